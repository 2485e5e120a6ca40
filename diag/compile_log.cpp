// The compile log: counters in memory, and one JSON line per disk load or compile on disk.
#include "diag/compile_log.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "files/read.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"

namespace keel::diag {
namespace {

using nlohmann::json;

// A line per compile or disk load (~300 bytes): far more than any run writes.
constexpr int64_t kMaxLogBytes = int64_t{256} << 20;

// "not JSON at column 11: syntax error ..." from nlohmann's "[json.exception.parse_error.101]
// parse error at line 1, column 11: syntax error ...": a log line is one JSON line.
std::string parse_problem(const json::parse_error& e) {
  std::string_view s = e.what();
  size_t colon = s.find(": ");
  if (colon != std::string_view::npos) s.remove_prefix(colon + 2);
  return fmt::format("not JSON at column {}: {}", e.byte, s);
}

const json& field(const json& j, const char* name, const std::string& source) {
  auto it = j.find(name);
  if (it == j.end()) throw InputError(fmt::format("[diag] {}: missing field '{}'", source, name));
  return *it;
}

std::string string_field(const json& j, const char* name, const std::string& source) {
  const json& v = field(j, name, source);
  if (!v.is_string()) {
    throw InputError(
        fmt::format("[diag] {}: field '{}' must be a string, got {}", source, name, v.dump()));
  }
  return utf8_to_bytes(v.get<std::string>());
}

}  // namespace

bool is_tier(std::string_view tier) {
  return tier == "memory" || tier == "disk" || tier == "compiled";
}

std::string CompileEvent::to_json() const {
  // Reasons quote user file names: any bytes, encoded so they read back exactly.
  json j = {
      {"step", step}, {"call", call},       {"function", bytes_to_utf8(function)}, {"key", key},
      {"tier", tier}, {"seconds", seconds}, {"reason", bytes_to_utf8(reason)}};
  return j.dump();
}

CompileEvent CompileEvent::from_json(const std::string& line, const std::string& source) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("[diag] {}: {}", source, parse_problem(e)));
  } catch (const json::out_of_range&) {  // a number beyond double, "1e400"
    throw InputError(fmt::format("[diag] {}: a number is out of range", source));
  }
  if (!j.is_object()) {
    throw InputError(
        fmt::format("[diag] {}: expected a JSON object, got {}", source, j.type_name()));
  }
  CompileEvent e;
  const json& step = field(j, "step", source);
  if (!step.is_number_integer()) {
    throw InputError(
        fmt::format("[diag] {}: field 'step' must be an integer, got {}", source, step.dump()));
  }
  e.step = step.get<int64_t>();
  // "call" arrived after "step": logs written before it have none.
  if (auto c = j.find("call"); c != j.end()) {
    if (!c->is_number_integer()) {
      throw InputError(
          fmt::format("[diag] {}: field 'call' must be an integer, got {}", source, c->dump()));
    }
    e.call = c->get<int64_t>();
  }
  e.function = string_field(j, "function", source);
  if (e.function.empty()) {
    throw InputError(fmt::format("[diag] {}: field 'function' must not be empty", source));
  }
  e.key = string_field(j, "key", source);
  e.tier = string_field(j, "tier", source);
  if (!is_tier(e.tier)) {
    throw InputError(fmt::format(
        "[diag] {}: field 'tier' must be \"memory\", \"disk\" or \"compiled\", got \"{}\"", source,
        e.tier));
  }
  const json& seconds = field(j, "seconds", source);
  if (!seconds.is_number() || !std::isfinite(seconds.get<double>()) || seconds.get<double>() < 0) {
    throw InputError(fmt::format("[diag] {}: field 'seconds' must be a non-negative number, got {}",
                                 source, seconds.dump()));
  }
  e.seconds = seconds.get<double>();
  e.reason = string_field(j, "reason", source);
  return e;
}

CompileLog::CompileLog(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    throw Error(fmt::format("[diag] cannot open compile log {}: cannot create {}: {}", path_,
                            parent.string(), ec.message()));
  }
  file_ = files::AppendFile(path_, "compile log");
}

CompileLog::~CompileLog() = default;

void CompileLog::record(const CompileEvent& e) {
  if (!is_tier(e.tier)) {
    throw Error(
        fmt::format("[diag] compile event for '{}' has unknown tier '{}'", e.function, e.tier));
  }
  std::lock_guard lock(mu_);
  if (e.tier == "memory") {
    ++totals_.memory_hits;
    return;
  }
  if (e.tier == "disk") {
    ++totals_.disk_hits;
    totals_.load_seconds += e.seconds;
  } else {
    ++totals_.compiles;
    totals_.compile_seconds += e.seconds;
  }
  events_.push_back(e);
  // One write() per line: O_APPEND lands each whole at the end, between other processes' lines.
  if (file_.is_open()) file_.append(e.to_json() + "\n");
}

CompileTotals CompileLog::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

std::vector<CompileEvent> CompileLog::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

std::vector<CompileEvent> read_compile_log(const std::string& path) {
  const std::string text = files::read_file(path, kMaxLogBytes, "the compile log");
  std::vector<CompileEvent> out;
  size_t start = 0;
  for (int64_t number = 1; start < text.size(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(CompileEvent::from_json(line, fmt::format("{}:{}", path, number)));
  }
  return out;
}

}  // namespace keel::diag
