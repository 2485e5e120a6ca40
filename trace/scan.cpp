// Traces a scan body in a nested TraceContext whose graph becomes the scan's body attribute.
#include "trace/scan.h"

#include <fmt/format.h>

#include "ir/attention.h"
#include "ir/error.h"
#include "ir/scan.h"
#include "trace/emit.h"

namespace keel {
namespace {

NodeId outer_id(const std::shared_ptr<TraceContext>& ctx, const Tensor& t, std::string_view what,
                size_t i, const SourceLoc& loc) {
  if (!t.defined()) {
    throw Error(fmt::format("[trace] scan at {}: {} {} is an empty tensor", loc.str(), what, i));
  }
  if (!t.is_symbolic() || t.trace() != ctx) {
    throw Error(fmt::format(
        "[trace] scan at {}: {} {} ({}) is not a tensor of the trace of '{}'; pass arguments "
        "of the compiled function or values computed from them",
        loc.str(), what, i, t.type().str(), ctx->function));
  }
  return t.node();
}

NodeId body_id(const std::shared_ptr<TraceContext>& body, const Tensor& t, std::string_view what,
               size_t i, const SourceLoc& loc) {
  if (!t.defined() || !t.is_symbolic() || t.trace() != body) {
    throw Error(fmt::format(
        "[trace] scan at {}: the body returned {} {} that was not computed inside the body; "
        "return values computed from the body's arguments",
        loc.str(), what, i));
  }
  return t.node();
}

// Whether the scan keeps for its gradient the value `n` computes from a carry: always without
// remat, as its policy says with.
bool saveable(const Node& n, const ScanOptions& options) {
  if (!options.remat) return true;
  switch (options.remat_policy) {
    case RematPolicy::nothing_saveable:
      return false;
    case RematPolicy::dots_saveable:
      return n.op == Op::dot_general || n.op == Op::attention;
    case RematPolicy::dots_with_no_batch_dims_saveable:
      return n.op == Op::dot_general && n.attrs.ints("lhs_batch").empty();
  }
  return false;
}

// The log-sum-exp rows of an attention, which its VJP reads: computed in the same pass as the
// attention (cse pairs them), so saving them spares the backward body a pass over q and k.
NodeId add_attention_lse(Graph& body, NodeId attention) {
  const Node n = body.node(attention);  // a copy: emitting moves the node storage
  AttentionLseArgs a = attention_lse_args(n);
  return body.emit(Op::attention_lse, std::move(a.inputs), std::move(a.attrs), n.loc, "trace");
}

// Layout ops that are views of their input (concat and pad copy).
bool is_view(const Node& n) {
  return op_info(n.op).kind == OpKind::Layout && n.op != Op::concat && n.op != Op::pad;
}

// Elementwise ops: recomputed in the backward body's loops from values it has at hand, for
// little more than the loop that reads them anyway.
bool elementwise(Op op) {
  switch (op_info(op).kind) {
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Compare:
    case OpKind::Select:
    case OpKind::Cast:
      return true;
    default:
      return false;
  }
}

// Values a product reads, directly or through views: the backward's products read them too.
std::vector<char> product_operands(const Graph& body) {
  std::vector<char> operand(body.size(), 0);
  for (size_t i = body.size(); i-- > 0;) {  // users first
    const Node& n = body.nodes()[i];
    if (n.op != Op::dot_general && !(is_view(n) && operand[i])) continue;
    for (NodeId in : n.inputs) operand[static_cast<size_t>(in)] = 1;
  }
  return operand;
}

// Values a gradient may need: computed from a carry (so they change per iteration), not views
// (cheap to recompute from their input) nor a nested scan's token, and kept by the remat policy
// when there is one; with each kept attention, its rows' log-sum-exp. Without remat, an
// elementwise value that no product reads and whose inputs the backward has at hand (saved, or
// cheap to compute from the xs and consts) is computed again there instead of saved, as the
// unrolled step's fused loops do; a product's operand is kept, since the backward's products
// read it too (as bf16 under bf16 matmuls: bf16_scan_operands saves that copy).
void add_residual_candidates(Graph& body, size_t carries, const ScanOptions& options,
                             std::vector<NodeId>& outs) {
  const size_t traced = body.size();
  std::vector<char> from_carry(traced, 0), listed(traced, 0), stacked(traced, 0),
      at_hand(traced, 0);
  for (size_t c = 0; c < carries; ++c) from_carry[static_cast<size_t>(body.params()[c])] = 1;
  for (size_t k = 0; k < outs.size(); ++k) {
    listed[static_cast<size_t>(outs[k])] = 1;
    if (k >= carries) stacked[static_cast<size_t>(outs[k])] = 1;  // a y or an incoming carry
  }
  const std::vector<char> product_operand = product_operands(body);
  std::vector<NodeId> attentions;
  for (size_t i = 0; i < traced; ++i) {
    const Node& n = body.nodes()[i];
    bool inputs_at_hand = true;
    for (NodeId in : n.inputs) {
      from_carry[i] = from_carry[i] || from_carry[static_cast<size_t>(in)];
      inputs_at_hand = inputs_at_hand && at_hand[static_cast<size_t>(in)];
    }
    const bool cheap = is_view(n) || elementwise(n.op);
    if (n.op == Op::parameter || n.op == Op::constant || n.op == Op::iota) {
      at_hand[i] = 1;
      continue;
    }
    if (!from_carry[i]) {  // not saved; recomputed by the backward where it needs it
      at_hand[i] = cheap && inputs_at_hand;
      continue;
    }
    if (is_view(n) || (!options.remat && !product_operand[i] && cheap && inputs_at_hand)) {
      at_hand[i] = inputs_at_hand || stacked[i];
      continue;
    }
    at_hand[i] = stacked[i];
    if (n.op == Op::scan || !saveable(n, options) || (listed[i] && !stacked[i])) continue;
    at_hand[i] = 1;
    if (!listed[i]) outs.push_back(static_cast<NodeId>(i));
    if (n.op == Op::attention) attentions.push_back(static_cast<NodeId>(i));
  }
  for (NodeId a : attentions) outs.push_back(add_attention_lse(body, a));
}

}  // namespace

std::optional<RematPolicy> remat_policy_named(std::string_view name) {
  for (RematPolicy p : {RematPolicy::nothing_saveable, RematPolicy::dots_saveable,
                        RematPolicy::dots_with_no_batch_dims_saveable}) {
    if (remat_policy_name(p) == name) return p;
  }
  return std::nullopt;
}

std::string_view remat_policy_name(RematPolicy p) {
  switch (p) {
    case RematPolicy::nothing_saveable:
      return "nothing_saveable";
    case RematPolicy::dots_saveable:
      return "dots_saveable";
    case RematPolicy::dots_with_no_batch_dims_saveable:
      return "dots_with_no_batch_dims_saveable";
  }
  return "nothing_saveable";
}

ScanOut scan(const ScanBody& fn, const std::vector<Tensor>& carries, const std::vector<Tensor>& xs,
             const std::vector<Tensor>& consts, ScanOptions options, SourceLoc loc) {
  auto ctx = detail::active_trace("scan", loc);
  std::vector<NodeId> inputs;
  for (size_t i = 0; i < carries.size(); ++i) {
    inputs.push_back(outer_id(ctx, carries[i], "carry", i, loc));
  }
  int64_t length = options.length;
  for (size_t i = 0; i < xs.size(); ++i) {
    inputs.push_back(outer_id(ctx, xs[i], "xs", i, loc));
    const Shape& s = xs[i].shape();
    if (s.empty()) {
      throw Error(
          fmt::format("[trace] scan at {}: xs {} is a scalar; xs are stacked along a "
                      "leading dimension",
                      loc.str(), i));
    }
    if (length < 0) length = s[0];
    if (s[0] != length) {
      throw Error(
          fmt::format("[trace] scan at {}: xs {} is {} but the trip count is {}; every "
                      "xs needs the same leading dimension",
                      loc.str(), i, xs[i].type().str(), length));
    }
  }
  if (length < 1) {
    throw Error(
        fmt::format("[trace] scan at {}: the trip count is {}; pass xs or set "
                    "ScanOptions::length >= 1",
                    loc.str(), length));
  }
  for (size_t i = 0; i < consts.size(); ++i) {
    inputs.push_back(outer_id(ctx, consts[i], "const", i, loc));
  }

  // The body: parameters carries..., x slices..., consts...; outputs new carries..., ys...,
  // then each incoming carry again and the values add_residual_candidates keeps (residuals the
  // VJP reuses instead of recomputing; dce drops those it does not use).
  auto body = std::make_shared<TraceContext>(fmt::format("{}/scan@{}", ctx->function, loc.str()));
  body->parent = ctx;
  std::vector<Tensor> bc, bx, bk;
  std::pair<std::vector<Tensor>, std::vector<Tensor>> ret;
  {
    TraceContext::Scope scope(body);
    for (const Tensor& c : carries)
      bc.push_back(Tensor::symbol(body, body->graph.add_param(c.type(), loc)));
    for (const Tensor& x : xs) {
      TensorType t = x.type();
      t.shape.erase(t.shape.begin());
      bx.push_back(Tensor::symbol(body, body->graph.add_param(t, loc)));
    }
    for (const Tensor& k : consts)
      bk.push_back(Tensor::symbol(body, body->graph.add_param(k.type(), loc)));
    ret = fn(bc, bx, bk);
  }
  if (ret.first.size() != carries.size()) {
    throw Error(fmt::format("[trace] scan at {}: the body returned {} carries; expected {}",
                            loc.str(), ret.first.size(), carries.size()));
  }
  std::vector<NodeId> outs;
  for (size_t i = 0; i < ret.first.size(); ++i) {
    outs.push_back(body_id(body, ret.first[i], "carry", i, loc));
    if (ret.first[i].type() != carries[i].type()) {
      throw Error(
          fmt::format("[trace] scan at {}: the body returned carry {} as {} but it "
                      "came in as {}; a carry keeps its type",
                      loc.str(), i, ret.first[i].type().str(), carries[i].type().str()));
    }
  }
  for (size_t i = 0; i < ret.second.size(); ++i)
    outs.push_back(body_id(body, ret.second[i], "y", i, loc));
  for (const Tensor& c : bc) outs.push_back(c.node());
  add_residual_candidates(body->graph, carries.size(), options, outs);
  body->graph.set_outputs(std::move(outs));
  body->graph.set_name("body");

  const int64_t m = static_cast<int64_t>(carries.size());
  std::vector<NodeId> results =
      emit_scan(ctx->graph, std::move(inputs),
                // A copy: the ended body trace keeps its graph, so a body tensor used after the
                // scan is reported with the line that made it.
                scan_attrs(std::make_shared<const Graph>(body->graph), m,
                           static_cast<int64_t>(xs.size()), length, options.reverse),
                loc, "trace");
  ScanOut out;
  for (size_t k = 0; k < results.size(); ++k) {
    if (k < carries.size()) {
      out.carries.push_back(Tensor::symbol(ctx, results[k]));
    } else if (k < carries.size() + ret.second.size()) {
      out.ys.push_back(Tensor::symbol(ctx, results[k]));
    }
  }
  return out;
}

}  // namespace keel
