#include "train/resume.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ir/error.h"
#include "train/checkpoint.h"

namespace keel::train {
namespace {

void say(const TrainEvents& ev, const std::string& line) {
  if (ev.message) ev.message(line);
}

}  // namespace

Start start_run(const TrainOptions& o, const Runtime& rt, const nn::GptConfig& model, bool stacked,
                const TrainEvents& ev) {
  Start s;
  if (!o.resume) {
    s.state = initial_state(model, stacked, make_gpt_init(model), o.seed);
    return s;
  }
  std::optional<std::string> dir = latest_checkpoint(o.run_dir);
  if (!dir) {
    throw InputError(fmt::format(
        "[train] --resume: no complete checkpoint under {}/checkpoints; start without --resume",
        o.run_dir));
  }
  CheckpointData d = read_checkpoint(*dir);
  nlohmann::json t = nlohmann::json::parse(d.trainer);
  const std::string source = *dir + "/trainer.json";
  nn::GptConfig saved = nn::GptConfig::from_json(t.at("config").dump(), source);
  if (saved.to_json() != o.model.to_json() || t.value("accum", int64_t{1}) != o.accum) {
    throw InputError(fmt::format(
        "[train] {}: the checkpoint is of another config ({} accum {}) than this run ({} accum "
        "{}); resume with the same --preset/--config, --batch-size, --seq-len and --accum",
        source, saved.to_json(), t.value("accum", int64_t{1}), o.model.to_json(), o.accum));
  }
  if (d.step >= o.steps) {
    throw InputError(fmt::format(
        "[train] --resume: the newest checkpoint is at step {} and --steps is {}; raise "
        "--steps to continue",
        d.step, o.steps));
  }
  if (t.contains("bundle")) {
    policy::Bundle theirs = policy::Bundle::from_json(t["bundle"].dump(), source);
    for (const std::string& difference : theirs.differences(rt.bundle())) {
      say(ev, fmt::format("resume: bundle differs from the checkpoint's: {}", difference));
    }
  }
  s.state = allocated_state(model, stacked);
  checkpoint_into_state(d, model, *dir, s.state);
  s.cursor = data::Cursor::from_json(t.at("cursor").dump(), source);
  s.first_step = d.step + 1;
  say(ev, fmt::format("resumed from {} (step {})", *dir, d.step));
  return s;
}

}  // namespace keel::train
