#pragma once
// The model as a launch lays it out: launch.layer_layout (unrolled, scanned, or split at layer
// barriers, which the trainer's StepRunner runs), launch.remat_layers and launch.remat_policy
// (what a recomputed scanned layer keeps), and the blocks split over the mesh axis "model" as
// sharding.rules says (heads, mlp and memory; any other rule that would split something is
// refused).
#include "nn/gpt.h"
#include "runtime/runtime.h"

namespace keel::train {

// `model` with the launch's layout and splits; keel::InputError naming the setting for a
// combination that cannot be built (remat without a scan, a rule over another axis, a split
// that does not divide).
nn::GptConfig laid_out_model(const Runtime& rt, nn::GptConfig model);

}  // namespace keel::train
