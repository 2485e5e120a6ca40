// The dist room in one process: the fixed reduction order, the mesh, collectives as IR ops
// (types, text, hash, VJPs, canonicalization) and the trace-time check of what varies.
#include <gtest/gtest.h>

#include <cstring>

#include "autodiff/grad.h"
#include "autodiff/value_and_grad.h"
#include "backend/collectives.h"
#include "backend/ref/client.h"
#include "dist/deadline.h"
#include "dist/fixed_order.h"
#include "dist/mesh.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "ir/text.h"
#include "ir/varying.h"
#include "passes/pipeline.h"
#include "runtime/jit.h"
#include "trace/collectives.h"
#include "trace/compile.h"
#include "trace/scan.h"
#include "trace/varying_check.h"

namespace keel {
namespace {

NodeId emit_in(Graph& g, Op op, std::vector<NodeId> in, Attrs a = {}) {
  return g.emit(op, std::move(in), std::move(a), SourceLoc::current(), "test");
}

float combined(std::vector<float> xs, ReduceKind kind = ReduceKind::sum) {
  dist::combine_blocks(kind, DType::f32, xs.data(), static_cast<int64_t>(xs.size()), 1);
  return xs[0];
}

// The tree: odd counts in index order, even counts as the sum of their halves' trees. Values
// far apart make every other order give other bits.
TEST(Dist, BlocksCombineInTheFixedTree) {
  const float a = 1e8f, b = 3.0f, c = -1e8f, d = 5.0f, e = 0.25f, f = 7.0f;
  EXPECT_EQ(combined({a, b}), a + b);
  EXPECT_EQ(combined({a, b, c}), (a + b) + c);
  EXPECT_EQ(combined({a, b, c, d}), (a + b) + (c + d));
  EXPECT_NE(combined({a, b, c, d}), ((a + b) + c) + d);  // the values do tell orders apart
  EXPECT_EQ(combined({a, b, c, d, e, f}), ((a + b) + c) + ((d + e) + f));
  std::vector<float> eight = {a, b, c, d, e, f, a, c};
  EXPECT_EQ(combined(eight), ((a + b) + (c + d)) + ((e + f) + (a + c)));
  EXPECT_EQ(combined({a, b, c, d}, ReduceKind::max), a);
  EXPECT_EQ(combined({a, b, c, d}, ReduceKind::min), c);
  // Integers add exactly; bf16 adds in f32 and rounds once.
  std::vector<int64_t> ints = {int64_t{1} << 40, 3, -5};
  dist::combine_blocks(ReduceKind::sum, DType::i64, ints.data(), 3, 1);
  EXPECT_EQ(ints[0], (int64_t{1} << 40) - 2);
  std::vector<uint16_t> halves = {f32_to_bf16(256.0f), f32_to_bf16(1.0f), f32_to_bf16(1.0f)};
  dist::combine_blocks(ReduceKind::sum, DType::bf16, halves.data(), 3, 1);
  EXPECT_EQ(bf16_to_f32(halves[0]), 258.0f);  // bf16 steps would lose both ones
  std::vector<uint8_t> flags = {1, 0};
  EXPECT_THROW(dist::combine_blocks(ReduceKind::sum, DType::boolean, flags.data(), 2, 1), Error);
}

TEST(Dist, MeshLaysRanksOutRowMajor) {
  dist::Mesh m{{"data", "model"}, {2, 3}};
  EXPECT_EQ(m.size(), 6);
  EXPECT_EQ(m.str(), "data=2,model=3");
  EXPECT_EQ(m.axis_size("model"), 3);
  EXPECT_EQ(m.axis_size("pipe"), 0);
  EXPECT_EQ(m.coordinates(5), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m.coordinates(3), (std::vector<int64_t>{1, 0}));
  // One process: every axis communicator has one member; a mesh larger than the world is
  // refused.
  auto one = dist::one_process_communicator();
  dist::MeshCollectives c(*one, dist::Mesh{{"data", "model"}, {1, 1}});
  EXPECT_EQ(c.axis_size("model"), 1);
  EXPECT_EQ(c.axis_index("data"), 0);
  EXPECT_EQ(c.axis_size("pipe"), 1);  // any axis of one device has size 1
  EXPECT_THROW(dist::MeshCollectives(*one, dist::Mesh{{"data"}, {2}}), Error);
  float x[3] = {1, 2, 3}, y[3] = {};
  c.all_reduce("data", ReduceKind::sum, DType::f32, x, y, 3);
  EXPECT_EQ(y[2], 3.0f);
}

// A program typed for one mesh refuses to run in another, naming both sizes.
TEST(Dist, ACollectiveCompiledForAnotherMeshIsRefused) {
  Attrs a{{"axis", std::string("data")}, {"axis_size", int64_t{4}}, {"reduce", std::string("sum")}};
  float x = 1, y = 0;
  try {
    backend::run_collective(Op::all_reduce, a, {DType::f32, {}}, &x, &y);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("compiled for 4 processes on that axis but this mesh has 1"),
        std::string::npos)
        << e.what();
  }
}

TEST(Dist, CollectiveTypeRules) {
  auto infer = [](Op op, TensorType x, Attrs a) {
    Graph g("t");
    NodeId p = g.add_param(x);
    return g.node(emit_in(g, op, {p}, std::move(a))).type;
  };
  Attrs gather{{"axis", std::string("data")}, {"axis_size", int64_t{4}}, {"dim", int64_t{1}}};
  EXPECT_EQ(infer(Op::all_gather, {DType::f32, {2, 3}}, gather).shape, (Shape{2, 12}));
  EXPECT_EQ(infer(Op::reduce_scatter, {DType::f32, {2, 8}}, gather).shape, (Shape{2, 2}));
  EXPECT_THROW(infer(Op::reduce_scatter, {DType::f32, {2, 6}}, gather), Error);  // 6 % 4
  EXPECT_THROW(infer(Op::reduce_scatter, {DType::i32, {2, 8}}, gather), Error);
  // all_to_all keeps the shape, moves any numbers (token indices too), and splits its dim.
  EXPECT_EQ(infer(Op::all_to_all, {DType::f32, {2, 8}}, gather).shape, (Shape{2, 8}));
  EXPECT_EQ(infer(Op::all_to_all, {DType::i64, {2, 4}}, gather).dtype, DType::i64);
  try {
    infer(Op::all_to_all, {DType::f32, {2, 6}}, gather);
    ADD_FAILURE() << "all_to_all of 6 entries over 4 processes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "all_to_all's dim 1 has 6 entries, not a multiple of axis 'data' of size 4"),
              std::string::npos)
        << e.what();
  }
  Attrs bad_dim = gather;
  bad_dim.set("dim", int64_t{2});
  EXPECT_THROW(infer(Op::all_gather, {DType::f32, {2, 3}}, bad_dim), Error);
  Attrs reduce{
      {"axis", std::string("data")}, {"axis_size", int64_t{2}}, {"reduce", std::string("mean")}};
  EXPECT_THROW(infer(Op::all_reduce, {DType::f32, {2}}, reduce), Error);
  Attrs no_axis{
      {"axis", std::string("")}, {"axis_size", int64_t{2}}, {"reduce", std::string("sum")}};
  EXPECT_THROW(infer(Op::all_reduce, {DType::f32, {2}}, no_axis), Error);
  EXPECT_THROW(infer(Op::all_reduce, {DType::boolean, {2}}, reduce), Error);
}

// Text round trip; the axis size is in the hash (the mesh is part of the key); a collective
// over one process canonicalizes away.
TEST(Dist, CollectivesPrintParseHashAndFoldOverOneProcess) {
  auto graph_for = [](int64_t size) {
    Graph g("c");
    NodeId p = g.add_param({DType::f32, {4}});
    NodeId r = emit_in(
        g, Op::all_reduce, {p},
        {{"axis", std::string("data")}, {"axis_size", size}, {"reduce", std::string("max")}});
    NodeId i = emit_in(g, Op::axis_index, {}, {{"axis", std::string("data")}, {"axis_size", size}});
    g.set_outputs({r, i});
    return g;
  };
  const Graph two = graph_for(2);
  const Graph back = parse_graph(print_graph(two));
  EXPECT_EQ(print_graph(back), print_graph(two));
  EXPECT_EQ(graph_hash(back), graph_hash(two));
  EXPECT_NE(graph_hash(two), graph_hash(graph_for(1)));
  EXPECT_NE(print_graph(passes::canonicalize(two)).find("all_reduce"), std::string::npos);
  EXPECT_EQ(print_graph(passes::canonicalize(graph_for(1))).find("all_reduce"), std::string::npos);
}

// VJPs: all_reduce sum passes the cotangent through, all_gather takes this process's block,
// reduce_scatter gathers the cotangent.
TEST(Dist, CollectiveVjpsEmitTheirTransposes) {
  auto backward_ops = [](Op op, Attrs a, Shape s) {
    Graph g("v");
    NodeId p = g.add_param({DType::f32, s});
    NodeId y = emit_in(g, op, {p}, std::move(a));
    g.set_outputs({emit_in(g, Op::reduce_sum, {y},
                           {{"axes", std::vector<int64_t>{0, 1}}, {"keepdims", int64_t{0}}})});
    return print_graph(autodiff::grad(g, 0, {0}));
  };
  Attrs base{{"axis", std::string("data")}, {"axis_size", int64_t{2}}};
  Attrs sum = base;
  sum.set("reduce", std::string("sum"));
  Attrs dim = base;
  dim.set("dim", int64_t{1});
  // all_gather's gradient sums every process's use of each block; the invariant one's is this
  // process's block of the cotangent every process holds.
  const std::string ag = backward_ops(Op::all_gather, dim, {2, 3});
  EXPECT_NE(ag.find("reduce_scatter"), std::string::npos) << ag;
  Attrs invariant = dim;
  invariant.set("invariant", int64_t{1});
  const std::string agi = backward_ops(Op::all_gather, invariant, {2, 3});
  EXPECT_NE(agi.find("axis_index"), std::string::npos) << agi;
  EXPECT_EQ(agi.find("reduce_scatter"), std::string::npos) << agi;
  const std::string rs = backward_ops(Op::reduce_scatter, dim, {2, 4});
  EXPECT_NE(rs.find("all_gather"), std::string::npos) << rs;
  // all_to_all's cotangent goes back through an all_to_all along the same dim.
  const std::string a2a = backward_ops(Op::all_to_all, dim, {2, 4});
  EXPECT_NE(a2a.find("all_to_all(", a2a.find("all_to_all(") + 1), std::string::npos) << a2a;
  // The forward all_reduce only: its cotangent needs no communication, only pvary's type (whose
  // check refuses a cotangent that varies); over one process, not even that.
  const std::string ar = backward_ops(Op::all_reduce, sum, {2, 3});
  EXPECT_EQ(ar.find("all_reduce(", ar.find("all_reduce(") + 1), std::string::npos) << ar;
  EXPECT_NE(ar.find("pvary("), std::string::npos) << ar;
  Attrs one = sum;
  one.set("axis_size", int64_t{1});
  const std::string ar1 = backward_ops(Op::all_reduce, one, {2, 3});
  EXPECT_EQ(ar1.find("pvary("), std::string::npos) << ar1;
}

// The mesh is part of every key, even of a program without collectives.
TEST(Dist, TheMeshIsPartOfEveryKey) {
  auto key = [](const std::string& mesh) {
    runtime::JitConfig jc;
    jc.client = ref::make_ref_client();
    jc.mesh = mesh;
    Graph g("plain");
    g.set_outputs({g.add_param({DType::f32, {2}})});
    return runtime::CachedJit(jc).key_for(g);
  };
  EXPECT_EQ(key("data=2"), key("data=2"));
  EXPECT_NE(key("data=2"), key("data=4"));
  EXPECT_NE(key("data=2"), key("data=2,model=1"));
}

TEST(Dist, LeafPathsNameEveryLeaf) {
  EXPECT_EQ(detail::leaf_paths("{wpe=T,wte=T,}"), (std::vector<std::string>{"wpe", "wte"}));
  EXPECT_EQ(detail::leaf_paths("[2:TT]"), (std::vector<std::string>{"[0]", "[1]"}));
  EXPECT_EQ(detail::leaf_paths("T"), (std::vector<std::string>{"."}));
  EXPECT_EQ(detail::leaf_paths("{a={b=T,},}"), (std::vector<std::string>{"a.b"}));
}

// Contract 8 in one process too: the types do not depend on the mesh's size.
TEST(Dist, VaryingValuesAreRefusedWhereTheyMustBeTheSameOnEveryProcess) {
  CompileOptions o;
  o.varying_arguments[1] = {"data"};
  o.donate = {{0, 1}};
  // A replicated weight updated from the batch without an all_reduce.
  auto update = compile(
      "bad_update",
      [](const std::map<std::string, Tensor>& w, const Tensor& batch) {
        Tensor loss = all_reduce(sum(batch), "data");
        std::map<std::string, Tensor> next;
        for (const auto& [name, t] : w) next[name] = t - 0.1 * sum(batch);
        return std::tuple<Tensor, std::map<std::string, Tensor>>{loss, next};
      },
      o);
  std::map<std::string, Tensor> w{{"wte", Tensor(Array::full({2}, 1.0))}};
  try {
    update(w, Tensor(Array::full({3}, 2.0)));
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("result 1 leaf 'wte' varies over mesh axis 'data'"), std::string::npos) << m;
    EXPECT_NE(m.find("updating replicated argument"), std::string::npos) << m;
    EXPECT_NE(m.find("dist_test.cpp"), std::string::npos) << m;
    EXPECT_NE(m.find("missing all_reduce over data"), std::string::npos) << m;
  }
  // Declared per-process, the same value is accepted; after all_reduce it is replicated.
  CompileOptions per_rank;
  per_rank.varying_arguments[0] = {"data"};
  per_rank.varying_results[0] = {"data"};
  auto local = compile(
      "per_rank_metric", [](const Tensor& b) { return sum(b); }, per_rank);
  EXPECT_EQ(local(Tensor(Array::full({3}, 2.0))).item(), 6.0);
  const auto& varies = local.programs()[0]->output_varies;
  ASSERT_EQ(varies.size(), 1u);
  EXPECT_EQ(varies[0], (std::set<std::string>{"data"}));
}

// A row-parallel product's result is this process's share of a sum over 'model' until its
// all_reduce: linear ops on it pass, and the backward holds no share; a nonlinear op, a whole
// value added to it, a norm of it or returning it is refused at trace time, naming the line.
TEST(Dist, APartialSumIsUsedOnlyLinearlyUntilItsAllReduce) {
  CompileOptions o;
  o.varying_arguments[0] = {"model"};  // x [2, 4] and w [4, 3], split along the 4
  o.varying_arguments[1] = {"model"};
  const Array x = Array::from_f32({2, 4}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  const Array w = Array::from_f32({4, 3}, std::vector<float>{1, 0, 2, 0, 1, 1, 3, 1, 0, 1, 2, 1});
  CompileOptions with_grad = o;
  with_grad.varying_results[2] = {"model"};  // the gradient of this process's block of x
  auto whole = compile(
      "row_parallel",
      [](const Tensor& a, const Tensor& b) {
        const Tensor share = matmul_partial(a, b, "model") * 2.0;
        const Tensor two = share + matmul_partial(a, b, "model");  // shares add up
        auto [value, grad] = value_and_grad([&](const Tensor& q) {
          return sum(tanh(all_reduce(matmul_partial(q, b, "model"), "model")));
        })(a);
        return std::tuple<Tensor, Tensor, Tensor>{tanh(all_reduce(two, "model")), value, grad};
      },
      with_grad);
  const auto [y, value, grad] = whole(Tensor(x), Tensor(w));
  EXPECT_NEAR(y.array().get_f64(0), std::tanh(3.0 * (1 + 0 + 9 + 0)), 1e-6);
  EXPECT_EQ(grad.array().shape(), (Shape{2, 4}));
  auto refusal = [&](const std::string& name, std::function<Tensor(Tensor, Tensor)> f) {
    auto bad = compile(
        name, [f](const Tensor& a, const Tensor& b) { return f(a, b); }, o);
    try {
      bad(Tensor(x), Tensor(w));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto has = [](const std::string& m, const std::string& part) {
    return m.find(part) != std::string::npos;
  };
  const std::string nonlinear = refusal("tanh_of_share", [](Tensor a, Tensor b) {
    return all_reduce(tanh(matmul_partial(a, b, "model")), "model");
  });
  EXPECT_TRUE(has(nonlinear, "tanh at ")) << nonlinear;
  EXPECT_TRUE(has(nonlinear, "dist_test.cpp")) << nonlinear;
  EXPECT_TRUE(has(nonlinear, "is not linear")) << nonlinear;
  EXPECT_TRUE(has(nonlinear, "share of a sum over mesh axis 'model'")) << nonlinear;
  const std::string bias = refusal("share_plus_bias", [](Tensor a, Tensor b) {
    return all_reduce(matmul_partial(a, b, "model") + 1.0, "model");
  });
  EXPECT_TRUE(has(bias, "add at ")) << bias;
  EXPECT_TRUE(has(bias, "count once per process")) << bias;
  const std::string norm = refusal("norm_of_share", [](Tensor a, Tensor b) {
    const Tensor share = matmul_partial(a, b, "model");
    return all_reduce(sum(share * share), "model");
  });
  EXPECT_TRUE(has(norm, "multiplies it by another partial sum")) << norm;
  const std::string truncated = refusal("share_to_int", [](Tensor a, Tensor b) {
    return cast(all_reduce(cast(matmul_partial(a, b, "model"), DType::i32), "model"), DType::f32);
  });
  EXPECT_TRUE(has(truncated, "casts it to a type that does not add up")) << truncated;
  const std::string gathered = refusal("gathered_shares", [](Tensor a, Tensor b) {
    return all_reduce(all_gather(matmul_partial(a, b, "model"), "model"), "model");
  });
  EXPECT_TRUE(has(gathered, "gathers the shares over the axis they are shares over")) << gathered;
  // Scaled or selected by a value each process holds differently, each share would change
  // differently: refused. Scaled by a value every process holds the same, it is not.
  const std::string scaled = refusal("share_times_varying", [](Tensor a, Tensor b) {
    return all_reduce(matmul_partial(a, b, "model") * sum(a, {1}, true), "model");
  });
  EXPECT_TRUE(has(scaled, "mul at ")) << scaled;
  EXPECT_TRUE(has(scaled, "scales it by a value that differs across the processes")) << scaled;
  const std::string selected = refusal("share_selected_by_varying", [](Tensor a, Tensor b) {
    const Tensor share = matmul_partial(a, b, "model");
    const Tensor keep = broadcast_to(gt(sum(a, {1}, true), full({}, 10.0)), {2, 3});
    return all_reduce(select(keep, share, share * 0.5), "model");
  });
  EXPECT_TRUE(has(selected, "selects it by a condition that differs")) << selected;
  EXPECT_EQ(refusal("share_times_invariant",
                    [](Tensor a, Tensor b) {
                      return all_reduce(matmul_partial(a, b, "model") * all_reduce(sum(a), "model"),
                                        "model");
                    }),
            "accepted");
  const std::string returned =
      refusal("returned_share", [](Tensor a, Tensor b) { return matmul_partial(a, b, "model"); });
  EXPECT_TRUE(has(returned, "result leaf 0")) << returned;
  EXPECT_TRUE(has(returned, "returned before its all_reduce over 'model'")) << returned;
  EXPECT_TRUE(has(returned, "the product at ")) << returned;
  // Inside a loop: the carry grows partial, and a nonlinear op on it is refused there.
  const std::string looped = refusal("share_in_scan", [](Tensor a, Tensor b) {
    auto body = [](const std::vector<Tensor>& c, const std::vector<Tensor>&,
                   const std::vector<Tensor>& k) {
      return std::pair<std::vector<Tensor>, std::vector<Tensor>>{
          {exp(c[0]) + matmul_partial(k[0], k[1], "model")}, {}};
    };
    return all_reduce(
        scan(body, {zeros_like(matmul(a, b))}, {}, {a, b}, ScanOptions{false, 2}).carries[0],
        "model");
  });
  EXPECT_TRUE(has(looped, "exp at ")) << looped;
  // Shares summed in a loop from zeros are a share; from a whole value, that value would count
  // once per process.
  auto accumulated = [](double start) {
    return [start](Tensor a, Tensor b) {
      auto body = [](const std::vector<Tensor>& c, const std::vector<Tensor>&,
                     const std::vector<Tensor>& k) {
        return std::pair<std::vector<Tensor>, std::vector<Tensor>>{
            {c[0] + matmul_partial(k[0], k[1], "model")}, {}};
      };
      const Tensor init = full({2, 3}, start);
      return all_reduce(scan(body, {init}, {}, {a, b}, ScanOptions{false, 2}).carries[0], "model");
    };
  };
  EXPECT_EQ(refusal("shares_from_zeros", accumulated(0.0)), "accepted");
  const std::string from_ones = refusal("shares_from_ones", accumulated(1.0));
  EXPECT_TRUE(has(from_ones, "starts a loop carry")) << from_ones;
}

// A sum over processes of a value every process holds counts it once per process: refused at
// trace time with the line (also inside a scan body); max of it is fine.
TEST(Dist, SummingAValueEveryProcessHoldsIsRefused) {
  auto twice =
      compile("counted_twice", [](const Tensor& w) { return all_reduce(w * 2.0, "data"); });
  try {
    twice(Tensor(Array::full({2}, 1.0)));
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("all_reduce over mesh axis 'data' at"), std::string::npos) << m;
    EXPECT_NE(m.find("dist_test.cpp"), std::string::npos) << m;
    EXPECT_NE(m.find("the same on every process"), std::string::npos) << m;
  }
  auto in_loop = compile("counted_twice_in_scan", [](const Tensor& w) {
    auto body = [](const std::vector<Tensor>& c, const std::vector<Tensor>&,
                   const std::vector<Tensor>&) {
      return std::pair<std::vector<Tensor>, std::vector<Tensor>>{{all_gather(c[0], "data")}, {}};
    };
    return scan(body, {w}, {}, {}, ScanOptions{false, 2}).carries[0];
  });
  EXPECT_THROW(in_loop(Tensor(Array::full({2}, 1.0))), Error);
  auto biggest = compile("max_is_fine",
                         [](const Tensor& w) { return all_reduce(w, "data", ReduceKind::max); });
  EXPECT_EQ(biggest(Tensor(Array::full({2}, 3.0))).array().get_f64(1), 3.0);
}

TEST(Dist, VaryingAxesFollowTheRules) {
  Graph g("v");
  NodeId batch = g.add_param({DType::f32, {4}});
  NodeId weight = g.add_param({DType::f32, {4}});
  NodeId prod = emit_in(g, Op::mul, {batch, weight});
  Attrs ax{
      {"axis", std::string("data")}, {"axis_size", int64_t{2}}, {"reduce", std::string("sum")}};
  NodeId reduced = emit_in(g, Op::all_reduce, {prod}, ax);
  Attrs sc{{"axis", std::string("data")}, {"axis_size", int64_t{2}}, {"dim", int64_t{0}}};
  NodeId scattered = emit_in(g, Op::reduce_scatter, {weight}, sc);
  NodeId gathered = emit_in(g, Op::all_gather, {prod}, sc);
  Attrs invariant = sc;
  invariant.set("invariant", int64_t{1});
  NodeId same_everywhere = emit_in(g, Op::all_gather, {prod}, invariant);
  g.set_outputs({prod, reduced, scattered, gathered, same_everywhere});
  const auto v = varying_axes(g, {{"data"}, {}});
  EXPECT_EQ(v[static_cast<size_t>(gathered)], AxisSet{"data"});
  EXPECT_TRUE(v[static_cast<size_t>(same_everywhere)].empty());
  EXPECT_EQ(v[static_cast<size_t>(prod)], AxisSet{"data"});
  EXPECT_TRUE(v[static_cast<size_t>(reduced)].empty());
  EXPECT_EQ(v[static_cast<size_t>(scattered)], AxisSet{"data"});
  EXPECT_EQ(variance_origin(g, v, prod, "data"), batch);
  EXPECT_EQ(variance_origin(g, v, scattered, "data"), scattered);
}

// Waits name what the thread is in (the innermost scopes, restored on exit) and use the longer
// deadline in a program's first run, which waits for every process's compile.
TEST(Dist, WaitsNameTheirProgramAndCollectiveAndTakeTheirDeadline) {
  const dist::WaitLimits before = dist::wait_limits();
  dist::set_wait_limits({7, 70});
  EXPECT_EQ(dist::wait_context(), "a collective");
  EXPECT_EQ(dist::current_timeout_s(), 7);
  {
    dist::ProgramScope program("train_step", true);
    dist::WaitScope wait("all_reduce over 'data'");
    EXPECT_EQ(dist::wait_context(),
              "all_reduce over 'data' in the first run of program 'train_step'");
    EXPECT_EQ(dist::current_timeout_s(), 70);
    {
      dist::ProgramScope again("eval_step", false);
      EXPECT_EQ(dist::wait_context(), "all_reduce over 'data' in program 'eval_step'");
      EXPECT_EQ(dist::current_timeout_s(), 7);
      EXPECT_EQ(dist::missing_peers_message(0, "h0", {1, 3}, {"h0", "h1", "h0", "h1"}, 7.2),
                "[dist] rank 1 (host h1), rank 3 (host h1) did not arrive within 7 s: rank 0 "
                "(host h0) was waiting in all_reduce over 'data' in program 'eval_step'; the "
                "launch ends here (a stopped or hung process, or a lost network); raise "
                "spmd.collective_timeout_s if the wait is legitimate, or resume from the last "
                "checkpoint");
    }
    EXPECT_NE(dist::missing_peers_message(2, "h0", {1}, {}, 70).find("first_run_timeout_s"),
              std::string::npos);
  }
  EXPECT_EQ(dist::wait_context(), "a collective");
  {
    dist::WaitScope leader("the leader's sampling", true);  // waiting out another's long work
    EXPECT_EQ(dist::current_timeout_s(), 70);
    {
      dist::WaitScope inner("all_gather over 'data'");  // a collective inside it stays long
      EXPECT_EQ(dist::current_timeout_s(), 70);
    }
    EXPECT_NE(dist::missing_peers_message(1, "h0", {0}, {}, 70).find("first_run_timeout_s"),
              std::string::npos);
  }
  EXPECT_EQ(dist::current_timeout_s(), 7);
  dist::set_wait_limits(before);
}

}  // namespace
}  // namespace keel
