// VJP of scan. The forward scan's results include each iteration's incoming carries (keel::scan
// adds them as ys; otherwise a second forward scan that stacks them is emitted). The backward
// pass is a reverse scan whose body applies the forward body's VJP (append_gradients on a
// surrogate loss sum(out * ct)), carrying the carries' cotangents and the consts' accumulated
// gradients, and stacking the xs' gradients. The forward values the VJP reads come from the
// forward scan's stacked ys where it saved them (what keel::scan keeps: trace/scan.cpp, with
// each attention's log-sum-exp rows, which the VJP computes again) and are recomputed from the
// saved carry otherwise.
#include <fmt/format.h>

#include <map>

#include "autodiff/grad.h"
#include "autodiff/vjp.h"
#include "ir/error.h"
#include "ir/scan.h"

namespace keel::autodiff::detail {
namespace {

// For each carry, the scan result holding its per-iteration incoming values, stacked.
std::vector<NodeId> residuals(Builder& b, NodeId scan) {
  Graph& g = b.graph();
  const Node n = g.node(scan);
  const ScanInfo s = scan_info(n.attrs, n.inputs.size());
  const Graph& body = *s.body;
  std::vector<NodeId> res(static_cast<size_t>(s.carries), kNone);
  bool all = true;
  for (int64_t c = 0; c < s.carries; ++c) {
    for (int64_t r = s.carries; r < s.results(); ++r) {
      if (body.outputs()[static_cast<size_t>(r)] == body.params()[static_cast<size_t>(c)]) {
        res[static_cast<size_t>(c)] = scan + 1 + static_cast<NodeId>(r);
        break;
      }
    }
    all = all && res[static_cast<size_t>(c)] != kNone;
  }
  if (all) return res;
  Graph extended = body;
  std::vector<NodeId> outs = body.outputs();
  for (int64_t c = 0; c < s.carries; ++c) outs.push_back(body.params()[static_cast<size_t>(c)]);
  extended.set_outputs(std::move(outs));
  Attrs a = n.attrs;
  a.set("body", std::make_shared<const Graph>(std::move(extended)));
  std::vector<NodeId> results = emit_scan(g, n.inputs, std::move(a), n.loc, "autodiff");
  for (int64_t c = 0; c < s.carries; ++c) {
    res[static_cast<size_t>(c)] = results[static_cast<size_t>(s.results() + c)];
  }
  return res;
}

// The backward body `bwd` with every recomputed forward value that the forward scan saved read
// from a new xs parameter instead (inserted before the first of the `consts` trailing
// parameters), keeping only what is still needed. `saved` maps bwd ids to forward result
// indices; `used` receives the result index of each new parameter, in order.
Graph read_saved_values(const Graph& bwd, size_t consts, const std::map<NodeId, int64_t>& saved,
                        std::vector<int64_t>& used) {
  std::vector<char> live(bwd.size(), 0);
  for (NodeId o : bwd.outputs()) live[static_cast<size_t>(o)] = 1;
  for (size_t i = bwd.size(); i-- > 0;) {
    if (!live[i] || saved.count(static_cast<NodeId>(i))) continue;  // a saved value: a leaf
    for (NodeId in : bwd.nodes()[i].inputs) live[static_cast<size_t>(in)] = 1;
  }
  Graph out(bwd.name());
  std::vector<NodeId> map(bwd.size(), kNone);
  const size_t first_const = bwd.params().size() - consts;
  auto add_param = [&](size_t k) {
    const NodeId p = bwd.params()[k];
    map[static_cast<size_t>(p)] = out.add_param(bwd.node(p).type, bwd.node(p).loc);
  };
  for (size_t k = 0; k < first_const; ++k) add_param(k);
  std::map<int64_t, NodeId> param_of;  // result index -> its parameter (two ids may share one)
  for (const auto& [id, r] : saved) {
    if (!live[static_cast<size_t>(id)]) continue;
    auto [at, added] = param_of.emplace(r, kNone);
    if (added) {
      at->second = out.add_param(bwd.node(id).type, bwd.node(id).loc);
      used.push_back(r);
    }
    map[static_cast<size_t>(id)] = at->second;
  }
  for (size_t k = first_const; k < bwd.params().size(); ++k) add_param(k);
  auto inputs_of = [&](const Node& n) {
    std::vector<NodeId> ins;
    for (NodeId in : n.inputs) ins.push_back(map[static_cast<size_t>(in)]);
    return ins;
  };
  for (size_t i = 0; i < bwd.size(); ++i) {
    const Node& n = bwd.nodes()[i];
    if (!live[i] || map[i] != kNone) continue;
    if (n.op == Op::constant) {
      map[i] = out.add_constant(n.attrs.array("value"), n.loc);
    } else if (n.op == Op::scan) {  // a nested scan: all of its results follow it
      const std::vector<NodeId> results = emit_scan(out, inputs_of(n), n.attrs, n.loc, "autodiff");
      for (size_t k = 0; k < results.size(); ++k) {
        NodeId& m = map[i + 1 + k];
        if (m == kNone) m = results[k];
      }
      map[i] = kNone;  // read only through its results
    } else if (n.op != Op::scan_result) {
      map[i] = out.emit(n.op, inputs_of(n), n.attrs, n.loc, "autodiff");
    }
  }
  std::vector<NodeId> outs;
  for (NodeId o : bwd.outputs()) outs.push_back(map[static_cast<size_t>(o)]);
  out.set_outputs(std::move(outs));
  return out;
}

}  // namespace

std::vector<NodeId> vjp_scan(Builder& b, NodeId scan, const std::vector<NodeId>& result_cts,
                             const std::vector<bool>& need) {
  const std::vector<NodeId> res = residuals(b, scan);
  Graph& g = b.graph();
  const Node n = g.node(scan);  // a copy: emitting moves the node storage
  const ScanInfo s = scan_info(n.attrs, n.inputs.size());
  const Graph& body = *s.body;
  const auto m = static_cast<size_t>(s.carries), nx = static_cast<size_t>(s.xs),
             nc = static_cast<size_t>(s.consts);
  auto in_type = [&](size_t i) { return g.node(n.inputs[i]).type; };
  auto param_type = [&](size_t i) { return body.node(body.params()[i]).type; };

  std::vector<size_t> fc, fk, fx, fy;  // float carries, consts needing grads, xs, ys with a ct
  for (size_t c = 0; c < m; ++c) {
    if (is_float(in_type(c).dtype)) fc.push_back(c);
  }
  for (size_t j = 0; j < nx; ++j) {
    if (is_float(in_type(m + j).dtype) && need[m + j]) fx.push_back(j);
  }
  for (size_t q = 0; q < nc; ++q) {
    if (is_float(in_type(m + nx + q).dtype) && need[m + nx + q]) fk.push_back(q);
  }
  for (size_t r = m; r < static_cast<size_t>(s.results()); ++r) {
    if (result_cts[r] != kNone) fy.push_back(r);
  }

  // The backward body: carries (ct of float carries, const-gradient accumulators), xs (saved
  // carries, x slices, ct slices of ys), consts (the forward consts).
  Graph bwd("body");
  std::vector<NodeId> p_ct, p_acc, p_res, p_x, p_cty, p_k;
  for (size_t c : fc) p_ct.push_back(bwd.add_param(in_type(c), n.loc));
  for (size_t q : fk) p_acc.push_back(bwd.add_param(in_type(m + nx + q), n.loc));
  for (size_t c = 0; c < m; ++c) p_res.push_back(bwd.add_param(param_type(c), n.loc));
  for (size_t j = 0; j < nx; ++j) p_x.push_back(bwd.add_param(param_type(m + j), n.loc));
  for (size_t r : fy) {
    p_cty.push_back(bwd.add_param(body.node(body.outputs()[r]).type, n.loc));
  }
  for (size_t q = 0; q < nc; ++q) p_k.push_back(bwd.add_param(param_type(m + nx + q), n.loc));

  // The forward body on the saved carry (values it saved are swapped in below).
  std::vector<NodeId> map(body.size(), kNone);
  for (size_t i = 0; i < body.params().size(); ++i) {
    map[static_cast<size_t>(body.params()[i])] = i < m        ? p_res[i]
                                                 : i < m + nx ? p_x[i - m]
                                                              : p_k[i - m - nx];
  }
  for (size_t i = 0; i < body.size(); ++i) {
    const Node& bn = body.nodes()[i];
    if (bn.op == Op::parameter) continue;
    std::vector<NodeId> ins;
    for (NodeId in : bn.inputs) ins.push_back(map[static_cast<size_t>(in)]);
    map[i] = bn.op == Op::constant ? bwd.add_constant(bn.attrs.array("value"), bn.loc)
                                   : bwd.emit(bn.op, std::move(ins), bn.attrs, bn.loc, "autodiff");
  }
  auto out_of = [&](size_t r) { return map[static_cast<size_t>(body.outputs()[r])]; };

  // Surrogate loss: sum over outputs with a cotangent of sum(out * ct), in f32.
  Builder bb(bwd, n.loc);
  NodeId loss = kNone;
  auto term = [&](NodeId out, NodeId ct) {
    const size_t rank = bwd.node(out).type.shape.size();
    std::vector<int64_t> axes;
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    NodeId t = bb.cast(bb.reduce_sum(bb.mul(out, ct), axes, false), DType::f32);
    loss = loss == kNone ? t : bb.add(loss, t);
  };
  for (size_t i = 0; i < fc.size(); ++i) term(out_of(fc[i]), p_ct[i]);
  for (size_t i = 0; i < fy.size(); ++i) {
    if (is_float(bwd.node(out_of(fy[i])).type.dtype)) term(out_of(fy[i]), p_cty[i]);
  }
  if (loss == kNone) loss = bb.scalar(0.0, DType::f32);
  std::vector<NodeId> wrt;
  for (size_t c : fc) wrt.push_back(p_res[c]);
  for (size_t j : fx) wrt.push_back(p_x[j]);
  for (size_t q : fk) wrt.push_back(p_k[q]);
  const std::vector<NodeId> grads = append_gradients(bwd, loss, wrt);
  std::vector<NodeId> outs;
  for (size_t i = 0; i < fc.size(); ++i) outs.push_back(grads[i]);
  for (size_t i = 0; i < fk.size(); ++i) {
    outs.push_back(bb.add(p_acc[i], grads[fc.size() + fx.size() + i]));
  }
  for (size_t i = 0; i < fx.size(); ++i) outs.push_back(grads[fc.size() + i]);
  bwd.set_outputs(std::move(outs));

  // Forward values the scan stacked as ys (r >= carries), by their node in `bwd`.
  std::map<NodeId, int64_t> saved;
  for (int64_t r = s.carries; r < s.results(); ++r) {
    const NodeId id = body.outputs()[static_cast<size_t>(r)];
    const Op op = body.node(id).op;
    if (op != Op::parameter && op != Op::constant) saved.emplace(map[static_cast<size_t>(id)], r);
  }
  // A value the VJP computes again that equals a saved one (an attention's log-sum-exp, which
  // keel::scan saves beside the attention) reads the saved one too.
  std::map<std::pair<Op, std::vector<NodeId>>, std::vector<NodeId>> saved_by_inputs;
  for (const auto& [id, r] : saved)
    saved_by_inputs[{bwd.node(id).op, bwd.node(id).inputs}].push_back(id);
  for (size_t i = 0; i < bwd.size(); ++i) {
    const Node& bn = bwd.nodes()[i];
    if (bn.op == Op::parameter || saved.count(static_cast<NodeId>(i))) continue;
    auto same = saved_by_inputs.find({bn.op, bn.inputs});
    if (same == saved_by_inputs.end()) continue;
    for (NodeId id : same->second) {
      const Node& sn = bwd.node(id);
      if (sn.type == bn.type && sn.attrs == bn.attrs) {
        saved.emplace(static_cast<NodeId>(i), saved.at(id));
        break;
      }
    }
  }
  std::vector<int64_t> used;
  bwd = read_saved_values(bwd, nc, saved, used);

  // The backward scan runs the other way.
  std::vector<NodeId> ins;
  for (size_t c : fc) ins.push_back(result_cts[c] != kNone ? result_cts[c] : b.zeros(in_type(c)));
  for (size_t q : fk) ins.push_back(b.zeros(in_type(m + nx + q)));
  for (NodeId r : res) ins.push_back(r);
  for (size_t j = 0; j < nx; ++j) ins.push_back(n.inputs[m + j]);
  for (size_t r : fy) ins.push_back(result_cts[r]);
  for (int64_t r : used) ins.push_back(scan + 1 + static_cast<NodeId>(r));
  for (size_t q = 0; q < nc; ++q) ins.push_back(n.inputs[m + nx + q]);
  const int64_t xs_count = static_cast<int64_t>(m + nx + fy.size() + used.size());
  std::vector<NodeId> results = emit_scan(
      g, std::move(ins),
      scan_attrs(std::make_shared<const Graph>(std::move(bwd)),
                 static_cast<int64_t>(fc.size() + fk.size()), xs_count, s.length, !s.reverse),
      n.loc, "autodiff");
  std::vector<NodeId> contrib(n.inputs.size(), kNone);
  for (size_t i = 0; i < fc.size(); ++i) contrib[fc[i]] = results[i];
  for (size_t i = 0; i < fk.size(); ++i) contrib[m + nx + fk[i]] = results[fc.size() + i];
  for (size_t i = 0; i < fx.size(); ++i) {
    contrib[m + fx[i]] = results[fc.size() + fk.size() + i];
  }
  return contrib;
}

}  // namespace keel::autodiff::detail
