// Reference interpreter tests. Every expected value is written out by hand, never recomputed with
// the formula under test, because this interpreter is the oracle other backends are judged by.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "ir/rng.h"
#include "tests/scan_graphs.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Empty arrays skip from_f32, whose memcpy gets null pointers when there are no elements.
Array F(Shape s, std::vector<float> v) {
  if (numel(s) == 0 && v.empty()) return Array(DType::f32, std::move(s));
  return Array::from_f32(std::move(s), v);
}
Array I(Shape s, Ints v, DType t = DType::i64) {
  return Array::from_i64(std::move(s), v, t);
}
Array B(Shape s, Ints v) {
  return Array::from_i64(std::move(s), v, DType::boolean);
}

// A one-op program over constant inputs, evaluated by interpret().
Array run(Op op, std::vector<Array> inputs, Attrs attrs = {}) {
  Graph g;
  std::vector<NodeId> ids;
  for (const Array& a : inputs) ids.push_back(g.add_constant(a));
  g.add_output(g.emit(op, ids, std::move(attrs), {}));
  std::vector<Array> out = ref::interpret(g, {});
  EXPECT_EQ(out.size(), 1u);
  return out.at(0);
}

// Checks dtype, shape and values; floats allow a relative 1e-6 and NaN matches NaN.
void expect_array(const Array& got, const Array& want) {
  ASSERT_EQ(dtype_name(got.dtype()), dtype_name(want.dtype()));
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape()));
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (is_float(want.dtype())) {
      double g = got.get_f64(i), w = want.get_f64(i);
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << "element " << i << " is " << g << ", want NaN";
      } else if (std::isinf(w)) {
        EXPECT_EQ(g, w) << "element " << i;
      } else {
        EXPECT_NEAR(g, w, 1e-6 * std::max(1.0, std::fabs(w))) << "element " << i;
      }
    } else {
      EXPECT_EQ(got.get_i64(i), want.get_i64(i)) << "element " << i;
    }
  }
}

void expect_f(const Array& got, Shape s, std::vector<float> v) {
  expect_array(got, F(s, v));
}
void expect_i(const Array& got, Shape s, Ints v, DType t = DType::i64) {
  expect_array(got, I(s, v, t));
}

Attrs reduce_attrs(Ints axes, int64_t keepdims) {
  return Attrs{{"axes", axes}, {"keepdims", keepdims}};
}

Attrs dot_attrs(Ints lb, Ints rb, Ints lc, Ints rc) {
  return Attrs{{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contract", lc}, {"rhs_contract", rc}};
}

Attrs cmp(const char* dir) {
  return Attrs{{"direction", std::string(dir)}};
}

// ---- Coverage: every op in ops.def has a checked sample (order-independent, so it also holds
// when ctest runs each test in its own process).

struct Sample {
  Array got, want;
};

// A scan and its hand-unrolled equivalent on the same inputs: {scan result, unrolled result}.
std::pair<std::vector<Array>, std::vector<Array>> scan_vs_unrolled(int64_t L, bool reverse) {
  std::vector<Array> in;
  auto make = [&](Graph& g) {
    NodeId h = g.add_param({DType::f32, {2, 3}});
    NodeId ws = g.add_param({DType::f32, {L, 3, 3}});
    NodeId b = g.add_param({DType::f32, {3}});
    return std::vector<NodeId>{h, ws, b};
  };
  Graph s("scan"), u("unrolled");
  std::vector<NodeId> ps = make(s), pu = make(u);
  std::vector<NodeId> rs = scan_test::tiny_scan(s, ps[0], ps[1], ps[2], reverse);
  std::vector<NodeId> ru = scan_test::tiny_unrolled(u, pu[0], pu[1], pu[2], reverse);
  s.set_outputs(rs);
  u.set_outputs(ru);
  for (NodeId p : ps) {
    Array a(DType::f32, s.node(p).type.shape);
    for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, std::sin(0.7 * double(i + 3 * p)));
    in.push_back(std::move(a));
  }
  return {ref::interpret(s, in), ref::interpret(u, in)};
}

Sample sample(Op op) {
  const Array v = F({3}, {1, -2, 4});
  const Array p = F({3}, {1, 0.5f, 4});
  const Array m = F({2, 3}, {1, 2, 3, 4, 5, 6});
  switch (op) {
    case Op::parameter: {
      Graph g;
      g.add_output(g.add_param({DType::f32, {3}}));
      std::vector<Array> in{v};
      return {ref::interpret(g, in).at(0), F({3}, {1, -2, 4})};
    }
    case Op::constant: {
      Graph g;
      g.add_output(g.add_constant(v));
      return {ref::interpret(g, {}).at(0), F({3}, {1, -2, 4})};
    }
    case Op::iota:
      return {run(op, {}, {{"shape", Ints{2, 3}}, {"dtype", DType::i32}, {"dim", int64_t{1}}}),
              I({2, 3}, {0, 1, 2, 0, 1, 2}, DType::i32)};
    case Op::rng_uniform: {
      Array got = run(op, {I({}, {5}), I({}, {9})}, {{"shape", Ints{2}}, {"dtype", DType::f32}});
      Array want = F({2}, {rng_uniform01(5, 9, 0), rng_uniform01(5, 9, 1)});
      return {got, want};
    }
    case Op::neg:
      return {run(op, {v}), F({3}, {-1, 2, -4})};
    case Op::abs:
      return {run(op, {v}), F({3}, {1, 2, 4})};
    case Op::exp:
      return {run(op, {v}), F({3}, {2.71828175f, 0.135335281f, 54.5981483f})};
    case Op::log:
      return {run(op, {p}), F({3}, {0, -0.693147182f, 1.38629436f})};
    case Op::tanh:
      return {run(op, {v}), F({3}, {0.761594176f, -0.964027584f, 0.999329329f})};
    case Op::sqrt:
      return {run(op, {p}), F({3}, {1, 0.707106769f, 2})};
    case Op::rsqrt:
      return {run(op, {p}), F({3}, {1, 1.41421354f, 0.5f})};
    case Op::sigmoid:
      return {run(op, {v}), F({3}, {0.731058598f, 0.119202919f, 0.982013762f})};
    case Op::erf:
      return {run(op, {v}), F({3}, {0.842700779f, -0.995322287f, 1.0f})};
    case Op::sin:
      return {run(op, {v}), F({3}, {0.841470957f, -0.909297407f, -0.756802499f})};
    case Op::cos:
      return {run(op, {v}), F({3}, {0.540302277f, -0.416146845f, -0.653643608f})};
    case Op::stop_gradient:
      return {run(op, {v}), F({3}, {1, -2, 4})};
    case Op::add:
      return {run(op, {m, v}), F({2, 3}, {2, 0, 7, 5, 3, 10})};
    case Op::sub:
      return {run(op, {m, v}), F({2, 3}, {0, 4, -1, 3, 7, 2})};
    case Op::mul:
      return {run(op, {m, v}), F({2, 3}, {1, -4, 12, 4, -10, 24})};
    case Op::div:
      return {run(op, {m, v}), F({2, 3}, {1, -1, 0.75f, 4, -2.5f, 1.5f})};
    case Op::max:
      return {run(op, {m, v}), F({2, 3}, {1, 2, 4, 4, 5, 6})};
    case Op::min:
      return {run(op, {m, v}), F({2, 3}, {1, -2, 3, 1, -2, 4})};
    case Op::pow:
      return {run(op, {F({3}, {2, 4, 9}), F({3}, {3, 0.5f, -1})}), F({3}, {8, 2, 0.111111112f})};
    case Op::compare:
      return {run(op, {v, F({3}, {1, 0, 5})}, cmp("lt")), B({3}, {0, 1, 1})};
    case Op::select:
      return {run(op, {B({3}, {1, 0, 1}), v, F({}, {7})}), F({3}, {1, 7, 4})};
    case Op::cast:
      return {run(op, {F({3}, {1.7f, -1.7f, 0})}, {{"dtype", DType::i32}}),
              I({3}, {1, -1, 0}, DType::i32)};
    case Op::reshape:
      return {run(op, {m}, {{"shape", Ints{3, 2}}}), F({3, 2}, {1, 2, 3, 4, 5, 6})};
    case Op::transpose:
      return {run(op, {m}, {{"perm", Ints{1, 0}}}), F({3, 2}, {1, 4, 2, 5, 3, 6})};
    case Op::broadcast:
      return {run(op, {v}, {{"shape", Ints{2, 3}}}), F({2, 3}, {1, -2, 4, 1, -2, 4})};
    case Op::slice:
      return {run(op, {m}, {{"start", Ints{0, 1}}, {"limit", Ints{2, 3}}, {"stride", Ints{1, 1}}}),
              F({2, 2}, {2, 3, 5, 6})};
    case Op::concat:
      return {run(op, {v, F({1}, {9})}, {{"axis", int64_t{0}}}), F({4}, {1, -2, 4, 9})};
    case Op::pad:
      return {run(op, {v}, {{"low", Ints{1}}, {"high", Ints{1}}, {"value", 0.5}}),
              F({5}, {0.5f, 1, -2, 4, 0.5f})};
    case Op::gather:
      return {run(op, {v, I({2}, {2, 0})}, {{"axis", int64_t{0}}}), F({2}, {4, 1})};
    case Op::scatter_add:
      return {run(op, {v, I({2}, {2, 2}), F({2}, {10, 20})}, {{"axis", int64_t{0}}}),
              F({3}, {1, -2, 34})};
    case Op::one_hot:
      return {run(op, {I({2}, {1, 0})}, {{"depth", int64_t{2}}, {"dtype", DType::f32}}),
              F({2, 2}, {0, 1, 1, 0})};
    case Op::reduce_sum:
      return {run(op, {m}, reduce_attrs({1}, 0)), F({2}, {6, 15})};
    case Op::reduce_max:
      return {run(op, {m}, reduce_attrs({0}, 0)), F({3}, {4, 5, 6})};
    case Op::reduce_mean:
      return {run(op, {m}, reduce_attrs({1}, 0)), F({2}, {2, 5})};
    case Op::argmax:
      return {run(op, {v}, {{"axis", int64_t{0}}, {"keepdims", int64_t{0}}}), I({}, {2})};
    case Op::cumsum:
      return {run(op, {v}, {{"axis", int64_t{0}}, {"reverse", int64_t{0}}}), F({3}, {1, -1, 3})};
    case Op::top_k_values:
      return {run(op, {v}, {{"k", int64_t{2}}}), F({2}, {4, 1})};
    case Op::top_k_indices:
      return {run(op, {v}, {{"k", int64_t{2}}}), I({2}, {2, 0})};
    case Op::dot_general:
      return {run(op, {m, v}, dot_attrs({}, {}, {1}, {0})), F({2}, {9, 18})};
    case Op::attention:
    case Op::attention_lse:
    case Op::attention_dq:
    case Op::attention_dk:
    case Op::attention_dv: {
      // One head, two positions, D = 1: row 1 sees scores [2, 0]; dout is all ones.
      const Array q = F({1, 1, 2, 1}, {1, 2}), k = F({1, 1, 2, 1}, {1, 0});
      const Array val = F({1, 1, 2, 1}, {3, 5}), out = F({1, 1, 2, 1}, {3, 3.23840584f});
      const Array ones = F({1, 1, 2, 1}, {1, 1}), lse = F({1, 1, 2}, {1, 2.12692801f});
      const Attrs scale{{"scale", 1.0}};
      const std::vector<Array> grad_in = {q, k, val, out, ones, lse};
      if (op == Op::attention) return {run(op, {q, k, val}, scale), out};
      // With a document boundary between the two positions each row sees only itself.
      if (op == Op::attention_lse)
        return {run(op, {q, k, I({1, 2}, {0, 1})}, scale), F({1, 1, 2}, {1, 0})};
      if (op == Op::attention_dq)
        return {run(op, grad_in, scale), F({1, 1, 2, 1}, {0, -0.209987171f})};
      if (op == Op::attention_dk) {
        return {run(op, grad_in, scale), F({1, 1, 2, 1}, {-0.419974342f, 0.419974342f})};
      }
      return {run(op, grad_in, scale), F({1, 1, 2, 1}, {1.88079708f, 0.119202922f})};
    }
    case Op::sparse_attention:
    case Op::sparse_attention_dq:
    case Op::sparse_attention_dk:
    case Op::sparse_attention_dv:
    case Op::sparse_attention_weights: {
      // The causal example above as listed keys: row 0 lists {0, nothing}, row 1 {0, 1}; the
      // same values and gradients, with dout all ones.
      const Array q = F({1, 2, 1, 1}, {1, 2}), k = F({1, 2, 1, 1}, {1, 0});
      const Array val = F({1, 2, 1, 1}, {3, 5}), ones = F({1, 2, 1, 1}, {1, 1});
      const Array keys = I({1, 2, 2}, {0, -1, 0, 1});
      const Attrs scale{{"scale", 1.0}};
      if (op == Op::sparse_attention) {
        return {run(op, {q, k, val, keys}, scale), F({1, 2, 1, 1}, {3, 3.23840584f})};
      }
      if (op == Op::sparse_attention_weights) {
        return {run(op, {q, k, keys}, scale), F({1, 2, 2}, {1, 0, 0.880797078f, 0.119202922f})};
      }
      const std::vector<Array> grad_in = {q, k, val, ones, keys};
      if (op == Op::sparse_attention_dq)
        return {run(op, grad_in, scale), F({1, 2, 1, 1}, {0, -0.209987171f})};
      if (op == Op::sparse_attention_dk) {
        return {run(op, grad_in, scale), F({1, 2, 1, 1}, {-0.419974342f, 0.419974342f})};
      }
      return {run(op, grad_in, scale), F({1, 2, 1, 1}, {1.88079708f, 0.119202922f})};
    }
    // One process: every axis has size 1 (dist_mpi_test runs them across processes).
    case Op::all_reduce:
      return {run(op, {v},
                  {{"axis", std::string("data")},
                   {"axis_size", int64_t{1}},
                   {"reduce", std::string("max")}}),
              v};
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all:
      return {run(op, {m},
                  {{"axis", std::string("data")}, {"axis_size", int64_t{1}}, {"dim", int64_t{1}}}),
              m};
    case Op::axis_index:
      return {run(op, {}, {{"axis", std::string("data")}, {"axis_size", int64_t{1}}}),
              Array::scalar(0, DType::i32)};
    case Op::pvary:
      return {run(op, {v}, {{"axis", std::string("model")}, {"axis_size", int64_t{2}}}),
              F({3}, {1, -2, 4})};
    case Op::scan:
    case Op::scan_result: {
      auto [got, want] = scan_vs_unrolled(3, false);
      return {got.at(1), want.at(1)};
    }
  }
  throw std::logic_error("no sample for this op");
}

TEST(RefCoverage, EveryOpHasACheckedSample) {
  for (const OpInfo& info : all_ops()) {
    SCOPED_TRACE(std::string(info.name));
    Sample s = sample(info.op);
    expect_array(s.got, s.want);
  }
}

TEST(RefScan, MatchesTheHandUnrolledProgram) {
  for (int64_t L : {1, 2, 5}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(testing::Message() << "L=" << L << " reverse=" << reverse);
      auto [got, want] = scan_vs_unrolled(L, reverse);
      ASSERT_EQ(got.size(), 2u);
      for (size_t k = 0; k < 2; ++k) expect_array(got[k], want[k]);
    }
  }
}

// ---- interpret() and eval_node()

TEST(RefInterpret, BindsParametersInOrderAndReturnsOutputsInOrder) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2}});
  NodeId y = g.add_param({DType::f32, {2}});
  NodeId d = g.emit(Op::sub, {x, y}, {}, {});
  NodeId c = g.add_constant(F({}, {10}));
  NodeId s = g.emit(Op::mul, {d, c}, {}, {});
  g.set_outputs({s, d, x});
  std::vector<Array> in{F({2}, {5, 7}), F({2}, {1, 2})};
  std::vector<Array> out = ref::interpret(g, in);
  ASSERT_EQ(out.size(), 3u);
  expect_f(out[0], {2}, {40, 50});
  expect_f(out[1], {2}, {4, 5});
  expect_f(out[2], {2}, {5, 7});
}

TEST(RefInterpret, RejectsAnInputOfTheWrongShape) {
  Graph g;
  g.add_param({DType::f32, {2}});
  g.add_param({DType::i32, {}});
  NodeId p = g.add_param({DType::f32, {4}});
  g.add_output(p);
  std::vector<Array> in{F({2}, {1, 2}), I({}, {1}, DType::i32), F({3}, {1, 2, 3})};
  try {
    ref::interpret(g, in);
    FAIL() << "expected keel::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[ref] input 2 is f32[3] but parameter 2 expects f32[4]; "));
  }
}

TEST(RefInterpret, RejectsAnInputOfTheWrongDtype) {
  Graph g;
  g.add_output(g.add_param({DType::f32, {2}}));
  std::vector<Array> in{I({2}, {1, 2}, DType::i32)};
  EXPECT_THROW(
      {
        try {
          ref::interpret(g, in);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(),
                      HasSubstr("[ref] input 0 is i32[2] but parameter 0 expects f32[2]"));
          throw;
        }
      },
      Error);
}

TEST(RefInterpret, RejectsTheWrongNumberOfInputs) {
  Graph g;
  g.add_output(g.add_param({DType::f32, {2}}));
  try {
    ref::interpret(g, {});
    FAIL() << "expected keel::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[ref] graph 'main' takes 1 inputs but 0 were given"));
  }
}

TEST(RefInterpret, RunsEveryNodeEvenIfUnused) {
  // An unused node that fails (gather from an empty axis, appended past the type checks)
  // still fails: nodes run in order.
  Graph g;
  NodeId e = g.add_constant(F({0}, {}));
  NodeId i = g.add_constant(I({1}, {0}));
  Node bad;
  bad.op = Op::gather;
  bad.inputs = {e, i};
  bad.type = {DType::f32, {1}};
  bad.attrs.set("axis", int64_t{0});
  g.append_unchecked(bad);
  g.add_output(g.add_constant(F({}, {1})));
  EXPECT_THROW(ref::interpret(g, {}), Error);
}

TEST(RefEvalNode, RejectsParametersUnknownOpsAndMistypedInputs) {
  Node param;
  param.op = Op::parameter;
  EXPECT_THROW(ref::eval_node(param, {}), Error);

  Node unknown;
  unknown.op = static_cast<Op>(200);
  try {
    ref::eval_node(unknown, {});
    FAIL() << "expected keel::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[ref]"));
  }

  Node add;
  add.op = Op::add;
  add.type = {DType::f32, {4}};
  std::vector<Array> in{F({3}, {1, 2, 3}), F({3}, {1, 2, 3})};
  try {
    ref::eval_node(add, in);
    FAIL() << "expected keel::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[ref] add"));
    EXPECT_THAT(e.what(), HasSubstr("f32[3]"));
  }
}

TEST(RefEvalNode, EvaluatesASingleNode) {
  Node n;
  n.op = Op::mul;
  n.type = {DType::i64, {2}};
  std::vector<Array> in{I({2}, {3, -4}), I({}, {5})};
  expect_i(ref::eval_node(n, in), {2}, {15, -20});
}

// ---- Leaves

TEST(RefLeaf, IotaCountsAlongItsDim) {
  expect_f(run(Op::iota, {}, {{"shape", Ints{2, 3}}, {"dtype", DType::f32}, {"dim", int64_t{0}}}),
           {2, 3}, {0, 0, 0, 1, 1, 1});
  expect_i(run(Op::iota, {}, {{"shape", Ints{4}}, {"dtype", DType::i64}, {"dim", int64_t{0}}}), {4},
           {0, 1, 2, 3});
  expect_i(run(Op::iota, {}, {{"shape", Ints{0, 2}}, {"dtype", DType::i64}, {"dim", int64_t{1}}}),
           {0, 2}, {});
}

TEST(RefLeaf, ConstantReturnsItsValue) {
  Graph g;
  g.add_output(g.add_constant(B({2}, {1, 0})));
  expect_array(ref::interpret(g, {}).at(0), B({2}, {1, 0}));
}

Array draw(int64_t seed, int64_t counter, int64_t n) {
  return run(Op::rng_uniform, {I({}, {seed}), I({}, {counter})},
             {{"shape", Ints{n}}, {"dtype", DType::f32}});
}

TEST(RefRng, SameSeedAndCounterGiveTheSameValues) {
  Array a = draw(42, 7, 64), b = draw(42, 7, 64);
  EXPECT_TRUE(a.same_bytes(b));
}

TEST(RefRng, DifferentCounterOrSeedGivesDifferentValues) {
  Array a = draw(42, 7, 64), b = draw(42, 8, 64), c = draw(43, 7, 64);
  int same_b = 0, same_c = 0;
  for (int64_t i = 0; i < 64; ++i) {
    same_b += a.get_f64(i) == b.get_f64(i);
    same_c += a.get_f64(i) == c.get_f64(i);
  }
  EXPECT_LT(same_b, 2);
  EXPECT_LT(same_c, 2);
}

TEST(RefRng, UsesTheSharedGeneratorElementByElement) {
  // Negative seeds are reinterpreted as uint64, as the spec says.
  Array a = draw(-1, 3, 4);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.get_f64(static_cast<int64_t>(i)), rng_uniform01(~uint64_t{0}, 3, i));
  }
}

TEST(RefRng, DrawsLieInUnitIntervalWithMeanNearHalf) {
  Array a = draw(123, 0, 4096);
  double sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get_f64(i);
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    sum += x;
  }
  // The mean of 4096 uniforms has standard deviation 0.0045; 0.02 is over 4 sigma.
  EXPECT_NEAR(sum / 4096, 0.5, 0.02);
}

TEST(RefRng, ProducesBf16AndEmptyShapes) {
  Array a = run(Op::rng_uniform, {I({}, {1}), I({}, {2})},
                {{"shape", Ints{2, 0}}, {"dtype", DType::bf16}});
  EXPECT_EQ(a.dtype(), DType::bf16);
  EXPECT_EQ(a.numel(), 0);
}

// ---- Unary

TEST(RefUnary, FloatEdgeCases) {
  expect_f(run(Op::log, {F({2}, {0, -1})}), {2}, {-kInf, kNaN});
  expect_f(run(Op::sqrt, {F({2}, {-1, 0})}), {2}, {kNaN, 0});
  expect_f(run(Op::rsqrt, {F({1}, {0})}), {1}, {kInf});
  expect_f(run(Op::sigmoid, {F({2}, {-200, 200})}), {2}, {0, 1});
  expect_f(run(Op::exp, {F({1}, {-kInf})}), {1}, {0});
  expect_f(run(Op::abs, {F({2}, {-0.0f, -kInf})}), {2}, {0, kInf});
}

TEST(RefUnary, IntegerNegAndAbsWrap) {
  expect_i(run(Op::neg, {I({3}, {-3, 0, 5}, DType::i32)}), {3}, {3, 0, -5}, DType::i32);
  expect_i(run(Op::abs, {I({3}, {-3, 0, 5}, DType::i32)}), {3}, {3, 0, 5}, DType::i32);
  const int64_t lo = std::numeric_limits<int64_t>::min();
  expect_i(run(Op::neg, {I({1}, {lo})}), {1}, {lo});
  expect_i(run(Op::abs, {I({1}, {-2147483648}, DType::i32)}), {1}, {-2147483648}, DType::i32);
}

TEST(RefUnary, StopGradientIsIdentityForAnyType) {
  expect_array(run(Op::stop_gradient, {B({2}, {0, 1})}), B({2}, {0, 1}));
  expect_i(run(Op::stop_gradient, {I({2}, {7, -7}, DType::i32)}), {2}, {7, -7}, DType::i32);
}

TEST(RefUnary, Bf16ResultsRoundToBf16) {
  Array x = run(Op::cast, {F({1}, {2})}, {{"dtype", DType::bf16}});
  Graph g;
  NodeId c = g.add_constant(x);
  g.add_output(g.emit(Op::sqrt, {c}, {}, {}));
  Array r = ref::interpret(g, {}).at(0);
  EXPECT_EQ(r.dtype(), DType::bf16);
  // sqrt(2) = 1.41421...; bf16 has 8 significant bits: 1.4140625 (0x3FB5).
  EXPECT_EQ(r.get_f64(0), 1.4140625);
}

// ---- Binary

TEST(RefBinary, BroadcastsRowAgainstMatrix) {
  expect_f(run(Op::add, {F({2, 3}, {1, 2, 3, 4, 5, 6}), F({3}, {10, 20, 30})}), {2, 3},
           {11, 22, 33, 14, 25, 36});
}

TEST(RefBinary, BroadcastsColumnAgainstRow) {
  expect_f(run(Op::mul, {F({2, 1}, {2, 3}), F({1, 3}, {1, 10, 100})}), {2, 3},
           {2, 20, 200, 3, 30, 300});
}

TEST(RefBinary, BroadcastsScalarOnEitherSide) {
  expect_f(run(Op::sub, {F({}, {10}), F({3}, {1, 2, 3})}), {3}, {9, 8, 7});
  expect_f(run(Op::div, {F({3}, {1, 2, 3}), F({}, {4})}), {3}, {0.25f, 0.5f, 0.75f});
  expect_f(run(Op::add, {F({}, {1}), F({}, {2})}), {}, {3});
}

TEST(RefBinary, BroadcastsSizeOneAndSizeZeroDims) {
  expect_f(run(Op::add, {F({1, 1}, {5}), F({2, 1}, {1, 2})}), {2, 1}, {6, 7});
  expect_f(run(Op::add, {F({0, 3}, {}), F({3}, {1, 2, 3})}), {0, 3}, {});
  expect_f(run(Op::mul, {F({2, 1}, {1, 2}), F({0}, {})}), {2, 0}, {});
}

TEST(RefBinary, FloatDivisionFollowsIeee) {
  expect_f(run(Op::div, {F({3}, {1, -1, 0}), F({3}, {0, 0, 0})}), {3}, {kInf, -kInf, kNaN});
}

TEST(RefBinary, IntegerDivisionTruncatesAndDivisionByZeroIsZero) {
  expect_i(run(Op::div, {I({6}, {7, -7, 7, -7, 5, 0}), I({6}, {2, 2, -2, -2, 0, 3})}), {6},
           {3, -3, -3, 3, 0, 0});
  expect_i(run(Op::div, {I({2}, {-9, 9}, DType::i32), I({}, {4}, DType::i32)}), {2}, {-2, 2},
           DType::i32);
  const int64_t lo = std::numeric_limits<int64_t>::min();
  expect_i(run(Op::div, {I({1}, {lo}), I({1}, {-1})}), {1}, {lo});
}

TEST(RefBinary, IntegerArithmeticWraps) {
  expect_i(run(Op::add, {I({1}, {2147483647}, DType::i32), I({1}, {1}, DType::i32)}), {1},
           {-2147483648}, DType::i32);
  expect_i(run(Op::mul, {I({1}, {4611686018427387904}), I({1}, {2})}), {1},
           {std::numeric_limits<int64_t>::min()});
  expect_i(run(Op::sub, {I({2}, {3, 10}), I({2}, {5, 1})}), {2}, {-2, 9});
}

TEST(RefBinary, MaxMinPropagateNaNAndOrderSignedZeros) {
  expect_f(run(Op::max, {F({3}, {1, kNaN, 3}), F({3}, {kNaN, 2, -5})}), {3}, {kNaN, kNaN, 3});
  expect_f(run(Op::min, {F({3}, {1, kNaN, 3}), F({3}, {kNaN, 2, -5})}), {3}, {kNaN, kNaN, -5});
  Array mx = run(Op::max, {F({1}, {-0.0f}), F({1}, {0.0f})});
  Array mn = run(Op::min, {F({1}, {0.0f}), F({1}, {-0.0f})});
  EXPECT_FALSE(std::signbit(mx.get_f64(0)));
  EXPECT_TRUE(std::signbit(mn.get_f64(0)));
  expect_i(run(Op::max, {I({3}, {-1, 5, 2}), I({3}, {-2, 6, 2})}), {3}, {-1, 6, 2});
  expect_i(run(Op::min, {I({3}, {-1, 5, 2}), I({3}, {-2, 6, 2})}), {3}, {-2, 5, 2});
}

TEST(RefBinary, PowBroadcasts) {
  expect_f(run(Op::pow, {F({2, 1}, {2, 3}), F({3}, {0, 1, 2})}), {2, 3}, {1, 2, 4, 1, 3, 9});
  expect_f(run(Op::pow, {F({2}, {-8, 0}), F({2}, {0.5f, -1})}), {2}, {kNaN, kInf});
}

TEST(RefBinary, Bf16AddRoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties go to the even mantissa (1.0).
  // 1 + 3*2^-8 is halfway between 1.0078125 and 1.015625: even is 1.015625.
  Array a = run(Op::cast, {F({2}, {1, 1})}, {{"dtype", DType::bf16}});
  Array b = run(Op::cast, {F({2}, {0.00390625f, 0.01171875f})}, {{"dtype", DType::bf16}});
  Array r = run(Op::add, {a, b});
  EXPECT_EQ(r.dtype(), DType::bf16);
  EXPECT_EQ(r.get_f64(0), 1.0);
  EXPECT_EQ(r.get_f64(1), 1.015625);
}

// ---- Compare and select

TEST(RefCompare, EveryDirection) {
  const Array a = F({3}, {1, 2, 3}), b = F({3}, {2, 2, 2});
  expect_array(run(Op::compare, {a, b}, cmp("eq")), B({3}, {0, 1, 0}));
  expect_array(run(Op::compare, {a, b}, cmp("ne")), B({3}, {1, 0, 1}));
  expect_array(run(Op::compare, {a, b}, cmp("lt")), B({3}, {1, 0, 0}));
  expect_array(run(Op::compare, {a, b}, cmp("le")), B({3}, {1, 1, 0}));
  expect_array(run(Op::compare, {a, b}, cmp("gt")), B({3}, {0, 0, 1}));
  expect_array(run(Op::compare, {a, b}, cmp("ge")), B({3}, {0, 1, 1}));
}

TEST(RefCompare, NaNIsUnorderedAndIntsCompareExactly) {
  const Array n = F({1}, {kNaN});
  expect_array(run(Op::compare, {n, n}, cmp("eq")), B({1}, {0}));
  expect_array(run(Op::compare, {n, n}, cmp("ne")), B({1}, {1}));
  expect_array(run(Op::compare, {n, F({1}, {0})}, cmp("lt")), B({1}, {0}));
  expect_array(run(Op::compare, {n, F({1}, {0})}, cmp("ge")), B({1}, {0}));
  // 2^53 + 1 and 2^53 differ as int64 even though they round to the same double.
  expect_array(
      run(Op::compare, {I({1}, {9007199254740993}), I({1}, {9007199254740992})}, cmp("gt")),
      B({1}, {1}));
  expect_array(run(Op::compare, {B({2}, {1, 0}), B({2}, {1, 1})}, cmp("eq")), B({2}, {1, 0}));
}

TEST(RefCompare, Broadcasts) {
  expect_array(run(Op::compare, {F({2, 1}, {1, 3}), F({3}, {0, 1, 2})}, cmp("gt")),
               B({2, 3}, {1, 0, 0, 1, 1, 1}));
}

TEST(RefSelect, BroadcastsAllThreeOperands) {
  expect_f(run(Op::select, {B({2, 1}, {1, 0}), F({3}, {1, 2, 3}), F({}, {-1})}), {2, 3},
           {1, 2, 3, -1, -1, -1});
  expect_i(run(Op::select, {B({}, {1}), I({2}, {4, 5}, DType::i32), I({2, 1}, {0, 0}, DType::i32)}),
           {2, 2}, {4, 5, 4, 5}, DType::i32);
  expect_array(run(Op::select, {B({3}, {0, 1, 0}), B({3}, {1, 1, 1}), B({3}, {0, 0, 0})}),
               B({3}, {0, 1, 0}));
}

// ---- Cast

TEST(RefCast, FloatToIntTruncatesAndNonFiniteIsZero) {
  expect_i(run(Op::cast, {F({7}, {1.9f, -1.9f, 0.5f, -0.5f, kNaN, kInf, -kInf})},
               {{"dtype", DType::i32}}),
           {7}, {1, -1, 0, 0, 0, 0, 0}, DType::i32);
  expect_i(run(Op::cast, {F({2}, {3e9f, -3e9f})}, {{"dtype", DType::i64}}), {2},
           {3000000000, -3000000000});
}

TEST(RefCast, FloatToIntSaturatesOutOfRange) {
  expect_i(run(Op::cast, {F({2}, {3e9f, -3e9f})}, {{"dtype", DType::i32}}), {2},
           {2147483647, -2147483648}, DType::i32);
  expect_i(run(Op::cast, {F({2}, {1e19f, -1e19f})}, {{"dtype", DType::i64}}), {2},
           {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()});
}

TEST(RefCast, ToBoolIsNonZero) {
  expect_array(run(Op::cast, {F({4}, {0, -0.0f, 0.5f, kNaN})}, {{"dtype", DType::boolean}}),
               B({4}, {0, 0, 1, 1}));
  expect_array(run(Op::cast, {I({3}, {0, -3, 256}, DType::i32)}, {{"dtype", DType::boolean}}),
               B({3}, {0, 1, 1}));
}

TEST(RefCast, FromBoolAndBetweenInts) {
  expect_f(run(Op::cast, {B({2}, {1, 0})}, {{"dtype", DType::f32}}), {2}, {1, 0});
  expect_i(run(Op::cast, {I({3}, {4294967297, -1, 2147483648})}, {{"dtype", DType::i32}}), {3},
           {1, -1, -2147483648}, DType::i32);
  expect_i(run(Op::cast, {I({1}, {-5}, DType::i32)}, {{"dtype", DType::i64}}), {1}, {-5});
}

TEST(RefCast, IntToFloatRoundsOnce) {
  // 2^24 + 1 is not an f32; it rounds to even, 2^24.
  Array r = run(Op::cast, {I({2}, {16777217, -3})}, {{"dtype", DType::f32}});
  EXPECT_EQ(r.get_f64(0), 16777216.0);
  EXPECT_EQ(r.get_f64(1), -3.0);
}

TEST(RefCast, F32ToBf16RoundsToNearestEven) {
  // bf16 keeps 7 mantissa bits: steps of 2^-7 = 0.0078125 just above 1.
  Array r = run(Op::cast, {F({4}, {1.00390625f, 1.01171875f, 1.0048828125f, -2.0f})},
                {{"dtype", DType::bf16}});
  EXPECT_EQ(r.get_f64(0), 1.0);        // tie -> even (down)
  EXPECT_EQ(r.get_f64(1), 1.015625);   // tie -> even (up)
  EXPECT_EQ(r.get_f64(2), 1.0078125);  // above the tie -> up
  EXPECT_EQ(r.get_f64(3), -2.0);
  expect_f(run(Op::cast, {r}, {{"dtype", DType::f32}}), {4}, {1, 1.015625f, 1.0078125f, -2});
}

// ---- Layout

TEST(RefLayout, ReshapeKeepsRowMajorOrder) {
  expect_i(run(Op::reshape, {I({2, 3}, {1, 2, 3, 4, 5, 6})}, {{"shape", Ints{3, 1, 2}}}), {3, 1, 2},
           {1, 2, 3, 4, 5, 6});
  expect_f(run(Op::reshape, {F({1, 1}, {7})}, {{"shape", Ints{}}}), {}, {7});
  expect_f(run(Op::reshape, {F({0, 3}, {})}, {{"shape", Ints{3, 0}}}), {3, 0}, {});
}

TEST(RefLayout, TransposeMapsOutputDimToPermDim) {
  // x[a][0][c] = {{{1,2,3}},{{4,5,6}}}; perm {2,0,1} gives out[c][a][0] = x[a][0][c].
  expect_f(run(Op::transpose, {F({2, 1, 3}, {1, 2, 3, 4, 5, 6})}, {{"perm", Ints{2, 0, 1}}}),
           {3, 2, 1}, {1, 4, 2, 5, 3, 6});
  // perm {1,2,0} on [2,1,3]: out[0][c][a] = x[a][0][c].
  expect_f(run(Op::transpose, {F({2, 1, 3}, {1, 2, 3, 4, 5, 6})}, {{"perm", Ints{1, 2, 0}}}),
           {1, 3, 2}, {1, 4, 2, 5, 3, 6});
  expect_array(run(Op::transpose, {B({1, 2}, {1, 0})}, {{"perm", Ints{1, 0}}}), B({2, 1}, {1, 0}));
}

TEST(RefLayout, BroadcastStretchesSizeOneDimsAndAddsLeadingDims) {
  expect_f(run(Op::broadcast, {F({2, 1}, {1, 2})}, {{"shape", Ints{2, 3}}}), {2, 3},
           {1, 1, 1, 2, 2, 2});
  expect_f(run(Op::broadcast, {F({}, {5})}, {{"shape", Ints{2}}}), {2}, {5, 5});
  expect_f(run(Op::broadcast, {F({1, 2}, {1, 2})}, {{"shape", Ints{2, 1, 2}}}), {2, 1, 2},
           {1, 2, 1, 2});
  expect_f(run(Op::broadcast, {F({3}, {1, 2, 3})}, {{"shape", Ints{0, 3}}}), {0, 3}, {});
}

Attrs slice_attrs(Ints start, Ints limit, Ints stride) {
  return Attrs{{"start", start}, {"limit", limit}, {"stride", stride}};
}

TEST(RefLayout, SliceWithStrides) {
  const Array x = F({5}, {10, 11, 12, 13, 14});
  expect_f(run(Op::slice, {x}, slice_attrs({1}, {5}, {2})), {2}, {11, 13});
  expect_f(run(Op::slice, {x}, slice_attrs({0}, {5}, {2})), {3}, {10, 12, 14});
  expect_f(run(Op::slice, {x}, slice_attrs({4}, {5}, {3})), {1}, {14});
  const Array m = F({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  expect_f(run(Op::slice, {m}, slice_attrs({0, 1}, {3, 4}, {2, 2})), {2, 2}, {1, 3, 9, 11});
}

TEST(RefLayout, SliceWithStartEqualToLimitIsEmpty) {
  const Array m = F({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_f(run(Op::slice, {m}, slice_attrs({0, 2}, {2, 2}, {1, 1})), {2, 0}, {});
  expect_f(run(Op::slice, {m}, slice_attrs({1, 0}, {1, 3}, {1, 1})), {0, 3}, {});
}

TEST(RefLayout, ConcatAlongEachAxis) {
  expect_f(run(Op::concat, {F({2, 1}, {1, 2}), F({2, 2}, {3, 4, 5, 6})}, {{"axis", int64_t{1}}}),
           {2, 3}, {1, 3, 4, 2, 5, 6});
  expect_f(run(Op::concat, {F({1, 2}, {1, 2}), F({2, 2}, {3, 4, 5, 6})}, {{"axis", int64_t{0}}}),
           {3, 2}, {1, 2, 3, 4, 5, 6});
  expect_i(run(Op::concat, {I({1}, {1}), I({2}, {2, 3}), I({1}, {4})}, {{"axis", int64_t{0}}}), {4},
           {1, 2, 3, 4});
}

TEST(RefLayout, ConcatWithAZeroLengthPiece) {
  expect_f(run(Op::concat, {F({2, 1}, {1, 2}), F({2, 0}, {}), F({2, 1}, {3, 4})},
               {{"axis", int64_t{1}}}),
           {2, 2}, {1, 3, 2, 4});
  expect_f(run(Op::concat, {F({0}, {}), F({0}, {})}, {{"axis", int64_t{0}}}), {0}, {});
}

Attrs pad_attrs(Ints low, Ints high, double value) {
  return Attrs{{"low", low}, {"high", high}, {"value", value}};
}

TEST(RefLayout, PadAddsValueBeforeAndAfter) {
  expect_f(run(Op::pad, {F({2}, {1, 2})}, pad_attrs({1}, {2}, -1)), {5}, {-1, 1, 2, -1, -1});
  expect_f(run(Op::pad, {F({1, 2}, {1, 2})}, pad_attrs({1, 0}, {0, 1}, 0)), {2, 3},
           {0, 0, 0, 1, 2, 0});
  expect_i(run(Op::pad, {I({2}, {5, 6}, DType::i32)}, pad_attrs({0}, {1}, 7)), {3}, {5, 6, 7},
           DType::i32);
  expect_f(run(Op::pad, {F({0}, {})}, pad_attrs({1}, {1}, 3)), {2}, {3, 3});
  expect_f(run(Op::pad, {F({2}, {1, 2})}, pad_attrs({0}, {0}, 9)), {2}, {1, 2});
}

// ---- Index

TEST(RefIndex, GatherTakesRowsWithRepeatsAndClamping) {
  const Array x = F({3, 2}, {1, 2, 3, 4, 5, 6});
  expect_f(run(Op::gather, {x, I({2}, {2, 0})}, {{"axis", int64_t{0}}}), {2, 2}, {5, 6, 1, 2});
  expect_f(run(Op::gather, {x, I({3}, {1, 1, 1}, DType::i32)}, {{"axis", int64_t{0}}}), {3, 2},
           {3, 4, 3, 4, 3, 4});
  expect_f(run(Op::gather, {x, I({2}, {-5, 10})}, {{"axis", int64_t{0}}}), {2, 2}, {1, 2, 5, 6});
}

TEST(RefIndex, GatherAlongAnInnerAxisWithMatrixIndices) {
  // out[i][a][b] = x[i][idx[a][b]]: shape [2] + [2,2].
  const Array x = F({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_f(run(Op::gather, {x, I({2, 2}, {0, 2, 1, 1})}, {{"axis", int64_t{1}}}), {2, 2, 2},
           {1, 3, 2, 2, 4, 6, 5, 5});
  expect_f(run(Op::gather, {x, I({}, {2})}, {{"axis", int64_t{1}}}), {2}, {3, 6});
}

TEST(RefIndex, GatherWithEmptyIndices) {
  expect_f(run(Op::gather, {F({3, 2}, {1, 2, 3, 4, 5, 6}), I({0}, {})}, {{"axis", int64_t{0}}}),
           {0, 2}, {});
  expect_f(run(Op::gather, {F({0, 2}, {}), I({0}, {})}, {{"axis", int64_t{0}}}), {0, 2}, {});
}

TEST(RefIndex, GatherFromAnEmptyAxisFails) {
  try {
    run(Op::gather, {F({0}, {}), I({1}, {0})}, {{"axis", int64_t{0}}});
    FAIL() << "expected keel::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot gather from axis 0 of size 0"));
  }
}

TEST(RefIndex, ScatterAddAccumulatesRepeatedIndices) {
  expect_f(run(Op::scatter_add, {F({3}, {0, 0, 0}), I({4}, {0, 2, 0, 0}), F({4}, {1, 2, 3, 4})},
               {{"axis", int64_t{0}}}),
           {3}, {8, 0, 2});
  expect_i(run(Op::scatter_add,
               {I({2}, {100, 200}, DType::i32), I({3}, {-1, 7, 0}), I({3}, {1, 2, 4}, DType::i32)},
               {{"axis", int64_t{0}}}),
           {2}, {105, 202}, DType::i32);
}

TEST(RefIndex, ScatterAddAlongAnInnerAxis) {
  // operand [2,3]; indices [2] at axis 1; updates [2,2]: out[i][idx[a]] += u[i][a].
  expect_f(run(Op::scatter_add,
               {F({2, 3}, {1, 1, 1, 1, 1, 1}), I({2}, {2, 2}), F({2, 2}, {10, 20, 30, 40})},
               {{"axis", int64_t{1}}}),
           {2, 3}, {1, 1, 31, 1, 1, 71});
  expect_f(run(Op::scatter_add, {F({2}, {1, 2}), I({0}, {}), F({0}, {})}, {{"axis", int64_t{0}}}),
           {2}, {1, 2});
}

TEST(RefIndex, OneHotWithOutOfRangeIndices) {
  expect_f(
      run(Op::one_hot, {I({4}, {0, 2, -1, 3})}, {{"depth", int64_t{3}}, {"dtype", DType::f32}}),
      {4, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0});
  expect_i(run(Op::one_hot, {I({2, 1}, {1, 0}, DType::i32)},
               {{"depth", int64_t{2}}, {"dtype", DType::i32}}),
           {2, 1, 2}, {0, 1, 1, 0}, DType::i32);
  expect_array(run(Op::one_hot, {I({}, {1})}, {{"depth", int64_t{2}}, {"dtype", DType::boolean}}),
               B({2}, {0, 1}));
  expect_f(run(Op::one_hot, {I({2}, {0, 1})}, {{"depth", int64_t{0}}, {"dtype", DType::f32}}),
           {2, 0}, {});
}

// ---- Reduce

TEST(RefReduce, SumOverAxesWithAndWithoutKeepdims) {
  const Array m = F({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_f(run(Op::reduce_sum, {m}, reduce_attrs({1}, 0)), {2}, {6, 15});
  expect_f(run(Op::reduce_sum, {m}, reduce_attrs({0}, 1)), {1, 3}, {5, 7, 9});
  expect_f(run(Op::reduce_sum, {m}, reduce_attrs({0, 1}, 0)), {}, {21});
  expect_f(run(Op::reduce_sum, {m}, reduce_attrs({1, 0}, 1)), {1, 1}, {21});
  expect_f(run(Op::reduce_sum, {m}, reduce_attrs({}, 0)), {2, 3}, {1, 2, 3, 4, 5, 6});
  expect_f(run(Op::reduce_sum, {F({2, 1}, {3, 4})}, reduce_attrs({1}, 0)), {2}, {3, 4});
}

TEST(RefReduce, SumOverThreeDimsMiddleAxis) {
  // x[2,3,2] = 0..11; summing axis 1: out[a][c] = sum_b x[a][b][c].
  Array x =
      run(Op::iota, {}, {{"shape", Ints{2, 3, 2}}, {"dtype", DType::i64}, {"dim", int64_t{0}}});
  Array y = I({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  expect_i(run(Op::reduce_sum, {y}, reduce_attrs({1}, 0)), {2, 2}, {6, 9, 24, 27});
  expect_i(run(Op::reduce_sum, {x}, reduce_attrs({0, 2}, 0)), {3}, {2, 2, 2});
}

TEST(RefReduce, EmptyReductions) {
  const Array e = F({2, 0}, {});
  expect_f(run(Op::reduce_sum, {e}, reduce_attrs({1}, 0)), {2}, {0, 0});
  expect_f(run(Op::reduce_max, {e}, reduce_attrs({1}, 0)), {2}, {-kInf, -kInf});
  expect_f(run(Op::reduce_mean, {e}, reduce_attrs({1}, 1)), {2, 1}, {kNaN, kNaN});
  expect_f(run(Op::reduce_sum, {e}, reduce_attrs({0}, 0)), {0}, {});
  const Array ei = I({0, 2}, {}, DType::i32);
  expect_i(run(Op::reduce_max, {ei}, reduce_attrs({0}, 0)), {2}, {-2147483648, -2147483648},
           DType::i32);
  expect_i(run(Op::reduce_max, {I({0}, {})}, reduce_attrs({0}, 0)), {},
           {std::numeric_limits<int64_t>::min()});
  expect_i(run(Op::reduce_mean, {ei}, reduce_attrs({0}, 0)), {2}, {0, 0}, DType::i32);
  expect_i(run(Op::reduce_sum, {ei}, reduce_attrs({0}, 0)), {2}, {0, 0}, DType::i32);
}

TEST(RefReduce, MaxAndMean) {
  const Array m = F({2, 3}, {1, 7, 3, -4, -5, -6});
  expect_f(run(Op::reduce_max, {m}, reduce_attrs({1}, 0)), {2}, {7, -4});
  expect_f(run(Op::reduce_max, {F({3}, {1, kNaN, 2})}, reduce_attrs({0}, 0)), {}, {kNaN});
  expect_f(run(Op::reduce_mean, {m}, reduce_attrs({0}, 0)), {3}, {-1.5f, 1, -1.5f});
  expect_i(run(Op::reduce_max, {I({3}, {-3, -1, -2})}, reduce_attrs({0}, 0)), {}, {-1});
}

TEST(RefReduce, IntegerMeanTruncatesTowardZero) {
  expect_i(run(Op::reduce_mean, {I({2, 2}, {7, 8, -7, -8})}, reduce_attrs({1}, 0)), {2}, {7, -7});
  expect_i(run(Op::reduce_mean, {I({3}, {1, 1, 2}, DType::i32)}, reduce_attrs({0}, 0)), {}, {1},
           DType::i32);
}

Attrs axis_attrs(int64_t axis, int64_t keepdims) {
  return Attrs{{"axis", axis}, {"keepdims", keepdims}};
}

TEST(RefReduce, ArgmaxTiesTakeTheLowestIndex) {
  expect_i(run(Op::argmax, {F({4}, {1, 3, 3, 2})}, axis_attrs(0, 0)), {}, {1});
  expect_i(run(Op::argmax, {I({3}, {5, 5, 5}, DType::i32)}, axis_attrs(0, 0)), {}, {0});
  expect_i(run(Op::argmax, {F({4}, {-kInf, -kInf, -kInf, -kInf})}, axis_attrs(0, 1)), {1}, {0});
}

TEST(RefReduce, ArgmaxCountsNaNAsLargest) {
  expect_i(run(Op::argmax, {F({4}, {1, kNaN, 5, kNaN})}, axis_attrs(0, 0)), {}, {1});
  expect_i(run(Op::argmax, {F({3}, {kInf, 2, kNaN})}, axis_attrs(0, 0)), {}, {2});
}

TEST(RefReduce, ArgmaxAlongEachAxis) {
  const Array m = F({2, 3}, {1, 9, 3, 4, 0, 6});
  expect_i(run(Op::argmax, {m}, axis_attrs(0, 0)), {3}, {1, 0, 1});
  expect_i(run(Op::argmax, {m}, axis_attrs(0, 1)), {1, 3}, {1, 0, 1});
  expect_i(run(Op::argmax, {m}, axis_attrs(1, 0)), {2}, {1, 2});
  expect_i(run(Op::argmax, {F({0, 2}, {})}, axis_attrs(1, 0)), {0}, {});
}

// ---- Scan

Attrs along_axis_attrs(int64_t axis, int64_t reverse) {
  return Attrs{{"axis", axis}, {"reverse", reverse}};
}

TEST(RefAlongAxis, CumsumForwardAndReverse) {
  const Array x = F({4}, {1, 2, 3, 4});
  expect_f(run(Op::cumsum, {x}, along_axis_attrs(0, 0)), {4}, {1, 3, 6, 10});
  expect_f(run(Op::cumsum, {x}, along_axis_attrs(0, 1)), {4}, {10, 9, 7, 4});
}

TEST(RefAlongAxis, CumsumAlongEachAxisOfAMatrix) {
  const Array m = I({2, 3}, {1, 2, 3, 4, 5, 6}, DType::i32);
  expect_i(run(Op::cumsum, {m}, along_axis_attrs(0, 0)), {2, 3}, {1, 2, 3, 5, 7, 9}, DType::i32);
  expect_i(run(Op::cumsum, {m}, along_axis_attrs(1, 0)), {2, 3}, {1, 3, 6, 4, 9, 15}, DType::i32);
  expect_i(run(Op::cumsum, {m}, along_axis_attrs(1, 1)), {2, 3}, {6, 5, 3, 15, 11, 6}, DType::i32);
  expect_f(run(Op::cumsum, {F({0, 3}, {})}, along_axis_attrs(0, 0)), {0, 3}, {});
  expect_f(run(Op::cumsum, {F({2, 0}, {})}, along_axis_attrs(1, 1)), {2, 0}, {});
}

TEST(RefAlongAxis, TopKTiesPutTheLowerIndexFirst) {
  const Array x = F({5}, {1, 3, 3, 2, 3});
  expect_f(run(Op::top_k_values, {x}, {{"k", int64_t{2}}}), {2}, {3, 3});
  expect_i(run(Op::top_k_indices, {x}, {{"k", int64_t{2}}}), {2}, {1, 2});
  expect_f(run(Op::top_k_values, {x}, {{"k", int64_t{4}}}), {4}, {3, 3, 3, 2});
  expect_i(run(Op::top_k_indices, {x}, {{"k", int64_t{4}}}), {4}, {1, 2, 4, 3});
}

TEST(RefAlongAxis, TopKWorksPerRowOfTheLastAxis) {
  const Array m = I({2, 3}, {5, -1, 7, 0, 0, -2}, DType::i32);
  expect_i(run(Op::top_k_values, {m}, {{"k", int64_t{2}}}), {2, 2}, {7, 5, 0, 0}, DType::i32);
  expect_i(run(Op::top_k_indices, {m}, {{"k", int64_t{2}}}), {2, 2}, {2, 0, 0, 1});
  expect_i(run(Op::top_k_indices, {F({0, 2}, {})}, {{"k", int64_t{1}}}), {0, 1}, {});
}

TEST(RefAlongAxis, TopKRanksNaNAboveNumbers) {
  const Array x = F({4}, {kInf, kNaN, 1, kNaN});
  expect_i(run(Op::top_k_indices, {x}, {{"k", int64_t{3}}}), {3}, {1, 3, 0});
  expect_f(run(Op::top_k_values, {x}, {{"k", int64_t{3}}}), {3}, {kNaN, kNaN, kInf});
}

// ---- dot_general

TEST(RefDot, MatrixProduct) {
  // [[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]] = [[58,64],[139,154]].
  expect_f(run(Op::dot_general, {F({2, 3}, {1, 2, 3, 4, 5, 6}), F({3, 2}, {7, 8, 9, 10, 11, 12})},
               dot_attrs({}, {}, {1}, {0})),
           {2, 2}, {58, 64, 139, 154});
}

TEST(RefDot, TransposedOperands) {
  // Same product with lhs stored transposed ([3,2], contract dim 0) ...
  expect_f(run(Op::dot_general, {F({3, 2}, {1, 4, 2, 5, 3, 6}), F({3, 2}, {7, 8, 9, 10, 11, 12})},
               dot_attrs({}, {}, {0}, {0})),
           {2, 2}, {58, 64, 139, 154});
  // ... and with rhs stored transposed ([2,3], contract dim 1).
  expect_f(run(Op::dot_general, {F({2, 3}, {1, 2, 3, 4, 5, 6}), F({2, 3}, {7, 9, 11, 8, 10, 12})},
               dot_attrs({}, {}, {1}, {1})),
           {2, 2}, {58, 64, 139, 154});
  // rhs first: out dims are lhs free then rhs free, giving the transposed product.
  expect_f(run(Op::dot_general, {F({3, 2}, {7, 8, 9, 10, 11, 12}), F({2, 3}, {1, 2, 3, 4, 5, 6})},
               dot_attrs({}, {}, {0}, {1})),
           {2, 2}, {58, 139, 64, 154});
}

TEST(RefDot, BatchDims) {
  // Batch 0: [1,2]·[3,4] = 11; batch 1: [5,6]·[7,8] = 83.
  expect_f(run(Op::dot_general, {F({2, 1, 2}, {1, 2, 5, 6}), F({2, 2, 1}, {3, 4, 7, 8})},
               dot_attrs({0}, {0}, {2}, {1})),
           {2, 1, 1}, {11, 83});
  // Batch dim last on lhs, first on rhs, no contraction: out[b][i] = lhs[i][b] * rhs[b].
  expect_f(run(Op::dot_general, {F({3, 2}, {1, 2, 3, 4, 5, 6}), F({2}, {10, 100})},
               dot_attrs({1}, {0}, {}, {})),
           {2, 3}, {10, 30, 50, 200, 400, 600});
}

TEST(RefDot, TwoContractingDims) {
  // Full contraction of [[1,2,3],[4,5,6]] with itself: 1+4+9+16+25+36 = 91.
  const Array a = F({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_f(run(Op::dot_general, {a, a}, dot_attrs({}, {}, {0, 1}, {0, 1})), {}, {91});
  // Pairs are positional: lhs dim 1 with rhs dim 0, lhs dim 0 with rhs dim 1 (rhs = a^T).
  expect_f(
      run(Op::dot_general, {a, F({3, 2}, {1, 4, 2, 5, 3, 6})}, dot_attrs({}, {}, {1, 0}, {0, 1})),
      {}, {91});
  // With a free dim left on each side: lhs [2,2,2] (k0,m,k1), rhs [2,2] (k1,k0).
  // out[m] = sum_{k0,k1} lhs[k0][m][k1] * rhs[k1][k0]; lhs = 1..8, rhs = [[1,10],[100,1000]].
  // m=0: 1*1 + 2*100 + 5*10 + 6*1000 = 6251; m=1: 3*1 + 4*100 + 7*10 + 8*1000 = 8473.
  expect_f(
      run(Op::dot_general, {F({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), F({2, 2}, {1, 10, 100, 1000})},
          dot_attrs({}, {}, {0, 2}, {1, 0})),
      {2}, {6251, 8473});
}

TEST(RefDot, OuterProductAndEmptyContraction) {
  expect_f(run(Op::dot_general, {F({2}, {1, 2}), F({3}, {1, 10, 100})}, dot_attrs({}, {}, {}, {})),
           {2, 3}, {1, 10, 100, 2, 20, 200});
  expect_f(run(Op::dot_general, {F({2, 0}, {}), F({0, 3}, {})}, dot_attrs({}, {}, {1}, {0})),
           {2, 3}, {0, 0, 0, 0, 0, 0});
  expect_f(run(Op::dot_general, {F({0, 4}, {}), F({4}, {1, 2, 3, 4})}, dot_attrs({}, {}, {1}, {0})),
           {0}, {});
}

TEST(RefDot, IntegerProducts) {
  expect_i(run(Op::dot_general, {I({2, 2}, {1, -2, 3, 4}, DType::i32), I({2}, {5, 6}, DType::i32)},
               dot_attrs({}, {}, {1}, {0})),
           {2}, {-7, 39}, DType::i32);
}

TEST(RefDot, Bf16AccumulatesBeforeRounding) {
  // 256 + 1 + 1: bf16 cannot hold 257, but the sum is accumulated wide and 258 is exact.
  Array a = run(Op::cast, {F({3}, {256, 1, 1})}, {{"dtype", DType::bf16}});
  Array b = run(Op::cast, {F({3}, {1, 1, 1})}, {{"dtype", DType::bf16}});
  Array r = run(Op::dot_general, {a, b}, dot_attrs({}, {}, {0}, {0}));
  EXPECT_EQ(r.dtype(), DType::bf16);
  EXPECT_EQ(r.get_f64(0), 258.0);
}

}  // namespace
}  // namespace keel
