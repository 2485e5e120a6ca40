#pragma once
// The training programs. One step is one program: K micro-batches (forward + backward each,
// gradients summed in the program), global-norm clipping, the warm-up + cosine learning rate
// computed from the step tensor, the AdamW update and the metrics. Every per-step value is a
// device scalar, so changing the learning rate or schedule never changes the program.
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "nn/gpt.h"
#include "optim/adamw.h"
#include "trace/bucketed.h"
#include "trace/compile.h"
#include "train/accumulate.h"

namespace keel::train {

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
// Their names in that order, for messages ("scalars leaf 'lr'").
const std::vector<std::string>& step_scalar_names();
// The schedule on the host, for tests and the progress line: the same formula the step runs.
double scheduled_lr(const Hyper& h, int64_t step);

// Device counters a step adds to, read by the host at log points only: "moe.load" f32 [MoE
// layers, E] (token choices routed to each expert) and "moe.dropped" f32 (choices dropped for
// capacity). Empty for a model without MoE layers.
Counters zero_counters(const nn::GptConfig& config);
// keel::InputError unless `counters` has exactly zero_counters(config)'s names and types.
void check_counters(const nn::GptConfig& config, const Counters& counters);

// (loss, grad_norm, lr, params, m, v, counters, metrics) from (params, m, v, counters, batch
// fields [K, B, T], scalars). batch: tokens, targets, loss_mask, positions, doc_ids, fim_kind
// (data::Batch::fields()). loss is the next-token loss alone; counters are the input counters
// plus this step's; metrics holds the step's extra losses: "mtp_loss.D" per MTP depth,
// "moe.aux_loss" and "indexer_kl" (sparse attention). Parameters, moments and counters are
// donated: the step writes them in place of its arguments (which it consumes), so training state
// is held once.
using StepOutputs = std::tuple<Tensor, Tensor, Tensor, NamedTensors, NamedTensors, NamedTensors,
                               Counters, Counters>;
using TrainStepFn = CompiledFn<StepOutputs(NamedTensors, NamedTensors, NamedTensors, Counters,
                                           std::vector<Tensor>, std::vector<Scalar>)>;
struct StepOptions {
  bool donate = true;  // false: fresh buffers for the new state (the baseline benches compare)
  Accumulation accumulation = Accumulation::automatic;
  // sharding.zero = 1 over more than one process: m and v are this process's flat slices
  // (train/moment_shards.h); each process updates its slice of every parameter and the slices
  // are gathered. Elementwise, so every element is the whole update's, bit for bit.
  bool split_moments = false;
  // sharding.zero = 2 (with split_moments): the gradients are reduce-scattered into the same
  // slices (each bit for bit its slice of the all-reduce) and the whole reduced ones never exist.
  bool split_gradients = false;
  // sharding.zero = 3 (with split_gradients): the parameters are this process's flat slices of
  // tensors of these types (whole, as stored); each micro-batch gathers them where it reads them
  // and the update writes the new slices, with no gather. Empty: whole parameters.
  std::map<std::string, TensorType> split_parameters = {};
  // DSA's dense warm-up stage (the trainer's --indexer-warmup steps, before step 1): the sparse
  // attention layers attend densely (GptConfig::dense_indexer_warmup) and only their indexers'
  // parameters are differentiated, clipped and updated; every other parameter and its moments
  // come back as they went in. The loss is the dense model's, for the log.
  bool indexer_warmup = false;
};
// The parameters the indexer warm-up trains: the sparse attention indexers' ("attn.indexer." in
// the name, stacked or not).
bool is_indexer_parameter(const std::string& name);
TrainStepFn make_train_step(const nn::GptConfig& config, StepOptions options = {});
// The donation of a step: arguments params, m, v, counters into results 3..6.
std::vector<Donation> step_donation();
// The step's compile options: its donation (when `donate`) and the batch (argument 4) varying
// over the data axis, so every result is checked to be the same on every process; the
// leaves `split_over_model` of parameters and moments (and their new values) varying over
// "model": each process's shards of the blocks (nn/tensor_parallel.h).
CompileOptions step_compile_options(bool donate, bool split_moments = false,
                                    bool split_parameters = false,
                                    const std::set<std::string>& split_over_model = {});
// "mtp_loss.D": the metrics key of MTP depth D's loss.
std::string mtp_loss_key(int64_t depth);

// The pieces every form of the step shares (this one and train/segmented_step.h), for use
// inside a trace.
// Micro-batch k of a [K, B, T] field, as [B, T].
Tensor micro(const Tensor& field, int64_t k);
// The step's loss denominators from the whole batch: live targets, then per MTP depth its live
// targets (each at least 1). The program does not grow with K.
std::vector<Tensor> step_denominators(const nn::GptConfig& config,
                                      const std::vector<Tensor>& batch);
// One micro-batch's share of the objective, without the MoE router losses: nll / N plus each
// MTP depth's weight times its nll / N_d.
Tensor step_objective(const nn::GptConfig& config, const nn::GptLosses& parts,
                      const std::vector<Tensor>& denominators);
// The blocks of consecutive elements a gradient (or each layer of a scanned stack's) of `elements`
// elements is summed in for the global norm: gcd(elements, 720720), which any process count up
// to 16 that divides `elements` divides too, so the norm's order is the same whether a process
// holds the whole gradient or a slice.
constexpr int64_t kNormBlockBase = 720720;  // lcm(1, ..., 16)
int64_t norm_blocks(int64_t elements);
// The gradients' sum of squares for the global norm: each tensor's norm blocks summed, then the
// blocks, then the tensors, in name order. The same bits from this process's flat slices over
// the data axis (`whole` gives each tensor's shape): no order depends on the process count.
Tensor gradient_squares(const NamedTensors& grads);
Tensor sliced_gradient_squares(const NamedTensors& slices,
                               const std::map<std::string, TensorType>& whole, int64_t shards);
// Global-norm clipping, the scheduled learning rate and the AdamW update.
struct StepUpdate {
  Tensor grad_norm, lr;
  optim::AdamWResult next;
};
// `split_over_model`: the gradients that are this process's shards over "model" (their squares
// are summed over the axis before the whole ones are added). `frozen_untrained` (the indexer
// warm-up): `grads` names the trained parameters, and the others and their moments come back as
// they went in; otherwise every parameter needs its gradient.
StepUpdate clip_and_update(const NamedTensors& p, NamedTensors grads, const NamedTensors& m,
                           const NamedTensors& v, const std::vector<Scalar>& s,
                           const std::set<std::string>& split_over_model = {},
                           bool frozen_untrained = false);
// Which of clip_and_update_slices's arguments are this process's slices besides m and v.
struct SlicedUpdate {
  bool gradients = false;  // StepOptions::split_gradients; else whole
  // StepOptions::split_parameters: the parameters are slices of these, and so are the new ones.
  // Empty: whole parameters; each process updates its slice and the new ones are gathered.
  std::map<std::string, TensorType> parameters = {};
  // The tensors whose shards the blocks split over "model" (nn::stored_model_splits, by the
  // names the step holds them under): their squares are summed over that axis too.
  std::set<std::string> split_over_model = {};
  bool frozen_untrained = false;  // as clip_and_update's
};
// The same with m and v this process's slices over the data axis (StepOptions::split_moments).
StepUpdate clip_and_update_slices(const NamedTensors& p, NamedTensors grads, const NamedTensors& m,
                                  const NamedTensors& v, const std::vector<Scalar>& s,
                                  const SlicedUpdate& sliced = {});

// (sum of -log p over live targets in nats, live target count) of one batch [K, B, T].
using EvalFn = CompiledFn<std::tuple<Tensor, Tensor>(NamedTensors, std::vector<Tensor>)>;
// `split_parameters` as StepOptions's: the parameters are this process's slices of these.
EvalFn make_eval_step(const nn::GptConfig& config,
                      std::map<std::string, TensorType> split_parameters = {});

// Logits [V] of the byte after position `index` (an i64 scalar) of tokens [1, T]; positions
// after `index` cannot change them (causal attention), so padding there is harmless.
Tensor next_byte_logits(const nn::GptConfig& config, const NamedTensors& p, const Tensor& tokens,
                        const Tensor& index);
// A bucketed program's arguments (trace/bucketed.h): the per-call tensors already in `args`,
// then the parameters in name order, listed as unpadded in `o`. Returns the names, for
// params_at to rebuild the map inside the body from args[first...].
std::vector<std::string> append_params(const NamedTensors& p, std::vector<Tensor>& args,
                                       BucketOptions& o);
NamedTensors params_at(const std::vector<Tensor>& args, size_t first,
                       const std::vector<std::string>& names);

// next_byte_logits as one program for tokens [1, T] i64 and index i64 0-d. The parameters are
// what a process holds: its shards of the blocks split over "model" (config.model_parallel),
// and with `split_parameters` (as StepOptions's) its slices over "data" of these, gathered
// inside; the logits are the same on every process, so all can sample together.
using SampleFn = CompiledFn<Tensor(NamedTensors, Tensor, Tensor)>;
SampleFn make_sample_step(const nn::GptConfig& config,
                          std::map<std::string, TensorType> split_parameters = {});

}  // namespace keel::train
