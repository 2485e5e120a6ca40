#include "train/resume.h"

#include <fmt/format.h>

#include "ir/error.h"
#include "train/checkpoint.h"
#include "train/trainer_json.h"

namespace keel::train {
namespace {

void say(const TrainEvents& ev, const std::string& line) {
  if (ev.message) ev.message(line);
}

}  // namespace

Start start_run(const TrainOptions& o, const Runtime& rt, const nn::GptConfig& model, bool stacked,
                const TrainEvents& ev, int64_t global_accum, StateShards shards) {
  Start s;
  if (!o.resume) {
    s.state = initial_state(model, stacked, make_gpt_init(model), o.seed, shards);
    return s;
  }
  std::optional<FoundCheckpoint> found = read_latest_checkpoint(o.run_dir);
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
