#include "train/segmented_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

#include "autodiff/value_and_grad.h"
#include "ir/error.h"
#include "nn/layer_stack.h"
#include "nn/tensor_parallel.h"
#include "trace/collectives.h"
#include "trace/compile.h"
#include "train/accumulate.h"
#include "train/model_shards.h"
#include "train/moment_shards.h"

namespace keel::train {
namespace {

using Fields = std::vector<Tensor>;
using CountsFn = CompiledFn<Fields(Fields)>;
// (embedding parameters, tokens, positions) -> x [B, T, C]
using EmbedFn = CompiledFn<Tensor(NamedTensors, Tensor, Tensor)>;
// (segment parameters h.0.., x, positions, doc_ids, tokens) -> the segment's output; the tokens
// are hashed for its n-gram memory layers (unread without any).
using SegmentForwardFn = CompiledFn<Tensor(NamedTensors, Tensor, Tensor, Tensor, Tensor)>;
// (head parameters, x, {targets, mask, positions, doc_ids}, denominators, loss sums, gradient
// sums) -> (dx, loss sums, gradient sums)
using HeadFn = CompiledFn<std::tuple<Tensor, NamedTensors, NamedTensors>(
    NamedTensors, Tensor, Fields, Fields, NamedTensors, NamedTensors)>;
// (segment parameters, x in, dx out, positions, doc_ids, router-loss scale 1/K, the step's live
// targets, gradient sums, MoE sums {moe.aux_loss, moe.load, moe.dropped} and sparse attention's
// {indexer_kl}, placement [MoE layers, segment's MoE layers], tokens) -> (dx in, gradient sums,
// MoE sums)
using SegmentBackwardFn = CompiledFn<std::tuple<Tensor, NamedTensors, NamedTensors>(
    NamedTensors, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, NamedTensors, NamedTensors,
    Tensor, Tensor)>;
// (embedding parameters, tokens, positions, dx, gradient sums) -> gradient sums
using EmbedBackwardFn =
    CompiledFn<NamedTensors(NamedTensors, Tensor, Tensor, Tensor, NamedTensors)>;
// (parameters, this process's gradient sums, m, v, counters, its loss sums, its MoE sums,
// scalars) -> (grad norm, lr, parameters, m, v, counters, metrics incl. "loss"): the sums are
// all-reduced over the data axis first; everything the step writes into its caller's state is
// written here, last, so a step that fails earlier leaves that state as it was.
using UpdateFn = CompiledFn<std::tuple<Tensor, Tensor, NamedTensors, NamedTensors, NamedTensors,
                                       NamedTensors, NamedTensors>(
    NamedTensors, NamedTensors, NamedTensors, NamedTensors, NamedTensors, NamedTensors,
    NamedTensors, std::vector<Scalar>)>;

// (a's gradient, loss and MoE sums, b's) -> a + b: a node of the tree over micro-batches, on the
// device (a's buffers donated).
using AccumulateFn = CompiledFn<std::tuple<NamedTensors, NamedTensors, NamedTensors>(
    NamedTensors, NamedTensors, NamedTensors, NamedTensors, NamedTensors, NamedTensors)>;

const std::string kInput = "x";  // the segment's or head's input among its differentiated leaves

// In prepare mode a program is only traced and prepared; its results are zeros of the traced
// types that take no memory, enough to trace the programs after it.
template <class R, class... Args>
R call(bool prepare_only, const CompiledFn<R(Args...)>& fn,
       const std::type_identity_t<Args>&... args) {
  if (!prepare_only) return fn(args...);
  const Program& program = fn.prepare(args...);
  std::vector<Tensor> zeros;
  for (NodeId id : program.graph.outputs()) {
    const TensorType& t = program.graph.node(id).type;
    zeros.emplace_back(Array::untouched_zeros(t.dtype, t.shape));  // no memory: never read
  }
  size_t i = 0;
  return Tree<R>::unflatten(*std::static_pointer_cast<R>(program.result_like), zeros, i);
}

// Host arrays: micro-batch k of a [K, B, T] batch field, as [B, T].
Tensor host_micro(const Tensor& field, int64_t k) {
  const Array& a = field.array();
  const Shape& s = a.shape();
  Array out = Array::uninitialized(a.dtype(), {s[1], s[2]});
  std::memcpy(out.data(), a.data() + k * static_cast<int64_t>(out.nbytes()), out.nbytes());
  return Tensor(out);
}

// The layer index of a name under h.N., or -1.
int64_t layer_of(const std::string& name) {
  if (!name.starts_with("h.")) return -1;
  size_t dot = name.find('.', 2);
  return std::stoll(name.substr(2, dot - 2));
}

std::string renumbered(const std::string& name, int64_t layer) {
  return fmt::format("h.{}{}", layer, name.substr(name.find('.', 2)));
}

// The parameters of layers first..first+count-1, renamed h.0.. (and back with offset -first).
NamedTensors segment_of(const NamedTensors& all, int64_t first, int64_t count) {
  NamedTensors out;
  for (const auto& [name, t] : all) {
    const int64_t l = layer_of(name);
    if (l >= first && l < first + count) out[renumbered(name, l - first)] = t;
  }
  return out;
}

void put_segment(NamedTensors& all, const NamedTensors& part, int64_t first) {
  for (const auto& [name, t] : part) all[renumbered(name, layer_of(name) + first)] = t;
}

bool is_embedding(const std::string& name) {
  return name == "wte.weight" || name == "wpe.weight";
}
bool is_head(const std::string& name) {
  return name == "wte.weight" || name.starts_with("ln_f.") || name.starts_with("mtp.");
}

template <class Pred>
NamedTensors subset(const NamedTensors& all, Pred keep) {
  NamedTensors out;
  for (const auto& [name, t] : all) {
    if (keep(name)) out[name] = t;
  }
  return out;
}

void put(NamedTensors& all, const NamedTensors& part) {
  for (const auto& [name, t] : part) all[name] = t;
}

NamedTensors with_input(NamedTensors p, const Tensor& x) {
  p[kInput] = x;
  return p;
}

NamedTensors without_input(NamedTensors p) {
  p.erase(kInput);
  return p;
}

NamedTensors plus(const NamedTensors& sums, const NamedTensors& more) {
  NamedTensors out = sums;
  for (auto& [name, t] : out) t = t + more.at(name);
  return out;
}

NamedTensors reduced(const NamedTensors& per_process) {
  NamedTensors out;
  for (const auto& [name, t] : per_process) out[name] = all_reduce(t, kDataAxis);
  return out;
}

// Each argument and result listed varies over the data axis (each process's micro-batches).
CompileOptions per_process(CompileOptions o, std::vector<int> arguments, std::vector<int> results) {
  for (int a : arguments) o.varying_arguments[a] = {kDataAxis};
  for (int r : results) o.varying_results[r] = {kDataAxis};
  return o;
}

// The leaves named in `split` of the arguments and results listed also vary over "model" (this
// process's shards of the tensors the blocks split, tensor parallelism).
CompileOptions model_shards(CompileOptions o, const std::set<std::string>& split,
                            std::vector<int> arguments, std::vector<int> results) {
  for (const std::string& name : split) {
    for (int a : arguments) o.varying_argument_leaves[a][name] = {nn::kModelAxis};
    for (int r : results) o.varying_result_leaves[r][name] = {nn::kModelAxis};
  }
  return o;
}

// The names of `split` among layers first..first+count-1, renamed h.0.. as segment_of does.
std::set<std::string> segment_split(const std::set<std::string>& split, int64_t first,
                                    int64_t count) {
  std::set<std::string> out;
  for (const std::string& name : split) {
    const int64_t l = layer_of(name);
    if (l >= first && l < first + count) out.insert(renumbered(name, l - first));
  }
  return out;
}

// What micro-batches add up to: one micro-batch's, from zeros, or a node of the tree over them.
struct MicroTotals {
  NamedTensors grads;  // per parameter
  NamedTensors sums;   // "loss", "mtp_loss.D"
  NamedTensors moe;    // "moe.aux_loss", "moe.load", "moe.dropped" (MoE), "indexer_kl" (sparse)
};

// Each value's type, by name.
std::map<std::string, TensorType> types_of(const NamedTensors& values) {
  std::map<std::string, TensorType> out;
  for (const auto& [name, t] : values) out[name] = t.type();
  return out;
}

// Zeros on the device, from its allocator: every micro-batch of every step makes a set. Only
// to prepare the programs (`prepare_only`), host stand-ins that take no memory.
NamedTensors zeros_of(const std::map<std::string, TensorType>& types, bool prepare_only) {
  const std::shared_ptr<Jit> jit = current_jit();
  NamedTensors out;
  for (const auto& [name, t] : types) {
    out[name] = prepare_only ? Tensor(Array::untouched_zeros(DType::f32, t.shape))
                             : Tensor::held_by_device(jit->allocate(DType::f32, t.shape, true));
  }
  return out;
}

// Inside a program: the whole parameters, `p` itself or (ZeRO stage 3, `types` given) gathered
// over the data axis from this process's slices of tensors of `types`, where the program starts.
NamedTensors gathered(const NamedTensors& p, const std::map<std::string, TensorType>& types) {
  return types.empty() ? p : gather_slices(p, types);
}

// The entries of `types` of layers first..first+count-1, renamed h.0.. as segment_of does.
std::map<std::string, TensorType> segment_types(const std::map<std::string, TensorType>& types,
                                                int64_t first, int64_t count) {
  std::map<std::string, TensorType> out;
  for (const auto& [name, t] : types) {
    const int64_t l = layer_of(name);
    if (l >= first && l < first + count) out[renumbered(name, l - first)] = t;
  }
  return out;
}

// The argument (or result) indices `always`, and `more` when `also`.
std::vector<int> indices(std::vector<int> always, bool also, const std::vector<int>& more) {
  if (also) always.insert(always.end(), more.begin(), more.end());
  return always;
}

// The partial sums a tree over `k` micro-batches holds at once (dist/fixed_order.h): odd k
// adds each onto one running sum; even k holds its first half's sum while summing the second.
int64_t tree_buffers(int64_t k) {
  if (k % 2 == 0) return 1 + tree_buffers(k / 2);
  return k == 1 ? 1 : 2;
}

}  // namespace

struct SegmentedStep::Programs {
  CountsFn counts;
  EmbedFn embed;
  std::map<std::string, SegmentForwardFn> forward;  // by segment pattern
  HeadFn head;
  std::map<std::string, SegmentBackwardFn> backward;
  EmbedBackwardFn embed_backward;
  UpdateFn update;
  AccumulateFn accumulate;  // only with more than one micro-batch
};

SegmentedStep::SegmentedStep(const nn::GptConfig& config, StepOptions options)
    : config_(config), options_(options) {
  const int64_t every_n_layers = config.layout.split_every;
  if (every_n_layers < 1) {
    throw InputError(
        fmt::format("[train] a split step (launch.layer_layout = split:N) needs N >= 1, got {}",
                    every_n_layers));
  }
  for (int64_t first = 0; first < config.layers; first += every_n_layers) {
    const int64_t count = std::min(every_n_layers, config.layers - first);
    segments_.push_back({first, count});
    patterns_.push_back(nn::layer_kinds(config, first, count));
  }
  const nn::GptConfig c = config;
  std::set<std::string> split;  // tensor parallelism's shards (per layer: a split step stacks none)
  for (const auto& [name, s] : nn::stored_model_splits(config)) split.insert(name);
  auto split_among = [&](bool (*keep)(const std::string&)) {
    std::set<std::string> out;
    for (const std::string& name : split) {
      if (keep(name)) out.insert(name);
    }
    return out;
  };
  const std::set<std::string> head_split = split_among(is_head),
                              embedding_split = split_among(is_embedding);
  // ZeRO over the data axis: at stage 3 every program takes this process's slices of its
  // parameters and gathers them where it starts; from stage 1 the update takes the moments'
  // slices, from stage 2 it reduce-scatters the gradient sums.
  const std::map<std::string, TensorType> sliced = options.split_parameters;
  const bool split_params = !sliced.empty(), split_moments = options.split_moments,
             split_gradients = options.split_gradients;
  // Donation of each program (argument -> result), when the step donates.
  auto donating = [&](std::vector<Donation> d) {
    return CompileOptions(nullptr, options.donate ? std::move(d) : std::vector<Donation>{});
  };
  auto* programs = new Programs{
      CountsFn(
          "step_counts",
          [c](const Fields& b) {
            // Then the MoE router losses' scale: 1 / the step's micro-batches over every process.
            Fields out = step_denominators(c, b);
            const int64_t total = b[0].shape()[0] * trace_axis_size(kDataAxis, KEEL_HERE);
            out.push_back(full({}, 1.0 / static_cast<double>(total)));
            return out;
          },
          [] {
            CompileOptions o;
            o.varying_arguments[0] = {kDataAxis};  // the batch
            return o;
          }(),
          SourceLoc::current()),
      EmbedFn(
          "embed_forward",
          [c, sliced](const NamedTensors& p, const Tensor& tokens, const Tensor& positions) {
            return nn::gpt_embed(c, gathered(p, sliced), tokens, positions);
          },
          model_shards(per_process({}, indices({1, 2}, split_params, {0}), {0}), embedding_split,
                       {0}, {}),
          SourceLoc::current()),
      {},
      HeadFn(
          "head",
          [c, sliced](const NamedTensors& p, const Tensor& x, const Fields& f,
                      const Fields& denominators, const NamedTensors& sums,
                      const NamedTensors& grad_sums) {
            nn::GptLosses parts;
            auto objective = [&](const NamedTensors& q) {
              parts = nn::gpt_head_losses(c, q, q.at(kInput), f[0], f[1], f[2], f[3]);
              return step_objective(c, parts, denominators);
            };
            auto [value, g] = value_and_grad(objective)(with_input(gathered(p, sliced), x));
            NamedTensors out_sums = sums;
            out_sums["loss"] = sums.at("loss") + parts.nll / denominators[0];
            for (int64_t d = 1; d <= c.mtp_depth(); ++d) {
              const std::string key = mtp_loss_key(d);
              out_sums[key] = sums.at(key) + parts.mtp_nll[static_cast<size_t>(d - 1)] /
                                                 denominators[static_cast<size_t>(d)];
            }
            return std::tuple<Tensor, NamedTensors, NamedTensors>{
                g.at(kInput), out_sums, plus(grad_sums, without_input(g))};
          },
          model_shards(per_process(donating({{4, 1}, {5, 2}}),
                                   indices({1, 2, 4, 5}, split_params, {0}), {0, 1, 2}),
                       head_split, {0, 5}, {2}),
          SourceLoc::current()),
      {},
      EmbedBackwardFn(
          "embed_backward",
          [c, sliced](const NamedTensors& p, const Tensor& tokens, const Tensor& positions,
                      const Tensor& dx, const NamedTensors& grad_sums) {
            auto objective = [&](const NamedTensors& q) {
              return sum(nn::gpt_embed(c, q, tokens, positions) * dx);
            };
            return plus(grad_sums, value_and_grad(objective)(gathered(p, sliced)).second);
          },
          model_shards(
              per_process(donating({{4, 0}}), indices({1, 2, 3, 4}, split_params, {0}), {0}),
              embedding_split, {0, 4}, {0}),
          SourceLoc::current()),
      UpdateFn(
          "update",
          [split, sliced, split_moments, split_gradients](
              const NamedTensors& p, const NamedTensors& grads, const NamedTensors& m,
              const NamedTensors& v, const NamedTensors& counters, const NamedTensors& sums,
              const NamedTensors& moe, const std::vector<Scalar>& s) {
            // Across processes: the tree of dist/fixed_order.h over their partial sums, as the
            // one-program step's (train/accumulate.h); scattered, each slice is its slice of it.
            NamedTensors total;
            for (const auto& [name, g] : grads) {
              total[name] = split_gradients ? scatter_sum(name, g) : all_reduce(g, kDataAxis);
            }
            StepUpdate u = split_moments
                               ? clip_and_update_slices(p, std::move(total), m, v, s,
                                                        {split_gradients, sliced, split, false})
                               : clip_and_update(p, std::move(total), m, v, s, split);
            NamedTensors metrics = reduced(sums), next_counters;
            for (const auto& [name, t] : reduced(moe)) {
              if (counters.count(name)) {
                next_counters[name] = counters.at(name) + t;
              } else {
                metrics[name] = t;
              }
            }
            return std::tuple<Tensor, Tensor, NamedTensors, NamedTensors, NamedTensors,
                              NamedTensors, NamedTensors>{
                u.grad_norm, u.lr, u.next.params, u.next.m, u.next.v, next_counters, metrics};
          },
          model_shards(
              per_process(donating({{0, 2}, {2, 3}, {3, 4}, {4, 5}}),
                          indices(indices({1, 5, 6}, split_moments, {2, 3}), split_params, {0}),
                          indices(indices({}, split_moments, {3, 4}), split_params, {2})),
              split, {0, 1, 2, 3}, {2, 3, 4}),
          SourceLoc::current()),
      AccumulateFn(
          "accumulate",
          [](const NamedTensors& grads, const NamedTensors& sums, const NamedTensors& moe,
             const NamedTensors& more_grads, const NamedTensors& more_sums,
             const NamedTensors& more_moe) {
            return std::tuple<NamedTensors, NamedTensors, NamedTensors>{
                plus(grads, more_grads), plus(sums, more_sums), plus(moe, more_moe)};
          },
          model_shards(
              per_process(donating({{0, 0}, {1, 1}, {2, 2}}), {0, 1, 2, 3, 4, 5}, {0, 1, 2}), split,
              {0, 3}, {0}),
          SourceLoc::current())};
  programs_.reset(programs);
  for (size_t i = 0; i < segments_.size(); ++i) {
    const std::string& pattern = patterns_[i];
    if (programs_->forward.count(pattern)) continue;
    // Segments of one pattern trace the same program: parameters are renamed h.0.., and the
    // first layer matters only through each layer's kind (nn::layer_kinds), which the pattern
    // fixes.
    const int64_t first = segments_[i].first, count = segments_[i].second;
    const std::set<std::string> own = segment_split(split, first, count);
    const std::map<std::string, TensorType> own_sliced = segment_types(sliced, first, count);
    programs_->forward.emplace(
        pattern, SegmentForwardFn(
                     "segment_forward_" + pattern,
                     [c, first, count, own_sliced](const NamedTensors& p, const Tensor& x,
                                                   const Tensor& positions, const Tensor& doc_ids,
                                                   const Tensor& tokens) {
                       return nn::gpt_blocks(c, gathered(p, own_sliced), first, count, x, tokens,
                                             positions, doc_ids)
                           .x;
                     },
                     model_shards(per_process({}, indices({1, 2, 3, 4}, split_params, {0}), {0}),
                                  own, {0}, {}),
                     SourceLoc::current()));
    programs_->backward.emplace(
        pattern,
        SegmentBackwardFn(
            "segment_backward_" + pattern,
            [c, first, count, own_sliced](
                const NamedTensors& p, const Tensor& x, const Tensor& dy, const Tensor& positions,
                const Tensor& doc_ids, const Tensor& aux_scale, const Tensor& live_targets,
                const NamedTensors& grad_sums, const NamedTensors& moe_sums,
                const Tensor& placement, const Tensor& tokens) {
              nn::GptSegment seg;
              // The forward again (only the segment's input was kept), then its gradient
              // against dy: d/dq of sum(y * dy) + the router losses' share of the objective,
              // and the indexers' loss as the one program's objective holds it (in the nll).
              auto objective = [&](const NamedTensors& q) {
                seg = nn::gpt_blocks(c, q, first, count, q.at(kInput), tokens, positions, doc_ids);
                Tensor total = sum(seg.x * dy);
                if (seg.moe_load.defined()) total = total + seg.aux_loss * aux_scale;
                if (seg.indexer_loss.defined()) {
                  const Tensor& l = seg.indexer_loss;
                  total = total + (l - stop_gradient(l)) / live_targets;
                }
                return total;
              };
              auto [value, g] = value_and_grad(objective)(with_input(gathered(p, own_sliced), x));
              NamedTensors out_moe = moe_sums;
              if (seg.moe_load.defined()) {
                out_moe["moe.aux_loss"] = moe_sums.at("moe.aux_loss") + seg.aux_loss * aux_scale;
                out_moe["moe.load"] = moe_sums.at("moe.load") + matmul(placement, seg.moe_load);
                out_moe["moe.dropped"] = moe_sums.at("moe.dropped") + seg.moe_dropped;
              }
              if (seg.indexer_loss.defined()) {  // a mean over the step's query positions
                const double queries = static_cast<double>(numel(positions.shape()));
                out_moe["indexer_kl"] = moe_sums.at("indexer_kl") +
                                        stop_gradient(seg.indexer_loss) * aux_scale / queries;
              }
              return std::tuple<Tensor, NamedTensors, NamedTensors>{
                  g.at(kInput), plus(grad_sums, without_input(g)), out_moe};
            },
            model_shards(per_process(donating({{7, 1}, {8, 2}}),
                                     indices({1, 2, 3, 4, 7, 8, 10}, split_params, {0}), {0, 1, 2}),
                         own, {0, 7}, {1}),
            SourceLoc::current()));
  }
}

std::vector<std::string> SegmentedStep::program_names() const {
  std::vector<std::string> names = {"step_counts", "embed_forward", "head", "embed_backward",
                                    "update"};
  for (const auto& [pattern, fn] : programs_->forward) names.push_back(fn.name());
  for (const auto& [pattern, fn] : programs_->backward) names.push_back(fn.name());
  return names;
}

StepOutputs SegmentedStep::operator()(const NamedTensors& p, const NamedTensors& m,
                                      const NamedTensors& v, const Counters& counters,
                                      const std::vector<Tensor>& batch,
                                      const std::vector<Scalar>& scalars) const {
  return run(false, p, m, v, counters, batch, scalars);
}

void SegmentedStep::prepare(const NamedTensors& p, const NamedTensors& m, const NamedTensors& v,
                            const Counters& counters, const std::vector<Tensor>& batch,
                            const std::vector<Scalar>& scalars) const {
  run(true, p, m, v, counters, batch, scalars);
}

StepOutputs SegmentedStep::run(bool prep, const NamedTensors& p, const NamedTensors& m,
                               const NamedTensors& v, const Counters& counters,
                               const std::vector<Tensor>& batch,
                               const std::vector<Scalar>& scalars) const {
  if (batch.size() < 5) {
    throw InputError(fmt::format(
        "[train] the split step takes the batch fields tokens, targets, loss_mask, positions, "
        "doc_ids (data::Batch::fields()); got {} fields",
        batch.size()));
  }
  for (const auto& [name, t] : p) {
    if (name.starts_with("scan.")) {
      throw InputError(fmt::format(
          "[train] the split step takes per-layer parameters (h.N.*), not stacked ones like {}; "
          "pass nn::unstack_layer_params(...)",
          name));
    }
  }
  check_counters(config_, counters);
  const Programs& fn = *programs_;
  const int64_t K = batch[0].shape()[0], moe_layers = config_.moe_layers();
  Fields denominators = call(prep, fn.counts, batch);
  const Tensor aux_scale = denominators.back();
  denominators.pop_back();
  // The sums each micro-batch's start from (as zeros; the gradients' are the parameters').
  MicroTotals zero;
  zero.sums = {{"loss", Tensor(Array(DType::f32, {}))}};
  for (int64_t d = 1; d <= config_.mtp_depth(); ++d) {
    zero.sums[mtp_loss_key(d)] = Tensor(Array(DType::f32, {}));
  }
  if (moe_layers > 0) {
    zero.moe = zero_counters(config_);
    zero.moe["moe.aux_loss"] = Tensor(Array(DType::f32, {}));
  }
  if (!config_.sparse_attention_layer_ids.empty()) {
    zero.moe["indexer_kl"] = Tensor(Array(DType::f32, {}));
  }  // The gradient sums are of the whole tensors, also where the parameters are slices.
  const std::map<std::string, TensorType> grad_types =
      options_.split_parameters.empty() ? types_of(p) : options_.split_parameters;
  const NamedTensors embed_params = subset(p, is_embedding);
  const NamedTensors head_params = subset(p, is_head);
  // Placement of each segment's MoE layers among all MoE layers (host data, not a device read).
  std::vector<Tensor> placements;
  int64_t moe_row = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    int64_t here = 0;  // the segment's MoE layers (any kind of mixer)
    for (int64_t i = segments_[s].first; i < segments_[s].first + segments_[s].second; ++i) {
      here += config_.is_moe_layer(i) ? 1 : 0;
    }
    Array a(DType::f32, {std::max<int64_t>(moe_layers, 1), std::max<int64_t>(here, 1)});
    for (int64_t j = 0; j < here; ++j) a.set_f64((moe_row + j) * here + j, 1.0);
    moe_row += here;
    placements.emplace_back(a);
  }
  // Micro-batch k's sums: each program adds its part onto zeros (fresh ones: donated).
  auto micro_batch = [&](int64_t k) {
    const Tensor tokens = host_micro(batch[0], k), targets = host_micro(batch[1], k),
                 mask = host_micro(batch[2], k), positions = host_micro(batch[3], k),
                 doc_ids = host_micro(batch[4], k);
    MicroTotals t = {zeros_of(grad_types, prep), zeros_of(types_of(zero.sums), prep),
                     zeros_of(types_of(zero.moe), prep)};
    std::vector<Tensor> inputs = {call(prep, fn.embed, embed_params, tokens, positions)};
    for (size_t s = 0; s < segments_.size(); ++s) {
      const auto [first, count] = segments_[s];
      inputs.push_back(call(prep, fn.forward.at(patterns_[s]), segment_of(p, first, count),
                            inputs.back(), positions, doc_ids, tokens));
    }
    auto [dx, sums, head_grads] =
        call(prep, fn.head, head_params, inputs.back(), Fields{targets, mask, positions, doc_ids},
             denominators, t.sums, subset(t.grads, is_head));
    t.sums = std::move(sums);
    put(t.grads, head_grads);
    for (size_t s = segments_.size(); s-- > 0;) {
      const auto [first, count] = segments_[s];
      auto [dx_in, seg_grads, seg_moe] =
          call(prep, fn.backward.at(patterns_[s]), segment_of(p, first, count), inputs[s], dx,
               positions, doc_ids, aux_scale, denominators[0], segment_of(t.grads, first, count),
               t.moe, placements[s], tokens);
      dx = std::move(dx_in);
      put_segment(t.grads, seg_grads, first);
      t.moe = std::move(seg_moe);
    }
    put(t.grads, call(prep, fn.embed_backward, embed_params, tokens, positions, dx,
                      subset(t.grads, is_embedding)));
    return t;
  };
  // a += b on the device: the same rounding as a host add, and no host read.
  auto add_into = [&](MicroTotals& a, const MicroTotals& b) {
    auto [grads, sums, moe] =
        call(prep, fn.accumulate, a.grads, a.sums, a.moe, b.grads, b.sums, b.moe);
    a = {std::move(grads), std::move(sums), std::move(moe)};
  };
  // Micro-batches [lo, hi) in the tree of dist/fixed_order.h (odd counts in index order, even
  // ones as the sum of their halves), so N processes of K micro-batches add up like one process
  // of N*K whenever N is a power of two or K is 1, as the one-program step does.
  std::function<MicroTotals(int64_t, int64_t)> tree = [&](int64_t lo, int64_t hi) {
    const int64_t n = hi - lo;
    if (n % 2 == 0) {
      MicroTotals a = tree(lo, lo + n / 2);
      add_into(a, tree(lo + n / 2, hi));
      return a;
    }
    MicroTotals a = micro_batch(lo);
    for (int64_t k = lo + 1; k < hi; ++k) add_into(a, micro_batch(k));
    return a;
  };
  // Preparing needs one micro-batch: the others run the same programs, and more than one are
  // added up by one more.
  MicroTotals totals = prep ? micro_batch(0) : tree(0, K);
  if (prep && K > 1) add_into(totals, totals);
  auto [norm, lr, p2, m2, v2, counters_out, metrics] =
      call(prep, fn.update, p, totals.grads, m, v, counters, totals.sums, totals.moe, scalars);
  const Tensor loss = metrics.at("loss");
  metrics.erase("loss");
  return StepOutputs{loss, norm, lr, p2, m2, v2, counters_out, metrics};
}

int64_t SegmentedStep::predicted_peak_bytes(const ProgramMemoryMap& programs, int64_t batch,
                                            int64_t seq, int64_t micro_batches,
                                            int64_t data_processes) const {
  std::map<std::string, TensorType> whole;
  for (const auto& [name, shape] : nn::gpt_param_shapes(config_)) whole[name] = {DType::f32, shape};
  int64_t params = 0;  // of what this process holds: its shards of the split ones
  for (const auto& [name, t] : model_shard_types(config_, whole)) params += numel(t.shape);
  // Parameters and both moments (their slices, where ZeRO splits them), the tree's gradient
  // sums (whole); the inputs of every segment.
  const int64_t N = std::max<int64_t>(data_processes, 1);
  const int64_t state = (options_.split_parameters.empty() ? params : params / N) +
                        (options_.split_moments ? 2 * params / N : 2 * params);
  const int64_t activation = batch * seq * config_.width;
  const int64_t sums = tree_buffers(std::max<int64_t>(micro_batches, 1)) * params;
  int64_t held = 4 * (state + sums + static_cast<int64_t>(segments_.size() + 1) * activation);
  int64_t beyond = 0;
  std::vector<std::string> names = program_names();
  if (micro_batches > 1) names.push_back("accumulate");
  for (const std::string& name : names) {
    auto it = programs.find(name);
    if (it != programs.end()) beyond = std::max(beyond, it->second.first - it->second.second);
  }
  return held + beyond;
}

}  // namespace keel::train
