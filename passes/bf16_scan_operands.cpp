// bf16_scan_operands: with matmul_precision = bf16, a scan's xs that its body reads only as
// product operands come in as bf16, rounded once outside the loop (a layer's weights once per
// step, where each body would round its slice again), and a scan's y that is read only that way
// (a residual the backward scan's products read) is rounded inside the body that makes it. So a
// scanned stack stores and reads the bf16 copies the unrolled one does, instead of f32 residuals
// rounded again in the backward loop. Rounding is the same rounding wherever it runs: no bit of
// the step changes.
#include <vector>

#include "ir/scan.h"
#include "passes/bf16_rules.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"

namespace keel::passes {
namespace {

using bf16::moves_across;
using bf16::rounds_operands;

constexpr NodeId kNoNode = -1;

std::vector<std::vector<NodeId>> users_of(const Graph& g) {
  std::vector<std::vector<NodeId>> users(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    for (NodeId in : g.nodes()[i].inputs)
      users[static_cast<size_t>(in)].push_back(static_cast<NodeId>(i));
  }
  return users;
}

// Whether every read of the f32 value `v` is a product's operand, directly or through layout
// ops that rounding moves across, and no output is v or one of those layout ops.
bool read_only_by_products(const Graph& g, const std::vector<std::vector<NodeId>>& users,
                           const std::vector<char>& output, NodeId v) {
  if (g.node(v).type.dtype != DType::f32) return false;
  std::vector<NodeId> todo = {v};
  bool read = false;
  while (!todo.empty()) {
    const NodeId x = todo.back();
    todo.pop_back();
    if (output[static_cast<size_t>(x)]) return false;
    for (NodeId u : users[static_cast<size_t>(x)]) {
      const Node& n = g.node(u);
      if (moves_across(n.op)) {
        todo.push_back(u);
      } else if (rounds_operands(g, n)) {
        read = true;
      } else {
        return false;
      }
    }
  }
  return read;
}

// `body` with the parameters marked in `narrow` taken as bf16 and widened back to f32 where
// they were read (bf16_operands then reads the parameter itself: the widening is exact).
Graph narrow_params(const Graph& body, const std::vector<char>& narrow) {
  Graph out(body.name());
  std::vector<NodeId> map(body.size(), kNoNode);
  std::vector<NodeId> widen;
  for (size_t k = 0; k < body.params().size(); ++k) {
    const Node& p = body.node(body.params()[k]);
    TensorType t = p.type;
    if (narrow[k]) t.dtype = DType::bf16;
    map[static_cast<size_t>(body.params()[k])] = out.add_param(t, p.loc);
    if (narrow[k]) widen.push_back(body.params()[k]);
  }
  for (NodeId p : widen) {
    map[static_cast<size_t>(p)] = out.emit(Op::cast, {map[static_cast<size_t>(p)]},
                                           {{"dtype", DType::f32}}, body.node(p).loc, "passes");
  }
  for (size_t i = 0; i < body.size(); ++i) {
    const Node& n = body.nodes()[i];
    if (n.op == Op::parameter || n.op == Op::scan_result) continue;  // results: with their scan
    std::vector<NodeId> ins;
    for (NodeId in : n.inputs) ins.push_back(map[static_cast<size_t>(in)]);
    if (n.op == Op::constant) {
      map[i] = out.add_constant(n.attrs.array("value"), n.loc);
    } else if (n.op == Op::scan) {
      const std::vector<NodeId> results = emit_scan(out, std::move(ins), n.attrs, n.loc, "passes");
      for (size_t r = 0; r < results.size(); ++r) map[i + 1 + r] = results[r];
    } else {
      map[i] = out.emit(n.op, std::move(ins), n.attrs, n.loc, "passes");
    }
  }
  std::vector<NodeId> outs;
  for (NodeId o : body.outputs()) outs.push_back(map[static_cast<size_t>(o)]);
  out.set_outputs(std::move(outs));
  return out;
}

// Rule 1: each scan's xs read only by products enter as an outer bf16 cast of the stacked xs.
Graph narrow_xs(const Graph& g) {
  Rebuilder rb(g);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op != Op::scan) {
      rb.copy(static_cast<NodeId>(i));
      continue;
    }
    const ScanInfo s = scan_info(n.attrs, n.inputs.size());
    const Graph& body = *s.body;
    const auto users = users_of(body);
    std::vector<char> output(body.size(), 0), narrow(body.params().size(), 0);
    for (NodeId o : body.outputs()) output[static_cast<size_t>(o)] = 1;
    bool any = false;
    for (int64_t j = s.carries; j < s.carries + s.xs; ++j) {
      const NodeId p = body.params()[static_cast<size_t>(j)];
      narrow[static_cast<size_t>(j)] = read_only_by_products(body, users, output, p);
      any = any || narrow[static_cast<size_t>(j)];
    }
    std::vector<NodeId> ins = rb.mapped_inputs(static_cast<NodeId>(i));
    Attrs a = n.attrs;
    if (any) {
      for (size_t j = 0; j < ins.size(); ++j) {
        if (narrow[j]) ins[j] = rb.emit(Op::cast, {ins[j]}, {{"dtype", DType::bf16}}, n.loc);
      }
      a.set("body", std::make_shared<const Graph>(narrow_params(body, narrow)));
    }
    const std::vector<NodeId> results = emit_scan(rb.dst_mut(), ins, std::move(a), n.loc, "passes");
    for (size_t r = 0; r < results.size(); ++r)
      rb.map_to(static_cast<NodeId>(i + 1 + r), results[r]);
    i += results.size();
  }
  return rb.finish();
}

// Rule 2: a scan's y that is read only through outer bf16 casts is rounded in the body instead,
// and the casts read the scan's (now bf16) result.
Graph narrow_ys(const Graph& g) {
  const auto users = users_of(g);
  std::vector<char> output(g.size(), 0);
  for (NodeId o : g.outputs()) output[static_cast<size_t>(o)] = 1;
  auto only_rounded = [&](NodeId result) {
    if (output[static_cast<size_t>(result)] || users[static_cast<size_t>(result)].empty()) {
      return false;
    }
    for (NodeId u : users[static_cast<size_t>(result)]) {
      const Node& n = g.node(u);
      if (n.op != Op::cast || n.type.dtype != DType::bf16) return false;
    }
    return g.node(result).type.dtype == DType::f32;
  };
  Rebuilder rb(g);
  std::vector<char> narrowed(g.size(), 0);  // old scan_result ids now bf16
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op == Op::cast && narrowed[static_cast<size_t>(n.inputs[0])]) {
      rb.map_to(static_cast<NodeId>(i), rb.mapped(n.inputs[0]));
      continue;
    }
    if (n.op != Op::scan) {
      rb.copy(static_cast<NodeId>(i));
      continue;
    }
    const ScanInfo s = scan_info(n.attrs, n.inputs.size());
    std::vector<int64_t> narrow;
    for (int64_t r = s.carries; r < s.results(); ++r) {
      if (only_rounded(static_cast<NodeId>(i + 1 + static_cast<size_t>(r)))) narrow.push_back(r);
    }
    Attrs a = n.attrs;
    if (!narrow.empty()) {
      Graph body = *s.body;
      std::vector<NodeId> outs = body.outputs();
      for (int64_t r : narrow) {
        NodeId& o = outs[static_cast<size_t>(r)];
        o = body.emit(Op::cast, {o}, {{"dtype", DType::bf16}}, body.node(o).loc, "passes");
        narrowed[i + 1 + static_cast<size_t>(r)] = 1;
      }
      body.set_outputs(std::move(outs));
      a.set("body", std::make_shared<const Graph>(std::move(body)));
    }
    const std::vector<NodeId> results = emit_scan(
        rb.dst_mut(), rb.mapped_inputs(static_cast<NodeId>(i)), std::move(a), n.loc, "passes");
    for (size_t r = 0; r < results.size(); ++r)
      rb.map_to(static_cast<NodeId>(i + 1 + r), results[r]);
    i += results.size();
  }
  return rb.finish();
}

}  // namespace

Graph bf16_scan_operands(const Graph& g) {
  return narrow_ys(narrow_xs(g));
}

}  // namespace keel::passes
