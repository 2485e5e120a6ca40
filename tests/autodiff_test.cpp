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
#include "tests/fd_cases.h"
#include "tests/scan_graphs.h"

namespace keel {
namespace {

using namespace fd_test;  // NOLINT: the cases are this test's own

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
