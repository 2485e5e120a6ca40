// Names of modes and tiers, and where the cache lives by default.
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

#include "cache/cache.h"
#include "ir/error.h"

namespace keel::cache {

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::readwrite:
      return "readwrite";
    case Mode::readonly:
      return "readonly";
    case Mode::sealed:
      return "sealed";
    case Mode::off:
      return "off";
  }
  return "?";
}

std::optional<Mode> parse_mode(std::string_view s) {
  for (Mode m : {Mode::readwrite, Mode::readonly, Mode::sealed, Mode::off}) {
    if (s == mode_name(m)) return m;
  }
  return std::nullopt;
}

std::string_view sharing_name(Sharing s) {
  return s == Sharing::shared ? "shared" : "per_host";
}

std::optional<Sharing> parse_sharing(std::string_view s) {
  for (Sharing v : {Sharing::per_host, Sharing::shared}) {
    if (s == sharing_name(v)) return v;
  }
  return std::nullopt;
}

std::string_view signatures_name(Signatures s) {
  switch (s) {
    case Signatures::off:
      return "off";
    case Signatures::recompile:
      return "recompile";
    case Signatures::refuse:
      return "refuse";
  }
  return "?";
}

std::optional<Signatures> parse_signatures(std::string_view s) {
  for (Signatures v : {Signatures::off, Signatures::recompile, Signatures::refuse}) {
    if (s == signatures_name(v)) return v;
  }
  return std::nullopt;
}

std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::memory:
      return "memory";
    case Tier::disk:
      return "disk";
    case Tier::compiled:
      return "compiled";
  }
  return "?";
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string default_cache_dir() {
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty() && x[0] == '/') return x + "/keel";
  std::string home = env("HOME");
  if (home.empty()) {
    if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) home = pw->pw_dir;
  }
  if (home.empty()) {
    throw Error(
        "[cache] no cache directory: HOME is not set and this user has no home directory; set "
        "compile_cache.dir (KEEL_COMPILE_CACHE_DIR)");
  }
  return home + "/.cache/keel";
}

const std::vector<std::string>& publish_steps() {
  static const std::vector<std::string> steps = [] {
    std::vector<std::string> out;
    for (const char* file : {"kir", "bin", "used"}) {
      for (const char* what : {"open", "written", "synced", "renamed"}) {
        out.push_back(std::string(file) + "." + what);
      }
    }
    out.push_back("dir.synced");
    for (const char* what : {"open", "written", "synced", "renamed"}) {
      out.push_back(std::string("json.") + what);
    }
    out.push_back("published");
    return out;
  }();
  return steps;
}

}  // namespace keel::cache
