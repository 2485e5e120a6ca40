#pragma once
/// @file
/// keel's release and the version of each format it writes to disk. A reader takes its own
/// format and older ones; a newer one is refused with one line naming the version needed.
#include <string>

#include "keel_version.h"

namespace keel {

/// The release, "MAJOR.MINOR.PATCH" (also `keel --version` and the bundle's keel.version).
inline constexpr const char* kVersion = KEEL_VERSION;

/// Versions of the on-disk formats; each goes up when a reader of the old one would misread it.
struct Formats {
  static constexpr int checkpoint = 1;      ///< a checkpoint's trainer.json "format"
  static constexpr int cache_layout = 1;    ///< the cache directory's v<N> folder
  static constexpr int cache_manifest = 1;  ///< an entry's manifest "format"
  static constexpr int run_record = 1;      ///< record.json "format"
};

/// "" when `found` is a format this keel reads (1..reads); otherwise one phrase saying what is
/// wrong and what to do: "field \"format\" is format 2, written by a newer keel; this keel
/// (0.1.0) reads format 1 and older: open it with a keel release that reads format 2".
std::string format_problem(const std::string& field, long long found, int reads);
/// Throws keel::InputError "[api] source: <format_problem>" when there is a problem.
void check_format(const std::string& api, const std::string& source, const std::string& field,
                  long long found, int reads);

}  // namespace keel
