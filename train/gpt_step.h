#pragma once
// Parameter initialisation as one compiled program, and host-side zeros for AdamW's moments.
// The training step itself is train/step.h.
#include <tuple>
#include <vector>

#include "nn/gpt.h"
#include "trace/compile.h"

namespace keel::train {

using InitFn = CompiledFn<NamedTensors(Scalar)>;

InitFn make_gpt_init(const nn::GptConfig& config);
// Zero-filled host arrays shaped like every parameter (AdamW's m and v at step 0).
NamedTensors zeros_like_params(const nn::GptConfig& config);
// AdamW's scalars for optim::adamw_update: lr, beta1, beta2, eps, weight_decay, step.
std::vector<Scalar> adamw_scalars(double lr, int64_t step, double beta1 = 0.9, double beta2 = 0.95,
                                  double eps = 1e-8, double weight_decay = 0.1);

}  // namespace keel::train
