#include "train/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cache/cache.h"
#include "files/publish.h"
#include "files/read.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "runtime/policy_config.h"

namespace keel::train {
namespace {

// A line per run, ~150 bytes: a million runs before the cap.
constexpr int64_t kMaxBytes = 256 << 20;
constexpr const char* kWhat = "the memory calibration record";

}  // namespace

double Calibration::ratio() const {
  if (predicted_peak_bytes <= 0 || observed_peak_bytes <= 0) return 1.0;
  return static_cast<double>(observed_peak_bytes) / static_cast<double>(predicted_peak_bytes);
}

std::string calibration_id(const std::string& config_text, const std::string& bundle_hash) {
  return hash_bytes(config_text + "\n" + bundle_hash).hex();
}

CalibrationTarget calibration_target(const Runtime& rt, const std::string& run_dir,
                                     const std::string& config_text) {
  const policy::LaunchPolicy& p = rt.policy();
  std::string file = run_dir + "/calibration.jsonl";
  if (p.string("compile_cache.mode") == "readwrite") {
    const std::string dir = runtime::cache_config_from(p).dir;
    file = (dir.empty() ? cache::default_cache_dir() : dir) + "/calibration.jsonl";
  }
  return {file, calibration_id(config_text, rt.bundle().hash())};
}

std::optional<Calibration> read_calibration(const std::string& file, const std::string& config_id) {
  std::optional<std::string> text = files::read_file_if_exists(file, kMaxBytes, kWhat);
  if (!text) return std::nullopt;
  std::optional<Calibration> newest;
  std::istringstream in(*text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      nlohmann::json j = nlohmann::json::parse(line);
      // Records written before "config_id" name it "key".
      const char* id = j.contains("config_id") ? "config_id" : "key";
      Calibration c{j.at(id).get<std::string>(), j.at("predicted_peak_bytes").get<int64_t>(),
                    j.at("observed_peak_bytes").get<int64_t>()};
      if (c.config_id == config_id) newest = c;
    } catch (const std::exception& e) {
      throw InputError(
          fmt::format("[train] {}:{}: not a calibration record ({}); fix or delete the line", file,
                      n, e.what()));
    }
  }
  return newest;
}

void append_calibration(const std::string& file, const Calibration& c) {
  std::string old = files::read_file_if_exists(file, kMaxBytes, kWhat).value_or("");
  nlohmann::ordered_json j = {{"config_id", c.config_id},
                              {"predicted_peak_bytes", c.predicted_peak_bytes},
                              {"observed_peak_bytes", c.observed_peak_bytes}};
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  files::publish_file(file, old + j.dump() + "\n");
}

void check_memory_budget(const std::optional<Calibration>& last, int64_t budget,
                         const std::string& file, int processes) {
  if (!last || budget <= 0) return;
  const double expected = static_cast<double>(last->predicted_peak_bytes) * last->ratio();
  if (expected * processes <= static_cast<double>(budget)) return;
  throw InputError(fmt::format(
      "[train] memory: this config needed {:.0f} MiB at its peak last time (predicted {:.0f} "
      "MiB x observed/predicted {:.2f}, {}){} but launch.memory_budget_bytes is {:.0f} MiB per "
      "host; stopped before compiling; lower --batch-size, split the step with "
      "--set launch.layer_layout=split:N, or raise the budget",
      expected / 1048576.0, static_cast<double>(last->predicted_peak_bytes) / 1048576.0,
      last->ratio(), file,
      processes > 1 ? fmt::format(", x {} processes on this host = {:.0f} MiB", processes,
                                  expected * processes / 1048576.0)
                    : std::string(),
      static_cast<double>(budget) / 1048576.0));
}

void check_state_fits(const std::string& model, int64_t parameters, int64_t state_bytes,
                      int processes, int64_t limit_bytes, const std::string& limit_source) {
  const double state = static_cast<double>(state_bytes) * std::max(processes, 1);
  if (limit_bytes <= 0 || state <= static_cast<double>(limit_bytes)) return;
  auto size = [](double bytes) {
    return bytes >= 1073741824.0 ? fmt::format("{:.1f} GiB", bytes / 1073741824.0)
                                 : fmt::format("{:.1f} MiB", bytes / 1048576.0);
  };
  throw InputError(fmt::format(
      "[train] memory: {} has {:.1f}M parameters, whose f32 values, AdamW moments and gradients "
      "alone take {}{}, above {} ({}); stopped before tracing; choose a smaller model (layers, "
      "width, vocab) or fewer processes per host",
      model, static_cast<double>(parameters) / 1e6, size(state / std::max(processes, 1)),
      processes > 1
          ? fmt::format(" per process, {} for this host's {} processes", size(state), processes)
          : std::string(),
      size(static_cast<double>(limit_bytes)), limit_source));
}

}  // namespace keel::train
