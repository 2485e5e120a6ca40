// dot_general on each GEMM library and precision (backend/cpu/kernel_matmul.cpp):
// - every layout of dot_cases.h on OpenBLAS and on oneDNN in f32 against the reference
//   interpreter: 1e-5 relative plus 1e-6 * K absolute (f32 accumulation against double);
// - precision bf16 against the reference on bf16-rounded operands with that same tolerance (only
//   the summation order differs: products of bf16 values are exact in f32), and within
//   2^-8 * K + 1e-5 of the f32 reference (operands in [-1, 1]: rounding both costs each product
//   at most 2 * 2^-9 of its magnitude, which is at most 1);
// - precision bf16 bit-equal to the exact product of the rounded operands where every partial sum
//   is exact in f32 (then no summation order can change it), ties to even included;
// - the same bytes at 1, 2 and 3 OpenMP threads on GPT shapes, each library and precision;
// - oneDNN's column panels for wide products.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "array_view.h"
#include "backend/cpu/client.h"
#include "backend/cpu/kernel_dot.h"
#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"
#include "backend/cpu/kernels.h"
#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "tests/dot_cases.h"
#include "tests/uniform_real.h"

namespace keel {
namespace {

using cpu::detail::GemmLibrary;
using Ints = std::vector<int64_t>;

// Restores automatic library choice and the thread count after each test.
class CpuMatmul : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::make_cpu_client();  // loads OpenBLAS
    threads_ = omp_get_max_threads();
  }
  void TearDown() override {
    cpu::detail::force_gemm_library(GemmLibrary::automatic);
    omp_set_num_threads(threads_);
  }
  int threads_ = 1;
};

std::mt19937_64& gen() {
  static std::mt19937_64 g(20261124);
  return g;
}

Array uniform(const Shape& s) {
  Array a(DType::f32, s);
  for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, testing_support::uniform_real(gen(), -1, 1));
  return a;
}

float round_bf16(float x) {
  return cpu::detail::bf16_load(cpu::detail::bf16_store(x));
}

Array rounded(const Array& a) {
  Array r(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    r.set_f64(i, round_bf16(static_cast<float>(a.get_f64(i))));
  return r;
}

using test::view;

Attrs dot_attrs(const test::DotCase& d) {
  return {{"lhs_batch", d.lb}, {"rhs_batch", d.rb}, {"lhs_contract", d.lc}, {"rhs_contract", d.rc}};
}

Node dot_node(const test::DotCase& d) {
  Node node;
  node.op = Op::dot_general;
  node.attrs = dot_attrs(d);
  node.inputs = {0, 1};
  const std::vector<TensorType> in = {{DType::f32, d.l}, {DType::f32, d.r}};
  node.type = infer_type(Op::dot_general, in, node.attrs);
  return node;
}

Array reference(const test::DotCase& d, const Array& l, const Array& r) {
  return ref::eval_node(dot_node(d), std::vector<Array>{l, r});
}

Array run(const test::DotCase& d, const Array& l, const Array& r, int32_t precision) {
  Array out(DType::f32, dot_node(d).type.shape);
  keel_view lv = view(l), rv = view(r), ov = view(out);
  cpu::kernels().dot_general(&lv, &rv, &ov, d.lb.data(), d.rb.data(),
                             static_cast<int32_t>(d.lb.size()), d.lc.data(), d.rc.data(),
                             static_cast<int32_t>(d.lc.size()), precision);
  return out;
}

int64_t contracted(const test::DotCase& d) {
  int64_t k = 1;
  for (int64_t a : d.lc) k *= d.l[a];
  return k;
}

void expect_near(const Array& got, const Array& want, double rel, double abs,
                 const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.get_f64(i);
    ASSERT_NEAR(got.get_f64(i), w, rel * std::fabs(w) + abs) << what << " at " << i;
  }
}

std::string label(const test::DotCase& d, GemmLibrary lib) {
  return shape_str(d.l) + " x " + shape_str(d.r) + " on " + cpu::detail::library_name(lib);
}

TEST_F(CpuMatmul, EveryLayoutOnEachLibraryMatchesTheReference) {
  for (GemmLibrary lib : {GemmLibrary::openblas, GemmLibrary::onednn, GemmLibrary::automatic}) {
    cpu::detail::force_gemm_library(lib);
    for (const test::DotCase& d : test::dot_cases()) {
      const Array l = uniform(d.l), r = uniform(d.r);
      const double k = static_cast<double>(contracted(d));
      expect_near(run(d, l, r, KEEL_MATMUL_F32), reference(d, l, r), 1e-5, 1e-6 * k,
                  label(d, lib) + " f32");
      // bf16: the reference of the rounded operands, and the f32 reference within 2^-8 * K.
      const Array got = run(d, l, r, KEEL_MATMUL_BF16);
      expect_near(got, reference(d, rounded(l), rounded(r)), 1e-5, 1e-6 * k,
                  label(d, lib) + " bf16 vs rounded");
      expect_near(got, reference(d, l, r), 1e-5, 0x1p-8 * k, label(d, lib) + " bf16 vs f32");
    }
  }
}

// Products wider than 2048 columns run on oneDNN as equal panels of at most 1024 (its one-call
// blocking there runs at half speed); dot_cases' 2100- and 2500-column cases check the panels'
// offsets against the reference on every layout.
TEST_F(CpuMatmul, OneDnnRunsWideProductsAsPanelsOfAtMost1024Columns) {
  EXPECT_EQ(cpu::detail::onednn_panel_columns(1), 1);
  EXPECT_EQ(cpu::detail::onednn_panel_columns(2048), 2048);
  EXPECT_EQ(cpu::detail::onednn_panel_columns(2100), 700);
  EXPECT_EQ(cpu::detail::onednn_panel_columns(2304), 768);
  EXPECT_EQ(cpu::detail::onednn_panel_columns(2500), 834);
  EXPECT_EQ(cpu::detail::onednn_panel_columns(3072), 1024);
  EXPECT_EQ(cpu::detail::onednn_panel_columns(50257), 1006);
}

// An operand of `batch` entries of rows x K stored K-major (element (row, k) at k * rows + row):
// X in a weight gradient X^T dY, and any B = [K, N] that is not transposed.
cpu::detail::MatView k_major(int64_t rows, int64_t k, int64_t batch = 1) {
  cpu::detail::MatView v;
  v.rows = rows;
  v.k = k;
  v.k_inner = false;
  v.ld = rows;
  v.extent = batch * rows * k;
  for (int64_t b = 0; b < batch; ++b) v.off.push_back(b * rows * k);
  return v;
}

// Where oneDNN has no brgemm (AVX2 hosts: gemm:jit in one-thread tiles), weight gradients of
// at least 2^19 outputs go to OpenBLAS's tiles (up to 2x faster there); the rest stays on oneDNN,
// and so does every f32 product where oneDNN has brgemm, the wide weight gradients whose column
// panels run gemm:jit there included (faster than OpenBLAS's tiles on the AMX host).
TEST_F(CpuMatmul, LargeWeightGradientsRunOnOpenBlasWhereOneDnnRunsTiles) {
  using cpu::detail::choose_library;
  const cpu::detail::MatView x_t = k_major(384, 2048), dy = k_major(1536, 2048);
  const std::string impl = cpu::detail::onednn_impl(x_t, dy, false);
  const bool tiles = impl.rfind("brg", 0) != 0;
  EXPECT_EQ(cpu::detail::onednn_has_brgemm(), !tiles) << impl;
  EXPECT_EQ(choose_library(x_t, dy, KEEL_MATMUL_F32),
            tiles ? GemmLibrary::openblas : GemmLibrary::onednn)
      << impl;
  const cpu::detail::MatView wide_x_t = k_major(768, 1024), wide_dy = k_major(3072, 1024);
  EXPECT_EQ(choose_library(wide_x_t, wide_dy, KEEL_MATMUL_F32),
            tiles ? GemmLibrary::openblas : GemmLibrary::onednn)
      << "gpt2-m's fc dW, in column panels: " << cpu::detail::onednn_impl(wide_x_t, wide_dy, false);
  EXPECT_EQ(choose_library(k_major(768, 1024), k_major(768, 1024), KEEL_MATMUL_F32),
            tiles ? GemmLibrary::openblas : GemmLibrary::onednn)
      << "768 x 768 outputs";
  EXPECT_EQ(choose_library(x_t, k_major(1152, 2048), KEEL_MATMUL_F32), GemmLibrary::onednn)
      << "384 x 1152 outputs";
  EXPECT_EQ(choose_library(x_t, k_major(384, 2048), KEEL_MATMUL_F32), GemmLibrary::onednn)
      << "384 x 384 outputs";
  cpu::detail::MatView x = k_major(2048, 384);  // the forward's X [BT, C]: K innermost
  x.k_inner = true;
  x.ld = 384;
  EXPECT_EQ(choose_library(x, k_major(1536, 384), KEEL_MATMUL_F32), GemmLibrary::onednn);
  EXPECT_EQ(choose_library(k_major(256, 256, 4), k_major(64, 256, 4), KEEL_MATMUL_F32),
            GemmLibrary::onednn)
      << "batched (attention's P^T dO)";
}

// AMX's brgemm takes only dense weights and output, so on an AMX host a bf16 product's one-thread
// tiles span every column; a column panel (gpt2-m's fc: 8 row tiles, so it was cut into panels)
// sent oneDNN to its slower gemm:jit.
TEST_F(CpuMatmul, AmxTilesSpanEveryColumnSoTheyStayOnAmx) {
  if (cpu::detail::onednn_description().find("amx") == std::string::npos) {
    GTEST_SKIP() << "no AMX here: " << cpu::detail::onednn_description();
  }
  cpu::detail::MatView x = k_major(1024, 768);  // gpt2-m's fc input [BT, C]: K innermost
  x.k_inner = true;
  x.ld = 768;
  const cpu::detail::MatView w = k_major(3072, 768);  // the weight [C, 4C]
  const std::string tile = cpu::detail::onednn_tile_impl(x, w, true);
  EXPECT_NE(tile.find("amx"), std::string::npos) << tile;
  // A weight gradient's x^T is K-major: its row tiles are strided, so gemm rounds it into a
  // row-major copy whose tiles AMX takes.
  const cpu::detail::MatView x_t = k_major(768, 1024), dy = k_major(3072, 1024);
  EXPECT_EQ(cpu::detail::onednn_tile_impl(x_t, dy, true).find("amx"), std::string::npos)
      << "oneDNN now takes strided AMX tiles; the row-major copy may be unneeded";
  EXPECT_TRUE(cpu::detail::bf16_copies_a_row_major(x_t, dy));
  cpu::detail::MatView rows = x_t;
  rows.k_inner = true;
  rows.ld = 1024;
  const std::string copied = cpu::detail::onednn_tile_impl(rows, dy, true);
  EXPECT_NE(copied.find("amx"), std::string::npos) << copied;
  // Eight row tiles or more read b packed once (the forward and input-gradient products); the
  // weight gradients' two or six do not, and f32 never does.
  EXPECT_GT(cpu::detail::onednn_packed_weights_bytes(x, w, true), 3072 * 768 * 2);
  EXPECT_EQ(cpu::detail::onednn_packed_weights_bytes(rows, dy, true), 0);
  EXPECT_EQ(cpu::detail::onednn_packed_weights_bytes(x, w, false), 0);
  // Three row tiles of 128 become two taller ones (each tile repacks all of b); other counts stay.
  const cpu::detail::MatView gpt2s_x_t = k_major(384, 2048), gpt2s_dy = k_major(1152, 2048);
  cpu::detail::MatView gpt2s_rows = gpt2s_x_t;
  gpt2s_rows.k_inner = true;
  gpt2s_rows.ld = 2048;
  EXPECT_EQ(cpu::detail::onednn_row_tiles(gpt2s_rows, gpt2s_dy, true), 2);
  EXPECT_EQ(cpu::detail::onednn_row_tiles(rows, dy, true), 6) << "gpt2-m's 768 rows";
  EXPECT_EQ(cpu::detail::onednn_row_tiles(x, w, true), 8) << "1024 rows";
}

// Operands 1 + m/128 (exact in bf16) with signs, some pushed off by less than half a bf16 ulp
// and some by exactly half (a tie: rounds to the even neighbour). Rounded, every product is a
// multiple of 2^-14 below 4 in magnitude, so with K <= 128 every partial sum is below 2^9 and
// exact in f32's 24 bits: the result is exact whatever the order.
Array dyadic(const Shape& s, bool perturb) {
  Array a(DType::f32, s);
  std::uniform_int_distribution<int> m(0, 127), kind(0, 3);
  for (int64_t i = 0; i < a.numel(); ++i) {
    double v = 1.0 + m(gen()) / 128.0;
    const int k = perturb ? kind(gen()) : 0;
    if (k == 1) v += 0x1p-10;  // rounds down to v
    if (k == 2) v += 0x1p-8;   // a tie
    if (k == 3) v -= 0x1p-11;  // rounds up to v
    a.set_f64(i, (gen()() & 1) ? -v : v);
  }
  return a;
}

TEST_F(CpuMatmul, Bf16IsExactlyTheProductOfRoundedOperands) {
  const std::vector<test::DotCase> cases = {
      {{17, 128}, {128, 23}, {}, {}, {1}, {0}},        // plain
      {{128, 17}, {128, 23}, {}, {}, {0}, {0}},        // lhs transposed
      {{100, 70}, {100, 23}, {}, {}, {0}, {0}},        // lhs transposed, partial 64-blocks
      {{128, 128}, {128, 23}, {}, {}, {0}, {0}},       // lhs transposed, whole 64-blocks
      {{17, 128}, {23, 128}, {}, {}, {1}, {1}},        // rhs transposed
      {{4, 9, 64}, {4, 64, 11}, {0}, {0}, {2}, {1}},   // batched
      {{9, 4, 64}, {4, 11, 64}, {1}, {0}, {2}, {2}},   // batch in the middle
      {{1, 96}, {96, 40}, {}, {}, {1}, {0}},           // M = 1
      {{40, 96}, {96, 1}, {}, {}, {1}, {0}},           // N = 1
      {{6, 5, 4}, {5, 4, 7}, {}, {}, {1, 2}, {0, 1}},  // two contracting dims
      {{1100, 64}, {64, 40}, {}, {}, {1}, {0}},        // 9 row tiles: b packed on AMX
      {{1100, 64}, {40, 64}, {}, {}, {1}, {1}}};       // the same, b transposed
  for (GemmLibrary lib : {GemmLibrary::onednn, GemmLibrary::openblas}) {
    cpu::detail::force_gemm_library(lib);
    for (const test::DotCase& d : cases) {
      const Array l = dyadic(d.l, true), r = dyadic(d.r, true);
      const Array exact = reference(d, rounded(l), rounded(r));  // double sums: exact here
      Array want(DType::f32, exact.shape());
      for (int64_t i = 0; i < exact.numel(); ++i) want.set_f64(i, exact.get_f64(i));
      const Array got = run(d, l, r, KEEL_MATMUL_BF16);
      EXPECT_TRUE(got.same_bytes(want))
          << label(d, lib) << "\n got  " << got.str(16) << "\n want " << want.str(16);
      // The rounding happened: f32 of the unrounded operands differs.
      EXPECT_FALSE(run(d, l, r, KEEL_MATMUL_F32).same_bytes(want)) << label(d, lib);
    }
  }
}

// bf16 arrays of the operands' rounded values.
Array bf16_of(const Array& a) {
  Array r(DType::bf16, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) r.set_f64(i, a.get_f64(i));  // set_f64 rounds
  return r;
}

// bf16 operands with an f32 result (preferred_element_type f32; bf16_operands casts once and
// multiplies those): the same bits as f32 operands at precision bf16, on every layout and
// library, the GPT shapes included (a weight gradient's K-major operand, transposed weights),
// and the scratch the memory plan is told of covers what it allocates.
TEST_F(CpuMatmul, Bf16OperandsWithAnF32ResultGiveThePrecisionBf16Bits) {
  std::vector<test::DotCase> cases = test::dot_cases();
  cases.push_back({{2048, 384}, {2048, 1152}, {}, {}, {0}, {0}});
  cases.push_back({{2048, 1152}, {384, 1152}, {}, {}, {1}, {1}});
  cases.push_back({{8, 256, 384}, {384, 1536}, {}, {}, {2}, {0}});
  for (GemmLibrary lib : {GemmLibrary::automatic, GemmLibrary::openblas, GemmLibrary::onednn}) {
    cpu::detail::force_gemm_library(lib);
    for (const test::DotCase& d : cases) {
      const Array l = uniform(d.l), r = uniform(d.r);
      const Array want = run(d, l, r, KEEL_MATMUL_BF16);
      const Array l16 = bf16_of(l), r16 = bf16_of(r);
      Array got(DType::f32, want.shape());
      keel_view lv = view(l16), rv = view(r16), ov = view(got);
      // The precision argument is moot for bf16 operands.
      cpu::kernels().dot_general(&lv, &rv, &ov, d.lb.data(), d.rb.data(),
                                 static_cast<int32_t>(d.lb.size()), d.lc.data(), d.rc.data(),
                                 static_cast<int32_t>(d.lc.size()), KEEL_MATMUL_F32);
      EXPECT_TRUE(got.same_bytes(want)) << label(d, lib);
      const int64_t scratch = cpu::detail::dot_general_scratch(
          &lv, &rv, &ov, d.lb.data(), d.rb.data(), static_cast<int32_t>(d.lb.size()), d.lc.data(),
          d.rc.data(), static_cast<int32_t>(d.lc.size()), KEEL_MATMUL_F32);
      if (lib == GemmLibrary::openblas && contracted(d) > 0 && got.numel() > 0) {
        EXPECT_GE(scratch, 4 * (l.numel() + r.numel())) << label(d, lib) << ": widened copies";
      }
    }
  }
  // A bf16 result keeps its own rule (widened, multiplied, rounded once), and mixing bf16 and
  // f32 operands is refused.
  const test::DotCase d{{3, 4}, {4, 5}, {}, {}, {1}, {0}};
  const Array l16 = bf16_of(uniform(d.l)), r32 = uniform(d.r);
  Array out(DType::f32, {3, 5});
  keel_view lv = view(l16), rv = view(r32), ov = view(out);
  EXPECT_THROW(cpu::kernels().dot_general(&lv, &rv, &ov, nullptr, nullptr, 0, d.lc.data(),
                                          d.rc.data(), 1, KEEL_MATMUL_F32),
               Error);
}

// Rounding to bf16 keeps NaN a NaN and infinities infinite, and rounds the largest floats up to
// infinity: row i of l holds x_i then zeros, so column 0 of l x I is x_i rounded.
TEST_F(CpuMatmul, Bf16RoundingKeepsNanAndInfinities) {
  const std::vector<float> x = {std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::quiet_NaN(),
                                std::bit_cast<float>(0x7f800001u),  // plain rounding: infinity
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::max(),
                                1.0f + 0x1p-8f,
                                -3.0f - 0x1p-7f - 0x1p-9f,
                                0.1f};
  const int64_t M = static_cast<int64_t>(x.size()), K = 8;
  Array l(DType::f32, {M, K}), eye(DType::f32, {K, K});
  for (int64_t i = 0; i < M; ++i) l.set_f64(i * K, x[static_cast<size_t>(i)]);
  for (int64_t k = 0; k < K; ++k) eye.set_f64(k * K + k, 1.0);
  const test::DotCase d{{M, K}, {K, K}, {}, {}, {1}, {0}};
  for (GemmLibrary lib : {GemmLibrary::onednn, GemmLibrary::openblas}) {
    cpu::detail::force_gemm_library(lib);
    const Array got = run(d, l, eye, KEEL_MATMUL_BF16);
    for (int64_t i = 0; i < M; ++i) {
      const float want = round_bf16(x[static_cast<size_t>(i)]);
      const double g = got.get_f64(i * K);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(g)) << label(d, lib) << " row " << i;
      } else {
        EXPECT_EQ(g, want) << label(d, lib) << " row " << i;
      }
    }
    EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::max())));
  }
}

// The operand rounding gives bf16_store's bits on every path: AVX512-BF16's instruction (where
// the CPU has it; it reads subnormal inputs as zero, so blocks holding one must not use it) and
// the portable loop, over blocks of 32 with and without special values, and a tail.
TEST_F(CpuMatmul, Bf16RoundingGivesTheSameBitsNativeOrPortable) {
  const std::vector<uint32_t> special = {
      0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00008000u, 0x00018000u,
      0x00000000u, 0x80000000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa12345u,
      0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0xbf80ffffu};
  std::vector<float> x(32 * 40 + 13);
  std::uniform_real_distribution<float> u(-4, 4);
  for (float& v : x) v = u(gen());
  // One special value per block in the first half, none in the second.
  for (size_t i = 0; i < 20; ++i) {
    x[i * 32 + i % 32] = std::bit_cast<float>(special[i % special.size()]);
  }
  for (size_t i = 0; i < special.size(); ++i) {
    x[x.size() - 1 - i % 13] = std::bit_cast<float>(special[i]);  // the tail, too
  }
  for (bool native : {true, false}) {
    std::vector<uint16_t> got(x.size());
    cpu::detail::bf16_round_bits(x.data(), static_cast<int64_t>(x.size()), got.data(), native);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i], cpu::detail::bf16_store(x[i]).bits)
          << (native ? "native" : "portable") << " element " << i << " bits 0x" << std::hex
          << std::bit_cast<uint32_t>(x[i]);
    }
  }
  RecordProperty("native", cpu::detail::bf16_round_is_native() ? "yes" : "no");
}

// The memory prediction asks for each layout's scratch (bf16 copies of both operands), K = 0 and
// empty dims included, without running anything.
TEST_F(CpuMatmul, ScratchOfEveryLayoutCountsTheBf16Copies) {
  for (const test::DotCase& d : test::dot_cases()) {
    const Array l = uniform(d.l), r = uniform(d.r);
    Array out(DType::f32, dot_node(d).type.shape);
    keel_view lv = view(l), rv = view(r), ov = view(out);
    auto scratch = [&](int32_t precision) {
      return cpu::detail::dot_general_scratch(
          &lv, &rv, &ov, d.lb.data(), d.rb.data(), static_cast<int32_t>(d.lb.size()), d.lc.data(),
          d.rc.data(), static_cast<int32_t>(d.lc.size()), precision);
    };
    const int64_t f32 = scratch(KEEL_MATMUL_F32), bf16 = scratch(KEEL_MATMUL_BF16);
    if (contracted(d) > 0 && out.numel() > 0) {
      EXPECT_GE(bf16, f32 + 2 * (l.numel() + r.numel()))
          << shape_str(d.l) << " x " << shape_str(d.r);
    } else {
      EXPECT_EQ(bf16, f32) << shape_str(d.l) << " x " << shape_str(d.r);
    }
  }
}

TEST_F(CpuMatmul, UnknownPrecisionIsAnErrorNamingTheBackend) {
  const test::DotCase d{{2, 3}, {3, 4}, {}, {}, {1}, {0}};
  const Array l = uniform(d.l), r = uniform(d.r);
  try {
    run(d, l, r, 7);
    FAIL() << "precision 7 must throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[backend.cpu] dot_general: precision 7", 0), 0u)
        << e.what();
  }
}

// A process builds each primitive once, for the team it first runs in: a product's bytes must
// not depend on that team either. Each thread count here builds every primitive afresh (in one
// process the cache kept the first team's; a gpt2-s bf16 step at 1 and 2 threads differed).
TEST_F(CpuMatmul, SameBytesWhateverTeamBuiltThePrimitives) {
  const std::vector<test::DotCase> cases = {{{2048, 384}, {2048, 1152}, {}, {}, {0}, {0}},
                                            {{2048, 1536}, {2048, 384}, {}, {}, {0}, {0}},
                                            {{2048, 384}, {384, 1152}, {}, {}, {1}, {0}},
                                            {{2048, 1152}, {384, 1152}, {}, {}, {1}, {1}}};
  const int before = omp_get_max_threads();
  for (const test::DotCase& d : cases) {
    const Array l = uniform(d.l), r = uniform(d.r);
    for (int32_t precision : {KEEL_MATMUL_F32, KEEL_MATMUL_BF16}) {
      std::optional<Array> first;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        cpu::detail::onednn_forget_primitives();
        const Array got = run(d, l, r, precision);
        if (!first) {
          first = got;
          continue;
        }
        EXPECT_TRUE(got.same_bytes(*first))
            << label(d, GemmLibrary::automatic) << (precision ? " bf16" : " f32")
            << ": primitives built at " << threads << " threads give other bytes than at 1";
      }
    }
  }
  omp_set_num_threads(before);
}

// The next issue compares 2 ranks x 1 thread with 1 rank x 2 threads bit for bit, so a product
// may not depend on the team size: GPT-2-small shapes (qkv forward, its dW and dX, attention
// scores, a K-heavy product, matrix-vector both ways) at 1, 2 and 3 threads, on what keel picks
// and on each library (on AVX2 hosts oneDNN's gemm:jit splits K over the team unless tiled).
TEST_F(CpuMatmul, SameBytesAtOneTwoAndThreeThreads) {
  const std::vector<test::DotCase> cases = {{{2048, 384}, {384, 1152}, {}, {}, {1}, {0}},
                                            {{2048, 384}, {2048, 1152}, {}, {}, {0}, {0}},
                                            {{2048, 1152}, {384, 1152}, {}, {}, {1}, {1}},
                                            {{48, 256, 64}, {48, 256, 64}, {0}, {0}, {2}, {2}},
                                            {{48, 256, 256}, {48, 256, 64}, {0}, {0}, {2}, {1}},
                                            {{64, 65536}, {65536, 64}, {}, {}, {1}, {0}},
                                            {{1, 384}, {384, 1536}, {}, {}, {1}, {0}},
                                            {{2048, 384}, {384, 1}, {}, {}, {1}, {0}}};
  for (const test::DotCase& d : cases) {
    const Array l = uniform(d.l), r = uniform(d.r);
    for (GemmLibrary lib : {GemmLibrary::automatic, GemmLibrary::openblas, GemmLibrary::onednn}) {
      cpu::detail::force_gemm_library(lib);
      for (int32_t precision : {KEEL_MATMUL_F32, KEEL_MATMUL_BF16}) {
        omp_set_num_threads(1);
        const Array one = run(d, l, r, precision);
        for (int threads : {2, 3}) {
          omp_set_num_threads(threads);
          EXPECT_TRUE(run(d, l, r, precision).same_bytes(one))
              << label(d, lib) << (precision ? " bf16" : " f32") << " at " << threads
              << " threads differs from 1 thread";
        }
      }
      // bf16 operands (the products bf16_operands leaves) give those bytes at any thread count.
      const Array l16 = bf16_of(l), r16 = bf16_of(r);
      omp_set_num_threads(1);
      const Array want = run(d, l, r, KEEL_MATMUL_BF16);
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        Array got(DType::f32, want.shape());
        keel_view lv = view(l16), rv = view(r16), ov = view(got);
        cpu::kernels().dot_general(&lv, &rv, &ov, d.lb.data(), d.rb.data(),
                                   static_cast<int32_t>(d.lb.size()), d.lc.data(), d.rc.data(),
                                   static_cast<int32_t>(d.lc.size()), KEEL_MATMUL_F32);
        EXPECT_TRUE(got.same_bytes(want)) << label(d, lib) << " bf16 operands at " << threads;
      }
    }
  }
}

}  // namespace
}  // namespace keel
