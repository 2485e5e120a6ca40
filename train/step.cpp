#include "train/step.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <numeric>
#include <set>

#include "data/batch.h"
#include "ir/error.h"
#include "nn/layers.h"
#include "nn/tensor_parallel.h"
#include "optim/adamw.h"
#include "trace/collectives.h"
#include "train/moment_shards.h"

namespace keel::train {
namespace {

// warm-up: lr * step / warmup; then cosine from lr down to lr * min_ratio at total_steps.
Tensor schedule(const Tensor& step, const Tensor& lr, const Tensor& warmup, const Tensor& total,
                const Tensor& min_ratio) {
  Tensor one = full({}, 1.0);
  Tensor warm = lr * step / maximum(warmup, one);
  Tensor progress = (step - warmup) / maximum(total - warmup, one);
  progress = minimum(maximum(progress, full({}, 0.0)), one);
  Tensor cosine = min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + cos(std::numbers::pi * progress));
  return select(le(step, warmup), warm, lr * cosine);
}

}  // namespace

Tensor micro(const Tensor& field, int64_t k) {
  const Shape& s = field.shape();
  return reshape(slice(field, {k, 0, 0}, {k + 1, s[1], s[2]}), {s[1], s[2]});
}

std::vector<Scalar> step_scalars(const Hyper& h, int64_t step) {
  return {Scalar(static_cast<double>(step)),
          Scalar(h.lr),
          Scalar(h.warmup_steps),
          Scalar(h.total_steps),
          Scalar(h.min_lr_ratio),
          Scalar(h.beta1),
          Scalar(h.beta2),
          Scalar(h.eps),
          Scalar(h.weight_decay),
          Scalar(h.clip_norm)};
}

const std::vector<std::string>& step_scalar_names() {
  static const std::vector<std::string> names = {
      "step",  "lr",    "warmup_steps", "total_steps",  "min_lr_ratio",
      "beta1", "beta2", "eps",          "weight_decay", "clip_norm"};
  return names;
}

double scheduled_lr(const Hyper& h, int64_t step) {
  const double s = static_cast<double>(step);
  if (s <= h.warmup_steps) return h.lr * s / std::max(h.warmup_steps, 1.0);
  double progress = (s - h.warmup_steps) / std::max(h.total_steps - h.warmup_steps, 1.0);
  progress = std::min(std::max(progress, 0.0), 1.0);
  return h.lr * (h.min_lr_ratio +
                 (1.0 - h.min_lr_ratio) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

Counters zero_counters(const nn::GptConfig& config) {
  Counters out;
  if (config.moe_layers() == 0) return out;
  out["moe.load"] = Tensor(Array(DType::f32, {config.moe_layers(), config.moe.experts}));
  out["moe.dropped"] = Tensor(Array(DType::f32, {}));
  return out;
}

void check_counters(const nn::GptConfig& config, const Counters& counters) {
  const Counters want = zero_counters(config);
  bool ok = want.size() == counters.size();
  for (const auto& [name, t] : want) {
    auto it = counters.find(name);
    ok = ok && it != counters.end() && it->second.defined() && it->second.type() == t.type();
  }
  if (ok) return;
  std::vector<std::string> names, got;
  for (const auto& [name, t] : want) names.push_back(name + " " + t.type().str());
  for (const auto& [name, t] : counters) {
    got.push_back(name + (t.defined() ? " " + t.type().str() : " (empty)"));
  }
  throw InputError(
      fmt::format("[train] the step of {} takes the counters {{{}}}, got {{{}}}; pass "
                  "train::zero_counters(config), then each step's counters",
                  config.name, fmt::join(names, ", "), fmt::join(got, ", ")));
}

std::string mtp_loss_key(int64_t depth) {
  return fmt::format("mtp_loss.{}", depth);
}

std::vector<Donation> step_donation() {
  return {{0, 3}, {1, 4}, {2, 5}, {3, 6}};
}

std::vector<Tensor> step_denominators(const nn::GptConfig& config,
                                      const std::vector<Tensor>& batch) {
  const Tensor &mask = batch[2], &doc_ids = batch[4];
  const Shape& s = mask.shape();
  // Rows are independent, so [K, B, T] counts as [K*B, T] rows.
  const Tensor rows_mask = reshape(mask, {s[0] * s[1], s[2]});
  const Tensor rows_docs = reshape(doc_ids, {s[0] * s[1], s[2]});
  std::vector<Tensor> out = {sum(mask)};
  for (int64_t d = 1; d <= config.mtp_depth(); ++d) {
    out.push_back(sum(nn::mtp_live(rows_mask, rows_docs, d)));
  }
  // Counts of the whole step, over every process (exact: integers in f32).
  for (Tensor& n : out) n = maximum(all_reduce(n, kDataAxis), full({}, 1.0));
  return out;
}

Tensor step_objective(const nn::GptConfig& config, const nn::GptLosses& parts,
                      const std::vector<Tensor>& denominators) {
  Tensor total = parts.nll / denominators[0];
  for (int64_t d = 0; d < config.mtp_depth(); ++d) {
    const size_t i = static_cast<size_t>(d);
    total = total + config.mtp_weights[i] * (parts.mtp_nll[i] / denominators[i + 1]);
  }
  return total;
}

namespace {

// The sum of squares of `x` (any shape, flattened) in `rows` blocks of consecutive elements:
// [rows], each block's sum.
Tensor block_squares(const Tensor& x, int64_t rows) {
  const Tensor f = reshape(x, {rows, numel(x.shape()) / rows});
  return sum(f * f, {1});
}

// Global-norm clipping from the gradients' sum of squares: scale = clip / max(norm, clip), or 1
// when clip is 0. Sets the norm and the learning rate of `out`.
Tensor clip_scale(const Tensor& squares, const std::vector<Scalar>& s, StepUpdate& out) {
  out.grad_norm = sqrt(squares);
  const Tensor& clip = s[9];
  out.lr = schedule(s[0], s[1], s[2], s[3], s[4]);
  return select(gt(clip, full({}, 0.0)), clip / maximum(out.grad_norm, clip), full({}, 1.0));
}

// The norm blocks of the tensor stored as `name`: each row's (a scanned stack's layer's), in order.
int64_t tensor_norm_blocks(const std::string& name, const Shape& shape) {
  const int64_t rows = split_rows(name, shape);
  return rows * norm_blocks(numel(shape) / rows);
}

}  // namespace

int64_t norm_blocks(int64_t elements) {
  return std::gcd(elements, kNormBlockBase);
}

Tensor gradient_squares(const NamedTensors& grads) {
  Tensor squares = full({}, 0.0);
  for (const auto& [name, g] : grads) {
    const int64_t n = numel(g.shape());
    if (n > 0) squares = squares + sum(block_squares(g, tensor_norm_blocks(name, g.shape())));
  }
  return squares;
}

// Each process sums its blocks; one gather brings every block's sum to every process, put back
// in the whole tensor's order (a stack's slices hold a part of each layer).
Tensor sliced_gradient_squares(const NamedTensors& slices,
                               const std::map<std::string, TensorType>& whole, int64_t shards) {
  std::vector<Tensor> mine;
  std::vector<std::pair<int64_t, int64_t>> blocks;  // per tensor: its blocks here, its rows
  for (const auto& [name, g] : slices) {
    const TensorType& type = whole.at(name);
    const int64_t n = numel(type.shape);
    moment_shard_type(name, type, shards);          // refuses a count that does not
    check_gradient_slices({{name, type}}, shards);  // divide n or its blocks
    blocks.push_back(
        {n > 0 ? tensor_norm_blocks(name, type.shape) / shards : 0, split_rows(name, type.shape)});
    if (n > 0) mine.push_back(block_squares(g, blocks.back().first));
  }
  Tensor squares = full({}, 0.0);
  if (mine.empty()) return squares;
  const Tensor here = concat(mine, 0);
  const int64_t width = here.shape()[0];
  const Tensor every = reshape(all_gather_invariant(here, kDataAxis), {shards, width});
  int64_t at = 0;
  for (const auto& [r, rows] : blocks) {
    if (r == 0) continue;
    Tensor these = slice(every, {0, at}, {shards, at + r});
    if (rows > 1) these = transpose(reshape(these, {shards, rows, r / rows}), {1, 0, 2});
    squares = squares + sum(reshape(these, {shards * r}));
    at += r;
  }
  return squares;
}

namespace {

// The gradients' sum of squares when those named in `split` are this process's shards over
// "model": theirs summed over the axis, the whole ones' added once. `squares` sums one group.
template <typename Squares>
Tensor model_split_squares(const NamedTensors& grads, const std::set<std::string>& split,
                           const Squares& squares) {
  if (split.empty()) return squares(grads);
  NamedTensors whole, shards;
  for (const auto& [name, g] : grads) (split.count(name) ? shards : whole)[name] = g;
  if (shards.empty()) return squares(whole);  // the indexer warm-up's: indexers are whole
  return squares(whole) + all_reduce(squares(shards), nn::kModelAxis);
}

// The entries of `all` whose names `names` has.
NamedTensors entries_named(const NamedTensors& all, const NamedTensors& names) {
  NamedTensors out;
  for (const auto& [name, t] : names) out[name] = all.at(name);
  return out;
}

// The parameters and moments without a gradient (the indexer warm-up's untrained ones), as they
// came in, when `frozen`; else a parameter without one is an error.
void pass_untrained(bool frozen, const NamedTensors& p, const NamedTensors& grads,
                    const NamedTensors& m, const NamedTensors& v, optim::AdamWResult& next) {
  if (!frozen && grads.size() != p.size()) {
    throw Error(fmt::format(
        "[train] the update has gradients for {} of the {} parameters; every parameter needs "
        "one (only the indexer warm-up leaves some untrained)",
        grads.size(), p.size()));
  }
  for (const auto& [name, w] : p) {
    if (grads.count(name)) continue;
    next.params[name] = w;
    next.m[name] = m.at(name);
    next.v[name] = v.at(name);
  }
}

}  // namespace

bool is_indexer_parameter(const std::string& name) {
  return name.find("attn.indexer.") != std::string::npos;
}

StepUpdate clip_and_update(const NamedTensors& p, NamedTensors grads, const NamedTensors& m,
                           const NamedTensors& v, const std::vector<Scalar>& s,
                           const std::set<std::string>& split_over_model, bool frozen_untrained) {
  StepUpdate out;
  const Tensor scale =
      clip_scale(model_split_squares(grads, split_over_model, gradient_squares), s, out);
  for (auto& [name, g] : grads) g = g * scale;
  out.next = optim::adamw_update(entries_named(p, grads), grads, entries_named(m, grads),
                                 entries_named(v, grads), {out.lr, s[5], s[6], s[7], s[8], s[0]});
  pass_untrained(frozen_untrained, p, grads, m, v, out.next);
  return out;
}

StepUpdate clip_and_update_slices(const NamedTensors& p, NamedTensors grads, const NamedTensors& m,
                                  const NamedTensors& v, const std::vector<Scalar>& s,
                                  const SlicedUpdate& sliced) {
  StepUpdate out;
  const int64_t shards = trace_axis_size(kDataAxis, SourceLoc::current());
  const bool sliced_params = !sliced.parameters.empty();
  std::map<std::string, TensorType> whole = sliced.parameters;
  if (!sliced_params) {
    for (const auto& [name, w] : p) whole[name] = w.type();
  }
  const Tensor squares =
      sliced.gradients ? model_split_squares(grads, sliced.split_over_model,
                                             [&](const NamedTensors& g) {
                                               return sliced_gradient_squares(g, whole, shards);
                                             })
                       : model_split_squares(grads, sliced.split_over_model, gradient_squares);
  const Tensor scale = clip_scale(squares, s, out);
  NamedTensors p_slices, g_slices;
  std::set<std::string> decayed;
  for (const auto& [name, w] : entries_named(p, grads)) {
    p_slices[name] = sliced_params ? w : own_slice(name, w, shards);
    g_slices[name] =
        (sliced.gradients ? grads.at(name) : own_slice(name, grads.at(name), shards)) * scale;
    if (optim::default_decays(name, whole.at(name).shape)) decayed.insert(name);
  }
  const optim::AdamWResult slices =
      optim::adamw_update(p_slices, g_slices, entries_named(m, grads), entries_named(v, grads),
                          {out.lr, s[5], s[6], s[7], s[8], s[0]}, decayed);
  out.next.m = slices.m;
  out.next.v = slices.v;
  if (sliced_params) {
    out.next.params = slices.params;
  } else {
    for (const auto& [name, g] : grads) {
      out.next.params[name] = gather_slice(name, slices.params.at(name), p.at(name).shape());
    }
  }
  pass_untrained(sliced.frozen_untrained, p, grads, m, v, out.next);
  return out;
}

CompileOptions step_compile_options(bool donate, bool split_moments, bool split_parameters,
                                    const std::set<std::string>& split_over_model) {
  CompileOptions o(nullptr, donate ? step_donation() : std::vector<Donation>{});
  for (const std::string& name : split_over_model) {  // this process's shards, and their moments
    for (int a : {0, 1, 2}) o.varying_argument_leaves[a][name] = {nn::kModelAxis};
    for (int r : {3, 4, 5}) o.varying_result_leaves[r][name] = {nn::kModelAxis};
  }
  o.varying_arguments[4] = {kDataAxis};  // each process holds its share of the batch
  if (split_moments) {                   // and its slices of the moments
    o.varying_arguments[1] = o.varying_arguments[2] = {kDataAxis};
    o.varying_results[4] = o.varying_results[5] = {kDataAxis};
  }
  if (split_parameters) {  // and of the parameters
    o.varying_arguments[0] = {kDataAxis};
    o.varying_results[3] = {kDataAxis};
  }
  o.argument_names = {"params", "m", "v", "counters", "batch", "scalars"};
  o.element_names[4] = data::Batch::field_names();
  o.element_names[5] = step_scalar_names();
  return o;
}

TrainStepFn make_train_step(const nn::GptConfig& config, StepOptions options) {
  const bool stages_nest = (!options.split_gradients || options.split_moments) &&
                           (options.split_parameters.empty() || options.split_gradients);
  if (!stages_nest) {
    throw Error(
        "[train] StepOptions: split_parameters needs split_gradients, which needs "
        "split_moments (ZeRO stage 3 splits what stages 1 and 2 do); set them as "
        "StateShards::at_stage gives them");
  }
  std::set<std::string> split_over_model;
  for (const auto& [name, split] : nn::stored_model_splits(config)) split_over_model.insert(name);
  if (options.indexer_warmup && config.sparse_attention_layer_ids.empty()) {
    throw InputError(fmt::format(
        "[train] model '{}': the indexer warm-up trains sparse attention's indexers, and it has "
        "no sparse attention layer; add sparse_attention_layers (or 'S' to block_pattern) or "
        "leave the warm-up out",
        config.name));
  }
  nn::GptConfig traced = config;
  traced.dense_indexer_warmup = options.indexer_warmup;
  return TrainStepFn(
      options.indexer_warmup ? "indexer_warmup_step" : "train_step",
      [config = traced, options, split_over_model](
          const NamedTensors& p, const NamedTensors& m, const NamedTensors& v,
          const Counters& counters, const std::vector<Tensor>& b, const std::vector<Scalar>& s) {
        check_counters(config, counters);
        std::set<std::string> trained;
        if (options.indexer_warmup) {
          for (const auto& [name, w] : p) {
            if (is_indexer_parameter(name)) trained.insert(name);
          }
        }
        // Every micro-batch's loss is divided by the live targets of the whole step, so the sum
        // over micro-batches is the per-token mean and the gradients add up to its gradient.
        const std::vector<Tensor> denominators = step_denominators(config, b);
        MicroSums sums = accumulate_micro_batches(
            config, p, b, denominators, counters,
            {options.accumulation, options.split_gradients, options.split_parameters, trained});
        StepUpdate u =
            options.split_moments
                ? clip_and_update_slices(p, std::move(sums.grads), m, v, s,
                                         {options.split_gradients, options.split_parameters,
                                          split_over_model, options.indexer_warmup})
                : clip_and_update(p, std::move(sums.grads), m, v, s, split_over_model,
                                  options.indexer_warmup);
        Counters metrics;
        for (size_t i = 0; i < sums.mtp_loss.size(); ++i) {
          metrics[mtp_loss_key(static_cast<int64_t>(i) + 1)] = sums.mtp_loss[i];
        }
        if (config.moe_layers() > 0) metrics["moe.aux_loss"] = sums.aux;
        if (!config.sparse_attention_layer_ids.empty()) metrics["indexer_kl"] = sums.indexer;
        // The warm-up's routing is the frozen model's: its loads are not the training's.
        if (options.indexer_warmup) sums.counters = counters;
        return StepOutputs{sums.loss, u.grad_norm, u.lr,          u.next.params,
                           u.next.m,  u.next.v,    sums.counters, metrics};
      },
      step_compile_options(options.donate, options.split_moments, !options.split_parameters.empty(),
                           split_over_model),
      SourceLoc::current());
}

namespace {

// Each process evaluates its own batches; the host gathers the per-batch sums (evaluate.h).
CompileOptions eval_compile_options(bool split_parameters, const nn::GptConfig& config) {
  CompileOptions o;
  if (split_parameters) o.varying_arguments[0] = {kDataAxis};
  for (const auto& [name, split] : nn::stored_model_splits(config)) {
    o.varying_argument_leaves[0][name] = {nn::kModelAxis};
  }
  o.varying_arguments[1] = {kDataAxis};
  o.varying_results[0] = {kDataAxis};
  o.varying_results[1] = {kDataAxis};
  o.argument_names = {"params", "batch"};
  o.element_names[1] = data::Batch::field_names();
  return o;
}

}  // namespace

EvalFn make_eval_step(const nn::GptConfig& config,
                      std::map<std::string, TensorType> split_parameters) {
  const bool split = !split_parameters.empty();
  return EvalFn(
      "eval_step",
      [config, split_parameters](const NamedTensors& held, const std::vector<Tensor>& b) {
        const NamedTensors p =
            split_parameters.empty() ? held : gather_slices(held, split_parameters);
        const int64_t K = b[0].shape()[0];
        Tensor total = full({}, 0.0);
        for (int64_t k = 0; k < K; ++k) {
          total = total + nn::gpt_nll_sum(config, p, micro(b[0], k), micro(b[1], k), micro(b[2], k),
                                          micro(b[3], k), micro(b[4], k));
        }
        return std::tuple<Tensor, Tensor>{total, sum(b[2])};
      },
      eval_compile_options(split, config), SourceLoc::current());
}

std::vector<std::string> append_params(const NamedTensors& p, std::vector<Tensor>& args,
                                       BucketOptions& o) {
  std::vector<std::string> names;
  for (const auto& [name, t] : p) {
    o.unpadded.push_back(static_cast<int>(args.size()));
    names.push_back(name);
    args.push_back(t);
  }
  return names;
}

NamedTensors params_at(const std::vector<Tensor>& args, size_t first,
                       const std::vector<std::string>& names) {
  NamedTensors p;
  for (size_t i = 0; i < names.size(); ++i) p[names[i]] = args[first + i];
  return p;
}

Tensor next_byte_logits(const nn::GptConfig& config, const NamedTensors& p, const Tensor& tokens,
                        const Tensor& index) {
  Tensor logits = nn::gpt_logits(config, p, tokens);  // [1, T, V]
  const int64_t T = tokens.shape()[1], V = logits.shape()[2];
  Tensor pick = one_hot(reshape(index, {1}), T);  // [1, T]
  return reshape(dot_general(pick, reshape(logits, {T, V}), {{}, {}, {1}, {0}}), {V});
}

SampleFn make_sample_step(const nn::GptConfig& config,
                          std::map<std::string, TensorType> split_parameters) {
  CompileOptions o;
  if (!split_parameters.empty()) o.varying_arguments[0] = {kDataAxis};
  for (const auto& [name, split] : nn::stored_model_splits(config)) {
    o.varying_argument_leaves[0][name] = {nn::kModelAxis};
  }
  return SampleFn(
      "sample_step",
      [config, split_parameters](const NamedTensors& held, const Tensor& tokens,
                                 const Tensor& index) {
        const NamedTensors p =
            split_parameters.empty() ? held : gather_slices(held, split_parameters);
        return next_byte_logits(config, p, tokens, index);
      },
      o, SourceLoc::current());
}

}  // namespace keel::train
