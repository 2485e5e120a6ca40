// The report's data: each input read on its own, every problem kept as one line for the page.
#include "diag/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "diag/compile_log.h"
#include "diag/tb_events.h"
#include "files/publish.h"
#include "files/read.h"
#include "ir/version.h"

namespace keel::diag {
namespace {

using json = nlohmann::json;
constexpr int64_t kMaxInputBytes = int64_t{1} << 30;

struct Inputs {
  std::string dir;
  std::vector<std::string>& problems;

  std::optional<std::string> text(const std::string& name, bool required) {
    try {
      const std::string path = dir.empty() ? name : dir + "/" + name;
      std::optional<std::string> t =
          files::read_file_if_exists(path, kMaxInputBytes, "report input");
      if (!t && required) problems.push_back(name + ": missing");
      return t;
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("{}: {}", name, e.what()));
      return std::nullopt;
    }
  }
  std::optional<json> document(const std::string& name, bool required) {
    std::optional<std::string> t = text(name, required);
    if (!t) return std::nullopt;
    json j = json::parse(*t, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      problems.push_back(name +
                         ": not a JSON object (damaged or cut short); its parts are left out");
      return std::nullopt;
    }
    return j;
  }
  // Each good line; a bad one is named and skipped, so one torn line costs one point.
  std::vector<json> lines(const std::string& name, bool required) {
    std::vector<json> out;
    std::optional<std::string> t = text(name, required);
    if (!t) return out;
    std::istringstream in(*t);
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        problems.push_back(fmt::format("{}:{}: not a JSON object; line skipped", name, n));
        continue;
      }
      j["_line"] = n;
      out.push_back(std::move(j));
    }
    return out;
  }
};

double number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A figure that may be missing: metrics.jsonl writes a NaN or infinite loss as null, and a chart
// leaves a gap there rather than plotting a zero no step had.
json figure(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? json(it->get<double>()) : json(nullptr);
}

// metrics.jsonl: training points, evaluations and MoE loads.
void read_metrics(Inputs& in, json& data) {
  json steps = json::array(), evals = json::array(), moe = json::array();
  for (const json& j : in.lines("metrics.jsonl", true)) {
    if (!j.contains("step") || !j["step"].is_number_integer()) {
      in.problems.push_back(fmt::format("metrics.jsonl:{}: no integer \"step\"; line skipped",
                                        j["_line"].get<int64_t>()));
      continue;
    }
    const int64_t step = j["step"];
    if (j.contains("val_loss")) {
      evals.push_back({{"step", step},
                       {"val_loss", figure(j, "val_loss")},
                       {"val_bits_per_byte", figure(j, "val_bits_per_byte")}});
      continue;
    }
    steps.push_back({{"step", step},
                     {"loss", figure(j, "loss")},
                     {"lr", number(j, "lr")},
                     {"grad_norm", figure(j, "grad_norm")},
                     {"ms_per_step", number(j, "ms_per_step")},
                     {"tokens_per_s", number(j, "tokens_per_s")}});
    if (j.contains("rank_busy_ms") && j["rank_busy_ms"].is_array()) {
      json busy = json::array();
      for (const json& b : j["rank_busy_ms"]) busy.push_back(b.is_number() ? b : json(nullptr));
      steps.back()["rank_busy_ms"] = std::move(busy);
    }
    if (j.contains("moe") && j["moe"].is_object() && j["moe"].contains("load")) {
      moe.push_back({{"step", step},
                     {"load", j["moe"]["load"]},
                     {"dropped_fraction", number(j["moe"], "dropped_fraction")}});
    }
  }
  data["steps"] = std::move(steps);
  data["evals"] = std::move(evals);
  data["moe"] = std::move(moe);
}

// compiles.jsonl: every compile and load with its step and reason, and the distinct programs
// the run holds after each step (the curve that must flatten after step 1).
void read_compiles(Inputs& in, json& data) {
  json compiles = json::array();
  for (const json& j : in.lines("compiles.jsonl", true)) {
    try {
      CompileEvent e = CompileEvent::from_json(
          [&] {
            json c = j;
            c.erase("_line");
            return c.dump();
          }(),
          fmt::format("compiles.jsonl:{}", j["_line"].get<int64_t>()));
      compiles.push_back({{"step", std::max<int64_t>(e.step, 0)},
                          {"function", e.function},
                          {"key", e.key},
                          {"tier", e.tier},
                          {"seconds", e.seconds},
                          {"reason", e.reason}});
    } catch (const std::exception& e) {
      in.problems.push_back(std::string(e.what()) + "; line skipped");
    }
  }
  std::map<int64_t, std::set<std::string>> new_keys;
  std::set<std::string> seen;
  for (const json& c : compiles) {
    const std::string key = c["key"];
    if (seen.insert(key).second) new_keys[c["step"].get<int64_t>()].insert(key);
  }
  json programs = json::array();
  int64_t total = 0;
  for (const auto& [step, keys] : new_keys) {
    total += static_cast<int64_t>(keys.size());
    programs.push_back({{"step", step}, {"programs", total}});
  }
  data["compiles"] = std::move(compiles);
  data["programs"] = std::move(programs);
}

// trace.json: each step's execute time, and the spans by kind for the summary.
void read_trace(Inputs& in, json& data) {
  json step_seconds = json::array();
  std::map<std::string, double> by_category;
  std::optional<json> doc = in.document("trace.json", true);
  if (!doc) {
    data["step_seconds"] = std::move(step_seconds);
    return;
  }
  const json& events = (*doc)["traceEvents"];
  if (!events.is_array()) {
    in.problems.push_back("trace.json: no \"traceEvents\" array; the timeline is left out");
  } else {
    for (const json& e : events) {
      if (!e.is_object() || e.value("ph", "") != "X" || e.value("pid", 0) != 0) continue;
      const std::string cat = e.value("cat", "");
      const double seconds = number(e, "dur") / 1e6;
      by_category[cat] += seconds;
      if (cat == "step" && e.contains("args") && e["args"].contains("step")) {
        step_seconds.push_back({{"step", e["args"]["step"]}, {"seconds", seconds}});
      }
    }
  }
  data["step_seconds"] = std::move(step_seconds);
  data["time_by_kind"] = by_category;
}

// "group.key" -> {value, origin} from record.json's policy.
json flat_policy(const json& policy) {
  json out = json::object();
  if (!policy.is_object()) return out;
  for (const auto& [group, keys] : policy.items()) {
    if (!keys.is_object()) continue;
    for (const auto& [key, v] : keys.items()) {
      if (v.is_object() && v.contains("value")) {
        out[group + "." + key] = {{"value", v["value"]}, {"origin", v.value("origin", "")}};
      }
    }
  }
  return out;
}

json flat_object(const json& j, const std::string& prefix = "") {
  json out = json::object();
  if (!j.is_object()) return out;
  for (const auto& [k, v] : j.items()) {
    if (v.is_object()) {
      const json inner = flat_object(v, prefix + k + ".");
      out.update(inner);
    } else {
      out[prefix + k] = v;
    }
  }
  return out;
}

// The rows where two flat objects differ (present in one only included).
json diff_rows(const json& mine, const json& theirs) {
  json rows = json::array();
  std::set<std::string> keys;
  for (const auto& [k, v] : mine.items()) keys.insert(k);
  for (const auto& [k, v] : theirs.items()) keys.insert(k);
  for (const std::string& k : keys) {
    json a = mine.contains(k) ? mine[k] : json(nullptr);
    json b = theirs.contains(k) ? theirs[k] : json(nullptr);
    if (a != b) rows.push_back({{"key", k}, {"this", a}, {"other", b}});
  }
  return rows;
}

void read_record(Inputs& in, json& data) {
  std::optional<json> record = in.document("record.json", true);
  if (!record) return;
  if (record->is_object() && record->contains("format") &&
      (*record)["format"].is_number_integer()) {
    check_format("report", "record.json", "format", (*record)["format"].get<long long>(),
                 Formats::run_record);
  }
  data["record"] = {{"time_to_first_step_s", (*record).value("time_to_first_step_s", 0.0)},
                    {"programs", (*record).value("programs", 0)},
                    {"compiles", (*record).value("compiles", 0)},
                    {"metrics", (*record).value("metrics", json::object())},
                    {"cache", (*record).value("cache", json::object())},
                    {"mesh", (*record).value("mesh", "")},
                    {"bundle_hash", (*record).value("bundle_hash", "")}};
  data["policy"] = flat_policy((*record)["policy"]);
  data["bundle"] = flat_object((*record).value("bundle", json::object()));
  data["config"] = flat_object((*record).value("config", json::object()));
  const json memory = (*record).value("memory", json::object());
  json ranks = json::array();
  for (const json& r : (*record).value("ranks", json::array())) {
    ranks.push_back({{"rank", r.value("rank", 0)},
                     {"host", r.value("host", "")},
                     {"predicted_peak_bytes", r.value("predicted_peak_bytes", int64_t{0})},
                     {"observed_peak_bytes", r.value("observed_peak_bytes", int64_t{0})}});
  }
  data["memory"] = {{"ranks", ranks}, {"hosts", memory.value("hosts", json::array())}};
  // How the training state lies over the processes (train/run_record.h), drawn as a table.
  data["state"] = (*record).value("state", json::object());

  // The calibration history of this config: one point per earlier run, oldest first.
  const json calibration = memory.value("calibration", json::object());
  const std::string file = calibration.value("file", "");
  const std::string id = calibration.value("config_id", "");
  json history = json::array();
  if (!file.empty()) {
    Inputs cal{"", in.problems};
    for (const json& j : cal.lines(file, false)) {
      if (j.value("config_id", "") != id) continue;
      history.push_back({{"predicted_peak_bytes", j.value("predicted_peak_bytes", int64_t{0})},
                         {"observed_peak_bytes", j.value("observed_peak_bytes", int64_t{0})}});
    }
  }
  data["calibration"] = {{"file", file}, {"config_id", id}, {"history", history}};
}

// Execute time per step (trace.json, else metrics' window means at log points) beside the
// compile and load seconds charged to that step.
json timeline(const json& data) {
  std::map<int64_t, json> rows;
  auto row = [&](int64_t step) -> json& {
    json& r = rows[step];
    if (r.is_null()) {
      r = {{"step", step},
           {"execute_s", 0.0},
           {"compile_s", 0.0},
           {"load_s", 0.0},
           {"compiles", json::array()}};
    }
    return r;
  };
  if (!data["step_seconds"].empty()) {
    for (const json& s : data["step_seconds"]) row(s["step"])["execute_s"] = s["seconds"];
  } else {
    for (const json& s : data["steps"])
      row(s["step"])["execute_s"] = s["ms_per_step"].get<double>() / 1e3;
  }
  for (const json& c : data["compiles"]) {
    json& r = row(c["step"]);
    const char* field = c["tier"] == "compiled" ? "compile_s" : "load_s";
    r[field] = r[field].get<double>() + c["seconds"].get<double>();
    r["compiles"].push_back(
        fmt::format("{} {} ({:.2f} s): {}", c["tier"] == "compiled" ? "compiled" : "loaded",
                    c["function"].get<std::string>(), c["seconds"].get<double>(),
                    c["reason"].get<std::string>()));
  }
  json out = json::array();
  for (auto& [step, r] : rows) out.push_back(std::move(r));
  return out;
}

// The event files are not drawn (the page has the same series from metrics.jsonl) but a torn or
// corrupt one is named, so TensorBoard's silence about it is not the only signal.
void check_tensorboard(const std::string& run_dir, std::vector<std::string>& problems) {
  std::error_code ec;
  const std::filesystem::path tb = std::filesystem::path(run_dir) / "tb";
  for (std::filesystem::directory_iterator it(tb, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    try {
      diag::read_scalar_events(it->path().string());
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("tb/{}: {}", it->path().filename().string(), e.what()));
    }
  }
}

}  // namespace

RunReportData read_run_report(const std::string& run_dir, const std::string& compare_dir) {
  RunReportData report;
  json& data = report.data;
  data["run_dir"] = run_dir;
  for (const char* series : {"steps", "evals", "moe", "compiles", "programs", "step_seconds"}) {
    data[series] = json::array();
  }
  Inputs in{run_dir, report.problems};
  // A field of the wrong type (a hand-edited or foreign file) costs its part, not the report.
  auto part = [&](const char* what, const std::function<void()>& read) {
    try {
      read();
    } catch (const std::exception& e) {
      report.problems.push_back(fmt::format("{}: {}; its parts are left out", what, e.what()));
    }
  };
  part("metrics.jsonl", [&] { read_metrics(in, data); });
  part("compiles.jsonl", [&] { read_compiles(in, data); });
  part("trace.json", [&] { read_trace(in, data); });
  part("record.json", [&] { read_record(in, data); });
  check_tensorboard(run_dir, report.problems);
  part("the step timeline", [&] { data["timeline"] = timeline(data); });
  // The programs curve runs to the last step, so a flat one is seen to be flat.
  if (!data["programs"].empty() && !data["timeline"].empty()) {
    const json last = data["programs"].back();
    const int64_t end = data["timeline"].back().value("step", int64_t{0});
    if (end > last.value("step", int64_t{0}))
      data["programs"].push_back({{"step", end}, {"programs", last["programs"]}});
  }
  if (!compare_dir.empty()) {
    std::vector<std::string> theirs_problems;
    Inputs other{compare_dir, theirs_problems};
    json theirs = json::object();
    try {
      read_record(other, theirs);
    } catch (const std::exception& e) {
      theirs_problems.push_back(std::string("record.json: ") + e.what());
    }
    for (const std::string& p : theirs_problems) {
      report.problems.push_back(fmt::format("--compare {}: {}", compare_dir, p));
    }
    data["compare"] = {
        {"run_dir", compare_dir},
        {"policy",
         diff_rows(data.value("policy", json::object()), theirs.value("policy", json::object()))},
        {"bundle",
         diff_rows(data.value("bundle", json::object()), theirs.value("bundle", json::object()))},
        {"config",
         diff_rows(data.value("config", json::object()), theirs.value("config", json::object()))}};
  }
  data["problems"] = report.problems;
  return report;
}

std::string write_run_report(const std::string& run_dir, const std::string& out,
                             const std::string& compare_dir, const std::string& chart_js_path) {
  const std::string path = out.empty() ? run_dir + "/report.html" : out;
  files::publish_file(path,
                      render_run_report(read_run_report(run_dir, compare_dir), chart_js_path));
  return path;
}

}  // namespace keel::diag
