#pragma once
// The GPT training step as one compiled program: forward, backward and the AdamW update, with
// every per-step value a device scalar.
#include <tuple>
#include <vector>

#include "nn/gpt.h"
#include "trace/compile.h"

namespace keel::train {

using nn::Params;

// Scalars in order: lr, beta1, beta2, eps, weight_decay, step (1-based), all f32.
using StepResult = std::tuple<Tensor, Params, Params, Params>;  // loss, params, m, v
using StepFn =
    CompiledFn<StepResult(Params, Params, Params, Tensor, Tensor, Tensor, std::vector<Scalar>)>;
using InitFn = CompiledFn<Params(Scalar)>;

StepFn make_gpt_train_step(const nn::GptConfig& config);
InitFn make_gpt_init(const nn::GptConfig& config);
// Zero-filled host arrays shaped like every parameter (AdamW's m and v at step 0).
Params zeros_like_params(const nn::GptConfig& config);
std::vector<Scalar> adamw_scalars(double lr, int64_t step, double beta1 = 0.9, double beta2 = 0.95,
                                  double eps = 1e-8, double weight_decay = 0.1);

}  // namespace keel::train
