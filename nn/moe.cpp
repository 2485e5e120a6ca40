#include "nn/moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ir/error.h"
#include "nn/layers.h"
#include "nn/tensor_parallel.h"
#include "trace/collectives.h"

namespace keel::nn {

void MoeConfig::validate(const std::string& source) const {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[nn] {}: moe: {}", source, what));
  };
  if (experts < 1) throw bad(fmt::format("experts must be >= 1, got {}", experts));
  if (top_k < 1 || top_k > experts) {
    throw bad(fmt::format("top_k must be in 1..experts ({}), got {}", experts, top_k));
  }
  if (!(capacity_factor > 0)) throw bad("capacity_factor must be > 0");
  if (hidden < 0) throw bad("hidden must be >= 0 (0: the model's mlp_hidden)");
  if (!(router_z_weight >= 0) || !(balance_weight >= 0)) {
    throw bad("router_z_weight and balance_weight must be >= 0");
  }
}

int64_t moe_capacity(const MoeConfig& c, int64_t tokens) {
  const double slots =
      c.capacity_factor * static_cast<double>(tokens * c.top_k) / static_cast<double>(c.experts);
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(slots)), 1,
                             std::max<int64_t>(tokens, 1));
}

std::vector<std::pair<std::string, Shape>> moe_param_shapes(const MoeConfig& c,
                                                            const std::string& prefix,
                                                            int64_t width, int64_t hidden) {
  const int64_t F = c.hidden > 0 ? c.hidden : hidden, E = c.experts;
  std::vector<std::pair<std::string, Shape>> out = {
      {prefix + ".router.weight", {width, E}},
      {prefix + ".experts.c_fc.weight", {E, width, 2 * F}},
      {prefix + ".experts.c_proj.weight", {E, F, width}}};
  if (c.shared_expert) {
    out.push_back({prefix + ".shared.c_fc.weight", {width, 2 * F}});
    out.push_back({prefix + ".shared.c_proj.weight", {F, width}});
  }
  return out;
}

bool is_routed_expert(const std::string& name) {
  return name.ends_with(".moe.experts.c_fc.weight") || name.ends_with(".moe.experts.c_proj.weight");
}

namespace {

// SwiGLU on the last axis of gate-and-up [.., 2F] -> [.., F].
Tensor swiglu(const Tensor& gu) {
  const Shape& s = gu.shape();
  const int64_t F = s.back() / 2;
  Axes start(s.size(), 0), mid(s.begin(), s.end()), end(s.begin(), s.end());
  mid.back() = F;
  Axes from = start;
  from.back() = F;
  Tensor g = slice(gu, start, mid);
  Tensor u = slice(gu, from, end);
  return g * sigmoid(g) * u;
}

}  // namespace

MoeOutput moe_ffn(const MoeConfig& c, const NamedTensors& p, const std::string& prefix,
                  const Tensor& x, int64_t model_processes) {
  c.validate(prefix);
  const Shape& s = x.shape();  // [B, T, C]
  const int64_t C = s[2], N = s[0] * s[1], E = c.experts, K = c.top_k;
  const int64_t cap = moe_capacity(c, N);
  const Tensor& c_fc = p.at(prefix + ".experts.c_fc.weight");
  const Tensor& c_proj = p.at(prefix + ".experts.c_proj.weight");
  // Experts given per source, [D, held, ...]: spread over the D processes of "data".
  const bool spread = c_fc.shape().size() == 4, split = model_processes > 1;
  const int64_t D = spread ? trace_axis_size(kDataAxis, SourceLoc::current()) : 1;
  if (spread &&
      (split || c_fc.shape()[0] != D || c_proj.shape().size() != 4 || c_proj.shape()[0] != D)) {
    throw InputError(fmt::format(
        "[nn] {}: experts given per source must be [{}, held, ...] for the {} processes of mesh "
        "axis 'data', both c_fc and c_proj, and not split over 'model' too; got {} and {} "
        "({} processes of 'model')",
        prefix, D, D, shape_str(c_fc.shape()), shape_str(c_proj.shape()), model_processes));
  }
  const int64_t held = c_fc.shape()[spread ? 1 : 0];  // experts run here
  const int64_t processes = spread ? D : model_processes;
  if (held * processes != E) {
    throw InputError(fmt::format(
        "[nn] {}: this process holds {} of {} experts, which is not its share over {} processes "
        "of mesh axis '{}'; pass the experts split as nn::gpt_model_splits gives them, or per "
        "source as train/expert_parallel.h does",
        prefix, held, E, processes, spread ? kDataAxis : kModelAxis));
  }
  Tensor x2 = reshape(x, {N, C});

  Tensor logits = matmul(x2, p.at(prefix + ".router.weight"));  // [N, E]
  Tensor probs = softmax(logits, -1);
  auto [top, choice] = top_k(probs, K);       // [N, K] each
  Tensor gates = top / sum(top, {-1}, true);  // renormalized over the K choices
  // Choice-major order: every token's first choice claims a slot before any second choice.
  Tensor expert = reshape(transpose(choice, {1, 0}), {K * N});  // i64
  Tensor gate = reshape(transpose(gates, {1, 0}), {K * N});
  Tensor hot = one_hot(expert, E);                                  // [K*N, E]
  Tensor slot_in_expert = sum((cumsum(hot, 0) - 1.0) * hot, {-1});  // [K*N], exact in f32
  Tensor keep = lt(slot_in_expert, full({}, static_cast<double>(cap)));
  // Kept choices go to row expert * cap + slot of the dispatch buffer; dropped ones to a last
  // row that no expert reads and whose output is zero.
  Tensor row =
      expert * full({}, static_cast<double>(cap), DType::i64) + cast(slot_in_expert, DType::i64);
  row = select(keep, row, full({}, static_cast<double>(E * cap), DType::i64));
  Tensor mine = keep;  // the kept choices this process's experts run
  if (split) {
    // This process holds experts [first, first + held): its buffer's rows are the whole one's
    // from first * cap, and a choice for another process's expert goes to the last row too.
    const Tensor first = cast(axis_index(kModelAxis), DType::i64) *
                         full({}, static_cast<double>(held * cap), DType::i64);
    const Tensor local = row - first;
    const Tensor at = minimum(maximum(local, full({}, 0.0, DType::i64)),
                              full({}, static_cast<double>(held * cap - 1), DType::i64));
    mine = eq(at, local);
    row = select(mine, local, full({}, static_cast<double>(held * cap), DType::i64));
    gate = pvary(gate, kModelAxis);  // each process's use of it is its share of the gradient
  }

  const Tensor routed = split ? pvary(x2, kModelAxis) : x2;  // as the gates
  Tensor tokens = reshape(broadcast_to(reshape(routed, {1, N, C}), {K, N, C}), {K * N, C});
  // Without `spread` this process's experts read its own buffer; with it, the whole buffer's
  // rows (expert-major) go in blocks to the experts' processes and come back the same way.
  const int64_t rows_here = spread ? E * cap : held * cap;
  Tensor buffer = scatter_add(full({rows_here + 1, C}, 0.0), row, tokens);
  Tensor ye;
  if (spread) {
    // Block d of the buffer is the tokens for process d's experts; after the exchange, block s
    // is source s's tokens for this process's experts, each expert's `cap` rows in order.
    Tensor xe = reshape(
        all_to_all(reshape(slice(buffer, {0, 0}, {E * cap, C}), {D, held * cap, C}), kDataAxis, 0),
        {D, held, cap, C});
    // One product per (source, expert), each the one a process holding every expert runs on
    // that source's tokens, so each source's gradient comes out apart.
    Tensor h = dot_general(xe, c_fc, {{0, 1}, {0, 1}, {3}, {2}});
    Tensor yd = dot_general(swiglu(h), c_proj, {{0, 1}, {0, 1}, {3}, {2}});  // [D, held, cap, C]
    ye = reshape(all_to_all(reshape(yd, {D, held * cap, C}), kDataAxis, 0), {E * cap, C});
  } else {
    Tensor xe = reshape(slice(buffer, {0, 0}, {held * cap, C}), {held, cap, C});
    Tensor h = dot_general(xe, c_fc, {{0}, {0}, {2}, {1}});
    ye = reshape(dot_general(swiglu(h), c_proj, {{0}, {0}, {2}, {1}}),
                 {held * cap, C});  // [held, cap, C]
  }
  Tensor rows = concat({ye, full({1, C}, 0.0)}, 0);
  Tensor weight = gate * cast(mine, DType::f32);
  Tensor back = take(rows, row) * reshape(weight, {K * N, 1});  // [K*N, C]
  Tensor y = sum(reshape(back, {K, N, C}), {0});
  // Each token's choices of other processes' experts are zeros here: the sum over the
  // processes adds each choice's output once.
  if (split) y = all_reduce(y, kModelAxis);
  if (c.shared_expert) {  // whole on every process
    Tensor gu = matmul(x2, p.at(prefix + ".shared.c_fc.weight"));
    y = y + matmul(swiglu(gu), p.at(prefix + ".shared.c_proj.weight"));
  }

  MoeOutput out;
  out.y = reshape(y, s);
  Tensor top_logit = stop_gradient(max(logits, {-1}, true));
  Tensor lse = log(sum(exp(logits - top_logit), {-1})) + reshape(top_logit, {N});
  Tensor z_loss = mean(lse * lse);
  out.load = sum(hot, {0});  // [E]
  Tensor fraction = out.load / static_cast<double>(N * K);
  Tensor balance = static_cast<double>(E) * sum(fraction * mean(probs, {0}));
  out.aux_loss = c.router_z_weight * z_loss + c.balance_weight * balance;
  out.dropped = sum(1.0 - cast(keep, DType::f32));
  return out;
}

}  // namespace keel::nn
