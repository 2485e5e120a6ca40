#include "train/accumulate.h"

#include <tuple>

#include "autodiff/value_and_grad.h"
#include "nn/layer_stack.h"
#include "nn/moe.h"
#include "trace/collectives.h"
#include "trace/scan.h"
#include "train/moment_shards.h"
#include "train/step.h"

namespace keel::train {
namespace {

// The sums as a scan carry: a tuple of keel Tree types.
using Carry = std::tuple<NamedTensors, Tensor, Tensor, std::vector<Tensor>, Tensor, Counters>;

Carry as_carry(MicroSums s) {
  return {std::move(s.grads),    std::move(s.loss),    std::move(s.aux),
          std::move(s.mtp_loss), std::move(s.indexer), std::move(s.counters)};
}

MicroSums from_carry(Carry c) {
  return {std::move(std::get<0>(c)), std::move(std::get<1>(c)), std::move(std::get<2>(c)),
          std::move(std::get<3>(c)), std::move(std::get<4>(c)), std::move(std::get<5>(c))};
}

struct TreeContext {
  const nn::GptConfig& config;
  int64_t total_k;  // micro-batches of the step over every process
  bool scanned;
  const std::map<std::string, TensorType>& gathered;  // AccumulateOptions::gathered_params
  const std::set<std::string>& trained;               // AccumulateOptions::trained
  int64_t processes;                                  // of the data axis
};

// Expert parallelism (GptConfig::experts_over_data): the routed experts' slices are a block of
// experts each, given to the MoE layers once per source process (nn/moe.h).
bool spread(const TreeContext& t, const std::string& name) {
  return t.config.experts_over_data && nn::is_routed_expert(name);
}

// [D, experts / D, ...] of a whole [experts, ...]: the block, once per source.
Shape per_source_shape(const Shape& whole, int64_t processes) {
  Shape s = whole;
  s[0] /= processes;
  s.insert(s.begin(), processes);
  return s;
}

// The sum over dim 0 of [n, ...] in the tree of dist/fixed_order.h (each odd group in order,
// then pairs of groups level by level): each source's gradient summed as the reduce_scatter of a
// gathered expert's would sum it over the processes.
Tensor tree_over_sources(const Tensor& g) {
  const Shape& s = g.shape();
  const Shape rest(s.begin() + 1, s.end());
  auto item = [&](int64_t i) {
    Axes start(s.size(), 0), end(s.begin(), s.end());
    start[0] = i;
    end[0] = i + 1;
    return reshape(slice(g, start, end), rest);
  };
  int64_t odd = s[0], groups = 1;
  while (odd % 2 == 0) {
    odd /= 2;
    groups *= 2;
  }
  std::vector<Tensor> acc;
  for (int64_t k = 0; k < groups; ++k) {
    Tensor a = item(k * odd);
    for (int64_t j = 1; j < odd; ++j) a = a + item(k * odd + j);
    acc.push_back(a);
  }
  for (int64_t step = 1; step < groups; step *= 2) {
    for (int64_t k = 0; k + step < groups; k += 2 * step) {
      acc[static_cast<size_t>(k)] =
          acc[static_cast<size_t>(k)] + acc[static_cast<size_t>(k + step)];
    }
  }
  return acc[0];
}

// The entries of `p` that `t` differentiates.
NamedTensors differentiated(const TreeContext& t, const NamedTensors& p) {
  if (t.trained.empty()) return p;
  NamedTensors out;
  for (const std::string& name : t.trained) out[name] = p.at(name);
  return out;
}

// Layer `index` (i64 scalar) of a stack of `layers` layers whose slices this process holds
// (train/moment_shards.h: its part of each layer): every process's part of that layer, gathered.
Tensor fetch_layer(const Tensor& held, const Tensor& index, const Shape& layer, int64_t layers) {
  const int64_t part = numel(held.shape()) / layers;
  const Tensor mine = take(reshape(held, {layers, part}), reshape(index, {1}), 0);  // [1, part]
  return reshape(all_gather_invariant(reshape(mine, {part}), kDataAxis), layer);
}

// The parameters whole for the micro-batch: each gathered, but for a scanned stack (scan.*),
// which `stacks` gives the scan to read a layer at a time; in its place a stack of -0.0, the
// gradient's handle (nn::LayerSource).
NamedTensors gathered_or_fetched(const TreeContext& c, const NamedTensors& held,
                                 nn::LayerSource& stacks) {
  const std::map<std::string, TensorType>& types = c.gathered;
  NamedTensors slices, experts;
  for (const auto& [name, t] : held) {
    if (name.starts_with("scan.")) {
      stacks.held[name] = t;
    } else if (spread(c, name)) {
      // D copies of the block, each its own rows: a broadcast (batch stride 0) may run as
      // another product, whose sums are in another order than a process holding every expert.
      Shape block = per_source_shape(types.at(name).shape, c.processes);
      block[0] = 1;
      experts[name] =
          concat(std::vector<Tensor>(static_cast<size_t>(c.processes), reshape(t, block)), 0);
    } else {
      slices[name] = t;
    }
  }
  NamedTensors out = gather_slices(slices, types);
  out.insert(experts.begin(), experts.end());
  for (const auto& [name, t] : stacks.held) out[name] = full(types.at(name).shape, -0.0, t.dtype());
  stacks.layer = [types](const std::string& name, const Tensor& held, const Tensor& index) {
    const Shape& whole = types.at(name).shape;
    return fetch_layer(held, index, Shape(whole.begin() + 1, whole.end()), whole[0]);
  };
  return out;
}

// One micro-batch (fields [B, T]) added onto `s`: its forward, its gradient, its metrics.
MicroSums add_micro_batch(const TreeContext& t, const NamedTensors& held,
                          const std::vector<Tensor>& f, const std::vector<Tensor>& denominators,
                          MicroSums s) {
  const nn::GptConfig& config = t.config;
  const int64_t K = t.total_k;  // the MoE router losses' divisor
  // Gathered here, inside the micro-batch, so the gathers sit beside the layers that read them;
  // a scanned stack's layers inside the scan, one at a time.
  nn::LayerSource stacks;
  const NamedTensors p = t.gathered.empty() ? held : gathered_or_fetched(t, held, stacks);
  nn::GptLosses parts;  // filled while tracing the objective
  auto objective = [&](const NamedTensors& q) {
    NamedTensors all = p;
    for (const auto& [name, w] : q) all[name] = w;
    parts = nn::gpt_losses(config, all, f[0], f[1], f[2], f[3], f[4],
                           stacks.held.empty() ? nullptr : &stacks);
    Tensor total = step_objective(config, parts, denominators);
    if (config.moe_layers() > 0) total = total + parts.aux_loss / static_cast<double>(K);
    return total;
  };
  auto [value, g] = value_and_grad(objective)(differentiated(t, p));
  for (auto& [name, t] : s.grads) t = t + g.at(name);
  s.loss = s.loss + parts.nll / denominators[0];
  s.aux = s.aux + parts.aux_loss / static_cast<double>(K);
  for (size_t i = 0; i < s.mtp_loss.size(); ++i) {
    s.mtp_loss[i] = s.mtp_loss[i] + parts.mtp_nll[i] / denominators[i + 1];
  }
  if (parts.indexer_kl.defined()) {  // a mean over every query position of the step
    const double queries = static_cast<double>(numel(f[0].shape()) * K);
    s.indexer = s.indexer + parts.indexer_kl / queries;
  }
  if (parts.moe_load.defined()) {
    s.counters["moe.load"] = s.counters.at("moe.load") + parts.moe_load;
    s.counters["moe.dropped"] = s.counters.at("moe.dropped") + parts.moe_dropped;
  }
  return s;
}

MicroSums add_sums(MicroSums a, const MicroSums& b) {
  for (auto& [name, t] : a.grads) t = t + b.grads.at(name);
  a.loss = a.loss + b.loss;
  a.aux = a.aux + b.aux;
  a.indexer = a.indexer + b.indexer;
  for (size_t i = 0; i < a.mtp_loss.size(); ++i) a.mtp_loss[i] = a.mtp_loss[i] + b.mtp_loss[i];
  for (auto& [name, t] : a.counters) t = t + b.counters.at(name);
  return a;
}

MicroSums zero_sums(const TreeContext& c, const NamedTensors& p, const Counters& counters) {
  const nn::GptConfig& config = c.config;
  MicroSums zero;
  for (const auto& [name, t] : differentiated(c, p)) {
    zero.grads[name] = c.gathered.empty() ? zeros_like(t)
                       : spread(c, name)
                           ? full(per_source_shape(c.gathered.at(name).shape, c.processes), 0.0)
                           : full(c.gathered.at(name).shape, 0.0);
  }
  zero.loss = full({}, 0.0);
  zero.aux = full({}, 0.0);
  zero.indexer = full({}, 0.0);
  zero.mtp_loss.assign(static_cast<size_t>(config.mtp_depth()), full({}, 0.0));
  for (const auto& [name, t] : counters) zero.counters[name] = zeros_like(t);
  return zero;
}

// The fields [K, B, T] viewed as [2, K/2, B, T].
std::vector<Tensor> halves(const std::vector<Tensor>& fields) {
  std::vector<Tensor> out;
  for (const Tensor& f : fields) {
    const Shape& s = f.shape();
    out.push_back(reshape(f, {2, s[0] / 2, s[1], s[2]}));
  }
  return out;
}

// The sums of fields [K, B, T] in the tree of dist/fixed_order.h, from zeros: K odd, in index
// order; K even, the first half's tree plus the second half's. Scanned, each level is a scan
// over its two halves (or its K items), so the program grows with log2 K, not K.
MicroSums tree_sums(const TreeContext& t, const NamedTensors& p, const std::vector<Tensor>& fields,
                    const std::vector<Tensor>& denominators, const Counters& zero_counters) {
  const int64_t K = fields.at(0).shape()[0];
  // tree(2) is g0 + g1, the order a flat loop over the two already has.
  const bool even = K % 2 == 0 && K > 2;
  MicroSums zero = zero_sums(t, p, zero_counters);
  if (!t.scanned || K == 1) {
    MicroSums s = std::move(zero);
    if (even) {
      for (int64_t h = 0; h < 2; ++h) {
        std::vector<Tensor> part;
        for (const Tensor& f : fields) {
          const Shape& sh = f.shape();
          part.push_back(slice(f, {h * K / 2, 0, 0}, {(h + 1) * K / 2, sh[1], sh[2]}));
        }
        s = add_sums(std::move(s), tree_sums(t, p, part, denominators, zero_counters));
      }
      return s;
    }
    for (int64_t k = 0; k < K; ++k) {
      std::vector<Tensor> f;
      for (const Tensor& field : fields) f.push_back(micro(field, k));
      s = add_micro_batch(t, p, f, denominators, std::move(s));
    }
    return s;
  }
  // Parameters, denominators and the counters' zeros are the scan's constants.
  using Consts = std::tuple<NamedTensors, std::vector<Tensor>, Counters>;
  auto body = [&](const Carry& carry, const std::vector<Tensor>& f, const Consts& c) {
    MicroSums s = from_carry(carry);
    if (even) {
      s = add_sums(std::move(s), tree_sums(t, std::get<0>(c), f, std::get<1>(c), std::get<2>(c)));
    } else {
      s = add_micro_batch(t, std::get<0>(c), f, std::get<1>(c), std::move(s));
    }
    return std::pair<Carry, std::vector<Tensor>>{as_carry(std::move(s)), {}};
  };
  auto [sums, ys] = scan_tree(body, as_carry(std::move(zero)), even ? halves(fields) : fields,
                              Consts{p, denominators, zero_counters});
  return from_carry(std::move(sums));
}

}  // namespace

MicroSums accumulate_micro_batches(const nn::GptConfig& config, const NamedTensors& p,
                                   const std::vector<Tensor>& batch,
                                   const std::vector<Tensor>& denominators,
                                   const Counters& counters, const AccumulateOptions& o) {
  const int64_t K = batch.at(0).shape()[0];
  const int64_t ranks = trace_axis_size(kDataAxis, SourceLoc::current());
  const bool scanned =
      o.how == Accumulation::scanned || (o.how == Accumulation::automatic && K > 1);
  const bool scatter_grads = o.scatter_grads;
  if (config.experts_over_data && o.gathered_params.empty()) {
    throw Error(
        "[train] experts over 'data' are ZeRO stage 3's slices of them; pass gathered_params "
        "(StepOptions::split_parameters)");
  }
  const std::vector<Tensor> fields(batch.begin(), batch.begin() + 5);
  const TreeContext context{config, K * ranks, scanned, o.gathered_params, o.trained, ranks};
  MicroSums s = tree_sums(context, p, fields, denominators, counters);
  // Across processes: the same tree over their partial sums, so N processes of K micro-batches
  // add up like one process of N*K. A spread expert's sources' sums are here already.
  for (auto& [name, g] : s.grads) {
    g = spread(context, name) ? reshape(tree_over_sources(g), {numel(g.shape()) / ranks})
        : scatter_grads       ? scatter_sum(name, g)
                              : all_reduce(g, kDataAxis);
  }
  s.loss = all_reduce(s.loss, kDataAxis);
  if (config.moe_layers() > 0) s.aux = all_reduce(s.aux, kDataAxis);  // else a constant 0
  for (Tensor& m : s.mtp_loss) m = all_reduce(m, kDataAxis);
  if (!config.sparse_attention_layer_ids.empty()) s.indexer = all_reduce(s.indexer, kDataAxis);
  for (auto& [name, c] : s.counters) c = counters.at(name) + all_reduce(c, kDataAxis);
  return s;
}

NamedTensors gather_slices(const NamedTensors& slices,
                           const std::map<std::string, TensorType>& types) {
  NamedTensors out;
  for (const auto& [name, t] : slices) {
    out[name] = gather_slice(name, t, types.at(name).shape);
  }
  return out;
}

}  // namespace keel::train
