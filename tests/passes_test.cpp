// Pass tests: each canonicalization rule, cse, dce, the fusion and memory contracts on hand-built
// and random programs, and the pipeline's switches, log and dumps. Semantics are checked against
// the reference interpreter, bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "passes/pipeline.h"
#include "passes/rebuild.h"
#include "tests/passes_checks.h"
#include "tests/passes_graphs.h"
#include "tests/scan_graphs.h"

namespace keel {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;
using passes::GroupKind;

SourceLoc at(uint32_t line) {
  return {"model.cpp", line};
}

// Equal dtype, shape and bits; any NaN equals any NaN (payloads are not part of ops.md).
bool same_values(const Array& a, const Array& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() != DType::f32) return a.same_bytes(b);
  for (int64_t i = 0; i < a.numel(); ++i) {
    float x, y;
    std::memcpy(&x, a.data() + 4 * i, 4);
    std::memcpy(&y, b.data() + 4 * i, 4);
    if (std::memcmp(&x, &y, 4) != 0 && !(x != x && y != y)) return false;
  }
  return true;
}

void expect_same_program(const Graph& before, const Graph& after, std::span<const Array> in) {
  ASSERT_THAT(verify_problems(after), ElementsAre()) << print_graph(after);
  ASSERT_EQ(after.params().size(), before.params().size());
  for (size_t k = 0; k < before.params().size(); ++k) {
    EXPECT_EQ(after.node(after.params()[k]).type, before.node(before.params()[k]).type);
  }
  std::vector<Array> want = ref::interpret(before, in), got = ref::interpret(after, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(same_values(got[k], want[k]))
        << "output " << k << ": " << got[k].str() << " vs " << want[k].str() << "\n"
        << print_graph(before) << print_graph(after);
  }
}

size_t count_op(const Graph& g, Op op) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

Array iota_f32(Shape s) {
  Array a(DType::f32, s);
  for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, 0.25 * static_cast<double>(i) - 1.0);
  return a;
}

// ---- canonicalize

struct OneInput {
  Graph g;
  NodeId x;
  explicit OneInput(Shape s) : x(g.add_param({DType::f32, std::move(s)}, at(1))) {}
  // Canonicalizes, then checks semantics and returns the result with dead nodes dropped.
  Graph canon() {
    Graph c = passes::dce(passes::canonicalize(g));
    Array in = iota_f32(g.node(x).type.shape);
    expect_same_program(g, c, std::span<const Array>(&in, 1));
    return c;
  }
};

TEST(Canonicalize, RemovesCastToSameDtypeOnly) {
  OneInput t({2, 3});
  NodeId same = t.g.emit(Op::cast, {t.x}, {{"dtype", DType::f32}}, at(2));
  t.g.set_outputs({same, t.g.emit(Op::cast, {same}, {{"dtype", DType::bf16}}, at(3))});
  Graph c = t.canon();
  EXPECT_EQ(c.outputs()[0], c.params()[0]);
  EXPECT_EQ(count_op(c, Op::cast), 1u);
  EXPECT_EQ(c.node(c.outputs()[1]).loc, at(3));
}

TEST(Canonicalize, RemovesSameShapeReshapeAndFoldsReshapeChains) {
  OneInput t({2, 3});
  NodeId flat = t.g.emit(Op::reshape, {t.x}, {{"shape", Ints{6}}}, at(2));
  NodeId back = t.g.emit(Op::reshape, {flat}, {{"shape", Ints{2, 3}}}, at(3));
  NodeId col = t.g.emit(Op::reshape, {flat}, {{"shape", Ints{3, 2}}}, at(4));
  NodeId same = t.g.emit(Op::reshape, {col}, {{"shape", Ints{3, 2}}}, at(5));
  t.g.set_outputs({back, same});
  Graph c = t.canon();
  EXPECT_EQ(c.outputs()[0], c.params()[0]);
  ASSERT_EQ(count_op(c, Op::reshape), 1u);
  const Node& r = c.node(c.outputs()[1]);
  EXPECT_EQ(r.inputs, std::vector<NodeId>{c.params()[0]});  // straight from x
  EXPECT_EQ(r.attrs.ints("shape"), (Ints{3, 2}));
  EXPECT_EQ(r.loc, at(4));
}

// The gradient of slices that split a tensor: zero pads of adjacent ranges, added, become one
// concat (with a pad for what they do not cover); pads of ranges with a gap stay added.
TEST(Canonicalize, AddedZeroPadsOfAdjacentRangesBecomeOneConcat) {
  OneInput t({4, 6});
  auto part = [&](int64_t from) {
    const NodeId s = t.g.emit(
        Op::slice, {t.x},
        {{"start", Ints{0, from}}, {"limit", Ints{4, from + 2}}, {"stride", Ints{1, 1}}}, at(2));
    const NodeId y = t.g.emit(Op::tanh, {s}, {}, at(3));
    return t.g.emit(Op::pad, {y},
                    {{"low", Ints{0, from}}, {"high", Ints{0, 4 - from}}, {"value", 0.0}}, at(4));
  };
  const NodeId a = part(0), b = part(2), c = part(4);
  const NodeId all = t.g.emit(Op::add, {t.g.emit(Op::add, {c, b}, {}, at(5)), a}, {}, at(6));
  const NodeId two = t.g.emit(Op::add, {b, a}, {}, at(7));
  const NodeId gap = t.g.emit(Op::add, {a, c}, {}, at(8));
  t.g.set_outputs({all, two, gap});
  Graph g = t.canon();
  const Node& whole = g.node(g.outputs()[0]);
  ASSERT_EQ(whole.op, Op::concat);
  ASSERT_EQ(whole.inputs.size(), 3u);  // a, b, c in order: the nested concat flattened
  EXPECT_EQ(whole.attrs.i("axis"), 1);
  const Node& padded = g.node(g.outputs()[1]);
  ASSERT_EQ(padded.op, Op::pad);
  EXPECT_EQ(padded.attrs.ints("high"), (Ints{0, 2}));
  EXPECT_EQ(g.node(padded.inputs[0]).op, Op::concat);
  EXPECT_EQ(g.node(g.outputs()[2]).op, Op::add);
}

TEST(Canonicalize, RemovesIdentityTransposeAndComposesTransposes) {
  OneInput t({2, 3, 4});
  NodeId ident = t.g.emit(Op::transpose, {t.x}, {{"perm", Ints{0, 1, 2}}}, at(2));
  NodeId t1 = t.g.emit(Op::transpose, {ident}, {{"perm", Ints{1, 2, 0}}}, at(3));  // [3,4,2]
  NodeId undo = t.g.emit(Op::transpose, {t1}, {{"perm", Ints{2, 0, 1}}}, at(4));
  NodeId swap = t.g.emit(Op::transpose, {t1}, {{"perm", Ints{1, 0, 2}}}, at(5));  // [4,3,2]
  t.g.set_outputs({undo, swap});
  Graph c = t.canon();
  EXPECT_EQ(c.outputs()[0], c.params()[0]);
  ASSERT_EQ(count_op(c, Op::transpose), 1u);
  const Node& s = c.node(c.outputs()[1]);
  EXPECT_EQ(s.inputs, std::vector<NodeId>{c.params()[0]});
  EXPECT_EQ(s.attrs.ints("perm"), (Ints{2, 1, 0}));
  EXPECT_EQ(s.loc, at(5));
}

TEST(Canonicalize, RemovesSameShapeBroadcastAndFoldsBroadcastChains) {
  OneInput t({3});
  NodeId same = t.g.emit(Op::broadcast, {t.x}, {{"shape", Ints{3}}}, at(2));
  NodeId b1 = t.g.emit(Op::broadcast, {same}, {{"shape", Ints{2, 3}}}, at(3));
  NodeId b2 = t.g.emit(Op::broadcast, {b1}, {{"shape", Ints{4, 2, 3}}}, at(4));
  t.g.set_outputs({b2});
  Graph c = t.canon();
  ASSERT_EQ(count_op(c, Op::broadcast), 1u);
  EXPECT_EQ(c.node(c.outputs()[0]).inputs, std::vector<NodeId>{c.params()[0]});
}

TEST(Canonicalize, RemovesWholeSlicesOnly) {
  OneInput t({1, 3});
  auto slice = [&](Ints start, Ints limit, Ints stride) {
    return t.g.emit(Op::slice, {t.x}, {{"start", start}, {"limit", limit}, {"stride", stride}},
                    at(2));
  };
  // Stride 2 over a size-1 dimension still takes the whole tensor.
  t.g.set_outputs({slice({0, 0}, {1, 3}, {1, 1}), slice({0, 0}, {1, 3}, {2, 1}),
                   slice({0, 1}, {1, 3}, {1, 1}), slice({0, 0}, {1, 3}, {1, 2})});
  Graph c = t.canon();
  EXPECT_EQ(c.outputs()[0], c.params()[0]);
  EXPECT_EQ(c.outputs()[1], c.params()[0]);
  EXPECT_EQ(count_op(c, Op::slice), 2u);
}

TEST(Canonicalize, RemovesConcatOfOneAndZeroPadding) {
  OneInput t({2, 2});
  NodeId one = t.g.emit(Op::concat, {t.x}, {{"axis", int64_t{1}}}, at(2));
  NodeId two = t.g.emit(Op::concat, {t.x, one}, {{"axis", int64_t{1}}}, at(3));
  auto pad = [&](Ints lo, Ints hi, double v) {
    return t.g.emit(Op::pad, {t.x}, {{"low", lo}, {"high", hi}, {"value", v}}, at(4));
  };
  t.g.set_outputs({one, two, pad({0, 0}, {0, 0}, 5.0), pad({0, 1}, {0, 0}, 0.0)});
  Graph c = t.canon();
  EXPECT_EQ(c.outputs()[0], c.params()[0]);
  EXPECT_EQ(c.outputs()[2], c.params()[0]);
  EXPECT_EQ(count_op(c, Op::concat), 1u);
  EXPECT_EQ(count_op(c, Op::pad), 1u);
}

TEST(Canonicalize, KeepsFloatIdentitiesThatAreNotExact) {
  OneInput t({2});
  NodeId zero = t.g.add_constant(Array::scalar(0.0), at(2));
  NodeId one = t.g.add_constant(Array::scalar(1.0), at(3));
  t.g.set_outputs(
      {t.g.emit(Op::add, {t.x, zero}, {}, at(4)), t.g.emit(Op::mul, {t.x, one}, {}, at(5))});
  Graph c = passes::canonicalize(t.g);
  EXPECT_EQ(print_graph(c), print_graph(t.g));
  // Why: -0.0 + 0.0 is +0.0, so x+0 is not x.
  Array in = Array::from_f32({2}, std::vector<float>{-0.0f, 1.0f});
  EXPECT_FALSE(same_values(ref::interpret(t.g, std::span<const Array>(&in, 1))[0], in));
}

TEST(GraphPasses, KeepParamOrderLocationsAndOutputs) {
  // Parameter nodes appear in the order index 1, index 0: params() order must survive.
  Graph g("order");
  Node p;
  p.op = Op::parameter;
  p.type = {DType::f32, {2}};
  p.attrs.set("index", int64_t{1});
  p.loc = at(1);
  NodeId b = g.append_unchecked(p);
  p.type = {DType::i32, {3}};
  p.attrs.set("index", int64_t{0});
  p.loc = at(2);
  NodeId a = g.append_unchecked(p);
  g.set_params({a, b});
  NodeId e = g.emit(Op::exp, {b}, {}, at(7));
  g.set_outputs({e, a, e});
  ASSERT_THAT(verify_problems(g), ElementsAre());
  for (Graph (*pass)(const Graph&) : {passes::canonicalize, passes::cse, passes::dce}) {
    Graph r = pass(g);
    EXPECT_EQ(print_graph(r), print_graph(g));
    EXPECT_EQ(r.params(), g.params());
    EXPECT_EQ(r.name(), "order");
  }
}

// ---- cse and dce

// ---- recompute_elementwise

// x² computed early and read again 70 nodes later by a loop is recomputed there from x, which
// that loop reads anyway; a value whose input would have to be kept for it (exp(x) · 2) and a
// value a far kernel reads stay stored.
TEST(Remat, RecomputesCheapValuesFarReadersNeed) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {4, 4}}), other = g.add_param({DType::f32, {4, 4}});
  NodeId sq = g.emit(Op::mul, {x, x}, {}, at(1));
  NodeId e2 = g.emit(Op::mul, {g.emit(Op::exp, {x}, {}, at(2)), x}, {}, at(3));
  NodeId kept = g.emit(Op::add, {x, other}, {}, at(4));
  NodeId near = g.emit(Op::tanh, {g.emit(Op::add, {sq, e2}, {}, at(5))}, {}, at(6));
  NodeId filler = other;
  for (int i = 0; i < 70; ++i) filler = g.emit(Op::sin, {filler}, {}, at(7));
  NodeId far = g.emit(Op::mul, {g.emit(Op::add, {sq, x}, {}, at(8)), e2}, {}, at(9));
  const Attrs dot{{"lhs_batch", Ints{}},
                  {"rhs_batch", Ints{}},
                  {"lhs_contract", Ints{1}},
                  {"rhs_contract", Ints{0}}};
  NodeId mm = g.emit(Op::dot_general, {kept, filler}, dot, at(10));
  g.set_outputs({near, far, mm});
  Graph r = passes::recompute_elementwise(g);
  std::vector<Array> in{iota_f32({4, 4}), iota_f32({4, 4})};
  expect_same_program(g, r, in);
  EXPECT_EQ(r.size(), g.size() + 1);  // one clone: x² again
  const Node& far_add = r.node(r.node(r.outputs()[1]).inputs[0]);
  const Node& clone = r.node(far_add.inputs[0]);
  EXPECT_EQ(clone.op, Op::mul);
  EXPECT_EQ(clone.inputs, (std::vector<NodeId>{0, 0}));              // x · x, read from x
  EXPECT_GT(far_add.inputs[0], static_cast<NodeId>(g.size() - 10));  // placed by its reader
  EXPECT_LT(r.node(r.outputs()[1]).inputs[1], 10);  // exp(x) · x is read where it was stored
}

// ---- place_collectives

// A parameter's gather read near it keeps that gather; a reader 70 nodes later gets its own,
// shared with the reader next to it, and the original is not repeated for them. A
// reduce_scatter traced at the end runs right after its operand, with the add and reshape that
// feed only it, before the 140 nodes between.
TEST(PlaceCollectives, RegathersForFarReadersAndScattersEarly) {
  Graph g;
  NodeId slice = g.add_param({DType::f32, {16}}), x = g.add_param({DType::f32, {4, 4}});
  const Attrs one_process{{"axis", std::string("data")}, {"axis_size", int64_t{1}}};
  Attrs gather = one_process;
  gather.set("dim", int64_t{0});
  gather.set("invariant", int64_t{1});
  const Attrs dot{{"lhs_batch", Ints{}},
                  {"rhs_batch", Ints{}},
                  {"lhs_contract", Ints{1}},
                  {"rhs_contract", Ints{0}}};
  NodeId w = g.emit(Op::reshape, {g.emit(Op::all_gather, {slice}, gather, at(1))},
                    {{"shape", Ints{4, 4}}}, at(2));
  NodeId near = g.emit(Op::dot_general, {x, w}, dot, at(3));
  NodeId grad = g.emit(Op::exp, {near}, {}, at(4));
  NodeId filler = near;
  for (int i = 0; i < 70; ++i) filler = g.emit(Op::sin, {filler}, {}, at(5));
  NodeId far = g.emit(Op::dot_general, {filler, w}, dot, at(6));
  NodeId next = g.emit(Op::dot_general, {far, w}, dot, at(7));
  for (int i = 0; i < 70; ++i) filler = g.emit(Op::cos, {filler}, {}, at(8));
  Attrs scatter = one_process;
  scatter.set("dim", int64_t{0});
  NodeId flat = g.emit(Op::reshape, {g.emit(Op::add, {grad, grad}, {}, at(9))},
                       {{"shape", Ints{16}}}, at(10));
  NodeId scattered = g.emit(Op::reduce_scatter, {flat}, scatter, at(11));
  g.set_outputs({next, filler, scattered});
  Graph r = passes::place_collectives(g);
  std::vector<Array> in{iota_f32({16}), iota_f32({4, 4})};
  expect_same_program(g, r, in);
  std::vector<NodeId> gathers, scatters;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r.nodes()[i].op == Op::all_gather) gathers.push_back(static_cast<NodeId>(i));
    if (r.nodes()[i].op == Op::reduce_scatter) scatters.push_back(static_cast<NodeId>(i));
  }
  ASSERT_EQ(gathers.size(), 2u);
  EXPECT_LT(gathers[0], 5);   // the original, read near
  EXPECT_GT(gathers[1], 70);  // again, by the far reader
  EXPECT_EQ(r.node(r.node(r.outputs()[0]).inputs[1]).inputs[0], gathers[1]);  // shared
  ASSERT_EQ(scatters.size(), 1u);
  EXPECT_LT(scatters[0], 12);         // beside its operand, not after the 140 nodes between
  EXPECT_EQ(r.size(), g.size() + 2);  // the second gather and its reshape
}

// With bf16 products the far reader reads a cast of the gathered weight (bf16_operands puts
// it next to the gather): the cast is repeated with the gather. A broadcast is never pulled
// ahead of its place for a reduce_scatter (it would grow what is held).
TEST(PlaceCollectives, RegathersThroughCastsAndLeavesBroadcastsInPlace) {
  Graph g;
  NodeId slice = g.add_param({DType::f32, {16}}), x = g.add_param({DType::f32, {16}});
  Attrs gather{{"axis", std::string("data")}, {"axis_size", int64_t{1}}};
  gather.set("dim", int64_t{0});
  gather.set("invariant", int64_t{1});
  NodeId w16 = g.emit(Op::cast, {g.emit(Op::all_gather, {slice}, gather, at(1))},
                      {{"dtype", DType::bf16}}, at(2));
  NodeId small =
      g.emit(Op::exp, {g.emit(Op::reshape, {x}, {{"shape", Ints{1, 16}}}, at(3))}, {}, at(4));
  NodeId filler = x;
  for (int i = 0; i < 70; ++i) filler = g.emit(Op::sin, {filler}, {}, at(5));
  NodeId far =
      g.emit(Op::add, {g.emit(Op::cast, {w16}, {{"dtype", DType::f32}}, at(6)), filler}, {}, at(7));
  Attrs scatter{{"axis", std::string("data")}, {"axis_size", int64_t{1}}};
  scatter.set("dim", int64_t{0});
  NodeId wide = g.emit(Op::broadcast, {small}, {{"shape", Ints{4, 16}}}, at(8));
  NodeId scattered = g.emit(Op::reduce_scatter, {wide}, scatter, at(9));
  g.set_outputs({far, scattered});
  Graph r = passes::place_collectives(g);
  std::vector<Array> in{iota_f32({16}), iota_f32({16})};
  expect_same_program(g, r, in);
  std::vector<NodeId> gathers;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r.nodes()[i].op == Op::all_gather) gathers.push_back(static_cast<NodeId>(i));
  }
  ASSERT_EQ(gathers.size(), 1u);  // the original read by nothing near: only the repeat is left
  EXPECT_GT(gathers[0], 70);
  const Node& back = r.node(r.node(r.outputs()[0]).inputs[0]);  // cast to f32 of the repeat
  EXPECT_EQ(r.node(back.inputs[0]).op, Op::cast);
  EXPECT_EQ(r.node(back.inputs[0]).inputs[0], gathers[0]);
  EXPECT_GT(r.outputs()[1], 70);  // the broadcast and its scatter stay after the 70 sins
}

TEST(Cse, MergesEqualNodesTransitively) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {3}}), y = g.add_param({DType::f32, {3}});
  NodeId a1 = g.emit(Op::add, {x, y}, {}, at(1)), a2 = g.emit(Op::add, {x, y}, {}, at(2));
  NodeId e1 = g.emit(Op::exp, {a1}, {}, at(3)), e2 = g.emit(Op::exp, {a2}, {}, at(4));
  NodeId c1 = g.add_constant(Array::scalar(2.0), at(5));
  NodeId c2 = g.add_constant(Array::scalar(2.0), at(6));
  g.set_outputs({g.emit(Op::mul, {e1, c1}, {}, at(7)), g.emit(Op::mul, {e2, c2}, {}, at(8))});
  Graph c = passes::cse(g);
  std::vector<Array> in{iota_f32({3}), iota_f32({3})};
  expect_same_program(g, c, in);
  EXPECT_EQ(c.size(), 6u);  // x, y, add, exp, constant, mul
  EXPECT_EQ(c.outputs()[0], c.outputs()[1]);
  EXPECT_EQ(c.node(c.outputs()[0]).loc, at(7));
}

// The backward's attention_lse moves next to the forward attention over the same q, k, doc
// ids and scale, so the code generator computes both in one pass; another scale stays put.
TEST(Cse, MovesAnAttentionLseToJustBeforeItsAttention) {
  Graph g;
  NodeId q = g.add_param({DType::f32, {1, 2, 8, 4}}), k = g.add_param({DType::f32, {1, 2, 8, 4}});
  NodeId v = g.add_param({DType::f32, {1, 2, 8, 4}});
  const Attrs scale{{"scale", 0.5}}, other{{"scale", 0.25}};
  NodeId out = g.emit(Op::attention, {q, k, v}, scale, at(1));
  NodeId e = g.emit(Op::exp, {out}, {}, at(2));
  NodeId lse = g.emit(Op::attention_lse, {q, k}, scale, at(3));
  NodeId lse2 = g.emit(Op::attention_lse, {q, k}, other, at(4));
  g.set_outputs({e, lse, lse2});
  Graph c = passes::cse(g);
  std::vector<Array> in{iota_f32({1, 2, 8, 4}), iota_f32({1, 2, 8, 4}), iota_f32({1, 2, 8, 4})};
  expect_same_program(g, c, in);
  ASSERT_EQ(c.size(), g.size());
  EXPECT_EQ(c.node(3).op, Op::attention_lse);
  EXPECT_EQ(c.node(3).attrs.f("scale"), 0.5);
  EXPECT_EQ(c.node(4).op, Op::attention);
  EXPECT_EQ(c.node(6).op, Op::attention_lse);  // the other scale: where it was
  EXPECT_EQ(c.outputs()[1], 3);
}

TEST(Cse, KeepsNodesThatDifferInAttrsConstantsOrParams) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {2, 3}}), y = g.add_param({DType::f32, {2, 3}});
  auto cmp = [&](const char* d) {
    return g.emit(Op::compare, {x, y}, {{"direction", std::string(d)}}, at(1));
  };
  auto sum = [&](Ints axes) {
    return g.emit(Op::reduce_sum, {x}, {{"axes", axes}, {"keepdims", int64_t{0}}}, at(2));
  };
  NodeId pz = g.add_constant(Array::scalar(0.0), at(3));
  NodeId nz = g.add_constant(Array::scalar(-0.0), at(4));  // equal as numbers, not as bits
  NodeId bz = g.add_constant(Array::scalar(0.0, DType::bf16), at(5));
  g.set_outputs({cmp("lt"), cmp("gt"), sum({0}), sum({1}), pz, nz, bz, x, y});
  Graph c = passes::cse(g);
  EXPECT_EQ(c.size(), g.size());
  std::vector<Array> in{iota_f32({2, 3}), iota_f32({2, 3})};
  expect_same_program(g, c, in);
}

TEST(Dce, DropsDeadNodesAndKeepsEveryParameter) {
  Graph g;
  NodeId x = g.add_param({DType::f32, {4}});
  NodeId unused = g.add_param({DType::f32, {2}});
  g.emit(Op::exp, {g.emit(Op::neg, {x}, {}, at(1))}, {}, at(2));
  g.add_constant(Array::scalar(3.0), at(3));
  NodeId live = g.emit(Op::tanh, {x}, {}, at(4));
  g.set_outputs({live, x, live});
  Graph d = passes::dce(g);
  std::vector<Array> in{iota_f32({4}), iota_f32({2})};
  expect_same_program(g, d, in);
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.params().size(), 2u);
  EXPECT_EQ(d.node(d.params()[1]).type, g.node(unused).type);
  EXPECT_EQ(count_op(d, Op::exp) + count_op(d, Op::neg) + count_op(d, Op::constant), 0u);
  EXPECT_EQ(d.outputs()[0], d.outputs()[2]);
}

// ---- bf16_operands

Graph small_program();  // the pipeline's, below

Attrs matmul_attrs(Ints lc, Ints rc) {
  return {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}}, {"lhs_contract", lc}, {"rhs_contract", rc}};
}

// A dense layer's forward and both gradient products as autodiff writes them (h = tanh(x) made
// by a loop, w a parameter read transposed by dh, the cotangent gy read by both gradients), and
// an integer product, with or without each product's operands rounded through bf16 and back.
Graph dense_layer(bool round_by_hand) {
  Graph g;
  const NodeId x = g.add_param({DType::f32, {6, 8}}, at(1));
  const NodeId w = g.add_param({DType::f32, {8, 5}}, at(2));
  const NodeId gy = g.add_param({DType::f32, {6, 5}}, at(3));
  const NodeId ix = g.add_param({DType::i32, {2, 3}}, at(4));
  const NodeId h = g.emit(Op::tanh, {x}, {}, at(5));
  auto r = [&](NodeId v) {
    if (!round_by_hand) return v;
    const NodeId c = g.emit(Op::cast, {v}, {{"dtype", DType::bf16}}, at(6));
    return g.emit(Op::cast, {c}, {{"dtype", DType::f32}}, at(6));
  };
  const NodeId wt = g.emit(Op::transpose, {w}, {{"perm", Ints{1, 0}}}, at(7));
  const NodeId y = g.emit(Op::dot_general, {r(h), r(w)}, matmul_attrs({1}, {0}), at(8));
  const NodeId dh = g.emit(Op::dot_general, {r(gy), r(wt)}, matmul_attrs({1}, {0}), at(9));
  const NodeId dw = g.emit(Op::dot_general, {r(h), r(gy)}, matmul_attrs({0}, {0}), at(10));
  const NodeId ii = g.emit(Op::dot_general, {ix, ix}, matmul_attrs({1}, {1}), at(11));
  g.set_outputs({y, dh, dw, ii, h});
  return g;
}

// Each value a product reads is cast to bf16 once (h right after its loop, w before its first
// product, transposed on the copy for dh); every f32 product reads bf16 operands with an f32
// result; the integer product is left alone; the program computes exactly what rounding each
// operand by hand does (products of bf16 values are exact, the sums the reference's).
TEST(Bf16Operands, EachValueIsRoundedOnceAndLayoutOpsMoveToTheCopy) {
  const Graph g = dense_layer(false);
  const Graph r = passes::cse(passes::bf16_operands(g));
  ASSERT_THAT(verify_problems(r), ElementsAre()) << print_graph(r);
  std::vector<NodeId> cast_inputs;
  for (const Node& n : r.nodes()) {
    if (n.op == Op::cast) cast_inputs.push_back(n.inputs[0]);
  }
  std::sort(cast_inputs.begin(), cast_inputs.end());
  EXPECT_EQ(cast_inputs.size(), 3u) << print_graph(r);  // h, w, gy
  EXPECT_EQ(std::adjacent_find(cast_inputs.begin(), cast_inputs.end()), cast_inputs.end());
  int products = 0;
  for (const Node& n : r.nodes()) {
    if (n.op != Op::dot_general) continue;
    if (r.node(n.inputs[0]).type.dtype == DType::i32) {
      EXPECT_FALSE(n.attrs.has("preferred_element_type"));
      continue;
    }
    ++products;
    EXPECT_EQ(n.attrs.dtype("preferred_element_type"), DType::f32);
    EXPECT_EQ(n.type.dtype, DType::f32);
    for (NodeId in : n.inputs) EXPECT_EQ(r.node(in).type.dtype, DType::bf16);
  }
  EXPECT_EQ(products, 3);
  // tanh's copy follows it; dh reads the transpose of w's copy.
  const NodeId h = r.outputs()[4];
  EXPECT_EQ(r.node(h + 1).op, Op::cast);
  EXPECT_EQ(r.node(h + 1).inputs[0], h);
  const Node& wt = r.node(r.node(r.outputs()[1]).inputs[1]);
  EXPECT_EQ(wt.op, Op::transpose);
  EXPECT_EQ(r.node(wt.inputs[0]).op, Op::cast);
  EXPECT_EQ(r.node(r.node(wt.inputs[0]).inputs[0]).op, Op::parameter);
  Array ints(DType::i32, {2, 3});
  for (int64_t i = 0; i < 6; ++i) ints.set_i64(i, i - 2);
  std::vector<Array> in{iota_f32({6, 8}), iota_f32({8, 5}), iota_f32({6, 5}), ints};
  // Values with more bits than bf16 keeps, so the rounding shows.
  for (int64_t i = 0; i < in[1].numel(); ++i) in[1].set_f64(i, 0.013 * double(i) - 0.21);
  expect_same_program(dense_layer(true), r, in);
  // Without f32 products there is nothing to do.
  EXPECT_EQ(print_graph(passes::bf16_operands(small_program())), print_graph(small_program()));
}

// Two scans as a scanned stack and its backward read each other: A (carry h, xs w, const b)
// makes h' = tanh(h.w + b) and saves y1 = h' (which only B's product reads) and y2 = h.w (which
// the program returns); B accumulates acc + y1.v over A's y1, in reverse. `round_by_hand`: each
// product operand is rounded through bf16 and back in the bodies, as bf16_operands means.
Graph scans_reading_each_other(bool round_by_hand) {
  const SourceLoc loc = at(1);
  auto r = [&](Graph& g, NodeId v) {
    if (!round_by_hand) return v;
    return g.emit(Op::cast, {g.emit(Op::cast, {v}, {{"dtype", DType::bf16}}, loc)},
                  {{"dtype", DType::f32}}, loc);
  };
  auto a = std::make_shared<Graph>("body");
  {
    const NodeId h = a->add_param({DType::f32, {2, 4}}, loc);
    const NodeId w = a->add_param({DType::f32, {4, 4}}, loc);
    const NodeId b = a->add_param({DType::f32, {4}}, loc);
    const NodeId d = a->emit(Op::dot_general, {r(*a, h), r(*a, w)}, matmul_attrs({1}, {0}), loc);
    const NodeId bb = a->emit(Op::broadcast, {b}, {{"shape", Ints{2, 4}}}, loc);
    const NodeId h2 = a->emit(Op::tanh, {a->emit(Op::add, {d, bb}, {}, loc)}, {}, loc);
    a->set_outputs({h2, h2, d});
  }
  auto bwd = std::make_shared<Graph>("body");
  {
    const NodeId acc = bwd->add_param({DType::f32, {2, 3}}, loc);
    const NodeId y = bwd->add_param({DType::f32, {2, 4}}, loc);
    const NodeId v = bwd->add_param({DType::f32, {4, 3}}, loc);
    const NodeId p =
        bwd->emit(Op::dot_general, {r(*bwd, y), r(*bwd, v)}, matmul_attrs({1}, {0}), loc);
    bwd->set_outputs({bwd->emit(Op::add, {acc, p}, {}, loc)});
  }
  Graph g;
  const NodeId h0 = g.add_param({DType::f32, {2, 4}}, loc);
  const NodeId ws = g.add_param({DType::f32, {3, 4, 4}}, loc);
  const NodeId b = g.add_param({DType::f32, {4}}, loc);
  const NodeId v = g.add_param({DType::f32, {4, 3}}, loc);
  const NodeId acc0 = g.add_param({DType::f32, {2, 3}}, loc);
  const std::vector<NodeId> fa = emit_scan(g, {h0, ws, b}, scan_attrs(a, 1, 1, 3, false), loc, "t");
  const std::vector<NodeId> fb =
      emit_scan(g, {acc0, fa[1], v}, scan_attrs(bwd, 1, 1, 3, true), loc, "t");
  g.set_outputs({fa[0], fa[2], fb[0]});
  return g;
}

// `g` with bf16_operands run on each scan body too, as lowering the body does.
Graph with_bodies_rounded(const Graph& g) {
  passes::Rebuilder rb(g);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op != Op::scan) {
      rb.copy(static_cast<NodeId>(i));
      continue;
    }
    Attrs a = n.attrs;
    a.set("body", std::make_shared<const Graph>(passes::bf16_operands(a.graph("body"))));
    const std::vector<NodeId> results =
        emit_scan(rb.dst_mut(), rb.mapped_inputs(static_cast<NodeId>(i)), a, n.loc, "test");
    for (size_t k = 0; k < results.size(); ++k) rb.map_to(NodeId(i + 1 + k), results[k]);
    i += results.size();
  }
  return rb.finish();
}

// Across scans (bf16_scan_operands): the stacked weights enter A as one bf16 copy, A stores y1 as
// bf16 (B's product reads it as it comes), y2, which the program returns, stays f32, and the
// program computes what rounding each product operand by hand in the bodies does.
TEST(Bf16Operands, ScansTakeAndSaveTheCopiesTheirProductsRead) {
  const Graph g = scans_reading_each_other(false);
  const Graph r = passes::cse(passes::bf16_operands(g));
  ASSERT_THAT(verify_problems(r), ElementsAre()) << print_graph(r);
  std::vector<const Node*> scans;
  for (const Node& n : r.nodes()) {
    if (n.op == Op::scan) scans.push_back(&n);
  }
  ASSERT_EQ(scans.size(), 2u);
  const Node& a = *scans[0];
  const Node& w = r.node(a.inputs[1]);
  EXPECT_EQ(w.op, Op::cast) << print_graph(r);
  EXPECT_EQ(w.type.dtype, DType::bf16);
  EXPECT_EQ(r.node(a.inputs[2]).type.dtype, DType::f32);  // b: an add reads it
  const NodeId a_id = static_cast<NodeId>(&a - r.nodes().data());
  EXPECT_EQ(r.node(a_id + 2).type.dtype, DType::bf16) << print_graph(r);  // y1
  EXPECT_EQ(r.node(a_id + 3).type.dtype, DType::f32);                     // y2
  EXPECT_EQ(scans[1]->inputs[1], a_id + 2);  // B reads A's bf16 y1 itself
  EXPECT_EQ(r.node(r.outputs()[1]).type.dtype, DType::f32);
  std::vector<Array> in{iota_f32({2, 4}), iota_f32({3, 4, 4}), iota_f32({4}), iota_f32({4, 3}),
                        iota_f32({2, 3})};
  for (Array& x : in) {
    for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, 0.013 * double(i % 37) - 0.21);
  }
  expect_same_program(scans_reading_each_other(true), with_bodies_rounded(r), in);
}

// A scan whose body holds a scan of its own: A's weights still enter as one bf16 copy, the inner
// loop (tanh three times over the product) is carried over with its results, and the values are
// those of rounding A's product operands by hand.
Graph scan_holding_a_scan(bool round_by_hand) {
  const SourceLoc loc = at(1);
  auto inner = std::make_shared<Graph>("body");
  inner->set_outputs(
      {inner->emit(Op::tanh, {inner->add_param({DType::f32, {2, 4}}, loc)}, {}, loc)});
  auto outer = std::make_shared<Graph>("body");
  const NodeId h = outer->add_param({DType::f32, {2, 4}}, loc);
  const NodeId w = outer->add_param({DType::f32, {4, 4}}, loc);
  auto r = [&](NodeId v) {
    if (!round_by_hand) return v;
    return outer->emit(Op::cast, {outer->emit(Op::cast, {v}, {{"dtype", DType::bf16}}, loc)},
                       {{"dtype", DType::f32}}, loc);
  };
  const NodeId d = outer->emit(Op::dot_general, {r(h), r(w)}, matmul_attrs({1}, {0}), loc);
  const std::vector<NodeId> looped =
      emit_scan(*outer, {d}, scan_attrs(inner, 1, 0, 3, false), loc, "t");
  outer->set_outputs({looped[0], d});
  Graph g;
  const NodeId h0 = g.add_param({DType::f32, {2, 4}}, loc);
  const NodeId ws = g.add_param({DType::f32, {2, 4, 4}}, loc);
  const std::vector<NodeId> fa =
      emit_scan(g, {h0, ws}, scan_attrs(outer, 1, 1, 2, false), loc, "t");
  g.set_outputs({fa[0], fa[1]});
  return g;
}

TEST(Bf16Operands, AScanHoldingAScanTakesItsWeightsRounded) {
  const Graph r = passes::cse(passes::bf16_operands(scan_holding_a_scan(false)));
  ASSERT_THAT(verify_problems(r), ElementsAre()) << print_graph(r);
  const Node* outer = nullptr;
  for (const Node& n : r.nodes()) {
    if (n.op == Op::scan) outer = &n;
  }
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(r.node(outer->inputs[1]).op, Op::cast) << print_graph(r);
  EXPECT_EQ(r.node(outer->inputs[1]).type.dtype, DType::bf16);
  const Graph& body = outer->attrs.graph("body");
  EXPECT_EQ(count_op(body, Op::scan), 1u) << print_graph(body);
  EXPECT_EQ(count_op(body, Op::scan_result), 1u) << print_graph(body);
  std::vector<Array> in{iota_f32({2, 4}), iota_f32({2, 4, 4})};
  for (Array& x : in) {
    for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, 0.017 * double(i % 29) - 0.23);
  }
  expect_same_program(scan_holding_a_scan(true), with_bodies_rounded(r), in);
}

// A scan's xs that is a broadcast of a scalar (a stack of -0.0, as the handle a scanned stack's
// gradient is taken against) moves into the body, in a nested scan too: no stack is stored, and
// the program computes the same values.
TEST(Canonicalize, AScansBroadcastXsMovesIntoItsBody) {
  const SourceLoc loc = at(1);
  auto inner = std::make_shared<Graph>("body");
  {
    const NodeId c = inner->add_param({DType::f32, {4}}, loc);
    const NodeId x = inner->add_param({DType::f32, {4}}, loc);
    inner->set_outputs({inner->emit(Op::add, {inner->emit(Op::tanh, {c}, {}, loc), x}, {}, loc)});
  }
  auto outer = std::make_shared<Graph>("body");
  {
    const NodeId h = outer->add_param({DType::f32, {4}}, loc);
    const NodeId w = outer->add_param({DType::f32, {4}}, loc);
    const NodeId z = outer->add_param({DType::f32, {4}}, loc);  // from the stack of -0.0
    const NodeId zeros =
        outer->emit(Op::broadcast, {outer->add_constant(Array::scalar(-0.0, DType::f32), loc)},
                    {{"shape", Shape{3, 4}}}, loc);
    const std::vector<NodeId> looped =
        emit_scan(*outer, {h, zeros}, scan_attrs(inner, 1, 1, 3, false), loc, "t");
    outer->set_outputs(
        {outer->emit(Op::add, {outer->emit(Op::mul, {looped[0], w}, {}, loc), z}, {}, loc), z});
  }
  Graph g;
  const NodeId h0 = g.add_param({DType::f32, {4}}, loc);
  const NodeId ws = g.add_param({DType::f32, {2, 4}}, loc);
  const NodeId stack = g.emit(Op::broadcast, {g.add_constant(Array::scalar(-0.0, DType::f32), loc)},
                              {{"shape", Shape{2, 4}}}, loc);
  const std::vector<NodeId> fa =
      emit_scan(g, {h0, ws, stack}, scan_attrs(outer, 1, 2, 2, false), loc, "t");
  g.set_outputs({fa[0], fa[1]});

  const Graph c = passes::dce(passes::canonicalize(g));
  const Node* scan = nullptr;
  for (const Node& n : c.nodes()) {
    EXPECT_FALSE(n.op == Op::broadcast && n.type.shape == (Shape{2, 4})) << print_graph(c);
    if (n.op == Op::scan) scan = &n;
  }
  ASSERT_NE(scan, nullptr);
  EXPECT_EQ(scan->attrs.i("xs"), 1) << print_graph(c);  // the weights alone
  const Graph& body = scan->attrs.graph("body");
  for (const Node& n : body.nodes()) {
    if (n.op == Op::scan) {
      EXPECT_EQ(n.attrs.i("xs"), 0) << print_graph(body);
    }
  }
  std::vector<Array> in{iota_f32({4}), iota_f32({2, 4})};
  for (Array& x : in) {
    for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, 0.019 * double(i % 31) - 0.2);
  }
  expect_same_program(g, c, in);
}

// lower() runs it only for bf16 matmuls, and it can be switched off like any other pass.
TEST(Bf16Operands, RunsOnlyForBf16MatmulsAndCanBeDisabled) {
  const Graph g = dense_layer(false);
  passes::PassOptions o;
  o.bf16_matmul = true;
  passes::Lowered on = passes::lower(g, o);
  EXPECT_EQ(on.log[1], "bf16_operands: 10 -> 14 nodes");  // 3 casts, w^T on its copy
  EXPECT_EQ(count_op(on.graph, Op::cast), 3u);
  o.disabled = {"bf16_operands"};
  passes::Lowered off = passes::lower(g, o);
  EXPECT_EQ(off.log[1], "bf16_operands: skipped");
  EXPECT_EQ(count_op(off.graph, Op::cast), 0u);
  EXPECT_EQ(passes::lower(g).log[1], "bf16_operands: not run (f32 matmuls)");
}

// ---- fusion on known shapes of program

struct Builder {
  Graph g;
  NodeId param(Shape s) { return g.add_param({DType::f32, std::move(s)}); }
  NodeId op(Op o, std::vector<NodeId> in, Attrs a = {}) { return g.emit(o, in, a, at(9)); }
  NodeId reduce(Op o, NodeId x, Ints axes) {
    return op(o, {x}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  }
  NodeId scalar(double v) { return g.add_constant(Array::scalar(v)); }
  passes::FusionPlan fuse() {
    passes::FusionPlan f = passes::fuse(g);
    EXPECT_THAT(testing::fusion_problems(g, f), ElementsAre()) << passes::print_fusion(f);
    return f;
  }
};

std::vector<GroupKind> kinds(const passes::FusionPlan& f) {
  std::vector<GroupKind> k;
  for (const auto& grp : f.groups) k.push_back(grp.kind);
  return k;
}

TEST(Fuse, ChainOfTenElementwiseOpsIsOneLoop) {
  Builder b;
  NodeId v = b.param({16, 8});
  NodeId half = b.scalar(0.5);
  for (int i = 0; i < 10; ++i) v = i % 2 ? b.op(Op::tanh, {v}) : b.op(Op::mul, {v, half});
  b.g.add_output(v);
  passes::FusionPlan f = b.fuse();
  ASSERT_EQ(f.groups.size(), 1u);
  EXPECT_EQ(f.groups[0].kind, GroupKind::Elementwise);
  EXPECT_EQ(f.groups[0].nodes.size(), 10u);
  EXPECT_EQ(f.groups[0].outputs, std::vector<NodeId>{v});
}

TEST(Fuse, SoftmaxIsFourLoops) {
  Builder b;
  NodeId x = b.param({4, 10});
  NodeId m = b.reduce(Op::reduce_max, x, {1});
  NodeId s = b.op(Op::sub, {x, m});
  NodeId e = b.op(Op::exp, {s});
  NodeId z = b.reduce(Op::reduce_sum, e, {1});
  NodeId y = b.op(Op::div, {e, z});
  b.g.add_output(y);
  passes::FusionPlan f = b.fuse();
  EXPECT_THAT(kinds(f), ElementsAre(GroupKind::Reduction, GroupKind::Elementwise,
                                    GroupKind::Reduction, GroupKind::Elementwise));
  EXPECT_EQ(f.groups[1].nodes, (std::vector<NodeId>{s, e}));
  EXPECT_EQ(f.groups[1].outputs, std::vector<NodeId>{e});
  EXPECT_EQ(f.groups[2].nodes, std::vector<NodeId>{z});
  EXPECT_EQ(f.groups[3].nodes, std::vector<NodeId>{y});
}

TEST(Fuse, LayerNormAndRmsNorm) {
  Builder b;
  NodeId x = b.param({4, 8}), gain = b.param({8}), bias = b.param({8}), eps = b.scalar(1e-5);
  NodeId mean = b.reduce(Op::reduce_mean, x, {1});
  NodeId d = b.op(Op::sub, {x, mean});
  NodeId dd = b.op(Op::mul, {d, d});
  NodeId var = b.reduce(Op::reduce_mean, dd, {1});
  NodeId ve = b.op(Op::add, {var, eps});
  NodeId r = b.op(Op::rsqrt, {ve});
  NodeId y1 = b.op(Op::mul, {d, r});
  NodeId y2 = b.op(Op::mul, {y1, gain});
  NodeId y3 = b.op(Op::add, {y2, bias});
  // RMSNorm of the layernorm's output: x*x feeds the mean inside one reduction loop.
  NodeId sq = b.op(Op::mul, {y3, y3});
  NodeId ms = b.reduce(Op::reduce_mean, sq, {1});
  NodeId rr = b.op(Op::rsqrt, {b.op(Op::add, {ms, eps})});
  NodeId out = b.op(Op::mul, {b.op(Op::mul, {y3, rr}), gain});
  b.g.set_outputs({out});
  passes::FusionPlan f = b.fuse();
  using V = std::vector<NodeId>;
  ASSERT_EQ(f.groups.size(), 8u) << passes::print_fusion(f);
  EXPECT_EQ(f.groups[0].nodes, V{mean});
  EXPECT_EQ(f.groups[1].nodes, V{d});
  EXPECT_EQ(f.groups[2].nodes, (V{dd, var}));
  EXPECT_EQ(f.groups[3].nodes, (V{ve, r}));
  EXPECT_EQ(f.groups[4].nodes, (V{y1, y2, y3}));
  EXPECT_EQ(f.groups[5].nodes, (V{sq, ms}));
  EXPECT_EQ(f.groups[5].kind, GroupKind::Reduction);
  EXPECT_EQ(f.groups[7].outputs, V{out});
}

TEST(Fuse, AdamWUpdateIsOneLoopWithThreeOutputs) {
  Builder b;
  const Shape s{64, 32};
  NodeId p = b.param(s), grad = b.param(s), m = b.param(s), v = b.param(s);
  NodeId lr = b.param({}), step = b.param({});
  NodeId b1 = b.scalar(0.9), b2 = b.scalar(0.999), one = b.scalar(1.0);
  NodeId eps = b.scalar(1e-8), wd = b.scalar(0.01);
  // Bias corrections are per-step device scalars: their own small loops.
  NodeId bc1 = b.op(Op::sub, {one, b.op(Op::pow, {b1, step})});
  NodeId bc2 = b.op(Op::sub, {one, b.op(Op::pow, {b2, step})});
  NodeId m1 =
      b.op(Op::add, {b.op(Op::mul, {b1, m}), b.op(Op::mul, {b.op(Op::sub, {one, b1}), grad})});
  NodeId g2 = b.op(Op::mul, {grad, grad});
  NodeId v1 =
      b.op(Op::add, {b.op(Op::mul, {b2, v}), b.op(Op::mul, {b.op(Op::sub, {one, b2}), g2})});
  NodeId mhat = b.op(Op::div, {m1, bc1});
  NodeId vhat = b.op(Op::div, {v1, bc2});
  NodeId upd = b.op(Op::div, {mhat, b.op(Op::add, {b.op(Op::sqrt, {vhat}), eps})});
  NodeId p1 = b.op(Op::sub, {p, b.op(Op::mul, {lr, b.op(Op::add, {upd, b.op(Op::mul, {wd, p})})})});
  b.g.set_outputs({p1, m1, v1});
  passes::FusionPlan f = b.fuse();
  int32_t big = f.group_of[p1];
  for (size_t i = 0; i < b.g.size(); ++i) {
    const Node& n = b.g.nodes()[i];
    if (n.type.shape == s && n.op != Op::parameter) {
      EXPECT_EQ(f.group_of[i], big) << "%" << i;
    }
  }
  EXPECT_EQ(f.groups[big].kind, GroupKind::Elementwise);
  EXPECT_EQ(f.groups[big].outputs, (std::vector<NodeId>{m1, v1, p1}));
  EXPECT_EQ(static_cast<size_t>(big), f.groups.size() - 1);
}

TEST(Fuse, NeverFormsACycleThroughAnUnfusedUser) {
  Builder b;
  NodeId x = b.param({4, 4});
  NodeId e = b.op(Op::exp, {x});
  NodeId t = b.op(Op::transpose, {e}, {{"perm", Ints{1, 0}}});
  NodeId r = b.op(Op::add, {e, t});
  b.g.add_output(r);
  passes::FusionPlan f = b.fuse();  // e may not join r's loop: t needs e first and feeds r
  EXPECT_THAT(kinds(f),
              ElementsAre(GroupKind::Elementwise, GroupKind::Single, GroupKind::Elementwise));
  EXPECT_NE(f.group_of[e], f.group_of[r]);
}

TEST(Fuse, ElementwiseGroupStoresValuesReadLater) {
  Builder b;
  NodeId x = b.param({8});
  NodeId e = b.op(Op::exp, {x});
  NodeId r = b.op(Op::add, {e, b.scalar(1.0)});
  NodeId s = b.reduce(Op::reduce_sum, e, {0});
  b.g.set_outputs({r, s});
  passes::FusionPlan f = b.fuse();
  ASSERT_EQ(f.groups.size(), 2u);
  EXPECT_EQ(f.groups[0].nodes, (std::vector<NodeId>{e, r}));
  EXPECT_EQ(f.groups[0].outputs, (std::vector<NodeId>{e, r}));
  EXPECT_EQ(f.groups[1].nodes, std::vector<NodeId>{s});
}

TEST(Fuse, ReductionNeverHidesAProgramOutput) {
  Builder b;
  NodeId x = b.param({4, 8});
  NodeId sq = b.op(Op::mul, {x, x});
  NodeId cube = b.op(Op::mul, {sq, x});
  NodeId s = b.reduce(Op::reduce_sum, cube, {1});
  b.g.set_outputs({s, sq});
  passes::FusionPlan f = b.fuse();
  ASSERT_EQ(f.groups.size(), 2u);
  EXPECT_EQ(f.groups[0].nodes, std::vector<NodeId>{sq});
  EXPECT_EQ(f.groups[1].nodes, (std::vector<NodeId>{cube, s}));
}

// A bias gradient's input whose bf16 copy products read later: the cast joins the sum's
// reduction (its loop stores the copy), so the f32 value is kept in registers. A cast read
// before the sum runs, or made after it, stays a loop of its own.
TEST(Fuse, ReductionStoresACastOfItsInputForLaterReaders) {
  const Attrs matmul{{"lhs_batch", Ints{}},
                     {"rhs_batch", Ints{}},
                     {"lhs_contract", Ints{0}},
                     {"rhs_contract", Ints{0}}};
  for (const bool read_early : {false, true}) {
    Builder b;
    NodeId x = b.param({16, 8}), w = b.param({16, 4});
    NodeId gy = b.op(Op::mul, {b.op(Op::tanh, {x}), x});
    NodeId cast = b.op(Op::cast, {gy}, {{"dtype", DType::bf16}});
    NodeId w16 = b.op(Op::cast, {w}, {{"dtype", DType::bf16}});
    NodeId early = read_early ? b.op(Op::neg, {cast}) : -1;
    NodeId sum = b.op(Op::reduce_sum, {gy}, {{"axes", Ints{0}}, {"keepdims", int64_t{0}}});
    Attrs wide = matmul;
    wide.set("preferred_element_type", DType::f32);
    NodeId prod = b.op(Op::dot_general, {cast, w16}, wide);
    b.g.set_outputs(read_early ? std::vector<NodeId>{sum, prod, early}
                               : std::vector<NodeId>{sum, prod});
    passes::FusionPlan f = b.fuse();
    const passes::FusionGroup& grp = f.groups[static_cast<size_t>(f.group_of[sum])];
    EXPECT_EQ(grp.kind, GroupKind::Reduction);
    if (read_early) {
      EXPECT_NE(f.group_of[cast], f.group_of[sum]);
      continue;
    }
    EXPECT_EQ(grp.nodes, (std::vector<NodeId>{gy - 1, gy, cast, sum}));
    EXPECT_EQ(grp.outputs, (std::vector<NodeId>{cast, sum}));
    passes::MemoryPlan m = passes::plan_memory(b.g, f);
    EXPECT_THAT(testing::memory_problems(b.g, f, m), ElementsAre());
    EXPECT_LT(m.offset[gy], 0);  // never stored
  }
}

TEST(Fuse, DisabledMakesEveryNodeItsOwnGroup) {
  Builder b;
  NodeId x = b.param({8});
  NodeId e = b.op(Op::exp, {b.op(Op::neg, {x})});
  b.g.add_output(b.reduce(Op::reduce_sum, e, {0}));
  passes::FusionPlan f = passes::fuse(b.g, false);
  EXPECT_THAT(testing::fusion_problems(b.g, f), ElementsAre());
  EXPECT_THAT(kinds(f), ElementsAre(GroupKind::Single, GroupKind::Single, GroupKind::Single));
  EXPECT_EQ(f.group_of[x], -1);
}

// The checkers must be able to fail, or the random-program tests prove nothing.
TEST(Fuse, CheckersRejectBrokenPlans) {
  Builder b;
  NodeId x = b.param({4, 10});
  NodeId e = b.op(Op::exp, {b.op(Op::sub, {x, b.reduce(Op::reduce_max, x, {1})})});
  b.g.add_output(b.op(Op::div, {e, b.reduce(Op::reduce_sum, e, {1})}));
  passes::FusionPlan f = b.fuse();
  passes::FusionPlan swapped = f;
  std::swap(swapped.groups[0], swapped.groups[1]);
  for (size_t k = 0; k < 2; ++k) {
    for (NodeId id : swapped.groups[k].nodes) swapped.group_of[id] = static_cast<int32_t>(k);
  }
  EXPECT_THAT(testing::fusion_problems(b.g, swapped), ::testing::Not(ElementsAre()));
  passes::MemoryPlan m = passes::plan_memory(b.g, f);
  ASSERT_THAT(testing::memory_problems(b.g, f, m), ElementsAre());
  passes::MemoryPlan broken = m;
  for (int64_t& o : broken.offset) o = o >= 0 ? 0 : o;  // e and the max live together
  EXPECT_THAT(testing::memory_problems(b.g, f, broken), ::testing::Not(ElementsAre()));
}

// ---- memory

TEST(PlanMemory, ReusesBuffersAlongAChain) {
  Builder b;
  NodeId v = b.param({3, 5});  // 60 bytes: every buffer rounds up to 64
  for (int i = 0; i < 10; ++i) v = b.op(Op::sin, {v});
  b.g.add_output(v);
  passes::FusionPlan f = passes::fuse(b.g, false);
  passes::MemoryPlan reuse = passes::plan_memory(b.g, f, true);
  passes::MemoryPlan fresh = passes::plan_memory(b.g, f, false);
  EXPECT_THAT(testing::memory_problems(b.g, f, reuse), ElementsAre());
  EXPECT_THAT(testing::memory_problems(b.g, f, fresh), ElementsAre());
  EXPECT_EQ(fresh.arena_bytes, 9 * 64);
  EXPECT_EQ(reuse.arena_bytes, 2 * 64);
  EXPECT_EQ(reuse.offset[v], -1);
  EXPECT_EQ(reuse.input_bytes, 60);
  EXPECT_EQ(reuse.predicted_peak_bytes, 2 * 64 + 60 + 60);
  EXPECT_EQ(passes::plan_memory(b.g, passes::fuse(b.g)).arena_bytes, 0);  // one loop
}

TEST(PlanMemory, RejectsAPlanForAnotherGraph) {
  Builder b;
  b.g.add_output(b.op(Op::exp, {b.param({2})}));
  passes::FusionPlan f = passes::fuse(b.g);
  f.group_of.pop_back();
  EXPECT_THAT([&] { passes::plan_memory(b.g, f); },
              ::testing::ThrowsMessage<Error>(HasSubstr("[passes] plan_memory: the fusion plan")));
}

// ---- random programs

TEST(RandomPrograms, LoweringKeepsSemanticsAndPlansKeepTheirContracts) {
  size_t removed = 0, fused_nodes = 0, reused = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::RandomProgram p = testing::random_program(seed);
    ASSERT_THAT(verify_problems(p.graph), ElementsAre());
    passes::PassOptions o;
    if (seed % 3 == 0) o.disabled = {passes::pass_names()[seed / 3 % 7]};
    // Half the seeds with the default target (contiguous views only), half with every view.
    if (seed % 2 == 0) o.target = testing::strided_target();
    o.target.fuse_reductions = seed % 5 != 0;
    o.target.alignment = seed % 7 == 0 ? 128 : 64;
    passes::Lowered l = passes::lower(p.graph, o);
    expect_same_program(p.graph, l.graph, p.inputs);
    EXPECT_THAT(testing::fusion_problems(l.graph, l.fusion), ElementsAre());
    EXPECT_THAT(testing::memory_problems(l.graph, l.fusion, l.memory, l.bodies, o.target.alignment),
                ElementsAre());
    passes::FusionPlan single = passes::fuse(p.graph, false);
    EXPECT_THAT(testing::fusion_problems(p.graph, single), ElementsAre());
    passes::MemoryPlan fresh = passes::plan_memory(l.graph, l.fusion, false, l.bodies, o.target);
    EXPECT_THAT(testing::memory_problems(l.graph, l.fusion, fresh, l.bodies, o.target.alignment),
                ElementsAre());
    EXPECT_LE(l.memory.arena_bytes, fresh.arena_bytes);
    removed += p.graph.size() - l.graph.size();
    for (const auto& grp : l.fusion.groups) fused_nodes += grp.nodes.size() > 1 ? 1 : 0;
    reused += l.memory.arena_bytes < fresh.arena_bytes;
  }
  // The generator must exercise what it is meant to: rewrites, fusion and reuse.
  EXPECT_GT(removed, 150u);
  EXPECT_GT(fused_nodes, 150u);
  EXPECT_GT(reused, 20u);
}

// ---- the pipeline

Graph small_program() {
  Builder b;
  NodeId x = b.param({4, 8});
  NodeId a = b.op(Op::exp, {x}), dup = b.op(Op::exp, {x});
  b.op(Op::neg, {x});  // dead
  NodeId t = b.op(Op::transpose, {b.op(Op::add, {a, dup})}, {{"perm", Ints{1, 0}}});
  b.g.set_outputs({b.op(Op::cast, {b.op(Op::tanh, {t})}, {{"dtype", DType::f32}})});
  b.g.set_name("step/train");
  return b.g;
}

// Two scans (one a duplicate, one with another body) whose ys are partly unused.
Graph scans_program(std::vector<Array>& in) {
  Graph g("scans");
  NodeId h = g.add_param({DType::f32, {2, 3}});
  NodeId ws = g.add_param({DType::f32, {3, 3, 3}});
  NodeId b = g.add_param({DType::f32, {3}});
  std::vector<NodeId> r1 = scan_test::tiny_scan(g, h, ws, b, false);
  std::vector<NodeId> r2 = scan_test::tiny_scan(g, h, ws, b, false);       // same: merged
  std::vector<NodeId> r3 = scan_test::tiny_scan(g, h, ws, b, false, 2.0);  // another body
  NodeId sum = g.emit(Op::add, {g.emit(Op::add, {r1[0], r2[0]}, {}, {}), r3[0]}, {}, {});
  g.set_outputs({sum, r2[1]});  // r1's and r3's ys are unused
  for (NodeId p : g.params()) {
    Array a(DType::f32, g.node(p).type.shape);
    for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, 0.1 * double(i % 7) - 0.3);
    in.push_back(std::move(a));
  }
  return g;
}

TEST(ScanPasses, CseMergesOnlyEqualBodiesAndDceDropsUnusedYs) {
  std::vector<Array> in;
  const Graph g = scans_program(in);
  const Graph c = passes::cse(g);
  expect_same_program(g, c, in);
  EXPECT_EQ(count_op(c, Op::scan), 2u);  // the duplicate merged, the other body kept
  const Graph d = passes::dce(c);
  expect_same_program(g, d, in);
  EXPECT_EQ(count_op(d, Op::scan), 2u);
  // The second scan (another body) lost its unused ys result; the first kept its used ys.
  EXPECT_EQ(count_op(d, Op::scan_result), 3u) << print_graph(d);
  // A scan none of whose results is used is dropped whole.
  Graph dead = g;
  dead.set_outputs({g.params()[0]});
  EXPECT_EQ(count_op(passes::dce(dead), Op::scan), 0u);
}

// The machine-dependent passes follow the target: a strided view folds only into readers the
// target names, a kernel's result joins a concat in place only where the target says it can
// store through strides, reductions fuse their producers only where it fuses them.
TEST(Target, StridedViewsFoldOnlyIntoReadersTheTargetNames) {
  Builder b;
  const NodeId x = b.param({4, 8});
  const NodeId t = b.op(Op::transpose, {x}, {{"perm", Ints{1, 0}}});  // strided
  const NodeId r = b.op(Op::reshape, {x}, {{"shape", Ints{32}}});     // contiguous
  b.g.add_output(b.op(Op::exp, {t}));
  b.g.add_output(b.op(Op::exp, {r}));
  const std::vector<passes::View> plain = passes::fold_layout(b.g, true, passes::Target{});
  EXPECT_LT(plain[t].base, 0) << "the default target reads no strided view";
  EXPECT_EQ(plain[r].base, x) << "a contiguous view folds for any target";
  const std::vector<passes::View> strided =
      passes::fold_layout(b.g, true, testing::strided_target());
  EXPECT_EQ(strided[t].base, x);
  EXPECT_EQ(strided[t].strides, (std::vector<int64_t>{1, 8}));
  passes::Target asks = testing::strided_target();
  std::vector<std::pair<Op, size_t>> asked;
  asks.reads_view = [&](const Node& reader, size_t index, const passes::View&) {
    asked.emplace_back(reader.op, index);
    return false;
  };
  EXPECT_LT(passes::fold_layout(b.g, true, asks)[t].base, 0);
  EXPECT_THAT(asked, Contains(std::pair{Op::exp, size_t{0}}));
}

TEST(Target, AKernelsResultJoinsAConcatOnlyWhereTheTargetStoresThroughStrides) {
  Builder b;
  const NodeId x = b.param({4, 8});
  const NodeId y = b.param({4, 8});
  // Two kernels (cumulative sums) whose results are the concat's only operands.
  const NodeId a = b.op(Op::cumsum, {x}, {{"axis", int64_t{1}}, {"reverse", int64_t{0}}});
  const NodeId c = b.op(Op::cumsum, {y}, {{"axis", int64_t{1}}, {"reverse", int64_t{0}}});
  const NodeId joined = b.op(Op::concat, {a, c}, {{"axis", int64_t{0}}});
  b.g.add_output(b.op(Op::exp, {joined}));
  for (const bool writes : {false, true}) {
    passes::Target target = testing::strided_target();
    if (!writes) target.writes_view = nullptr;
    passes::FusionPlan f = passes::fuse(b.g, true, passes::fold_layout(b.g, true, target), target);
    EXPECT_EQ(passes::concat_in_place(b.g, f, target), writes ? 1 : 0);
    for (const NodeId operand : {a, c}) {
      EXPECT_EQ(f.is_view(operand), writes);
      EXPECT_EQ(f.storage_of(operand), writes ? joined : operand);  // stored in the join's bytes
    }
  }
}

// Kernels the target runs in one call (here: up to three cumulative sums) are one group, fused or
// not, when adjacent in the schedule; a kernel reading the call's result never joins it.
TEST(Target, KernelsSharingACallAreOneGroup) {
  Builder b;
  const NodeId x = b.param({4, 8});
  const NodeId y = b.param({4, 8});
  const Attrs along{{"axis", int64_t{1}}, {"reverse", int64_t{0}}};
  const NodeId a = b.op(Op::cumsum, {x}, along);
  const NodeId c = b.op(Op::cumsum, {y}, along);
  const NodeId d = b.op(Op::cumsum, {a}, along);  // reads a: not in a's call
  const NodeId e = b.op(Op::cumsum, {x}, {{"axis", int64_t{0}}, {"reverse", int64_t{0}}});
  const NodeId sum = b.op(Op::add, {b.op(Op::add, {c, d}), e});
  b.g.add_output(sum);
  b.g.add_output(a);
  passes::Target target;
  auto groups = [&](bool fused) {
    const passes::FusionPlan f = passes::fuse(b.g, fused, {}, target);
    EXPECT_THAT(testing::fusion_problems(b.g, f), ElementsAre()) << passes::print_fusion(f);
    std::vector<std::vector<NodeId>> kernels;
    for (const passes::FusionGroup& grp : f.groups) {
      if (b.g.node(grp.nodes.front()).op == Op::cumsum) kernels.push_back(grp.nodes);
    }
    return kernels;
  };
  using Calls = std::vector<std::vector<NodeId>>;
  EXPECT_EQ(groups(true), (Calls{{a}, {c}, {d}, {e}}));  // the default target shares no call
  target.shares_call = [](const Graph& g, const std::vector<NodeId>& call, NodeId next) {
    return call.size() < 3 && g.node(call.front()).op == Op::cumsum &&
           g.node(next).op == Op::cumsum;
  };
  EXPECT_EQ(groups(true), (Calls{{a, c}, {d, e}}));
  EXPECT_EQ(groups(false), (Calls{{a, c}, {d, e}}));
}

TEST(Target, ReductionsFuseTheirProducersOnlyWhereTheTargetFusesThem) {
  Builder b;
  const NodeId x = b.param({4, 10});
  const NodeId e = b.op(Op::exp, {x});
  const NodeId z = b.reduce(Op::reduce_sum, e, {1});
  b.g.add_output(z);
  passes::Target target;
  EXPECT_THAT(kinds(passes::fuse(b.g, true, {}, target)), ElementsAre(GroupKind::Reduction));
  target.fuse_reductions = false;
  const passes::FusionPlan f = passes::fuse(b.g, true, {}, target);
  EXPECT_THAT(kinds(f), ElementsAre(GroupKind::Elementwise, GroupKind::Single));
  EXPECT_EQ(f.groups[1].nodes, std::vector<NodeId>{z});
  EXPECT_THAT(testing::fusion_problems(b.g, f), ElementsAre());
}

TEST(Target, AlignmentAndScanWorkspaceFollowTheTarget) {
  std::vector<Array> in;
  const Graph g = scans_program(in);
  passes::PassOptions o;
  o.target.alignment = 256;
  const passes::Lowered l = passes::lower(g, o);
  EXPECT_THAT(testing::memory_problems(l.graph, l.fusion, l.memory, l.bodies, 256), ElementsAre());
  EXPECT_EQ(l.memory.arena_bytes % 256, 0);
  size_t scans = 0;
  for (size_t i = 0; i < l.graph.size(); ++i) {
    const Node& n = l.graph.nodes()[i];
    if (n.op != Op::scan) continue;
    ++scans;
    ASSERT_TRUE(l.bodies.count(NodeId(i))) << "every scan's body is lowered with its graph";
    const passes::Lowered& body = *l.bodies.at(NodeId(i));
    EXPECT_EQ(body.options.target.alignment, 256) << "the body is lowered for the same target";
    EXPECT_EQ(passes::scan_carry_bytes(n, o.target) % 256, 0);
    passes::Target no_spare = o.target;
    no_spare.scan_spare_carries = false;
    EXPECT_EQ(passes::scan_carry_bytes(n, no_spare), 0);
    EXPECT_GT(passes::scan_carry_bytes(n, o.target), 0);
  }
  EXPECT_GT(scans, 0u);
  // Without spare carries a scan's workspace is its body's arena alone.
  passes::PassOptions no_spare = o;
  no_spare.target.scan_spare_carries = false;
  const passes::Lowered tight = passes::lower(g, no_spare);
  for (const auto& [scan, body] : tight.bodies) {
    EXPECT_EQ(passes::scan_workspace_bytes(tight.graph.node(scan), *body),
              body->memory.arena_bytes);
  }
  EXPECT_LE(tight.memory.arena_bytes, l.memory.arena_bytes);
  EXPECT_THAT(testing::memory_problems(tight.graph, tight.fusion, tight.memory, tight.bodies, 256),
              ElementsAre());
  EXPECT_THAT([&] { passes::print_memory(l.graph, l.memory); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no lowered body for scan")));
  passes::PassOptions odd = o;
  odd.target.alignment = 48;
  EXPECT_THAT([&] { passes::lower(g, odd); },
              ::testing::ThrowsMessage<Error>(HasSubstr("must be a power of two")));
}

TEST(ScanPasses, FusionKeepsAScanWithItsResultsAndMemoryCountsTheBodysArena) {
  std::vector<Array> in;
  const Graph g = scans_program(in);
  const passes::LoweredBodies bodies = passes::lower_scan_bodies(g, {});
  for (bool fuse_on : {true, false}) {
    passes::FusionPlan f = passes::fuse(g, fuse_on);
    EXPECT_THAT(testing::fusion_problems(g, f), ElementsAre());
    for (size_t i = 0; i < g.size(); ++i) {
      if (g.nodes()[i].op != Op::scan_result) continue;
      EXPECT_EQ(f.group_of[i], f.group_of[g.nodes()[i].inputs[0]]) << i;
    }
    passes::MemoryPlan m = passes::plan_memory(g, f, true, bodies);
    EXPECT_THAT(testing::memory_problems(g, f, m, bodies), ElementsAre());
    for (size_t i = 0; i < g.size(); ++i) {
      if (g.nodes()[i].op != Op::scan) continue;
      const int64_t ws = passes::scan_workspace_bytes(g.nodes()[i], *bodies.at(NodeId(i)));
      EXPECT_GT(ws, passes::scan_carry_bytes(g.nodes()[i]));  // the body's arena is in it
      ASSERT_GE(m.offset[i], 0);
      EXPECT_GE(m.arena_bytes, m.offset[i] + ws);
    }
    // Without its lowered body a scan's workspace cannot be sized: one line, no guess.
    EXPECT_THAT([&] { passes::plan_memory(g, f); },
                ::testing::ThrowsMessage<Error>(HasSubstr("was given no lowered body for scan")));
  }
  const passes::Lowered low = passes::lower(g);
  expect_same_program(g, low.graph, in);
}

TEST(Lower, RunsTheNamedPassesInOrderAndLogsEach) {
  EXPECT_THAT(
      passes::pass_names(),
      ElementsAre("canonicalize", "bf16_operands", "cse", "dce", "recompute_elementwise",
                  "place_collectives", "fold_layout", "fuse", "concat_in_place", "plan_memory"));
  passes::PassOptions o;
  o.target = testing::strided_target();
  passes::Lowered l = passes::lower(small_program(), o);
  // The transpose is read in place by tanh: no group, no buffer of its own.
  EXPECT_THAT(
      l.log,
      ElementsAre("canonicalize: 8 -> 7 nodes", "bf16_operands: not run (f32 matmuls)",
                  "cse: 7 -> 6 nodes", "dce: 6 -> 5 nodes", "recompute_elementwise: 5 -> 5 nodes",
                  "place_collectives: 5 -> 5 nodes", "fold_layout: 1 layout ops read in place",
                  "fuse: 5 nodes -> 2 groups", "concat_in_place: 0 concats written in place",
                  "plan_memory: arena 128 B, predicted peak 384 B"));
}

TEST(Lower, DisabledPassesAreSkipped) {
  passes::PassOptions o;
  o.disabled = {"cse",        "recompute_elementwise", "place_collectives", "fold_layout", "fuse",
                "plan_memory"};
  passes::Lowered l = passes::lower(small_program(), o);
  EXPECT_THAT(l.log,
              ElementsAre("canonicalize: 8 -> 7 nodes", "bf16_operands: not run (f32 matmuls)",
                          "cse: skipped", "dce: 7 -> 6 nodes", "recompute_elementwise: skipped",
                          "place_collectives: skipped", "fold_layout: skipped", "fuse: skipped",
                          "concat_in_place: skipped (no views without fold_layout)",
                          "plan_memory: skipped"));
  EXPECT_EQ(count_op(l.graph, Op::exp), 2u);
  for (const auto& grp : l.fusion.groups) EXPECT_EQ(grp.kind, GroupKind::Single);
  EXPECT_EQ(l.memory.arena_bytes, 4 * 128);  // exp, exp, add, transpose: no reuse
}

TEST(Lower, RejectsUnknownPassesAndInvalidGraphs) {
  passes::PassOptions o;
  o.disabled = {"fusion"};
  EXPECT_THAT([&] { passes::lower(small_program(), o); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("[passes] unknown pass 'fusion'; known: canonicalize, "
                            "bf16_operands, cse, dce, recompute_elementwise, place_collectives, "
                            "fold_layout, fuse, concat_in_place, plan_memory")));
  Graph bad = small_program();
  bad.set_outputs({99});
  EXPECT_THAT([&] { passes::lower(bad); },
              ::testing::ThrowsMessage<Error>(HasSubstr("[passes] graph 'step/train'")));
}

TEST(Lower, DumpsEveryPassThatRan) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("keel_passes_dump_" + std::to_string(getpid()));
  fs::remove_all(dir);
  passes::PassOptions o;
  o.dump_dir = (dir / "nested").string();
  o.disabled = {"cse"};
  passes::Lowered l = passes::lower(small_program(), o);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "nested")) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names,
              ElementsAre("step_train.1.canonicalize.txt", "step_train.10.plan_memory.txt",
                          "step_train.4.dce.txt", "step_train.5.recompute_elementwise.txt",
                          "step_train.6.place_collectives.txt", "step_train.7.fold_layout.txt",
                          "step_train.8.fuse.txt", "step_train.9.concat_in_place.txt"));
  auto read = [&](const char* name) {
    std::ifstream f(dir / "nested" / name);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  EXPECT_EQ(print_graph(parse_graph(read("step_train.6.place_collectives.txt"))),
            print_graph(l.graph));
  EXPECT_EQ(read("step_train.7.fold_layout.txt"), passes::print_views(l.fusion.views));
  EXPECT_EQ(read("step_train.8.fuse.txt"), passes::print_fusion(l.fusion));
  EXPECT_EQ(read("step_train.9.concat_in_place.txt"), passes::print_views(l.fusion.views));
  EXPECT_THAT(read("step_train.10.plan_memory.txt"),
              HasSubstr(fmt::format("arena_bytes={}", l.memory.arena_bytes)));
  fs::remove_all(dir);
}

TEST(Lower, FingerprintIsTheCanonicalDisabledSet) {
  passes::PassOptions a, b;
  a.disabled = {"dce", "cse"};
  b.disabled = {"cse", "dce"};
  b.dump_dir = "/tmp/elsewhere";
  EXPECT_EQ(a.fingerprint(), "passes.disabled=cse,dce");
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(passes::PassOptions{}.fingerprint(), "passes.disabled=");
}

}  // namespace
}  // namespace keel
