#pragma once
// Scan programs built directly in the IR for the per-module tests, with a hand-unrolled
// equivalent: carry h [B,H], xs w [L,H,H], const b [H];
// body: h' = tanh(h.w + b), y = sum(h', axis 1).
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/scan.h"

namespace keel::scan_test {

inline Attrs matmul_attrs() {
  return {{"lhs_batch", std::vector<int64_t>{}},
          {"rhs_batch", std::vector<int64_t>{}},
          {"lhs_contract", std::vector<int64_t>{1}},
          {"rhs_contract", std::vector<int64_t>{0}}};
}

// One step of the body in `g`: returns {h', y}.
inline std::vector<NodeId> tiny_step(Graph& g, NodeId h, NodeId w, NodeId b, const SourceLoc& loc) {
  NodeId d = g.emit(Op::dot_general, {h, w}, matmul_attrs(), loc);
  NodeId h2 = g.emit(Op::tanh, {g.emit(Op::add, {d, b}, {}, loc)}, {}, loc);
  NodeId y = g.emit(Op::reduce_sum, {h2},
                    {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}, loc);
  return {h2, y};
}

inline GraphRef tiny_body(int64_t B, int64_t H, double scale = 1.0) {
  auto g = std::make_shared<Graph>("body");
  const SourceLoc loc{"scan_graphs.h", 30};
  NodeId h = g->add_param({DType::f32, {B, H}}, loc);
  NodeId w = g->add_param({DType::f32, {H, H}}, loc);
  NodeId b = g->add_param({DType::f32, {H}}, loc);
  if (scale != 1.0) w = g->emit(Op::mul, {w, g->add_constant(Array::scalar(scale), loc)}, {}, loc);
  g->set_outputs(tiny_step(*g, h, w, b, loc));
  return g;
}

// {final h, ys [L,B]}
inline std::vector<NodeId> tiny_scan(Graph& g, NodeId h, NodeId ws, NodeId b, bool reverse,
                                     double scale = 1.0) {
  const Shape& hs = g.node(h).type.shape;
  const int64_t L = g.node(ws).type.shape[0];
  return emit_scan(g, {h, ws, b}, scan_attrs(tiny_body(hs[0], hs[1], scale), 1, 1, L, reverse),
                   SourceLoc{"scan_graphs.h", 50}, "test");
}

inline std::vector<NodeId> tiny_unrolled(Graph& g, NodeId h, NodeId ws, NodeId b, bool reverse) {
  const Shape ws_shape = g.node(ws).type.shape;
  const int64_t L = ws_shape[0], H = ws_shape[1], B = g.node(h).type.shape[0];
  const SourceLoc loc{"scan_graphs.h", 60};
  std::vector<NodeId> ys(static_cast<size_t>(L));
  for (int64_t it = 0; it < L; ++it) {
    const int64_t i = reverse ? L - 1 - it : it;
    NodeId w = g.emit(Op::slice, {ws},
                      {{"start", std::vector<int64_t>{i, 0, 0}},
                       {"limit", std::vector<int64_t>{i + 1, H, H}},
                       {"stride", std::vector<int64_t>{1, 1, 1}}},
                      loc);
    w = g.emit(Op::reshape, {w}, {{"shape", std::vector<int64_t>{H, H}}}, loc);
    std::vector<NodeId> r = tiny_step(g, h, w, b, loc);
    h = r[0];
    ys[static_cast<size_t>(i)] =
        g.emit(Op::reshape, {r[1]}, {{"shape", std::vector<int64_t>{1, B}}}, loc);
  }
  return {h, g.emit(Op::concat, ys, {{"axis", int64_t{0}}}, loc)};
}

// A scan whose body is itself a tiny scan: xs ws [L,K,H,H]; ys [L,K,B].
inline std::vector<NodeId> nested_scan(Graph& g, NodeId h, NodeId ws, NodeId b, bool reverse) {
  const Shape hs = g.node(h).type.shape, wss = g.node(ws).type.shape;
  auto body = std::make_shared<Graph>("body");
  const SourceLoc loc{"scan_graphs.h", 85};
  NodeId ph = body->add_param({DType::f32, hs}, loc);
  NodeId pw = body->add_param({DType::f32, {wss[1], wss[2], wss[3]}}, loc);
  NodeId pb = body->add_param({DType::f32, {wss[2]}}, loc);
  body->set_outputs(tiny_scan(*body, ph, pw, pb, !reverse));
  return emit_scan(g, {h, ws, b}, scan_attrs(body, 1, 1, wss[0], reverse),
                   SourceLoc{"scan_graphs.h", 86}, "test");
}

// Two carries (a f32[4], n i32[]), two xs (u [L,4], v [L,2,4]), one const k [4]:
// a' = a*k + u + sum(v, 0), n' = n + 1; ys: a'*2, n', u (a parameter as an output).
inline std::vector<NodeId> multi_scan(Graph& g, NodeId a, NodeId n, NodeId u, NodeId v, NodeId k,
                                      bool reverse) {
  auto body = std::make_shared<Graph>("body");
  const SourceLoc loc{"scan_graphs.h", 90};
  Graph& b = *body;
  NodeId pa = b.add_param({DType::f32, {4}}, loc), pn = b.add_param({DType::i32, {}}, loc);
  NodeId pu = b.add_param({DType::f32, {4}}, loc), pv = b.add_param({DType::f32, {2, 4}}, loc);
  NodeId pk = b.add_param({DType::f32, {4}}, loc);
  NodeId sv = b.emit(Op::reduce_sum, {pv},
                     {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}}, loc);
  NodeId a2 = b.emit(
      Op::add, {b.emit(Op::add, {b.emit(Op::mul, {pa, pk}, {}, loc), pu}, {}, loc), sv}, {}, loc);
  NodeId n2 = b.emit(Op::add, {pn, b.add_constant(Array::scalar(1, DType::i32), loc)}, {}, loc);
  NodeId y = b.emit(Op::mul, {a2, b.add_constant(Array::scalar(2.0), loc)}, {}, loc);
  b.set_outputs({a2, n2, y, n2, pu});
  const int64_t L = g.node(u).type.shape[0];
  return emit_scan(g, {a, n, u, v, k}, scan_attrs(body, 2, 2, L, reverse),
                   SourceLoc{"scan_graphs.h", 100}, "test");
}

}  // namespace keel::scan_test
