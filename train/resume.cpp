#include "train/resume.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ir/error.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"
#include "train/trainer_json.h"

namespace keel::train {
namespace {

void say(const TrainEvents& ev, const std::string& line) {
  if (ev.message) ev.message(line);
}

// --init-from's checkpoint, opened: every tensor of its model file must be one of this model's,
// of the same shape (the model's own names: its config may differ). The file is read later, one
// tensor at a time, and of its optimizer file only the header.
FoundCheckpoint opened_init_source(const TrainOptions& o, const TrainEvents& ev) {
  FoundCheckpoint found = [&] {
    try {
      return open_checkpoint_or_newest(o.init_from);
    } catch (const InputError& e) {
      throw InputError(fmt::format("[train] --init-from {}: {}", o.init_from, e.what()));
    }
  }();
  const std::string source = found.dir + "/model.safetensors";
  std::map<std::string, Shape> here;
  for (const auto& [name, shape] : nn::gpt_param_shapes(o.model)) here[name] = shape;
  std::vector<std::string> problems;
  const std::map<std::string, TensorType>& there = found.data.model_types;
  for (const auto& [name, t] : there) {
    const auto it = here.find(name);
    if (it == here.end()) {
      problems.push_back(fmt::format("{} is not one of this model's", name));
    } else if (t.dtype != DType::f32 || t.shape != it->second) {
      problems.push_back(
          fmt::format("{} is {} there, f32{} here", name, t.str(), shape_str(it->second)));
    }
  }
  if (!problems.empty()) {
    throw InputError(fmt::format(
        "[train] --init-from {}: {} of its {} tensors do not fit model '{}': {}{}; give a "
        "checkpoint of this model, or of one that differs only by added parameters",
        source, problems.size(), there.size(), o.model.name,
        fmt::join(problems.begin(), problems.begin() + std::min<size_t>(problems.size(), 4), "; "),
        problems.size() > 4 ? "; ..." : ""));
  }
  std::vector<std::string> fresh;
  for (const auto& [name, shape] : here) {
    if (!there.count(name)) fresh.push_back(name);
  }
  say(ev, fmt::format(
              "init from {}: {} parameters copied{}", found.dir, there.size(),
              fresh.empty()
                  ? std::string()
                  : fmt::format(", {} initialised ({}{})", fresh.size(),
                                fmt::join(fresh.begin(),
                                          fresh.begin() + std::min<size_t>(fresh.size(), 3), ", "),
                                fresh.size() > 3 ? ", ..." : "")));
  return found;
}

}  // namespace

Start start_run(const TrainOptions& o, const Runtime& rt, const nn::GptConfig& model, bool stacked,
                const TrainEvents& ev, int64_t global_accum, StateShards shards) {
  Start s;
  if (!o.resume) {
    std::optional<FoundCheckpoint> from;  // checked before the init compiles
    if (!o.init_from.empty()) from = opened_init_source(o, ev);
    s.state =
        initial_state(model, stacked, make_state_init(model, stacked, shards), o.seed, shards);
    if (from) {
      // Each process takes its slices of the file's tensors, read one at a time.
      try {
        parameters_into_state(from->data.model_types, from->data.model_tensor, model, s.state);
        from->data.check_model_read();
      } catch (const InputError& e) {
        throw InputError(fmt::format("[train] --init-from {}: {}", o.init_from, e.what()));
      }
    }
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
