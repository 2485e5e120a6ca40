#pragma once
// The training programs. One step is one program: K micro-batches (forward + backward each,
// gradients summed in the program), global-norm clipping, the warm-up + cosine learning rate
// computed from the step tensor, the AdamW update and the metrics. Every per-step value is a
// device scalar, so changing the learning rate or schedule never changes the program.
#include <tuple>
#include <vector>

#include "nn/gpt.h"
#include "trace/compile.h"

namespace keel::train {

using nn::Params;

struct Hyper {
  double lr = 4e-3;
  double warmup_steps = 20;
  double total_steps = 200;
  double min_lr_ratio = 0.1;  // the cosine ends at lr * min_lr_ratio
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip_norm = 1.0;  // global gradient norm cap; 0: no clipping
};

// Device scalars for step `step` (1-based): step, lr, warmup, total, min_lr_ratio, beta1,
// beta2, eps, weight_decay, clip_norm.
std::vector<Scalar> step_scalars(const Hyper& h, int64_t step);
// The schedule on the host, for tests and the progress line: the same formula the step runs.
double scheduled_lr(const Hyper& h, int64_t step);

// (loss, grad_norm, lr, params, m, v) from (params, m, v, batch fields [K, B, T], scalars).
// batch: tokens, targets, loss_mask, positions, doc_ids, fim_kind (data::Batch::fields()).
using StepOutputs = std::tuple<Tensor, Tensor, Tensor, Params, Params, Params>;
using TrainStepFn =
    CompiledFn<StepOutputs(Params, Params, Params, std::vector<Tensor>, std::vector<Scalar>)>;
TrainStepFn make_train_step(const nn::GptConfig& config);

// (sum of -log p over live targets in nats, live target count) of one batch [K, B, T].
using EvalFn = CompiledFn<std::tuple<Tensor, Tensor>(Params, std::vector<Tensor>)>;
EvalFn make_eval_step(const nn::GptConfig& config);

// Logits [V] of the next token after tokens[0, index] (tokens [1, T] i64, index i64 0-d).
using SampleFn = CompiledFn<Tensor(Params, Tensor, Tensor)>;
SampleFn make_sample_step(const nn::GptConfig& config);

}  // namespace keel::train
