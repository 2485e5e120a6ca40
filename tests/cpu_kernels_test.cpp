// CPU kernel table tests: every kernel, every dtype it accepts, seeded random inputs over shapes
// with size-0 and size-1 dims, checked against the reference interpreter (ref::eval_node) on the
// same Arrays. Tolerances: layout, index, cast, iota, rng, argmax, top_k, cumsum, scatter_add and
// reduce_max must match bit for bit (same order, same rounding as the reference). Float sums
// (reduce sum/mean) differ only in summation order in double: 2^-22 relative (f32) or 2^-7 (bf16,
// one ulp). dot_general f32 accumulates in f32 (sgemm), the reference in double: 1e-5 relative
// plus 1e-6 * K absolute for inputs in [-1, 1]; bf16 adds one bf16 ulp. Fused attention (f32
// tiles, a polynomial exp) against the double reference: 2e-5 relative plus 2e-6 absolute.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "array_view.h"
#include "backend/cpu/client.h"
#include "backend/cpu/kernel_attention.h"
#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernels.h"
#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "tests/dot_cases.h"
#include "tests/uniform_real.h"

namespace keel {
namespace {

using Ints = std::vector<int64_t>;
constexpr DType kAll[] = {DType::f32, DType::bf16, DType::i32, DType::i64, DType::boolean};
constexpr DType kNumbers[] = {DType::f32, DType::bf16, DType::i32, DType::i64};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const keel_kernels& K() {
  return cpu::kernels();
}

std::mt19937_64& gen() {
  static std::mt19937_64 g(20240611);
  return g;
}

// Floats in [-1, 1]; with `ties` small integers (equal values) plus NaN, infinities and -0.
// Ints in [-50, 50], or the whole range with `wide` (to exercise wrapping). Bool 0 / 1.
Array random(DType t, Shape s, bool ties = false, bool wide = false) {
  Array a(t, std::move(s));
  std::uniform_int_distribution<int64_t> small(-50, 50), tie(-3, 3), any;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (t == DType::boolean) {
      a.set_i64(i, gen()() & 1);
    } else if (is_int(t)) {
      a.set_i64(i, wide ? any(gen()) : ties ? tie(gen()) : small(gen()));
    } else if (ties) {
      const double special[] = {kNaN, kInf, -kInf, -0.0};
      const int64_t v = tie(gen());
      a.set_f64(i, v == 3 && gen()() % 4 == 0 ? special[gen()() % 4] : static_cast<double>(v));
    } else {
      a.set_f64(i, testing_support::uniform_real(gen(), -1, 1));
    }
  }
  return a;
}

using test::view;
namespace attn = cpu::detail::attn;

// The reference result and an output Array of the node's type for the kernel to fill.
struct Case {
  Array want, got;
};
Case expect(Op op, const std::vector<Array>& in, const Attrs& attrs) {
  Node node;
  node.op = op;
  node.attrs = attrs;
  std::vector<TensorType> types;
  for (size_t i = 0; i < in.size(); ++i) {
    node.inputs.push_back(static_cast<NodeId>(i));
    types.push_back({in[i].dtype(), in[i].shape()});
  }
  node.type = infer_type(op, types, attrs);
  return {ref::eval_node(node, in), Array(node.type.dtype, node.type.shape)};
}

struct Tol {
  double rel = 0, abs = 0;  // both 0: bit for bit
};

void compare(const Array& got, const Array& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (tol.rel == 0 && tol.abs == 0) {
    ASSERT_TRUE(got.same_bytes(want))
        << what << "\n got  " << got.str(64) << "\n want " << want.str(64);
    return;
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.get_f64(i), w = want.get_f64(i);
    if (std::isnan(w) || std::isinf(w)) {
      ASSERT_EQ(std::bit_cast<uint64_t>(g), std::bit_cast<uint64_t>(w)) << what << " at " << i;
    } else {
      ASSERT_NEAR(g, w, tol.rel * std::fabs(w) + tol.abs) << what << " at " << i;
    }
  }
}

std::string label(DType t, const Shape& s) {
  return std::string(dtype_name(t)) + shape_str(s);
}

TEST(CpuKernels, TableIsCompleteAndVersioned) {
  const keel_kernels& k = K();
  EXPECT_EQ(k.abi_version, KEEL_ABI_VERSION);
  EXPECT_EQ(k.struct_size, sizeof(keel_kernels));
  const void* entries[] = {reinterpret_cast<const void*>(k.dot_general),
                           reinterpret_cast<const void*>(k.transpose),
                           reinterpret_cast<const void*>(k.broadcast),
                           reinterpret_cast<const void*>(k.slice),
                           reinterpret_cast<const void*>(k.concat),
                           reinterpret_cast<const void*>(k.pad),
                           reinterpret_cast<const void*>(k.gather),
                           reinterpret_cast<const void*>(k.scatter_add),
                           reinterpret_cast<const void*>(k.one_hot),
                           reinterpret_cast<const void*>(k.iota),
                           reinterpret_cast<const void*>(k.rng_uniform),
                           reinterpret_cast<const void*>(k.reduce),
                           reinterpret_cast<const void*>(k.argmax),
                           reinterpret_cast<const void*>(k.cumsum),
                           reinterpret_cast<const void*>(k.top_k),
                           reinterpret_cast<const void*>(k.copy),
                           reinterpret_cast<const void*>(k.cast),
                           reinterpret_cast<const void*>(k.attention),
                           reinterpret_cast<const void*>(k.attention_grad),
                           reinterpret_cast<const void*>(k.collective),
                           reinterpret_cast<const void*>(k.sparse_attention)};
  // Every pointer-sized slot after the two header words is listed above.
  static_assert(sizeof(entries) == sizeof(keel_kernels) - 2 * sizeof(uint32_t));
  for (const void* p : entries) EXPECT_NE(p, nullptr);
}

TEST(CpuKernels, Transpose) {
  const std::vector<std::pair<Shape, Ints>> cases = {
      {{}, {}},
      {{0, 3}, {1, 0}},
      {{1, 5}, {1, 0}},
      {{37, 53}, {1, 0}},
      {{2, 3, 4}, {0, 2, 1}},
      {{2, 3, 4}, {1, 0, 2}},
      {{2, 3, 4}, {1, 2, 0}},
      {{2, 3, 4}, {2, 0, 1}},
      {{2, 3, 4}, {2, 1, 0}},
      {{4, 1, 6, 5}, {3, 0, 2, 1}},
      {{100, 70, 12}, {2, 1, 0}},
      {{90, 33, 40}, {0, 2, 1}},
      {{8, 64, 12, 64}, {0, 2, 1, 3}},
      {{2, 1, 3, 2, 1, 2, 3, 2}, {7, 6, 5, 4, 3, 2, 1, 0}}};
  for (DType t : kAll) {
    for (const auto& [s, perm] : cases) {
      const Array x = random(t, s);
      Case c = expect(Op::transpose, {x}, {{"perm", perm}});
      keel_view in = view(x), out = view(c.got);
      K().transpose(&in, &out, perm.data());
      compare(c.got, c.want, {}, label(t, s));
    }
  }
}

TEST(CpuKernels, Broadcast) {
  const std::vector<std::pair<Shape, Shape>> cases = {{{}, {2, 3}},
                                                      {{3}, {2, 3}},
                                                      {{2, 1}, {2, 3}},
                                                      {{1, 3, 1}, {2, 1, 3, 5}},
                                                      {{0}, {2, 0}},
                                                      {{1}, {0}},
                                                      {{1, 1}, {1, 1}},
                                                      {{1, 300}, {300, 300}},
                                                      {{300, 1}, {2, 300, 200}},
                                                      {{4, 1, 5}, {4, 6, 5}},
                                                      {{}, {300, 300}},
                                                      {{1}, {70000}}};
  for (DType t : kAll) {
    for (const auto& [from, to] : cases) {
      const Array x = random(t, from);
      Case c = expect(Op::broadcast, {x}, {{"shape", to}});
      keel_view in = view(x), out = view(c.got);
      K().broadcast(&in, &out);
      compare(c.got, c.want, {}, label(t, from) + "->" + shape_str(to));
    }
  }
}

TEST(CpuKernels, Slice) {
  struct S {
    Shape shape;
    Ints start, limit, stride;
  };
  const std::vector<S> cases = {{{}, {}, {}, {}},
                                {{10}, {2}, {9}, {3}},
                                {{10}, {4}, {4}, {1}},
                                {{5, 6}, {1, 0}, {4, 6}, {1, 1}},
                                {{5, 6}, {0, 1}, {5, 6}, {2, 7}},
                                {{3, 4, 5}, {1, 1, 1}, {3, 4, 5}, {1, 2, 2}},
                                {{1, 7, 1}, {0, 2, 0}, {1, 7, 1}, {1, 1, 1}},
                                {{300, 400}, {3, 5}, {300, 400}, {2, 3}},
                                {{256, 512}, {0, 128}, {256, 384}, {1, 1}},
                                {{3, 40000}, {1, 0}, {3, 40000}, {1, 1}}};
  for (DType t : kAll) {
    for (const S& s : cases) {
      const Array x = random(t, s.shape);
      Case c =
          expect(Op::slice, {x}, {{"start", s.start}, {"limit", s.limit}, {"stride", s.stride}});
      keel_view in = view(x), out = view(c.got);
      K().slice(&in, &out, s.start.data(), s.stride.data());
      compare(c.got, c.want, {}, label(t, s.shape));
    }
  }
}

TEST(CpuKernels, Concat) {
  struct S {
    std::vector<Shape> pieces;
    int64_t axis;
  };
  const std::vector<S> cases = {{{{3}}, 0},
                                {{{2, 3}, {4, 3}}, 0},
                                {{{2, 3}, {2, 0}, {2, 5}}, 1},
                                {{{2, 3, 4}, {2, 1, 4}, {2, 2, 4}}, 1},
                                {{{2, 3, 1}, {2, 3, 2}}, 2},
                                {{{0, 3}, {0, 2}}, 1},
                                {{{128, 300}, {128, 200}, {128, 100}}, 1}};
  for (DType t : kAll) {
    for (const S& s : cases) {
      std::vector<Array> xs;
      std::vector<keel_view> views;
      for (const Shape& p : s.pieces) xs.push_back(random(t, p));
      for (const Array& x : xs) views.push_back(view(x));
      std::vector<const keel_view*> ptrs;
      for (const keel_view& v : views) ptrs.push_back(&v);
      Case c = expect(Op::concat, xs, {{"axis", s.axis}});
      keel_view out = view(c.got);
      K().concat(ptrs.data(), static_cast<int32_t>(ptrs.size()), &out,
                 static_cast<int32_t>(s.axis));
      compare(c.got, c.want, {}, label(t, s.pieces[0]));
    }
  }
}

TEST(CpuKernels, Pad) {
  struct S {
    Shape shape;
    Ints low, high;
  };
  const std::vector<S> cases = {{{}, {}, {}},
                                {{3}, {2}, {1}},
                                {{0, 2}, {1, 0}, {1, 2}},
                                {{2, 3}, {0, 0}, {0, 0}},
                                {{2, 3, 4}, {1, 0, 2}, {0, 3, 1}},
                                {{1, 1}, {3, 2}, {2, 3}},
                                {{200, 300}, {5, 7}, {3, 1}}};
  const double values[] = {0.0, 1.5, -2.7, kNaN, 1e20};
  for (DType t : kAll) {
    for (const S& s : cases) {
      for (double v : values) {
        const Array x = random(t, s.shape);
        Case c = expect(Op::pad, {x}, {{"low", s.low}, {"high", s.high}, {"value", v}});
        keel_view in = view(x), out = view(c.got);
        K().pad(&in, &out, s.low.data(), v);
        compare(c.got, c.want, {}, label(t, s.shape) + " value " + std::to_string(v));
      }
    }
  }
}

TEST(CpuKernels, CopyIsAByteCopy) {
  for (DType t : kAll) {
    for (const Shape& s : {Shape{}, Shape{0}, Shape{7, 3}, Shape{1 << 20}}) {
      const Array x = random(t, s);
      Case c = expect(Op::reshape, {x}, {{"shape", Shape{numel(s)}}});
      keel_view in = view(x), out = view(c.got);
      K().copy(&in, &out);
      compare(c.got, c.want, {}, label(t, s));
    }
  }
}

TEST(CpuKernels, CastEveryPair) {
  const double specials[] = {kNaN,  kInf,    -kInf,      -0.0,         0.0,           2.5,
                             -2.5,  1e10,    -1e10,      3e9,          -3e9,          1e19,
                             -1e19, 65504.0, 0.49,       255.75,       1.0,           -1.0,
                             2e38,  1e-40,   16777217.0, 2147483647.0, -2147483648.0, 9.3e18};
  const int64_t ints[] = {0,         1,         -1,        255,
                          256,       -129,      1LL << 31, -(1LL << 31) - 1,
                          INT64_MAX, INT64_MIN, 16777217,  (1LL << 53) + 1};
  for (DType from : kAll) {
    Array x(from, {static_cast<int64_t>(std::size(specials) + std::size(ints)) + 2000});
    for (int64_t i = 0; i < x.numel(); ++i) {
      const size_t n = std::size(specials);
      if (i < static_cast<int64_t>(n)) {
        x.set_f64(i, specials[i]);
      } else if (i < static_cast<int64_t>(n + std::size(ints))) {
        x.set_i64(i, ints[i - n]);
      } else {
        x.set_i64(i, static_cast<int64_t>(gen()()));
        if (is_float(from))
          x.set_f64(i,
                    std::ldexp(static_cast<double>(gen()() % 2001) - 1000, int(gen()() % 80) - 40));
      }
    }
    for (DType to : kAll) {
      Case c = expect(Op::cast, {x}, {{"dtype", to}});
      keel_view in = view(x), out = view(c.got);
      K().cast(&in, &out);
      compare(c.got, c.want, {},
              std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)));
    }
  }
}

Array random_indices(DType t, Shape s, int64_t n) {
  Array a(t, std::move(s));
  std::uniform_int_distribution<int64_t> u(-2, n + 1);  // some out of range: clamped
  for (int64_t i = 0; i < a.numel(); ++i) a.set_i64(i, u(gen()));
  return a;
}

struct IndexCase {
  Shape operand, indices;
  int64_t axis;
};
const std::vector<IndexCase> kIndexCases = {
    {{5}, {}, 0},        {{5}, {7}, 0},           {{4, 3}, {2, 3}, 0},     {{4, 3}, {6}, 1},
    {{2, 3, 4}, {5}, 1}, {{2, 3, 4}, {0}, 2},     {{1, 6, 1}, {9}, 1},     {{0, 3}, {0}, 0},
    {{3, 1}, {4}, 1},    {{1000, 96}, {3000}, 0}, {{64, 500, 4}, {700}, 1}};

TEST(CpuKernels, Gather) {
  for (DType t : kAll) {
    for (DType it : {DType::i32, DType::i64}) {
      for (const IndexCase& ic : kIndexCases) {
        const Array x = random(t, ic.operand);
        const Array idx = random_indices(it, ic.indices, ic.operand[ic.axis]);
        Case c = expect(Op::gather, {x, idx}, {{"axis", ic.axis}});
        keel_view in = view(x), iv = view(idx), out = view(c.got);
        K().gather(&in, &iv, &out, static_cast<int32_t>(ic.axis));
        compare(c.got, c.want, {}, label(t, ic.operand) + " idx " + label(it, ic.indices));
      }
    }
  }
}

TEST(CpuKernels, ScatterAddAccumulatesRepeatedIndicesDeterministically) {
  for (DType t : kNumbers) {
    for (DType it : {DType::i32, DType::i64}) {
      for (const IndexCase& ic : kIndexCases) {
        Shape us(ic.operand.begin(), ic.operand.begin() + ic.axis);
        us.insert(us.end(), ic.indices.begin(), ic.indices.end());
        us.insert(us.end(), ic.operand.begin() + ic.axis + 1, ic.operand.end());
        const Array x = random(t, ic.operand, false, true), u = random(t, us, false, true);
        const Array idx = random_indices(it, ic.indices, ic.operand[ic.axis]);
        Case c = expect(Op::scatter_add, {x, idx, u}, {{"axis", ic.axis}});
        keel_view in = view(x), iv = view(idx), uv = view(u), out = view(c.got);
        K().scatter_add(&in, &iv, &uv, &out, static_cast<int32_t>(ic.axis));
        compare(c.got, c.want, {}, label(t, ic.operand) + " idx " + label(it, ic.indices));
      }
    }
  }
}

TEST(CpuKernels, OneHot) {
  for (DType t : kAll) {
    for (DType it : {DType::i32, DType::i64}) {
      for (const auto& [s, depth] : std::vector<std::pair<Shape, int64_t>>{
               {{}, 4}, {{5}, 3}, {{2, 3}, 1}, {{4}, 0}, {{0}, 5}, {{300, 40}, 50}}) {
        const Array idx = random_indices(it, s, depth);
        Case c = expect(Op::one_hot, {idx}, {{"depth", depth}, {"dtype", t}});
        keel_view iv = view(idx), out = view(c.got);
        K().one_hot(&iv, &out);
        compare(c.got, c.want, {}, label(t, s));
      }
    }
  }
}

TEST(CpuKernels, Iota) {
  for (DType t : kNumbers) {
    for (const auto& [s, dim] : std::vector<std::pair<Shape, int64_t>>{{{1}, 0},
                                                                       {{5}, 0},
                                                                       {{2, 3}, 0},
                                                                       {{2, 3}, 1},
                                                                       {{3, 0, 2}, 2},
                                                                       {{4, 1, 3}, 1},
                                                                       {{70000}, 0},
                                                                       {{3, 300, 100}, 1}}) {
      Case c = expect(Op::iota, {}, {{"shape", s}, {"dtype", t}, {"dim", dim}});
      keel_view out = view(c.got);
      K().iota(&out, static_cast<int32_t>(dim));
      compare(c.got, c.want, {}, label(t, s));
    }
  }
}

TEST(CpuKernels, RngUniformIsTheReferenceStream) {
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Shape& s : {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{300, 700}}) {
      for (int64_t seed : {int64_t{0}, int64_t{42}, int64_t{-7}}) {
        const Array sa = Array::from_i64({}, std::vector<int64_t>{seed});
        const Array ca = Array::from_i64({}, std::vector<int64_t>{seed * 31 + 5});
        Case c = expect(Op::rng_uniform, {sa, ca}, {{"shape", s}, {"dtype", t}});
        keel_view sv = view(sa), cv = view(ca), out = view(c.got);
        K().rng_uniform(&sv, &cv, &out);
        compare(c.got, c.want, {}, label(t, s));
      }
    }
  }
}

// Every subset of axes of a few shapes, both keepdims, every op, plus shapes large enough to take
// the parallel and split-reduction paths.
TEST(CpuKernels, Reduce) {
  const std::vector<Shape> shapes = {{},        {1},          {7},        {0},       {3, 4, 5},
                                     {2, 0, 3}, {1, 6, 1, 4}, {512, 300}, {1 << 17}, {40, 3, 2000}};
  const Op ops[] = {Op::reduce_sum, Op::reduce_max, Op::reduce_mean};
  for (DType t : kNumbers) {
    for (const Shape& s : shapes) {
      const bool big = numel(s) > 100000;
      const int rank = static_cast<int>(s.size());
      for (int mask = 0; mask < (1 << rank); ++mask) {
        Ints axes;
        for (int d = 0; d < rank; ++d) {
          if (mask >> d & 1) axes.push_back(d);
        }
        for (int op = 0; op < 3; ++op) {
          for (int64_t keep : {int64_t{0}, int64_t{1}}) {
            if (big && keep) continue;  // keepdims only changes the shape; spare the slow oracle
            const Array x = random(t, s, op == 1 && !big, op != 2);
            Case c = expect(ops[op], {x}, {{"axes", axes}, {"keepdims", keep}});
            keel_view in = view(x), out = view(c.got);
            K().reduce(&in, &out, op, axes.data(), static_cast<int32_t>(axes.size()));
            const Tol tol = op == 1 || !is_float(t) ? Tol{}
                            : t == DType::f32       ? Tol{0x1p-22, 1e-12}
                                                    : Tol{0x1p-7, 1e-12};
            compare(c.got, c.want, tol,
                    label(t, s) + " mask " + std::to_string(mask) + " op " + std::to_string(op));
          }
        }
      }
    }
  }
}

// IEEE maximum: +0 beats -0, NaN wins wherever it is, -inf stays -inf; along rows, columns, all.
TEST(CpuKernels, ReduceMaxOrdersSignedZerosAndPropagatesNaN) {
  const std::vector<double> v = {-0.0, 0.0,  -1, 0.0,   -0.0,  -1,    -0.0, -0.0,  -1,
                                 -1,   kNaN, 2,  -kInf, -kInf, -kInf, kNaN, -kInf, 5};
  for (DType t : {DType::f32, DType::bf16}) {
    Array x(t, {6, 3});
    for (size_t i = 0; i < v.size(); ++i) x.set_f64(static_cast<int64_t>(i), v[i]);
    for (const Ints& axes : {Ints{1}, Ints{0}, Ints{0, 1}}) {
      Case c = expect(Op::reduce_max, {x}, {{"axes", axes}, {"keepdims", int64_t{0}}});
      keel_view in = view(x), out = view(c.got);
      K().reduce(&in, &out, 1, axes.data(), static_cast<int32_t>(axes.size()));
      compare(c.got, c.want, {}, label(t, x.shape()) + " axes " + std::to_string(axes[0]));
    }
  }
}

TEST(CpuKernels, Argmax) {
  for (DType t : kNumbers) {
    for (const auto& [s, axis] : std::vector<std::pair<Shape, int64_t>>{{{1}, 0},
                                                                        {{9}, 0},
                                                                        {{4, 5}, 0},
                                                                        {{4, 5}, 1},
                                                                        {{3, 6, 300}, 1},
                                                                        {{0, 3}, 1},
                                                                        {{2, 1, 3}, 1},
                                                                        {{500, 300}, 1},
                                                                        {{500, 300}, 0}}) {
      for (int64_t keep : {int64_t{0}, int64_t{1}}) {
        const Array x = random(t, s, true);
        Case c = expect(Op::argmax, {x}, {{"axis", axis}, {"keepdims", keep}});
        keel_view in = view(x), out = view(c.got);
        K().argmax(&in, &out, static_cast<int32_t>(axis));
        compare(c.got, c.want, {}, label(t, s) + " axis " + std::to_string(axis));
      }
    }
  }
}

TEST(CpuKernels, Cumsum) {
  for (DType t : kNumbers) {
    for (const auto& [s, axis] : std::vector<std::pair<Shape, int64_t>>{{{1}, 0},
                                                                        {{9}, 0},
                                                                        {{4, 5}, 0},
                                                                        {{4, 5}, 1},
                                                                        {{3, 0, 2}, 2},
                                                                        {{3, 7, 300}, 1},
                                                                        {{2, 1, 3}, 1},
                                                                        {{300, 500}, 1},
                                                                        {{300, 500}, 0}}) {
      for (int64_t rev : {int64_t{0}, int64_t{1}}) {
        const Array x = random(t, s, false, true);
        Case c = expect(Op::cumsum, {x}, {{"axis", axis}, {"reverse", rev}});
        keel_view in = view(x), out = view(c.got);
        K().cumsum(&in, &out, static_cast<int32_t>(axis), static_cast<int32_t>(rev));
        compare(c.got, c.want, {}, label(t, s) + " axis " + std::to_string(axis));
      }
    }
  }
}

TEST(CpuKernels, TopKValuesAndIndicesEitherMayBeNull) {
  for (DType t : kNumbers) {
    for (const auto& [s, k] : std::vector<std::pair<Shape, int64_t>>{{{1}, 1},
                                                                     {{9}, 3},
                                                                     {{9}, 9},
                                                                     {{4, 5}, 2},
                                                                     {{0, 6}, 2},
                                                                     {{2, 1, 7}, 7},
                                                                     {{64, 5000}, 50}}) {
      const Array x = random(t, s, true);
      Case v = expect(Op::top_k_values, {x}, {{"k", k}});
      Case i = expect(Op::top_k_indices, {x}, {{"k", k}});
      keel_view in = view(x), vv = view(v.got), iv = view(i.got);
      K().top_k(&in, &vv, &iv, k);
      compare(v.got, v.want, {}, label(t, s) + " values");
      compare(i.got, i.want, {}, label(t, s) + " indices");
      Array only_v(v.got.dtype(), v.got.shape()), only_i(i.got.dtype(), i.got.shape());
      keel_view ov = view(only_v), oi = view(only_i);
      K().top_k(&in, &ov, nullptr, k);
      K().top_k(&in, nullptr, &oi, k);
      compare(only_v, v.want, {}, label(t, s) + " values alone");
      compare(only_i, i.want, {}, label(t, s) + " indices alone");
    }
  }
}

// Every layout of dot_cases.h (each BLAS path) in every numeric dtype; cpu_matmul_test runs them
// on each library and precision.
TEST(CpuKernels, DotGeneral) {
  cpu::make_cpu_client();  // loads the BLAS the GEMM kernels call
  for (DType t : kNumbers) {
    for (const test::DotCase& d : test::dot_cases()) {
      const Array l = random(t, d.l, false, is_int(t)), r = random(t, d.r, false, is_int(t));
      Case c = expect(Op::dot_general, {l, r},
                      {{"lhs_batch", d.lb},
                       {"rhs_batch", d.rb},
                       {"lhs_contract", d.lc},
                       {"rhs_contract", d.rc}});
      keel_view lv = view(l), rv = view(r), out = view(c.got);
      K().dot_general(&lv, &rv, &out, d.lb.data(), d.rb.data(), static_cast<int32_t>(d.lb.size()),
                      d.lc.data(), d.rc.data(), static_cast<int32_t>(d.lc.size()), KEEL_MATMUL_F32);
      int64_t k = 1;
      for (int64_t a : d.lc) k *= d.l[a];
      const Tol tol = !is_float(t)      ? Tol{}
                      : t == DType::f32 ? Tol{1e-5, 1e-6 * static_cast<double>(k)}
                                        : Tol{0x1p-7, 1e-6 * static_cast<double>(k)};
      compare(c.got, c.want, tol, label(t, d.l) + " x " + shape_str(d.r));
    }
  }
}

// Split reductions combine partials in an order fixed by the shape, and scatter_add gives each
// output row to one thread: three threads (an uneven split) give the serial result bit for bit.
TEST(CpuKernels, ParallelSumsMatchSerialBitForBit) {
  const Array x = random(DType::f32, {1 << 18});
  const Array cols = random(DType::f32, {4096, 40});
  const Array idx = random_indices(DType::i64, {3000}, 50), upd = random(DType::f32, {3000, 64});
  const Array table = random(DType::f32, {50, 64});
  const int64_t axis0[] = {0};
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Array total(DType::f32, {}), col(DType::f32, {40}), scattered(DType::f32, {50, 64});
    keel_view xv = view(x), tv = view(total), cv = view(cols), colv = view(col);
    keel_view iv = view(idx), uv = view(upd), bv = view(table), sv = view(scattered);
    K().reduce(&xv, &tv, 0, axis0, 1);
    K().reduce(&cv, &colv, 0, axis0, 1);
    K().scatter_add(&bv, &iv, &uv, &sv, 0);
    return std::vector<Array>{total, col, scattered};
  };
  const int before = omp_get_max_threads();
  const std::vector<Array> one = run(1), three = run(3);
  omp_set_num_threads(before);
  for (size_t i = 0; i < one.size(); ++i)
    compare(three[i], one[i], {}, "result " + std::to_string(i));
}

TEST(CpuKernels, BadViewsAreErrorsNamingTheBackend) {
  const Array x = random(DType::f32, {0, 3});
  const Array idx = Array::from_i64({2}, std::vector<int64_t>{0, 1});
  Array out(DType::f32, {2, 3});
  keel_view xv = view(x), iv = view(idx), ov = view(out);
  try {
    K().gather(&xv, &iv, &ov, 0);
    FAIL() << "gather from an empty axis must throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[backend.cpu] gather", 0), 0u) << e.what();
  }
  const Array a = random(DType::f32, {2, 3});
  Array wrong(DType::f32, {3, 3});
  keel_view av = view(a), wv = view(wrong);
  const int64_t perm[] = {1, 0};
  EXPECT_THROW(K().transpose(&av, &wv, perm), Error);
  Array bad_dtype(DType::i32, {2, 3});
  keel_view bv = view(bad_dtype);
  EXPECT_THROW(K().copy(&av, &bv), Error);
}

// ---- fused attention: q [B,H,T,D], k/v [B,KV,T,D], documents given by their lengths per row

struct AttnCase {
  int64_t B, H, KV, T, D;
  Ints docs;  // lengths of the documents of each row (summing to T); empty: no doc ids
  DType doc_type = DType::i64;
};

std::vector<Array> attention_inputs(const AttnCase& c) {
  std::vector<Array> in = {random(DType::f32, {c.B, c.H, c.T, c.D}),
                           random(DType::f32, {c.B, c.KV, c.T, c.D}),
                           random(DType::f32, {c.B, c.KV, c.T, c.D})};
  if (!c.docs.empty()) {
    Array doc(c.doc_type, {c.B, c.T});
    for (int64_t b = 0; b < c.B; ++b) {
      int64_t t = 0, id = 7 * b;  // ids need not start at 0 or be shared across rows
      for (int64_t len : c.docs) {
        for (int64_t i = 0; i < len; ++i) doc.set_i64(b * c.T + t++, id);
        ++id;
      }
    }
    in.push_back(std::move(doc));
  }
  return in;
}

// The five ops' results from the kernels, in order: out, lse, dq, dk, dv. The gradient calls get
// the reference's out and lse so both sides differentiate the same forward.
std::vector<Array> attention_kernels(const std::vector<Array>& in, const Array& out,
                                     const Array& lse, const Array& dout, double scale,
                                     int32_t precision = KEEL_MATMUL_F32) {
  const bool docs = in.size() == 4;
  keel_view q = view(in[0]), k = view(in[1]), v = view(in[2]);
  keel_view doc = docs ? view(in[3]) : keel_view{};
  const keel_view* d = docs ? &doc : nullptr;
  Array o(DType::f32, in[0].shape()), l(DType::f32, lse.shape());
  Array dq(DType::f32, in[0].shape()), dk(DType::f32, in[1].shape()), dv(DType::f32, in[1].shape());
  keel_view ov = view(o), lv = view(l), dqv = view(dq), dkv = view(dk), dvv = view(dv);
  K().attention(&q, &k, &v, d, &ov, &lv, scale, precision);
  keel_view ro = view(out), rl = view(lse), g = view(dout);
  K().attention_grad(&q, &k, &v, &ro, &g, &rl, d, &dqv, nullptr, nullptr, scale, precision);
  K().attention_grad(&q, &k, &v, &ro, &g, &rl, d, nullptr, &dkv, nullptr, scale, precision);
  K().attention_grad(&q, &k, &v, &ro, &g, &rl, d, nullptr, nullptr, &dvv, scale, precision);
  // dk and dv in one pass (as generated code calls it): the same bytes as one at a time.
  Array dk2(DType::f32, in[1].shape()), dv2(DType::f32, in[1].shape());
  keel_view dk2v = view(dk2), dv2v = view(dv2);
  K().attention_grad(&q, &k, &v, &ro, &g, &rl, d, nullptr, &dk2v, &dv2v, scale, precision);
  EXPECT_EQ(std::memcmp(dk2.data(), dk.data(), dk.nbytes()), 0);
  EXPECT_EQ(std::memcmp(dv2.data(), dv.data(), dv.nbytes()), 0);
  // All three in one pass (one task per batch and kv head; at one thread whenever there are two
  // or more of them), and dq with dv alone: the same bytes again.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (bool with_dk : {true, false}) {
    Array dq3(DType::f32, in[0].shape()), dk3(DType::f32, in[1].shape());
    Array dv3(DType::f32, in[1].shape());
    keel_view dq3v = view(dq3), dk3v = view(dk3), dv3v = view(dv3);
    K().attention_grad(&q, &k, &v, &ro, &g, &rl, d, &dq3v, with_dk ? &dk3v : nullptr, &dv3v, scale,
                       precision);
    EXPECT_EQ(std::memcmp(dq3.data(), dq.data(), dq.nbytes()), 0) << "dk " << with_dk;
    if (with_dk) {
      EXPECT_EQ(std::memcmp(dk3.data(), dk.data(), dk.nbytes()), 0);
    }
    EXPECT_EQ(std::memcmp(dv3.data(), dv.data(), dv.nbytes()), 0) << "dk " << with_dk;
  }
  omp_set_num_threads(threads);
  return {o, l, dq, dk, dv};
}

// Against the reference: odd T (not a multiple of the 64-row tile), T = 1, GQA, odd head dims,
// several documents per row with ones of length 1 and ones crossing tile boundaries.
TEST(CpuKernels, AttentionMatchesTheReference) {
  const std::vector<AttnCase> cases = {
      {1, 2, 2, 1, 8, {}},
      {2, 8, 2, 67, 16, {3, 1, 40, 23}},
      {1, 4, 1, 130, 32, {1, 63, 2, 64}, DType::i32},
      {1, 2, 1, 70, 5, {}},
      {1, 2, 2, 129, 64, {129}},
  };
  for (const AttnCase& c : cases) {
    const std::string what =
        fmt::format("B{} H{} KV{} T{} D{} docs {}", c.B, c.H, c.KV, c.T, c.D, c.docs.size());
    const std::vector<Array> in = attention_inputs(c);
    const Attrs attrs{{"scale", 1.0 / std::sqrt(double(c.D))}};
    std::vector<Array> lse_in = {in[0], in[1]};
    if (in.size() == 4) lse_in.push_back(in[3]);
    const Array out = expect(Op::attention, in, attrs).want;
    const Array lse = expect(Op::attention_lse, lse_in, attrs).want;
    const Array dout = random(DType::f32, in[0].shape());
    std::vector<Array> grad_in = {in[0], in[1], in[2], out, dout, lse};
    if (in.size() == 4) grad_in.push_back(in[3]);
    const std::vector<Array> want = {out, lse, expect(Op::attention_dq, grad_in, attrs).want,
                                     expect(Op::attention_dk, grad_in, attrs).want,
                                     expect(Op::attention_dv, grad_in, attrs).want};
    const std::vector<Array> got = attention_kernels(in, out, lse, dout, attrs.f("scale"));
    const char* names[] = {"out", "lse", "dq", "dk", "dv"};
    for (size_t i = 0; i < got.size(); ++i) {
      compare(got[i], want[i], {2e-5, 2e-6}, what + " " + names[i]);
    }
  }
}

// A copy of x with every element rounded to bf16 (kept in f32).
Array bf16_values(const Array& x) {
  Array r(DType::f32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    r.set_f64(i, attn::bf16_rounded(static_cast<float>(x.get_f64(i))));
  }
  return r;
}

// The root mean square of a - b over that of b (b = 0: of a).
double rms_ratio(const Array& a, const Array& b) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    d += std::pow(a.get_f64(i) - b.get_f64(i), 2);
    n += std::pow(b.get_f64(i), 2);
  }
  return std::sqrt(d / n);
}

// matmul_precision = bf16 rounds the operands of every tile product (q, k, v, dout, and each
// tile's probabilities and score gradients) and sums in f32. Against the reference on rounded
// q, k, v and dout, what remains is the tiles' rounding; q and k spread over [-4, 4) so that
// unrounded q or k would miss by more. Every way the host has is checked: the f32 tiles'
// rounding, and where D allows, AVX512-BF16 dot products and AMX tiles (whose forward rounds
// probabilities once per pass of up to 1024 keys, not per 64). Each way gives the same bytes at
// 1, 2 and 3 threads.
TEST(CpuKernels, AttentionInBf16RoundsTheOperandsOfItsProducts) {
  const std::vector<AttnCase> cases = {
      {2, 4, 2, 130, 64, {3, 1, 60, 66}},
      {1, 2, 1, 67, 32, {}},
      {1, 2, 2, 70, 16, {}},  // D not a multiple of 32: the rounding path on any host
      // Past the bf16 forward's 1024-key softmax pass; the last rows' first pass is all dead.
      {1, 2, 1, 1100, 32, {1030, 70}},
  };
  for (const AttnCase& c : cases) {
    const std::string what = fmt::format("B{} H{} KV{} T{} D{}", c.B, c.H, c.KV, c.T, c.D);
    std::vector<Array> in = attention_inputs(c);
    for (int i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < in[i].numel(); ++j) in[i].set_f64(j, 4 * in[i].get_f64(j));
    }
    const Array dout = random(DType::f32, in[0].shape());
    std::vector<Array> rounded = in;
    for (int i = 0; i < 3; ++i) rounded[i] = bf16_values(in[i]);
    const Attrs attrs{{"scale", 1.0 / std::sqrt(double(c.D))}};
    std::vector<Array> lse_in = {rounded[0], rounded[1]};
    if (in.size() == 4) lse_in.push_back(in[3]);
    const Array out = expect(Op::attention, rounded, attrs).want;
    const Array lse = expect(Op::attention_lse, lse_in, attrs).want;
    std::vector<Array> grad_in = {rounded[0], rounded[1], rounded[2], out, bf16_values(dout), lse};
    if (in.size() == 4) grad_in.push_back(in[3]);
    const std::vector<Array> want = {out, lse, expect(Op::attention_dq, grad_in, attrs).want,
                                     expect(Op::attention_dk, grad_in, attrs).want,
                                     expect(Op::attention_dv, grad_in, attrs).want};
    const double scale = attrs.f("scale");
    const std::vector<Array> f32 = attention_kernels(in, out, lse, dout, scale);
    auto run = [&](attn::Bf16Tiles way, int threads) {
      attn::force_bf16_tiles(way);
      omp_set_num_threads(threads);
      std::vector<Array> r = attention_kernels(in, out, lse, dout, scale, KEEL_MATMUL_BF16);
      attn::force_bf16_tiles(std::nullopt);
      return r;
    };
    const int before = omp_get_max_threads();
    const char* way_names[] = {"AMX", "dot products", "rounding"};
    // Root-mean-square errors relative to the reference's: the tiles' rounding gave up to 5e-4
    // (out), 5e-8 (lse), 2e-3 (dq, dk) and 1.4e-3 (dv) in two input draws; the f32 kernel misses
    // the rounded operands' reference by 4e-3, 7e-4, 1e-2 and 1.1e-2, so unrounded operands fail.
    // dq and dk missed by 3.7-4.8e-3 while delta = dout·out took the f32 dout (see Grad).
    const char* names[] = {"out", "lse", "dq", "dk", "dv"};
    const double tols[] = {1.5e-3, 1e-6, 2.7e-3, 2.7e-3, 4e-3};
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_GT(rms_ratio(f32[i], want[i]), tols[i])
          << what << " " << names[i] << ": the check cannot tell f32 apart";
    }
    const std::vector<Array> rounding = run(attn::Bf16Tiles::rounding, 2);
    for (attn::Bf16Tiles way :
         {attn::Bf16Tiles::amx, attn::Bf16Tiles::dot_products, attn::Bf16Tiles::rounding}) {
      if (!attn::bf16_tiles_available(way, c.D)) continue;
      const std::string how = what + " " + way_names[static_cast<int>(way)];
      const std::vector<Array> two = run(way, 2);
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_LE(rms_ratio(two[i], want[i]), tols[i]) << how << " " << names[i];
      }
      // Forcing took effect: another way sums in another order, so out's last bits differ.
      if (way != attn::Bf16Tiles::rounding) {
        EXPECT_NE(std::memcmp(two[0].data(), rounding[0].data(), two[0].nbytes()), 0) << how;
      }
      for (int threads : {1, 3}) {
        const std::vector<Array> again = run(way, threads);
        for (size_t i = 0; i < want.size(); ++i) {
          compare(again[i], two[i], {}, how + " threads " + std::to_string(threads));
        }
      }
    }
    omp_set_num_threads(before);
  }
}

// The fastest way the host has runs unless one is forced: AMX, then AVX512-BF16 dot products
// (AMD Zen 4), then the rounding f32 tiles; head dims off a multiple of 32 always round.
TEST(CpuKernels, AttentionInBf16TakesTheFastestWayTheHostHas) {
  using attn::Bf16Tiles;
  const Bf16Tiles best = attn::bf16_tiles_available(Bf16Tiles::amx, 64) ? Bf16Tiles::amx
                         : attn::bf16_tiles_available(Bf16Tiles::dot_products, 64)
                             ? Bf16Tiles::dot_products
                             : Bf16Tiles::rounding;
  EXPECT_EQ(attn::bf16_tiles(64), best);
  EXPECT_EQ(attn::bf16_tiles(48), Bf16Tiles::rounding);
  EXPECT_TRUE(attn::bf16_tiles_available(Bf16Tiles::rounding, 48));
  const bool avx512_bf16 = cpu::detail::onednn_description().find("bf16") != std::string::npos ||
                           cpu::detail::onednn_description().find("amx") != std::string::npos;
  if (avx512_bf16) {
    EXPECT_NE(best, Bf16Tiles::rounding) << cpu::detail::onednn_description();
  }
  attn::force_bf16_tiles(Bf16Tiles::rounding);
  EXPECT_EQ(attn::bf16_tiles(64), Bf16Tiles::rounding);
  attn::force_bf16_tiles(std::nullopt);
  EXPECT_EQ(attn::bf16_tiles(64), best);
}

// Each result element is summed by one thread in a fixed order (dk and dv over the query heads
// of a group too): 1, 2 and 3 threads give the same bytes.
TEST(CpuKernels, AttentionIsIndependentOfTheThreadCount) {
  const AttnCase c{2, 4, 2, 200, 32, {50, 1, 90, 59}};
  const std::vector<Array> in = attention_inputs(c);
  const Array dout = random(DType::f32, in[0].shape());
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Array out(DType::f32, in[0].shape()), lse(DType::f32, {c.B, c.H, c.T});
    keel_view q = view(in[0]), k = view(in[1]), v = view(in[2]), d = view(in[3]);
    keel_view ov = view(out), lv = view(lse);
    K().attention(&q, &k, &v, &d, &ov, &lv, 0.25, KEEL_MATMUL_F32);
    std::vector<Array> r = attention_kernels(in, out, lse, dout, 0.25);
    r[0] = out;  // forward from this thread count, then the gradients of it
    r[1] = lse;
    return r;
  };
  const int before = omp_get_max_threads();
  const std::vector<Array> one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(before);
  for (size_t i = 0; i < one.size(); ++i) {
    compare(two[i], one[i], {}, "2 threads, result " + std::to_string(i));
    compare(three[i], one[i], {}, "3 threads, result " + std::to_string(i));
  }
}

// Heads `h0 .. h0 + n` of a [B, T, W, D] buffer (W heads per position) as the [B, n, T, D]
// strided view the kernels index: how generated code passes a head slice of a fused projection
// or a bthd result.
keel_view heads_view(const Array& buf, int64_t h0, int64_t n) {
  const Shape& s = buf.shape();  // B, T, W, D
  keel_view v = view(buf);
  v.data = const_cast<std::byte*>(buf.data()) + h0 * s[3] * 4;
  const int64_t shape[] = {s[0], n, s[1], s[3]};
  const int64_t stride[] = {s[1] * s[2] * s[3], s[3], s[2] * s[3], 1};
  std::copy(shape, shape + 4, v.shape);
  std::copy(stride, stride + 4, v.stride);
  v.strided = 1;
  return v;
}

// The [B, n, T, D] array of those heads, row-major.
Array gather_heads(const Array& buf, int64_t h0, int64_t n) {
  const Shape& s = buf.shape();
  Array out(DType::f32, {s[0], n, s[1], s[3]});
  int64_t i = 0;
  for (int64_t b = 0; b < s[0]; ++b) {
    for (int64_t h = h0; h < h0 + n; ++h) {
      for (int64_t t = 0; t < s[1]; ++t) {
        for (int64_t d = 0; d < s[3]; ++d) {
          out.set_f64(i++, buf.get_f64(((b * s[1] + t) * s[2] + h) * s[3] + d));
        }
      }
    }
  }
  return out;
}

// q, k and v read where they lie in one [B, T, H + 2 KV, D] projection, out and dout in [B, T, H,
// D], dq, dk and dv written into one [B, T, H + 2 KV, D] buffer: the same bytes as row-major
// [B, H, T, D] operands, on the one-pass backward (1 thread) and the separate passes (3).
TEST(CpuKernels, AttentionReadsAndWritesStridedRowsWithTheSameBytes) {
  const AttnCase c{2, 4, 2, 70, 32, {30, 40}};
  const int64_t W = c.H + 2 * c.KV;
  const Array qkv = random(DType::f32, {c.B, c.T, W, c.D});
  const Array doc = attention_inputs(c)[3];
  const std::vector<Array> in = {gather_heads(qkv, 0, c.H), gather_heads(qkv, c.H, c.KV),
                                 gather_heads(qkv, c.H + c.KV, c.KV), doc};
  const Array dout_bthd = random(DType::f32, {c.B, c.T, c.H, c.D});
  const Array dout = gather_heads(dout_bthd, 0, c.H);
  const int before = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    SCOPED_TRACE(threads);
    Array out(DType::f32, in[0].shape()), lse(DType::f32, {c.B, c.H, c.T});
    keel_view q = view(in[0]), k = view(in[1]), v = view(in[2]), d = view(doc);
    keel_view ov = view(out), lv = view(lse);
    K().attention(&q, &k, &v, &d, &ov, &lv, 0.25, KEEL_MATMUL_F32);
    const std::vector<Array> want = attention_kernels(in, out, lse, dout, 0.25);

    Array out_s(DType::f32, {c.B, c.T, c.H, c.D}), lse_s(DType::f32, {c.B, c.H, c.T});
    keel_view qs = heads_view(qkv, 0, c.H), ks = heads_view(qkv, c.H, c.KV);
    keel_view vs = heads_view(qkv, c.H + c.KV, c.KV), os = heads_view(out_s, 0, c.H);
    keel_view ls = view(lse_s), gs = heads_view(dout_bthd, 0, c.H);
    K().attention(&qs, &ks, &vs, &d, &os, &ls, 0.25, KEEL_MATMUL_F32);
    compare(gather_heads(out_s, 0, c.H), out, {}, "out");
    compare(lse_s, lse, {}, "lse");
    Array grads(DType::f32, {c.B, c.T, W, c.D});
    keel_view dq = heads_view(grads, 0, c.H), dk = heads_view(grads, c.H, c.KV);
    keel_view dv = heads_view(grads, c.H + c.KV, c.KV);
    K().attention_grad(&qs, &ks, &vs, &os, &gs, &ls, &d, &dq, &dk, &dv, 0.25, KEEL_MATMUL_F32);
    compare(gather_heads(grads, 0, c.H), want[2], {}, "dq");
    compare(gather_heads(grads, c.H, c.KV), want[3], {}, "dk");
    compare(gather_heads(grads, c.H + c.KV, c.KV), want[4], {}, "dv");
    Array dq_only(DType::f32, {c.B, c.T, c.H, c.D});
    keel_view dqo = heads_view(dq_only, 0, c.H);
    K().attention_grad(&qs, &ks, &vs, &os, &gs, &ls, &d, &dqo, nullptr, nullptr, 0.25,
                       KEEL_MATMUL_F32);
    compare(gather_heads(dq_only, 0, c.H), want[2], {}, "dq alone");
  }
  omp_set_num_threads(before);
  // Rows must be contiguous; lse is read flat.
  keel_view q = heads_view(qkv, 0, c.H), k = heads_view(qkv, c.H, c.KV);
  keel_view v = heads_view(qkv, c.H + c.KV, c.KV);
  Array out(DType::f32, {c.B, c.H, c.T, c.D}), lse(DType::f32, {c.B, c.H, c.T});
  keel_view ov = view(out), lv = view(lse);
  q.stride[3] = 2;
  EXPECT_THROW(K().attention(&q, &k, &v, nullptr, &ov, nullptr, 0.25, KEEL_MATMUL_F32), Error);
  q.stride[3] = 1;
  lv.strided = 1;
  lv.stride[0] = c.H * c.T;
  lv.stride[1] = c.T;
  lv.stride[2] = 1;
  EXPECT_THROW(K().attention(&q, &k, &v, nullptr, &ov, &lv, 0.25, KEEL_MATMUL_F32), Error);
}

// The attention tiles run in AVX2-wide registers (8 lanes) or AVX-512-wide ones (16), chosen by
// the CPU; both, and a plain loop in the same order, must give the same bytes on any host. On
// causal tiles (diag: row r sees keys c <= r + diag) they skip keys no row of a group sees: the
// visible scores are unchanged, and the products skip only zero probabilities, to the bit.
TEST(CpuKernels, AttentionTilesGiveTheSameBytesInEitherRegisterWidth) {
  constexpr int64_t B = attn::kBlock;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = u(gen);
    return x;
  };
  for (const int64_t dim : {16, 32, 64, 128}) {
    for (const int64_t rows : {B, B - 3, int64_t{1}}) {
      for (const int64_t diag : {attn::kAllKeys, int64_t{0}, int64_t{5}}) {
        SCOPED_TRACE(fmt::format("dim {} rows {} diag {}", dim, rows, diag));
        const int64_t lda = dim + 3;  // rows of a at a stride, as heads of a joined projection
        const std::vector<float> a = random(static_cast<size_t>(B * lda)), bt = random(dim * B);
        const std::vector<float> x = random(static_cast<size_t>(B * lda));
        std::vector<float> p = random(B * B);
        std::vector<float> s8(B * B), s16(B * B);
        attn::tile_dot_lanes<8>(a.data(), lda, rows, bt.data(), B, dim, 0.125f, s8.data(), diag);
        attn::tile_dot_lanes<16>(a.data(), lda, rows, bt.data(), B, dim, 0.125f, s16.data(), diag);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c <= std::min(B - 1, r + diag); ++c) {
            float acc = 0.0f;
            for (int64_t d = 0; d < dim; ++d) acc += a[r * lda + d] * bt[d * B + c];
            ASSERT_EQ(s8[r * B + c], acc * 0.125f) << r << " " << c;
            ASSERT_EQ(s16[r * B + c], acc * 0.125f) << r << " " << c;
          }
          for (int64_t c = r + diag + 1; c < B; ++c) p[r * B + c] = 0.0f;  // masked keys
        }
        const int64_t n = rows;           // keys of a partial block
        const bool wide = dim % 32 == 0;  // tile_acc's condition for 16 lanes (two per chunk)
        for (const bool transposed : {false, true}) {
          SCOPED_TRACE(transposed ? "p read transposed" : "p");
          std::vector<float> acc8 = random(B * dim), acc16 = acc8, want = acc8;
          if (transposed) {  // dV += P^T dO: p read as p[c][r]
            attn::tile_acc_lanes<8, true>(p.data(), rows, n, x.data(), lda, dim, acc8.data(), dim,
                                          diag);
            if (wide) {
              attn::tile_acc_lanes<16, true>(p.data(), rows, n, x.data(), lda, dim, acc16.data(),
                                             dim, diag);
            }
          } else {
            attn::tile_acc_lanes<8, false>(p.data(), rows, n, x.data(), lda, dim, acc8.data(), dim,
                                           diag);
            if (wide) {
              attn::tile_acc_lanes<16, false>(p.data(), rows, n, x.data(), lda, dim, acc16.data(),
                                              dim, diag);
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              const float pc = transposed ? p[c * B + r] : p[r * B + c];
              for (int64_t e = 0; e < dim; ++e) want[r * dim + e] += pc * x[c * lda + e];
            }
          }
          EXPECT_EQ(acc8, want);
          if (wide) {
            EXPECT_EQ(acc16, want);
          }
        }
      }
    }
  }
}

// The forward's score tiles read a key block as 64 rows of transposed keys, `ld` floats apart.
// At a multiple of 64 floats the rows shared a few L1 sets (at T = 1024 all 64 did); the padded
// stride puts them in distinct sets, and the forward ran 7-27 % faster on the AVX2 host.
TEST(CpuKernels, AttentionTransposedKeysSpreadOverTheCacheSets) {
  constexpr int64_t kLineFloats = 16, kSets = 64;  // 64-byte lines, 64 sets (32 KiB, 8 ways)
  for (const int64_t T : {int64_t{1}, int64_t{200}, int64_t{256}, int64_t{1024}, int64_t{4096}}) {
    SCOPED_TRACE(fmt::format("T {}", T));
    attn::Problem pb;
    pb.batch = 1;
    pb.heads = pb.kv_heads = 1;
    pb.seq = T;
    pb.dim = 64;
    std::vector<float> keys(static_cast<size_t>(T * pb.dim));
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<float>(i % 1000) + 1.0f;
    const attn::InRows rows{keys.data(), T * pb.dim, T * pb.dim, pb.dim};
    const attn::HeadsT t = attn::transpose_heads(pb, rows);
    ASSERT_GE(t.ld, pb.blocks() * attn::kBlock);
    std::vector<bool> used(kSets, false);
    for (int64_t d = 0; d < attn::kBlock; ++d) {
      const int64_t set = d * t.ld / kLineFloats % kSets;
      EXPECT_FALSE(used[static_cast<size_t>(set)]) << "row " << d << " shares set " << set;
      used[static_cast<size_t>(set)] = true;
    }
    const float* kt = t.block(pb, 0, 0, 0);
    for (int64_t d = 0; d < pb.dim; ++d) {
      for (int64_t s = 0; s < t.ld; ++s) {
        const float want = s < T ? keys[static_cast<size_t>(s * pb.dim + d)] : 0.0f;
        ASSERT_EQ(kt[d * t.ld + s], want) << d << " " << s;
      }
    }
  }
}

TEST(CpuKernels, AttentionRejectsMismatchedViews) {
  const std::vector<Array> in = attention_inputs({1, 3, 2, 4, 8, {}});  // 3 heads, 2 kv heads
  keel_view q = view(in[0]), k = view(in[1]), v = view(in[2]);
  Array out(DType::f32, in[0].shape());
  keel_view ov = view(out);
  try {
    K().attention(&q, &k, &v, nullptr, &ov, nullptr, 1.0, KEEL_MATMUL_F32);
    FAIL() << "3 query heads over 2 kv heads must throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[backend.cpu] attention: 3 query heads", 0), 0u)
        << e.what();
  }
  EXPECT_THROW(K().attention_grad(&q, &k, &v, &ov, &ov, &ov, nullptr, nullptr, nullptr, nullptr,
                                  1.0, KEEL_MATMUL_F32),
               Error);
  // A precision that is neither f32 nor bf16 (a generated call from another ABI) is refused.
  const std::vector<Array> ok = attention_inputs({1, 2, 2, 4, 8, {}});
  keel_view q2 = view(ok[0]), k2 = view(ok[1]), v2 = view(ok[2]);
  Array out2(DType::f32, ok[0].shape());
  keel_view ov2 = view(out2);
  try {
    K().attention(&q2, &k2, &v2, nullptr, &ov2, nullptr, 1.0, 7);
    FAIL() << "precision 7 must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention: precision 7 is neither"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace keel
