#include "train/segmented_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "autodiff/value_and_grad.h"
#include "ir/error.h"
#include "nn/layer_stack.h"
#include "trace/compile.h"

namespace keel::train {
namespace {

using Fields = std::vector<Tensor>;
using CountsFn = CompiledFn<Fields(Fields)>;
// (embedding parameters, tokens, positions) -> x [B, T, C]
using EmbedFn = CompiledFn<Tensor(Params, Tensor, Tensor)>;
// (segment parameters h.0.., x, positions, doc_ids) -> the segment's output
using SegmentForwardFn = CompiledFn<Tensor(Params, Tensor, Tensor, Tensor)>;
// (head parameters, x, {targets, mask, positions, doc_ids}, denominators, loss sums, gradient
// sums) -> (dx, loss sums, gradient sums)
using HeadFn =
    CompiledFn<std::tuple<Tensor, Params, Params>(Params, Tensor, Fields, Fields, Params, Params)>;
// (segment parameters, x in, dx out, positions, doc_ids, router-loss scale 1/K, gradient sums,
// MoE sums {moe.aux_loss, moe.load, moe.dropped}, placement [MoE layers, segment's MoE layers])
// -> (dx in, gradient sums, MoE sums)
using SegmentBackwardFn = CompiledFn<std::tuple<Tensor, Params, Params>(
    Params, Tensor, Tensor, Tensor, Tensor, Tensor, Params, Params, Tensor)>;
// (embedding parameters, tokens, positions, dx, gradient sums) -> gradient sums
using EmbedBackwardFn = CompiledFn<Params(Params, Tensor, Tensor, Tensor, Params)>;
// (parameters, gradients, m, v, scalars) -> (grad norm, lr, parameters, m, v)
// (parameters, gradients, m, v, counters, this step's counts, scalars) -> (grad norm, lr,
// parameters, m, v, counters): everything the step writes into its caller's state is written
// here, last, so a step that fails earlier leaves that state as it was.
using UpdateFn = CompiledFn<std::tuple<Tensor, Tensor, Params, Params, Params, Params>(
    Params, Params, Params, Params, Params, Params, std::vector<Scalar>)>;

const std::string kInput = "x";  // the segment's or head's input among its differentiated leaves

// In prepare mode a program is only traced and prepared; its results are zeros of the traced
// types, enough to trace the programs after it.
template <class R, class... Args>
R call(bool prepare_only, const CompiledFn<R(Args...)>& fn,
       const std::type_identity_t<Args>&... args) {
  if (!prepare_only) return fn(args...);
  const Program& program = fn.prepare(args...);
  std::vector<Tensor> zeros;
  for (NodeId id : program.graph.outputs()) {
    const TensorType& t = program.graph.node(id).type;
    zeros.emplace_back(Array(t.dtype, t.shape));
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
Params segment_of(const Params& all, int64_t first, int64_t count) {
  Params out;
  for (const auto& [name, t] : all) {
    const int64_t l = layer_of(name);
    if (l >= first && l < first + count) out[renumbered(name, l - first)] = t;
  }
  return out;
}

void put_segment(Params& all, const Params& part, int64_t first) {
  for (const auto& [name, t] : part) all[renumbered(name, layer_of(name) + first)] = t;
}

bool is_embedding(const std::string& name) {
  return name == "wte.weight" || name == "wpe.weight";
}
bool is_head(const std::string& name) {
  return name == "wte.weight" || name.starts_with("ln_f.") || name.starts_with("mtp.");
}

template <class Pred>
Params subset(const Params& all, Pred keep) {
  Params out;
  for (const auto& [name, t] : all) {
    if (keep(name)) out[name] = t;
  }
  return out;
}

void put(Params& all, const Params& part) {
  for (const auto& [name, t] : part) all[name] = t;
}

Params with_input(Params p, const Tensor& x) {
  p[kInput] = x;
  return p;
}

Params without_input(Params p) {
  p.erase(kInput);
  return p;
}

Params plus(const Params& sums, const Params& more) {
  Params out = sums;
  for (auto& [name, t] : out) t = t + more.at(name);
  return out;
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
};

SegmentedStep::SegmentedStep(const nn::GptConfig& config, int64_t every_n_layers,
                             StepOptions options)
    : config_(config) {
  if (every_n_layers < 1) {
    throw InputError(
        fmt::format("[train] launch.barrier_every_n_layers must be >= 1 for a split step, got {}",
                    every_n_layers));
  }
  for (int64_t first = 0; first < config.layers; first += every_n_layers) {
    const int64_t count = std::min(every_n_layers, config.layers - first);
    segments_.push_back({first, count});
    patterns_.push_back(nn::layer_kinds(config, first, count));
  }
  const nn::GptConfig c = config;
  // Donation of each program (argument -> result), when the step donates.
  auto donating = [&](std::vector<Donation> d) {
    return CompileOptions(nullptr, options.donate ? std::move(d) : std::vector<Donation>{});
  };
  auto* programs = new Programs{
      CountsFn(
          "step_counts", [c](const Fields& b) { return step_denominators(c, b); },
          [] {
            CompileOptions o;
            o.varying_arguments[0] = {kDataAxis};  // the batch
            return o;
          }(),
          SourceLoc::current()),
      EmbedFn(
          "embed_forward",
          [c](const Params& p, const Tensor& tokens, const Tensor& positions) {
            return nn::gpt_embed(c, p, tokens, positions);
          },
          {}, SourceLoc::current()),
      {},
      HeadFn(
          "head",
          [c](const Params& p, const Tensor& x, const Fields& f, const Fields& denominators,
              const Params& sums, const Params& grad_sums) {
            nn::GptLosses parts;
            auto objective = [&](const Params& q) {
              parts = nn::gpt_head_losses(c, q, q.at(kInput), f[0], f[1], f[2], f[3]);
              return step_objective(c, parts, denominators);
            };
            auto [value, g] = value_and_grad(objective)(with_input(p, x));
            Params out_sums = sums;
            out_sums["loss"] = sums.at("loss") + parts.nll / denominators[0];
            for (int64_t d = 1; d <= c.mtp_depth(); ++d) {
              const std::string key = mtp_loss_key(d);
              out_sums[key] = sums.at(key) + parts.mtp_nll[static_cast<size_t>(d - 1)] /
                                                 denominators[static_cast<size_t>(d)];
            }
            return std::tuple<Tensor, Params, Params>{g.at(kInput), out_sums,
                                                      plus(grad_sums, without_input(g))};
          },
          donating({{4, 1}, {5, 2}}), SourceLoc::current()),
      {},
      EmbedBackwardFn(
          "embed_backward",
          [c](const Params& p, const Tensor& tokens, const Tensor& positions, const Tensor& dx,
              const Params& grad_sums) {
            auto objective = [&](const Params& q) {
              return sum(nn::gpt_embed(c, q, tokens, positions) * dx);
            };
            return plus(grad_sums, value_and_grad(objective)(p).second);
          },
          donating({{4, 0}}), SourceLoc::current()),
      UpdateFn(
          "update",
          [](const Params& p, const Params& grads, const Params& m, const Params& v,
             const Params& counters, const Params& counts, const std::vector<Scalar>& s) {
            StepUpdate u = clip_and_update(p, grads, m, v, s);
            Params next_counters;
            for (const auto& [name, t] : counters) next_counters[name] = t + counts.at(name);
            return std::tuple<Tensor, Tensor, Params, Params, Params, Params>{
                u.grad_norm, u.lr, u.next.params, u.next.m, u.next.v, next_counters};
          },
          donating({{0, 2}, {2, 3}, {3, 4}, {4, 5}}), SourceLoc::current())};
  programs_.reset(programs);
  for (size_t i = 0; i < segments_.size(); ++i) {
    const std::string& pattern = patterns_[i];
    if (programs_->forward.count(pattern)) continue;
    // Segments of one pattern trace the same program: parameters are renamed h.0.., and the
    // first layer matters only through which layers are MoE, which the pattern fixes.
    const int64_t first = segments_[i].first, count = segments_[i].second;
    programs_->forward.emplace(
        pattern, SegmentForwardFn(
                     "segment_forward_" + pattern,
                     [c, first, count](const Params& p, const Tensor& x, const Tensor& positions,
                                       const Tensor& doc_ids) {
                       return nn::gpt_blocks(c, p, first, count, x, positions, doc_ids).x;
                     },
                     {}, SourceLoc::current()));
    programs_->backward.emplace(
        pattern,
        SegmentBackwardFn(
            "segment_backward_" + pattern,
            [c, first, count](const Params& p, const Tensor& x, const Tensor& dy,
                              const Tensor& positions, const Tensor& doc_ids,
                              const Tensor& aux_scale, const Params& grad_sums,
                              const Params& moe_sums, const Tensor& placement) {
              nn::GptSegment seg;
              // The forward again (only the segment's input was kept), then its gradient
              // against dy: d/dq of sum(y * dy) + the router losses' share of the objective.
              auto objective = [&](const Params& q) {
                seg = nn::gpt_blocks(c, q, first, count, q.at(kInput), positions, doc_ids);
                Tensor total = sum(seg.x * dy);
                if (seg.moe_load.defined()) total = total + seg.aux_loss * aux_scale;
                return total;
              };
              auto [value, g] = value_and_grad(objective)(with_input(p, x));
              Params out_moe = moe_sums;
              if (seg.moe_load.defined()) {
                out_moe["moe.aux_loss"] = moe_sums.at("moe.aux_loss") + seg.aux_loss * aux_scale;
                out_moe["moe.load"] = moe_sums.at("moe.load") + matmul(placement, seg.moe_load);
                out_moe["moe.dropped"] = moe_sums.at("moe.dropped") + seg.moe_dropped;
              }
              return std::tuple<Tensor, Params, Params>{g.at(kInput),
                                                        plus(grad_sums, without_input(g)), out_moe};
            },
            donating({{6, 1}, {7, 2}}), SourceLoc::current()));
  }
}

std::vector<std::string> SegmentedStep::program_names() const {
  std::vector<std::string> names = {"step_counts", "embed_forward", "head", "embed_backward",
                                    "update"};
  for (const auto& [pattern, fn] : programs_->forward) names.push_back(fn.name());
  for (const auto& [pattern, fn] : programs_->backward) names.push_back(fn.name());
  return names;
}

StepOutputs SegmentedStep::operator()(const Params& p, const Params& m, const Params& v,
                                      const Counters& counters, const std::vector<Tensor>& batch,
                                      const std::vector<Scalar>& scalars) const {
  return run(false, p, m, v, counters, batch, scalars);
}

void SegmentedStep::prepare(const Params& p, const Params& m, const Params& v,
                            const Counters& counters, const std::vector<Tensor>& batch,
                            const std::vector<Scalar>& scalars) const {
  run(true, p, m, v, counters, batch, scalars);
}

StepOutputs SegmentedStep::run(bool prep, const Params& p, const Params& m, const Params& v,
                               const Counters& counters, const std::vector<Tensor>& batch,
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
  const Fields denominators = call(prep, fn.counts, batch);
  Params sums = {{"loss", Tensor(Array(DType::f32, {}))}};
  for (int64_t d = 1; d <= config_.mtp_depth(); ++d) {
    sums[mtp_loss_key(d)] = Tensor(Array(DType::f32, {}));
  }
  // This step's MoE counts start from zero; the update adds them to the caller's counters.
  Params moe_sums;
  if (moe_layers > 0) {
    moe_sums = zero_counters(config_);
    moe_sums["moe.aux_loss"] = Tensor(Array(DType::f32, {}));
  }
  Params grads;
  for (const auto& [name, t] : p) grads[name] = Tensor(Array(DType::f32, t.shape()));
  const Params embed_params = subset(p, is_embedding);
  const Params head_params = subset(p, is_head);
  const Tensor aux_scale(Array::scalar(1.0 / static_cast<double>(K)));
  // Placement of each segment's MoE layers among all MoE layers (host data, not a device read).
  std::vector<Tensor> placements;
  int64_t moe_row = 0;
  for (size_t s = 0; s < segments_.size(); ++s) {
    const int64_t here = std::count(patterns_[s].begin(), patterns_[s].end(), 'm');
    Array a(DType::f32, {std::max<int64_t>(moe_layers, 1), std::max<int64_t>(here, 1)});
    for (int64_t j = 0; j < here; ++j) a.set_f64((moe_row + j) * here + j, 1.0);
    moe_row += here;
    placements.emplace_back(a);
  }
  for (int64_t k = 0; k < K; ++k) {
    const Tensor tokens = host_micro(batch[0], k), targets = host_micro(batch[1], k),
                 mask = host_micro(batch[2], k), positions = host_micro(batch[3], k),
                 doc_ids = host_micro(batch[4], k);
    std::vector<Tensor> inputs = {call(prep, fn.embed, embed_params, tokens, positions)};
    for (size_t s = 0; s < segments_.size(); ++s) {
      const auto [first, count] = segments_[s];
      inputs.push_back(call(prep, fn.forward.at(patterns_[s]), segment_of(p, first, count),
                            inputs.back(), positions, doc_ids));
    }
    auto [dx, new_sums, head_grads] =
        call(prep, fn.head, head_params, inputs.back(), Fields{targets, mask, positions, doc_ids},
             denominators, sums, subset(grads, is_head));
    sums = std::move(new_sums);
    put(grads, head_grads);
    for (size_t s = segments_.size(); s-- > 0;) {
      const auto [first, count] = segments_[s];
      auto [dx_in, seg_grads, seg_moe] = call(
          prep, fn.backward.at(patterns_[s]), segment_of(p, first, count), inputs[s], dx, positions,
          doc_ids, aux_scale, segment_of(grads, first, count), moe_sums, placements[s]);
      dx = std::move(dx_in);
      put_segment(grads, seg_grads, first);
      moe_sums = std::move(seg_moe);
    }
    put(grads, call(prep, fn.embed_backward, embed_params, tokens, positions, dx,
                    subset(grads, is_embedding)));
  }
  Counters counts, metrics;
  for (const auto& [name, t] : moe_sums) (name == "moe.aux_loss" ? metrics : counts)[name] = t;
  auto [norm, lr, p2, m2, v2, counters_out] =
      call(prep, fn.update, p, grads, m, v, counters, counts, scalars);
  for (const auto& [name, t] : sums) {
    if (name != "loss") metrics[name] = t;
  }
  return StepOutputs{sums.at("loss"), norm, lr, p2, m2, v2, counters_out, metrics};
}

int64_t SegmentedStep::predicted_peak_bytes(const ProgramMemoryMap& programs, int64_t batch,
                                            int64_t seq) const {
  int64_t params = 0;
  for (const auto& [name, shape] : nn::gpt_param_shapes(config_)) params += numel(shape);
  // Parameters, both moments and the gradient sums: 4 copies; the inputs of every segment.
  const int64_t activation = batch * seq * config_.width;
  int64_t held = 4 * (4 * params + static_cast<int64_t>(segments_.size() + 1) * activation);
  int64_t beyond = 0;
  for (const std::string& name : program_names()) {
    auto it = programs.find(name);
    if (it != programs.end()) beyond = std::max(beyond, it->second.first - it->second.second);
  }
  return held + beyond;
}

}  // namespace keel::train
