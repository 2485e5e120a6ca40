#pragma once
/// @file
/// The compatibility bundle: everything about the stack that can change what a compiled program
/// does. Its hash is part of every cache key; cache manifests carry the whole bundle so a
/// mismatch is reported field by field.
#include <map>
#include <string>
#include <vector>

namespace keel::policy {

/// The compatibility bundle: named fields describing the stack a program was compiled on.
struct Bundle {
  std::map<std::string, std::string> fields;  ///< sorted, so hashing and printing are canonical

  std::string hash() const;  ///< 32 hex digits
  /// Keys and values as ir/utf8_escape.h encodes them, so any bytes survive; from_json decodes.
  std::string to_json() const;
  /// Parses to_json's text. Throws keel::InputError naming `source` on malformed JSON or
  /// non-string fields.
  static Bundle from_json(const std::string& json, const std::string& source);
  /// "field: before -> after" for each field that differs (or is missing on one side).
  std::vector<std::string> differences(const Bundle& other) const;
};

/// Reads the running stack: keel version and revision, the compiler and what its `--version`
/// printed (the caller runs it: cpu::compiler_version, under a deadline; "" reads "not found"),
/// codegen flags, CPU ISA features, OpenMP, OS, plus what the backend reports of itself
/// (`backend_fields`: the BLAS it loaded). Cached per input in the process.
Bundle detect_bundle(const std::string& compiler, const std::string& compiler_version,
                     const std::vector<std::string>& flags,
                     const std::map<std::string, std::string>& backend_fields = {});

/// `keel --version`: the release, git revision, source hash and the on-disk format versions.
std::string version_text();

}  // namespace keel::policy
