#include "policy/bundle.h"

#include <fmt/format.h>
#include <sys/utsname.h>

#include <array>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "files/read.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "ir/utf8_escape.h"
#include "ir/version.h"

#include "keel_revision.h"

namespace keel::policy {

std::string Bundle::hash() const {
  return hash_bytes(to_json()).hex();
}

std::string Bundle::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : fields) j[bytes_to_utf8(k)] = bytes_to_utf8(v);
  return j.dump();
}

Bundle Bundle::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("[bundle] {}: not JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("[bundle] {}: expected an object", source));
  Bundle b;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) {
      throw InputError(fmt::format("[bundle] {}: field '{}' must be a string", source, k));
    }
    b.fields[utf8_to_bytes(k)] = utf8_to_bytes(v.get<std::string>());
  }
  return b;
}

std::vector<std::string> Bundle::differences(const Bundle& other) const {
  std::set<std::string> keys;
  for (const auto& [k, v] : fields) keys.insert(k);
  for (const auto& [k, v] : other.fields) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    auto a = fields.find(k);
    auto b = other.fields.find(k);
    std::string va = a == fields.end() ? "(missing)" : a->second;
    std::string vb = b == other.fields.end() ? "(missing)" : b->second;
    if (va != vb) out.push_back(fmt::format("{}: {} -> {}", k, va, vb));
  }
  return out;
}

namespace {

// Empty where there is no /proc (the fields then say "unknown").
std::string cpuinfo() {
  return files::read_file_if_exists("/proc/cpuinfo", 16 << 20, "/proc/cpuinfo").value_or("");
}

// The ISA features generated code may use: the vector extensions the CPU reports.
std::string cpu_features() {
  std::istringstream in(cpuinfo());
  std::string line;
  static const std::set<std::string> wanted = {"sse4_2",      "avx",      "avx2",     "fma",
                                               "f16c",        "avx512f",  "avx512bw", "avx512vl",
                                               "avx512_bf16", "amx_bf16", "neon",     "asimd"};
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> have;
    std::string w;
    while (words >> w) {
      if (wanted.count(w)) have.insert(w);
    }
    std::string out;
    for (const auto& f : have) out += (out.empty() ? "" : " ") + f;
    return out;
  }
  return "unknown";
}

std::string cpu_model() {
  std::istringstream in(cpuinfo());
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace

Bundle detect_bundle(const std::string& compiler, const std::string& compiler_version,
                     const std::vector<std::string>& flags,
                     const std::map<std::string, std::string>& backend_fields) {
  static std::mutex mu;
  static std::map<std::string, Bundle> memo;
  std::string flag_text;
  for (const auto& f : flags) flag_text += (flag_text.empty() ? "" : " ") + f;
  std::lock_guard lock(mu);
  std::string memo_key = compiler + "\n" + compiler_version + "\n" + flag_text + "\n" +
                         Bundle{backend_fields}.to_json();
  auto it = memo.find(memo_key);
  if (it != memo.end()) return it->second;
  Bundle b;
  b.fields["keel.version"] = kVersion;
  b.fields["keel.revision"] = KEEL_GIT_REVISION;
  b.fields["keel.sources"] = KEEL_SOURCE_HASH;  // differs whenever keel's code does
  b.fields["compiler"] = compiler;
  b.fields["compiler.version"] = compiler_version.empty() ? "not found" : compiler_version;
  b.fields["compiler.flags"] = flag_text;
  b.fields["host.cpu_features"] = cpu_features();
  b.fields["host.cpu_model"] = cpu_model();
  for (const auto& [k, v] : backend_fields) b.fields[k] = v;
  struct utsname u {};
  if (uname(&u) == 0) b.fields["os"] = fmt::format("{} {}", u.sysname, u.machine);
  memo.emplace(memo_key, b);
  return b;
}

std::string version_text() {
  return fmt::format(
      "keel {} (revision {}, sources {})\nformats read and written: checkpoint {}, cache layout "
      "v{}, cache manifest {}, run record {}",
      kVersion, KEEL_GIT_REVISION, KEEL_SOURCE_HASH, Formats::checkpoint, Formats::cache_layout,
      Formats::cache_manifest, Formats::run_record);
}

}  // namespace keel::policy
