#pragma once
// Ed25519 signatures on cache entries (libsodium), for caches several users or hosts share:
// the writer signs each entry's manifest (which holds the executable's size and checksum), and
// a reader that requires signatures loads only entries signed by a key it trusts. Checked
// before the executable is handed to the backend, so an untrusted one is never dlopen'ed.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace keel::cache {

// "ed25519:<64 hex digits>": how a public key is written in compile_cache.trusted_keys.
using PublicKeyId = std::string;

class SigningKey {
 public:
  // Reads a secret key file written by `keel cache keygen`. InputError naming the file when it
  // is missing, malformed, or readable by group or others.
  static SigningKey read(const std::string& path);
  // A new key pair, its secret written to `path` (created exclusively, mode 0600).
  static SigningKey generate(const std::string& path);

  const PublicKeyId& public_id() const { return public_id_; }
  // The .sig file text for a manifest: {"key": "ed25519:...", "signature": "<128 hex>"}.
  std::string sign(std::string_view manifest_text) const;

 private:
  std::string secret_;  // 64 bytes: libsodium's seed || public key
  PublicKeyId public_id_;
};

// BLAKE2b-256 of `bytes`, 64 lowercase hex digits: how a manifest binds its executable and graph
// text for a signature (the XXH3 checksum beside it catches accidents, not forgeries).
std::string content_digest(std::string_view bytes);

// InputError naming `source` unless `id` spells an Ed25519 public key.
void check_public_key_id(const std::string& id, const std::string& source);

// Why the signature text does not prove that a trusted key signed this manifest, or nullopt
// when it does. nullopt signature text: the entry is unsigned.
std::optional<std::string> signature_problem(const std::optional<std::string>& signature_text,
                                             std::string_view manifest_text,
                                             const std::vector<PublicKeyId>& trusted);

}  // namespace keel::cache
