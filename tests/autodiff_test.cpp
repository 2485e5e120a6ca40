// Reverse-mode autodiff: every differentiable op is checked against central differences run on
// the reference interpreter, plus the traversal's contract (zeros, errors, locations, pruning).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>

#include "autodiff/grad.h"
#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "ir/verify.h"
#include "tests/scan_graphs.h"

namespace keel {
namespace {

using Ints = std::vector<int64_t>;

SourceLoc here(uint32_t line) {
  return {"autodiff_test.cpp", line};
}

// Emits with a location naming the test line, so failures point at the case.
NodeId E(Graph& g, Op op, std::vector<NodeId> in, Attrs attrs = {},
         SourceLoc loc = SourceLoc::current()) {
  return g.emit(op, std::move(in), std::move(attrs), std::move(loc));
}

NodeId sum_all(Graph& g, NodeId x, SourceLoc loc = SourceLoc::current()) {
  Ints axes(g.node(x).type.shape.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = int64_t(i);
  return E(g, Op::reduce_sum, {x}, {{"axes", axes}, {"keepdims", int64_t{0}}}, std::move(loc));
}

NodeId f32_const(Graph& g, Shape s, std::vector<float> v) {
  return g.add_constant(Array::from_f32(std::move(s), v));
}

NodeId i64_const(Graph& g, Shape s, std::vector<int64_t> v) {
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

std::vector<FdCase> fd_cases() {
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
  c.push_back({"attention, 4 query heads over 2, documents",
               Op::attention,
               {{{1, 4, 5, 3}}, {{1, 2, 5, 3}}, {{1, 2, 5, 3}}},
               [](Graph& g, const std::vector<NodeId>& p) {
                 NodeId doc = i64_const(g, {1, 5}, {0, 0, 1, 2, 2});
                 return E(g, Op::attention, {p[0], p[1], p[2], doc}, {{"scale", 0.7}});
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

std::vector<Array> make_inputs(const FdCase& fc, uint32_t seed) {
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

// f(params) = reduce_sum(op(...) * w) with fixed weights w, so every output element matters.
Graph fd_graph(const FdCase& fc, uint32_t seed) {
  Graph g(fc.name);
  std::vector<NodeId> params;
  for (const ParamSpec& p : fc.params) params.push_back(g.add_param({DType::f32, p.shape}));
  NodeId out = fc.body(g, params);
  std::mt19937 rng(seed + 1000);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> w(size_t(numel(g.node(out).type.shape)));
  for (float& x : w) x = dist(rng);
  NodeId weighted = E(g, Op::mul, {out, f32_const(g, g.node(out).type.shape, w)});
  g.set_outputs({sum_all(g, weighted)});
  return g;
}

double eval_loss(const Graph& g, const std::vector<Array>& in) {
  return ref::interpret(g, in).at(0).get_f64(0);
}

TEST(AutodiffFd, EveryDifferentiableOpHasACase) {
  std::set<Op> covered;
  for (const FdCase& fc : fd_cases()) covered.insert(fc.op);
  for (const OpInfo& info : all_ops()) {
    if (info.differentiable) {
      EXPECT_TRUE(covered.count(info.op)) << "no finite-difference case for " << info.name;
    }
  }
}

class FdTest : public ::testing::TestWithParam<size_t> {};

TEST_P(FdTest, MatchesCentralDifferences) {
  const FdCase fc = fd_cases()[GetParam()];
  SCOPED_TRACE(fc.name);
  const uint32_t seed = 17 + uint32_t(GetParam());
  Graph f = fd_graph(fc, seed);
  bool has_op = false;
  for (const Node& n : f.nodes()) has_op = has_op || n.op == fc.op;
  ASSERT_TRUE(has_op) << "case does not contain " << op_name(fc.op);

  std::vector<Array> in = make_inputs(fc, seed);
  Graph df = autodiff::grad(f);
  EXPECT_EQ(verify_problems(df), std::vector<std::string>{});
  std::vector<Array> analytic = ref::interpret(df, in);
  ASSERT_EQ(analytic.size(), in.size());

  const double eps = 1e-2;
  double largest = 0;
  for (size_t p = 0; p < in.size(); ++p) {
    ASSERT_EQ(analytic[p].shape(), in[p].shape());
    for (int64_t i = 0; i < in[p].numel(); ++i) {
      std::vector<Array> hi = in, lo = in;
      hi[p] = in[p].clone();
      lo[p] = in[p].clone();
      hi[p].set_f64(i, in[p].get_f64(i) + eps);
      lo[p].set_f64(i, in[p].get_f64(i) - eps);
      double numeric = (eval_loss(f, hi) - eval_loss(f, lo)) / (2 * eps);
      double got = analytic[p].get_f64(i);
      double tol = 1e-2 * std::max(std::abs(numeric), std::abs(got)) + 2e-3;
      EXPECT_NEAR(got, numeric, tol) << "param " << p << " element " << i;
      largest = std::max(largest, std::abs(numeric));
    }
  }
  EXPECT_GT(largest, 1e-2) << "all gradients are ~0: the case checks nothing";
}

INSTANTIATE_TEST_SUITE_P(AllOps, FdTest, ::testing::Range(size_t{0}, fd_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string s = fd_cases()[info.param].name;
                           for (char& ch : s) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return std::to_string(info.param) + "_" + s;
                         });

// ---- traversal contract --------------------------------------------------------------------

std::vector<float> run1(const Graph& g, std::vector<Array> in, size_t out = 0) {
  return ref::interpret(g, in).at(out).to_f32();
}

TEST(Autodiff, UnreachedWrtGetsZeros) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2, 3}});
  NodeId y = g.add_param({DType::f32, {4}});
  g.set_outputs({sum_all(g, E(g, Op::mul, {x, x}))});
  Graph d = autodiff::grad(g, 0, {1});
  ASSERT_EQ(d.outputs().size(), 1u);
  const Node& z = d.node(d.outputs()[0]);
  EXPECT_EQ(z.type, g.node(y).type);
  EXPECT_EQ(z.op, Op::broadcast);
  EXPECT_EQ(d.node(z.inputs[0]).op, Op::constant);
  EXPECT_EQ(d.size(), g.size() + 2) << "only the zeros should be appended";
  std::vector<Array> in = {Array::full({2, 3}, 1.0), Array::full({4}, 3.0)};
  EXPECT_EQ(run1(d, in), std::vector<float>(4, 0.0f));
}

TEST(Autodiff, IntegerInputsGetZerosAndNoCotangent) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {3}});
  NodeId idx = g.add_param({DType::i64, {2}});
  g.set_outputs({sum_all(g, E(g, Op::gather, {x, idx}, {{"axis", int64_t{0}}}))});
  Graph d = autodiff::grad(g);
  ASSERT_EQ(d.outputs().size(), 2u);
  EXPECT_EQ(d.node(d.outputs()[1]).type, (TensorType{DType::i64, {2}}));
  std::vector<Array> in = {Array::full({3}, 1.0), Array::from_i64({2}, std::vector<int64_t>{2, 2})};
  std::vector<Array> out = ref::interpret(d, in);
  EXPECT_EQ(out[0].to_f32(), (std::vector<float>{0, 0, 2}));
  EXPECT_EQ(out[1].to_i64(), (std::vector<int64_t>{0, 0}));
}

TEST(Autodiff, NonScalarLossNamesItsLine) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2}});
  NodeId sq = E(g, Op::mul, {x, x}, {}, {"model.cpp", 42});
  g.set_outputs({sq});
  try {
    autodiff::grad(g);
    FAIL() << "expected keel::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[autodiff]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.cpp:42"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2]"), std::string::npos) << msg;
  }
  Graph h;
  NodeId i = h.add_param({DType::i32, {}});
  h.set_outputs({E(h, Op::neg, {i}, {}, {"model.cpp", 7})});
  EXPECT_THROW(autodiff::grad(h), Error);
}

TEST(Autodiff, BackwardNodesCarryForwardLoc) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {3}}, here(1));
  NodeId t = E(g, Op::tanh, {x}, {}, here(10));
  NodeId s = E(g, Op::mul, {t, t}, {}, here(11));
  NodeId loss = E(g, Op::reduce_sum, {s}, reduce_attrs({0}, 0), here(12));
  size_t forward = g.size();
  std::vector<NodeId> wrt = {x};
  autodiff::append_gradients(g, loss, wrt);
  std::set<uint32_t> lines;
  for (size_t i = forward; i < g.size(); ++i) lines.insert(g.nodes()[i].loc.line);
  EXPECT_EQ(lines, (std::set<uint32_t>{10, 11, 12}));
}

TEST(Autodiff, ValueAndGradPutsValueFirst) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {3}});
  g.set_outputs({sum_all(g, E(g, Op::exp, {x}))});
  Graph vg = autodiff::value_and_grad(g);
  ASSERT_EQ(vg.outputs().size(), 2u);
  std::vector<Array> in = {Array::from_f32({3}, std::vector<float>{0, 1, 2})};
  std::vector<Array> out = ref::interpret(vg, in);
  EXPECT_FLOAT_EQ(out[0].to_f32()[0], ref::interpret(g, in)[0].to_f32()[0]);
  EXPECT_FLOAT_EQ(out[1].to_f32()[2], std::exp(2.0f));
}

TEST(Autodiff, PrunesNodesOffThePath) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {3}});
  NodeId y = g.add_param({DType::f32, {3}});
  NodeId a = sum_all(g, E(g, Op::mul, {x, y}));
  NodeId b = sum_all(g, E(g, Op::sin, {y}, {}, here(77)));
  g.set_outputs({E(g, Op::add, {a, b})});
  Graph d = autodiff::grad(g, 0, {0});
  for (size_t i = g.size(); i < d.size(); ++i) {
    EXPECT_NE(d.nodes()[i].loc.line, 77u) << "differentiated sin although only x was asked for";
  }
  std::vector<Array> in = {Array::full({3}, 1.0), Array::full({3}, 2.5)};
  EXPECT_EQ(run1(d, in), std::vector<float>(3, 2.5f));
}

TEST(Autodiff, StopGradientBlocks) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2}});
  g.set_outputs({sum_all(g, E(g, Op::mul, {x, E(g, Op::stop_gradient, {x})}))});
  std::vector<Array> in = {Array::from_f32({2}, std::vector<float>{3, -1})};
  EXPECT_EQ(run1(autodiff::grad(g), in), (std::vector<float>{3, -1}));
}

TEST(Autodiff, WrtAnIntermediateNode) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2}});
  NodeId h = E(g, Op::exp, {x});
  NodeId loss = sum_all(g, E(g, Op::mul, {h, h}));
  std::vector<NodeId> wrt = {h, x};
  std::vector<NodeId> d = autodiff::append_gradients(g, loss, wrt);
  g.set_outputs(d);
  std::vector<Array> in = {Array::from_f32({2}, std::vector<float>{0, 1})};
  std::vector<Array> out = ref::interpret(g, in);
  EXPECT_NEAR(out[0].to_f32()[1], 2 * std::exp(1.0), 1e-5);  // 2h
  EXPECT_NEAR(out[1].to_f32()[1], 2 * std::exp(2.0), 1e-4);  // 2h·h
}

// A weight's gradient (x [B, T, in] . w [in, out]) is one product x^T g already in w's layout:
// no transpose after it, which a consumer such as the optimizer update would read as a strided
// walk (gpt2-m's AdamW did: 11 % of its step). The input's gradient needs none either.
TEST(Autodiff, WeightGradientIsAProductInTheWeightsLayout) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2, 3, 4}});
  NodeId w = g.add_param({DType::f32, {4, 5}});
  NodeId y = E(g, Op::dot_general, {x, w}, dot_attrs({}, {}, {2}, {0}));
  NodeId loss = sum_all(g, E(g, Op::mul, {y, y}));
  const size_t forward = g.size();
  const std::vector<NodeId> wrt = {x, w};
  std::vector<NodeId> d = autodiff::append_gradients(g, loss, wrt);
  g.set_outputs(d);
  EXPECT_EQ(g.node(d[1]).op, Op::dot_general);
  EXPECT_EQ(g.node(d[1]).type.shape, (Shape{4, 5}));
  for (size_t i = forward; i < g.size(); ++i) {
    EXPECT_NE(g.nodes()[i].op, Op::transpose) << "node " << i << " of the backward";
  }
  std::vector<Array> in = {Array::full({2, 3, 4}, 0.5), Array::full({4, 5}, 0.25)};
  const std::vector<Array> out = ref::interpret(g, in);
  // y = 4 * 0.5 * 0.25 = 0.5 everywhere; dL/dy = 2y = 1; dL/dw = sum over 6 rows of x = 3.
  EXPECT_EQ(out[1].to_f32(), std::vector<float>(20, 3.0f));
  EXPECT_EQ(out[0].to_f32(), std::vector<float>(24, 1.25f));  // dL/dx = 1 . w^T = 5 * 0.25
}

TEST(Autodiff, Bf16CotangentsStayBf16AndCastBack) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {3}});
  NodeId y = E(g, Op::cast, {x}, {{"dtype", DType::bf16}});
  NodeId sq = E(g, Op::mul, {y, E(g, Op::exp, {y})});
  g.set_outputs({sum_all(g, E(g, Op::cast, {sq}, {{"dtype", DType::f32}}))});
  Graph d = autodiff::grad(g);
  EXPECT_EQ(verify_problems(d), std::vector<std::string>{});
  std::vector<float> v = {0.5f, 1.0f, -1.0f};
  std::vector<float> got = run1(d, {Array::from_f32({3}, v)});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(got[i], (1 + v[i]) * std::exp(v[i]), 0.02 * std::exp(v[i])) << i;  // (1+x)eˣ
  }
}

// bf16 operands with an f32 result (what bf16_operands makes): each cotangent is the f32
// product of the widened operands, rounded once to its operand's bf16.
TEST(Autodiff, Bf16ProductWithAnF32ResultHasBf16Cotangents) {
  Graph g;
  NodeId x = g.add_param({DType::bf16, {2, 3}});
  NodeId w = g.add_param({DType::bf16, {3, 4}});
  Attrs attrs = dot_attrs({}, {}, {1}, {0});
  attrs.set("preferred_element_type", DType::f32);
  NodeId y = E(g, Op::dot_general, {x, w}, attrs);
  NodeId loss = sum_all(g, E(g, Op::mul, {y, y}));
  std::vector<NodeId> d = autodiff::append_gradients(g, loss, std::vector<NodeId>{x, w});
  g.set_outputs(d);
  ASSERT_EQ(verify_problems(g), std::vector<std::string>{});
  EXPECT_EQ(g.node(d[0]).type, (TensorType{DType::bf16, {2, 3}}));
  EXPECT_EQ(g.node(d[1]).type, (TensorType{DType::bf16, {3, 4}}));
  const std::vector<float> xs = {0.5f, -1.25f, 2.0f, 0.75f, 1.5f, -0.5f};
  std::vector<float> ws(12);
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = 0.125f * static_cast<float>(i) - 0.625f;
  Array xa(DType::bf16, {2, 3}), wa(DType::bf16, {3, 4});
  for (int64_t i = 0; i < 6; ++i) xa.set_f64(i, xs[static_cast<size_t>(i)]);
  for (int64_t i = 0; i < 12; ++i) wa.set_f64(i, ws[static_cast<size_t>(i)]);
  const std::vector<Array> out = ref::interpret(g, std::vector<Array>{xa, wa});
  // dL/dy = 2y; dL/dx = 2y w^T and dL/dw = x^T 2y in f32 (exact here: few bits), each then
  // rounded to bf16 once.
  auto y_at = [&](int64_t i, int64_t j) {
    double v = 0;
    for (int64_t m = 0; m < 3; ++m) v += xs[i * 3 + m] * ws[m * 4 + j];
    return v;
  };
  auto rounded = [](double v) { return double(bf16_to_f32(f32_to_bf16(static_cast<float>(v)))); };
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t k = 0; k < 3; ++k) {
      double dx = 0;
      for (int64_t j = 0; j < 4; ++j) dx += 2 * y_at(i, j) * ws[k * 4 + j];
      EXPECT_EQ(out[0].get_f64(i * 3 + k), rounded(dx)) << "dx " << i << "," << k;
    }
  }
  for (int64_t k = 0; k < 3; ++k) {
    for (int64_t j = 0; j < 4; ++j) {
      double dw = 0;
      for (int64_t i = 0; i < 2; ++i) dw += xs[i * 3 + k] * 2 * y_at(i, j);
      EXPECT_EQ(out[1].get_f64(k * 4 + j), rounded(dw)) << "dw " << k << "," << j;
    }
  }
}

// ---- kinks and ties ------------------------------------------------------------------------

TEST(Autodiff, MaxMinTiesSplitEvenly) {
  for (Op op : {Op::max, Op::min}) {
    Graph g;
    NodeId a = g.add_param({DType::f32, {3}});
    NodeId b = g.add_param({DType::f32, {3}});
    g.set_outputs({sum_all(g, E(g, op, {a, b}))});
    Graph d = autodiff::grad(g);
    std::vector<Array> in = {Array::from_f32({3}, std::vector<float>{1, 5, 2}),
                             Array::from_f32({3}, std::vector<float>{1, 2, 5})};
    std::vector<Array> out = ref::interpret(d, in);
    bool is_max = op == Op::max;
    EXPECT_EQ(out[0].to_f32(), (std::vector<float>{0.5f, is_max ? 1.f : 0.f, is_max ? 0.f : 1.f}));
    EXPECT_EQ(out[1].to_f32(), (std::vector<float>{0.5f, is_max ? 0.f : 1.f, is_max ? 1.f : 0.f}));
  }
}

TEST(Autodiff, ReduceMaxTiesShareEvenly) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2, 3}});
  g.set_outputs({sum_all(g, E(g, Op::reduce_max, {x}, reduce_attrs({1}, 0)))});
  std::vector<Array> in = {Array::from_f32({2, 3}, std::vector<float>{3, 1, 3, 2, 2, 2})};
  std::vector<float> third = {1 / 3.f, 1 / 3.f, 1 / 3.f};
  std::vector<float> got = run1(autodiff::grad(g), in);
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 3), (std::vector<float>{0.5f, 0, 0.5f}));
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(got[3 + i], third[i]);
}

TEST(Autodiff, AbsAtZeroHasZeroGradient) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {3}});
  g.set_outputs({sum_all(g, E(g, Op::abs, {x}))});
  std::vector<Array> in = {Array::from_f32({3}, std::vector<float>{-2, 0, 3})};
  EXPECT_EQ(run1(autodiff::grad(g), in), (std::vector<float>{-1, 0, 1}));
}

TEST(Autodiff, PowAtZeroBaseIsFinite) {
  Graph g;
  NodeId a = g.add_param({DType::f32, {2}});
  NodeId b = g.add_param({DType::f32, {2}});
  g.set_outputs({sum_all(g, E(g, Op::pow, {a, b}))});
  std::vector<Array> in = {Array::from_f32({2}, std::vector<float>{0, 0}),
                           Array::from_f32({2}, std::vector<float>{2, 0})};
  std::vector<Array> out = ref::interpret(autodiff::grad(g), in);
  EXPECT_EQ(out[0].to_f32(), (std::vector<float>{0, 0}));
  EXPECT_EQ(out[1].to_f32(), (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace keel
