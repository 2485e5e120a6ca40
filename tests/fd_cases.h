#pragma once
// The finite-difference cases: one small graph per differentiable op (and the scan forms), each
// a loss f(params) = sum(op(...) * w) with fixed weights, and its inputs. autodiff_test checks
// them on the reference interpreter, conformance_test on every registered backend.
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "tests/scan_graphs.h"

namespace keel::fd_test {

using Ints = std::vector<int64_t>;

inline SourceLoc here(uint32_t line) {
  return {"autodiff_test.cpp", line};
}

// Emits with a location naming the test line, so failures point at the case.
inline NodeId E(Graph& g, Op op, std::vector<NodeId> in, Attrs attrs = {},
                SourceLoc loc = SourceLoc::current()) {
  return g.emit(op, std::move(in), std::move(attrs), std::move(loc));
}

inline NodeId sum_all(Graph& g, NodeId x, SourceLoc loc = SourceLoc::current()) {
  Ints axes(g.node(x).type.shape.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = int64_t(i);
  return E(g, Op::reduce_sum, {x}, {{"axes", axes}, {"keepdims", int64_t{0}}}, std::move(loc));
}

inline NodeId f32_const(Graph& g, Shape s, std::vector<float> v) {
  return g.add_constant(Array::from_f32(std::move(s), v));
}

inline NodeId i64_const(Graph& g, Shape s, std::vector<int64_t> v) {
  return g.add_constant(Array::from_i64(std::move(s), v));
}

// ---- finite-difference cases -------------------------------------------------------------

struct ParamSpec {
  Shape shape;
  float lo = -2, hi = 2;        // distinct values spread over [lo, hi], shuffled
  std::vector<float> values{};  // explicit values instead (for kinks and ties)
};

using Body = std::function<NodeId(Graph&, const std::vector<NodeId>&)>;

struct FdCase {
  std::string name;
  Op op;  // the differentiable op this case covers
  std::vector<ParamSpec> params;
  Body body;
};

FdCase unary(Op op, float lo, float hi) {
  return {std::string(op_name(op)),
          op,
          {{{2, 3}, lo, hi}},
          [op](Graph& g, const std::vector<NodeId>& p) { return E(g, op, {p[0]}); }};
}

FdCase binary(std::string name, Op op, ParamSpec a, ParamSpec b) {
  return {std::move(name),
          op,
          {std::move(a), std::move(b)},
          [op](Graph& g, const std::vector<NodeId>& p) {
            return E(g, op, {p[0], p[1]});
          }};
}

FdCase single(std::string name, Op op, ParamSpec x, Attrs attrs) {
  return {std::move(name), op, {std::move(x)}, [op, attrs](Graph& g, const std::vector<NodeId>& p) {
            return E(g, op, {p[0]}, attrs);
          }};
}

Attrs reduce_attrs(Ints axes, int64_t keep) {
  return {{"axes", axes}, {"keepdims", keep}};
}

Attrs dot_attrs(Ints lb, Ints rb, Ints lc, Ints rc) {
  return {{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contract", lc}, {"rhs_contract", rc}};
}

inline std::vector<FdCase> fd_cases() {
  std::vector<FdCase> c;
  c.push_back(unary(Op::neg, -2, 2));
  c.push_back({"abs",
               Op::abs,
               {{{2, 3}, {}, {}, {-1.5f, -0.4f, 0.3f, 0.9f, -2.f, 1.7f}}},
               [](Graph& g, const std::vector<NodeId>& p) { return E(g, Op::abs, {p[0]}); }});
  c.push_back(unary(Op::exp, -1, 1));
  c.push_back(unary(Op::log, 0.5, 2));
  c.push_back(unary(Op::tanh, -2, 2));
  c.push_back(unary(Op::sqrt, 0.5, 2));
  c.push_back(unary(Op::rsqrt, 0.5, 2));
  c.push_back(unary(Op::sigmoid, -3, 3));
  c.push_back(unary(Op::erf, -1.5, 1.5));
  c.push_back(unary(Op::sin, -3, 3));
  c.push_back(unary(Op::cos, -3, 3));

  c.push_back(binary("add [2,3]+[3]", Op::add, {{2, 3}}, {{3}}));
  c.push_back(binary("add [4,1]+[1,5]", Op::add, {{4, 1}}, {{1, 5}}));
  c.push_back(binary("sub [2,3]-[2,1]", Op::sub, {{2, 3}}, {{2, 1}}));
  c.push_back(binary("sub scalar-[3]", Op::sub, {{}}, {{3}}));
  c.push_back(binary("mul [4,1]*[1,5]", Op::mul, {{4, 1}}, {{1, 5}}));
  c.push_back({"mul x*x", Op::mul, {{{3}}}, [](Graph& g, const std::vector<NodeId>& p) {
                 return E(g, Op::mul, {p[0], p[0]});
               }});
  c.push_back(binary("div [2,3]/[3]", Op::div, {{2, 3}}, {{3}, 0.5, 2}));
  c.push_back(binary("div [3]/[2,1]", Op::div, {{3}}, {{2, 1}, -2, -0.5}));
  ParamSpec ma{{2, 3}, {}, {}, {0.3f, -1.2f, 2.0f, -0.5f, 1.1f, 0.7f}};
  ParamSpec mb{{3}, {}, {}, {0.5f, -0.1f, 1.5f}};
  c.push_back(binary("max [2,3],[3]", Op::max, ma, mb));
  c.push_back(binary("min [2,3],[3]", Op::min, ma, mb));
  c.push_back(binary("pow [2,3]^[3]", Op::pow, {{2, 3}, 0.5, 2}, {{3}, -1.5, 1.5}));
  c.push_back(binary("pow [3]^scalar", Op::pow, {{3}, 0.5, 2}, {{}, 2.5, 2.5}));

  c.push_back({"select [2,3] ? [2,3] : [3]",
               Op::select,
               {{{2, 3}}, {{2, 3}}, {{3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 NodeId pred = E(g, Op::compare, {p[0], g.add_constant(Array::scalar(0.0))},
                                 {{"direction", std::string("gt")}});
                 return E(g, Op::select, {pred, p[1], p[2]});
               }});
  // cast to f32 passes the cotangent; the int round trip passes none (inputs avoid integers).
  c.push_back(
      {"cast", Op::cast, {{{2, 3}, 0.2f, 2.8f}}, [](Graph& g, const std::vector<NodeId>& p) {
         NodeId same = E(g, Op::cast, {p[0]}, {{"dtype", DType::f32}});
         NodeId floor = E(g, Op::cast, {E(g, Op::cast, {p[0]}, {{"dtype", DType::i32}})},
                          {{"dtype", DType::f32}});
         return E(g, Op::mul, {same, E(g, Op::add, {floor, p[0]})});
       }});

  c.push_back(single("reshape", Op::reshape, {{2, 3}}, {{"shape", Ints{3, 1, 2}}}));
  c.push_back(single("transpose", Op::transpose, {{2, 3, 4}}, {{"perm", Ints{2, 0, 1}}}));
  c.push_back(single("broadcast [3]->[2,3]", Op::broadcast, {{3}}, {{"shape", Ints{2, 3}}}));
  c.push_back(
      single("broadcast [2,1]->[3,2,4]", Op::broadcast, {{2, 1}}, {{"shape", Ints{3, 2, 4}}}));
  c.push_back(single("slice", Op::slice, {{4, 5}},
                     {{"start", Ints{1, 1}}, {"limit", Ints{3, 4}}, {"stride", Ints{1, 1}}}));
  c.push_back(single("slice strided", Op::slice, {{5, 7}},
                     {{"start", Ints{1, 0}}, {"limit", Ints{5, 7}}, {"stride", Ints{2, 3}}}));
  c.push_back(single("slice strided uneven", Op::slice, {{2, 8}},
                     {{"start", Ints{0, 2}}, {"limit", Ints{2, 7}}, {"stride", Ints{1, 2}}}));
  c.push_back({"concat",
               Op::concat,
               {{{2, 1}}, {{2, 3}}, {{2, 2}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 return E(g, Op::concat, {p[0], p[1], p[2]}, {{"axis", int64_t{1}}});
               }});
  c.push_back(single("pad", Op::pad, {{2, 3}},
                     {{"low", Ints{1, 0}}, {"high", Ints{0, 2}}, {"value", 0.5}}));

  c.push_back({"gather axis 0, repeated",
               Op::gather,
               {{{4, 3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 NodeId idx = i64_const(g, {5}, {0, 2, 2, 3, 0});
                 return E(g, Op::gather, {p[0], idx}, {{"axis", int64_t{0}}});
               }});
  c.push_back({"gather axis 1, 2-d indices",
               Op::gather,
               {{{2, 4, 3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 NodeId idx = i64_const(g, {2, 2}, {3, 1, 1, 0});
                 return E(g, Op::gather, {p[0], idx}, {{"axis", int64_t{1}}});
               }});
  c.push_back({"scatter_add",
               Op::scatter_add,
               {{{4, 3}}, {{3, 3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 NodeId idx = i64_const(g, {3}, {1, 1, 3});
                 return E(g, Op::scatter_add, {p[0], idx, p[1]}, {{"axis", int64_t{0}}});
               }});

  c.push_back(single("reduce_sum axis 1", Op::reduce_sum, {{2, 3, 4}}, reduce_attrs({1}, 0)));
  c.push_back(single("reduce_sum keepdims", Op::reduce_sum, {{2, 3, 4}}, reduce_attrs({0, 2}, 1)));
  c.push_back(single("reduce_max", Op::reduce_max, {{3, 4}}, reduce_attrs({1}, 0)));
  c.push_back(single("reduce_max all", Op::reduce_max, {{2, 3}}, reduce_attrs({0, 1}, 0)));
  c.push_back(single("reduce_mean", Op::reduce_mean, {{2, 3, 4}}, reduce_attrs({0, 2}, 0)));
  c.push_back(
      single("cumsum", Op::cumsum, {{3, 4}}, {{"axis", int64_t{1}}, {"reverse", int64_t{0}}}));
  c.push_back(single("cumsum reverse", Op::cumsum, {{3, 4}},
                     {{"axis", int64_t{0}}, {"reverse", int64_t{1}}}));
  c.push_back(single("top_k_values", Op::top_k_values, {{2, 5}}, {{"k", int64_t{3}}}));
  // Collectives over one process (dist_mpi_test checks them across 2 and 4).
  const Attrs one{{"axis", std::string("data")}, {"axis_size", int64_t{1}}};
  Attrs reduce = one, along = one;
  reduce.set("reduce", std::string("max"));
  along.set("dim", int64_t{1});
  c.push_back(single("all_reduce", Op::all_reduce, {{2, 3}}, reduce));
  c.push_back(single("all_gather", Op::all_gather, {{2, 3}}, along));
  c.push_back(single("reduce_scatter", Op::reduce_scatter, {{2, 3}}, along));
  c.push_back(single("all_to_all", Op::all_to_all, {{2, 3}}, along));
  c.push_back(single("pvary", Op::pvary, {{2, 3}}, one));
  c.push_back({"attention, 4 query heads over 2, documents",
               Op::attention,
               {{{1, 4, 5, 3}}, {{1, 2, 5, 3}}, {{1, 2, 5, 3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 NodeId doc = i64_const(g, {1, 5}, {0, 0, 1, 2, 2});
                 return E(g, Op::attention, {p[0], p[1], p[2], doc}, {{"scale", 0.7}});
               }});
  c.push_back(
      {"sparse_attention, 4 query heads over 2, a key listed twice, a query with none",
       Op::sparse_attention,
       {{{1, 5, 4, 3}}, {{1, 5, 2, 3}}, {{1, 5, 2, 3}}},
       [](Graph& g, const std::vector<NodeId>& p) {
         NodeId keys = i64_const(g, {1, 5, 3}, {0, -1, 9, 1, 0, -1, 2, 0, 0, -1, -1, -1, 4, 1, 3});
         return E(g, Op::sparse_attention, {p[0], p[1], p[2], keys}, {{"scale", 0.7}});
       }});

  c.push_back(binary("dot_general matmul", Op::dot_general, {{2, 3}}, {{3, 4}}));
  c.back().body = [](Graph& g, const std::vector<NodeId>& p) {
    return E(g, Op::dot_general, {p[0], p[1]}, dot_attrs({}, {}, {1}, {0}));
  };
  c.push_back(binary("dot_general batched", Op::dot_general, {{2, 3, 4}}, {{2, 4, 5}}));
  c.back().body = [](Graph& g, const std::vector<NodeId>& p) {
    return E(g, Op::dot_general, {p[0], p[1]}, dot_attrs({0}, {0}, {2}, {1}));
  };
  c.push_back(binary("dot_general batch in the middle", Op::dot_general, {{3, 2, 5}}, {{3, 4, 2}}));
  c.back().body = [](Graph& g, const std::vector<NodeId>& p) {
    return E(g, Op::dot_general, {p[0], p[1]}, dot_attrs({1}, {2}, {0}, {0}));
  };
  c.push_back(binary("dot_general two contractions", Op::dot_general, {{2, 3, 4}}, {{4, 5, 3}}));
  c.back().body = [](Graph& g, const std::vector<NodeId>& p) {
    return E(g, Op::dot_general, {p[0], p[1]}, dot_attrs({}, {}, {1, 2}, {2, 0}));
  };
  c.push_back(binary("dot_general two batches", Op::dot_general, {{2, 3, 2, 4}}, {{3, 4, 2}}));
  c.back().body = [](Graph& g, const std::vector<NodeId>& p) {
    return E(g, Op::dot_general, {p[0], p[1]}, dot_attrs({1, 0}, {0, 2}, {3}, {1}));
  };
  // Scans: gradients w.r.t. the carry, the xs and the const, through every iteration.
  c.push_back({"scan ys, reversed",
               Op::scan,
               {{{2, 3}}, {{3, 3, 3}, -1, 1}, {{3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 return scan_test::tiny_scan(g, p[0], p[1], p[2], true)[1];
               }});
  c.push_back({"scan final carry",
               Op::scan_result,
               {{{2, 3}}, {{4, 3, 3}, -1, 1}, {{3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 return scan_test::tiny_scan(g, p[0], p[1], p[2], false)[0];
               }});
  c.push_back({"scan of a scan",
               Op::scan,
               {{{2, 3}}, {{2, 2, 3, 3}, -1, 1}, {{3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 std::vector<NodeId> r = scan_test::nested_scan(g, p[0], p[1], p[2], false);
                 return E(
                     g, Op::add,
                     {E(g, Op::reshape, {r[1]}, {{"shape", Ints{4, 2}}}),
                      E(g, Op::slice, {r[0]},
                        {{"start", Ints{0, 0}}, {"limit", Ints{1, 2}}, {"stride", Ints{1, 1}}})});
               }});
  c.push_back({"scan two carries, two xs, a const",
               Op::scan,
               {{{4}}, {{3, 4}}, {{3, 2, 4}}, {{4}, -1, 1}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 NodeId n = g.add_constant(Array::scalar(3, DType::i32));
                 std::vector<NodeId> r = scan_test::multi_scan(g, p[0], n, p[1], p[2], p[3], false);
                 return E(g, Op::add, {E(g, Op::add, {r[2], r[0]}), r[4]});
               }});
  return c;
}

inline std::vector<Array> make_inputs(const FdCase& fc, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Array> in;
  for (const ParamSpec& p : fc.params) {
    std::vector<float> v = p.values;
    if (v.empty()) {
      int64_t n = numel(p.shape);
      for (int64_t i = 0; i < n; ++i) {
        v.push_back(n == 1 ? (p.lo + p.hi) / 2 : p.lo + (p.hi - p.lo) * float(i) / float(n - 1));
      }
      std::shuffle(v.begin(), v.end(), rng);
    }
    in.push_back(Array::from_f32(p.shape, v));
  }
  return in;
}

// Adds fc's params to `g` and returns its loss f(params) = reduce_sum(op(...) * w) with fixed
// weights w, so every output element matters.
inline NodeId add_fd_loss(Graph& g, const FdCase& fc, uint32_t seed) {
  std::vector<NodeId> params;
  for (const ParamSpec& p : fc.params) params.push_back(g.add_param({DType::f32, p.shape}));
  NodeId out = fc.body(g, params);
  std::mt19937 rng(seed + 1000);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> w(size_t(numel(g.node(out).type.shape)));
  for (float& x : w) x = dist(rng);
  NodeId weighted = E(g, Op::mul, {out, f32_const(g, g.node(out).type.shape, w)});
  return sum_all(g, weighted);
}

// The case alone: its loss is the graph's one output.
inline Graph fd_graph(const FdCase& fc, uint32_t seed) {
  Graph g(fc.name);
  g.set_outputs({add_fd_loss(g, fc, seed)});
  return g;
}

}  // namespace keel::fd_test
