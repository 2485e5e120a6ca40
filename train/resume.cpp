#include "train/resume.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ir/error.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"
#include "train/gpt_step.h"
#include "train/trainer_json.h"

namespace keel::train {
namespace {

void say(const TrainEvents& ev, const std::string& line) {
  if (ev.message) ev.message(line);
}

// --init-from's parameters, whole and per layer: every one of the checkpoint's must be one of
// this model's, of the same shape (the model's own names: its config may differ).
NamedTensors copied_parameters(const TrainOptions& o, const TrainEvents& ev) {
  const FoundCheckpoint found = [&] {
    try {
      return read_checkpoint_or_newest(o.init_from);
    } catch (const InputError& e) {
      throw InputError(fmt::format("[train] --init-from {}: {}", o.init_from, e.what()));
    }
  }();
  const std::string source = found.dir + "/model.safetensors";
  std::map<std::string, Shape> here;
  for (const auto& [name, shape] : nn::gpt_param_shapes(o.model)) here[name] = shape;
  std::vector<std::string> problems;
  NamedTensors out;
  for (const auto& [name, a] : found.data.model) {
    const auto it = here.find(name);
    if (it == here.end()) {
      problems.push_back(fmt::format("{} is not one of this model's", name));
    } else if (a.dtype() != DType::f32 || a.shape() != it->second) {
      problems.push_back(fmt::format("{} is {} there, f32{} here", name,
                                     TensorType{a.dtype(), a.shape()}.str(),
                                     shape_str(it->second)));
    } else {
      out[name] = Tensor(a);
    }
  }
  if (!problems.empty()) {
    throw InputError(fmt::format(
        "[train] --init-from {}: {} of its {} tensors do not fit model '{}': {}{}; give a "
        "checkpoint of this model, or of one that differs only by added parameters",
        source, problems.size(), found.data.model.size(), o.model.name,
        fmt::join(problems.begin(), problems.begin() + std::min<size_t>(problems.size(), 4), "; "),
        problems.size() > 4 ? "; ..." : ""));
  }
  std::vector<std::string> fresh;
  for (const auto& [name, shape] : here) {
    if (!out.count(name)) fresh.push_back(name);
  }
  say(ev, fmt::format(
              "init from {}: {} parameters copied{}", found.dir, out.size(),
              fresh.empty()
                  ? std::string()
                  : fmt::format(", {} initialised ({}{})", fresh.size(),
                                fmt::join(fresh.begin(),
                                          fresh.begin() + std::min<size_t>(fresh.size(), 3), ", "),
                                fresh.size() > 3 ? ", ..." : "")));
  return out;
}

}  // namespace

Start start_run(const TrainOptions& o, const Runtime& rt, const nn::GptConfig& model, bool stacked,
                const TrainEvents& ev, int64_t global_accum, StateShards shards) {
  Start s;
  if (!o.resume) {
    // --init-from replaces whole tensors: its init gives every one whole on every process.
    s.state =
        o.init_from.empty()
            ? initial_state(model, stacked, make_state_init(model, stacked, shards), o.seed, shards)
            : initial_state(model, stacked, make_gpt_init(model), o.seed, shards,
                            copied_parameters(o, ev));
    return s;
  }
  if (!o.init_from.empty()) {
    say(ev, fmt::format("--init-from {}: the run began from it; its checkpoint holds the rest",
                        o.init_from));
  }
  std::optional<FoundCheckpoint> found = open_latest_checkpoint(o.run_dir);
  if (!found) {
    throw InputError(fmt::format(
        "[train] --resume: no complete checkpoint under {}/checkpoints; start without --resume",
        o.run_dir));
  }
  const std::string& dir = found->dir;
  CheckpointData& d = found->data;
  const std::string source = dir + "/trainer.json";
  const TrainerJson t = read_trainer_json(d.trainer, source);
  if (t.config.to_json() != o.model.to_json() || t.accum != global_accum) {
    const int64_t ranks = global_accum / o.accum;
    throw InputError(fmt::format(
        "[train] {}: the checkpoint is of another config ({} accum {}) than this run ({} accum "
        "{}{}); resume with the same --preset/--config, --batch-size, --seq-len and --accum "
        "times processes",
        source, t.config.to_json(), t.accum, o.model.to_json(), global_accum,
        ranks > 1 ? fmt::format(" = --accum {} x {} processes", o.accum, ranks) : ""));
  }
  // The seed orders the data: another one would continue on another stream.
  if (t.seed != o.seed) {
    throw InputError(fmt::format(
        "[train] {}: the checkpoint's run used seed {} but this run has {}; resume with --seed {}",
        source, t.seed, o.seed, t.seed));
  }
  if (d.step >= o.steps) {
    throw InputError(fmt::format(
        "[train] --resume: the newest checkpoint is at step {} and --steps is {}; raise "
        "--steps to continue",
        d.step, o.steps));
  }
  if (t.bundle) {
    for (const std::string& difference : t.bundle->differences(rt.bundle())) {
      say(ev, fmt::format("resume: bundle differs from the checkpoint's: {}", difference));
    }
  }
  s.state = allocated_state(model, stacked, shards);
  checkpoint_into_state(d, model, dir, s.state);
  s.cursor = t.cursor;
  s.first_step = d.step + 1;
  say(ev, fmt::format("resumed from {} (step {})", dir, d.step));
  return s;
}

}  // namespace keel::train
