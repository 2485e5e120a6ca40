#include "train/run_record.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "files/host.h"
#include "files/memory_limit.h"
#include "files/publish.h"
#include "ir/utf8_escape.h"
#include "ir/version.h"
#include "train/data_parallel.h"

namespace keel::train {
namespace {

// The physical device is the host: its processes' peaks add up against its memory.
nlohmann::ordered_json memory_per_host(const nlohmann::ordered_json& ranks) {
  std::map<std::string, nlohmann::ordered_json> hosts;
  for (const auto& r : ranks) {
    nlohmann::ordered_json& h = hosts[r["host"].get<std::string>()];
    if (h.empty()) {
      h = {{"host", r["host"]},
           {"ranks", nlohmann::ordered_json::array()},
           {"predicted_peak_bytes", 0},
           {"observed_peak_bytes", 0},
           {"physical_memory_bytes", r["physical_memory_bytes"]},
           {"memory_limit_bytes", r["memory_limit_bytes"]}};
    }
    h["ranks"].push_back(r["rank"]);
    for (const char* k : {"predicted_peak_bytes", "observed_peak_bytes"}) {
      h[k] = h[k].get<int64_t>() + r[k].get<int64_t>();
    }
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (auto& [name, h] : hosts) out.push_back(std::move(h));
  return out;
}

// Each stored tensor: its global shape, and for the parameter, its gradient and its moments
// "whole", or split over "model" (the blocks' split, with this process's shard's shape), over the
// data axis's processes (ZeRO, with the flat slice each holds) or over both ("model,data": the
// flat slice of its shard each holds); its bytes on each process.
nlohmann::ordered_json state_json(const RunFigures& f) {
  auto part = [](const StateTensorLayout& t, int64_t shards) {
    if (t.model > 1 && shards == 1) {
      return nlohmann::ordered_json{
          {"split", "model"}, {"processes", t.model}, {"local_shape", t.model_shard}};
    }
    if (shards == 1) return nlohmann::ordered_json{{"split", "whole"}};
    const int64_t processes = t.model * shards;
    return nlohmann::ordered_json{{"split", t.model > 1 ? "model,data" : "data"},
                                  {"processes", processes},
                                  {"local_shape", {numel(t.type.shape) / processes}}};
  };
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const StateTensorLayout& t : f.state_layout) {
    tensors.push_back(
        {{"name", bytes_to_utf8(t.name)},
         {"dtype", std::string(dtype_name(t.type.dtype))},
         {"shape", t.type.shape},
         {"parameter", part(t, t.shards.parameters)},
         {"gradient", part(t, t.shards.gradients)},
         {"moments", part(t, t.shards.moments)},
         {"bytes_per_process", t.parameter_bytes() + t.gradient_bytes() + t.optimizer_bytes()}});
  }
  return {{"zero", f.zero},
          {"axis", "data"},
          {"processes", f.data_processes},
          {"model_processes", f.model_processes},
          {"bytes_per_process", f.state.total()},
          {"tensors", tensors}};
}

}  // namespace

std::string write_run_record(Runtime& rt, const TrainOptions& o, const TrainResult& result,
                             RunFigures f, bool leader) {
  const diag::CompileTotals n = rt.jit().log().totals();
  std::set<std::string> programs;
  for (const diag::CompileEvent& e : rt.jit().log().events()) programs.insert(e.key);
  const dist::ProcessPlace& here = rt.place();
  const nlohmann::ordered_json host_reads = {
      {"total", f.host_reads.total},
      {"quiet_steps",
       {{"steps", f.host_reads.quiet_steps}, {"reads", f.host_reads.in_quiet_steps}}},
      {"reporting_steps",
       {{"steps", f.host_reads.reporting_steps},
        {"reads", f.host_reads.in_reporting_steps},
        {"lone_reads", f.host_reads.lone_in_reporting_steps}}}};
  const nlohmann::ordered_json mine = {
      {"rank", here.rank},
      {"host", bytes_to_utf8(here.host)},
      {"local_rank", here.local_rank},
      {"threads", rt.threads()},
      {"oversubscribed", rt.oversubscribed()},
      {"programs", std::vector<std::string>(programs.begin(), programs.end())},
      {"compiles", n.compiles},
      {"disk_hits", n.disk_hits},
      {"memory_hits", n.memory_hits},
      {"predicted_peak_bytes", f.predicted_peak_bytes},
      {"observed_peak_bytes", f.observed_peak_bytes},
      {"state_bytes",
       {{"parameters", f.state.parameters},
        {"gradients", f.state.gradients},
        {"optimizer", f.state.optimizer},
        {"total", f.state.total()},
        {"held", {{"parameters", f.held.parameters}, {"optimizer", f.held.optimizer}}}}},
      {"physical_memory_bytes", files::physical_memory_bytes()},
      {"memory_limit_bytes", files::memory_limit().bytes},  // a cgroup's cap, where lower
      {"host_reads", host_reads}};
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const std::string& text : gather_text_over_world(mine.dump())) {
    ranks.push_back(nlohmann::ordered_json::parse(text));
  }
  const std::string path = o.run_dir + "/record.json";
  if (!leader) return path;
  std::sort(f.step_seconds.begin(), f.step_seconds.end());
  const double median = f.step_seconds.empty() ? 0 : f.step_seconds[f.step_seconds.size() / 2];
  const bool evaluated = result.final_eval.step > 0;
  nlohmann::ordered_json record = {
      {"format", Formats::run_record},
      {"bundle", nlohmann::json::parse(rt.bundle().to_json())},
      {"bundle_hash", rt.bundle().hash()},
      {"policy", nlohmann::json::parse(rt.policy().to_json(true))},
      {"config", nlohmann::json::parse(o.to_json())},
      {"time_to_first_step_s", f.time_to_first_step_s},
      {"programs", programs.size()},
      {"compiles", n.compiles},
      {"cache",
       {{"memory_hits", n.memory_hits},
        {"disk_hits", n.disk_hits},
        {"compiled", n.compiles},
        {"compile_seconds", n.compile_seconds},
        {"load_seconds", n.load_seconds}}},
      {"memory",
       {{"predicted_peak_bytes", f.predicted_peak_bytes},
        {"observed_peak_bytes", f.observed_peak_bytes},
        {"hosts", memory_per_host(ranks)},
        {"calibration",
         {{"file", bytes_to_utf8(f.calibration_file)}, {"config_id", f.calibration_id}}}}},
      {"metrics",
       {{"first_step", result.first_step},
        {"last_step", result.last_step},
        {"stopped_by_signal", result.stop_signal},
        {"train_loss", result.final_loss},
        // The newest evaluation's, and its step; null when none ran (a run stopped early).
        {"val_step", evaluated ? nlohmann::ordered_json(result.final_eval.step) : nullptr},
        {"val_loss", evaluated ? nlohmann::ordered_json(result.final_eval.loss) : nullptr},
        {"val_bits_per_byte",
         evaluated ? nlohmann::ordered_json(result.final_eval.bits_per_byte) : nullptr},
        {"indexer_warmup", f.indexer_warmup.steps > 0
                               ? nlohmann::ordered_json{{"steps", f.indexer_warmup.steps},
                                                        {"first_kl", f.indexer_warmup.first_kl},
                                                        {"last_kl", f.indexer_warmup.last_kl}}
                               : nlohmann::ordered_json(nullptr)},
        {"median_step_seconds", median},
        {"tokens_per_s", median > 0 ? f.tokens_per_step / median : 0.0}}},
      {"host_reads", host_reads},                // this process's; each rank's is under "ranks"
      {"sample", bytes_to_utf8(result.sample)},  // an untrained model's bytes: any bytes
      {"mesh", rt.mesh().str()},
      {"state", state_json(f)},
      {"ranks", ranks}};
  files::publish_file(path, record.dump(2) + "\n");
  return path;
}

}  // namespace keel::train
