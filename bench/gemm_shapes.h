#pragma once
// The matrix products of one GPT-2 training step, as dot_general hands them to the GEMM
// libraries, and a timer for one product on a chosen library and precision. Shared by
// gemm_bench (the per-shape library table) and step_bench (the matmul baseline of a step).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/abi.h"
#include "backend/cpu/kernel_dot.h"
#include "ir/error.h"
#include "nn/gpt.h"

namespace keel::bench {

// c[batch] (M x N) = a (M x K, or K x M when a_t) times b (K x N, or N x K when b_t).
struct GemmShape {
  std::string name;
  int64_t count = 1;  // how many times one step runs it
  int64_t batch = 1, M = 1, N = 1, K = 1;
  bool a_t = false, b_t = false;
  double flops() const { return 2.0 * double(batch) * double(M) * double(N) * double(K); }
};

// Forward X W for every projection, backward dX = dY W^T and dW = X^T dY, and the attention
// products (per batch x head) with their gradients; the matrix-vector classes close the list.
inline std::vector<GemmShape> gpt_gemm_shapes(const nn::GptConfig& c) {
  const int64_t BT = c.batch * c.seq, C = c.width, T = c.seq, D = c.width / c.heads;
  const int64_t BH = c.batch * c.heads, L = c.layers, H4 = 4 * C;
  std::vector<GemmShape> s;
  auto linear = [&](const std::string& name, int64_t in, int64_t out, int64_t n) {
    s.push_back({name + " fwd [BT,in]x[in,out]", n, 1, BT, out, in, false, false});
    s.push_back({name + " dX [BT,out]x[in,out]^T", n, 1, BT, in, out, false, true});
    s.push_back({name + " dW [BT,in]^Tx[BT,out]", n, 1, in, out, BT, true, false});
  };
  linear("qkv", C, 3 * C, L);
  linear("attn-proj", C, C, L);
  linear("fc", C, H4, L);
  linear("fc-proj", H4, C, L);
  linear("lm-head", C, c.vocab, 1);
  s.push_back({"attn QK^T [BH,T,D]x[BH,T,D]^T", L, BH, T, T, D, false, true});
  s.push_back({"attn PV [BH,T,T]x[BH,T,D]", L, BH, T, D, T, false, false});
  s.push_back({"attn dS=dO V^T", L, BH, T, T, D, false, true});
  s.push_back({"attn dV=P^T dO", L, BH, T, D, T, true, false});
  s.push_back({"attn dQ=dS K", L, BH, T, D, T, false, false});
  s.push_back({"attn dK=dS^T Q", L, BH, T, D, T, true, false});
  return s;
}

// Matrix-vector classes (not in a training step's mix, but dot_general sees them).
inline std::vector<GemmShape> vector_shapes(const nn::GptConfig& c) {
  const int64_t BT = c.batch * c.seq, C = c.width;
  return {{"mat-vec M=1 [1,C]x[C,4C]", 0, 1, 1, 4 * C, C, false, false},
          {"mat-vec N=1 [BT,C]x[C,1]", 0, 1, BT, 1, C, false, false}};
}

inline cpu::detail::MatView view_a(const GemmShape& s, const float* data) {
  cpu::detail::MatView v;
  v.data = data;
  v.rows = s.M;
  v.k = s.K;
  v.k_inner = !s.a_t;
  v.ld = s.a_t ? s.M : s.K;
  v.extent = s.batch * s.M * s.K;
  for (int64_t b = 0; b < s.batch; ++b) v.off.push_back(b * s.M * s.K);
  return v;
}

inline cpu::detail::MatView view_b(const GemmShape& s, const float* data) {
  cpu::detail::MatView v;
  v.data = data;
  v.rows = s.N;
  v.k = s.K;
  v.k_inner = s.b_t;  // stored N x K
  v.ld = s.b_t ? s.K : s.N;
  v.extent = s.batch * s.K * s.N;
  for (int64_t b = 0; b < s.batch; ++b) v.off.push_back(b * s.K * s.N);
  return v;
}

// Median seconds of `reps` calls of `fn` after two warm-up calls.
template <class F>
double median_seconds(int reps, F&& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps + 2; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    if (r >= 2) t.push_back(dt);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Operands of one shape (values in [-1, 1)) and their bf16 copies.
struct GemmOperands {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
  explicit GemmOperands(const GemmShape& s)
      : a(size_t(s.batch * s.M * s.K)),
        b(size_t(s.batch * s.K * s.N)),
        c(size_t(s.batch * s.M * s.N)) {
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = float(int64_t(i * 2654435761u % 2001) - 1000) / 1000;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(int64_t(i * 40503u % 2001) - 1000) / 1000;
    a16.resize(a.size());
    b16.resize(b.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = uint16_t(std::bit_cast<uint32_t>(a[i]) >> 16);
    for (size_t i = 0; i < b.size(); ++i) b16[i] = uint16_t(std::bit_cast<uint32_t>(b[i]) >> 16);
  }
};

// GFLOP/s of dot_general's GEMM on one library (precision: KEEL_MATMUL_*; bf16 includes the
// rounding of both operands, as a step pays it).
inline double gemm_gflops(const GemmShape& s, cpu::detail::GemmLibrary lib, int32_t precision,
                          int reps) {
  GemmOperands o(s);
  const auto a = view_a(s, o.a.data()), b = view_b(s, o.b.data());
  const double t =
      median_seconds(reps, [&] { cpu::detail::gemm(a, b, o.c.data(), precision, lib); });
  return s.flops() / t / 1e9;
}

// GFLOP/s of OpenBLAS left to thread each product itself (not thread-count independent).
inline double blas_threaded_gflops(const GemmShape& s, int reps) {
  GemmOperands o(s);
  const auto a = view_a(s, o.a.data()), b = view_b(s, o.b.data());
  const double t =
      median_seconds(reps, [&] { cpu::detail::gemm_blas_f32(a, b, o.c.data(), false); });
  return s.flops() / t / 1e9;
}

// GFLOP/s of the bare oneDNN primitive threaded as oneDNN likes (not in keel's fixed tiles),
// operands already in the precision it multiplies.
inline double onednn_gflops(const GemmShape& s, bool bf16, int reps) {
  GemmOperands o(s);
  const auto a = view_a(s, o.a.data()), b = view_b(s, o.b.data());
  const uint16_t* a16 = bf16 ? o.a16.data() : nullptr;
  const uint16_t* b16 = bf16 ? o.b16.data() : nullptr;
  bool ran = true;
  const double t = median_seconds(
      reps, [&] { ran = cpu::detail::gemm_onednn(a, b, o.c.data(), a16, b16, false) && ran; });
  // false: oneDNN has only its reference loop for this layout and computed nothing.
  return ran ? s.flops() / t / 1e9 : std::nan("");
}

// A step's GEMM mix on the bare oneDNN primitive (threaded as oneDNN likes), timed one pass at a
// time: every product once, its time counted as often as a step runs it. step_bench times a
// pass after each step, so each step has a baseline from the same seconds (this host's speed
// moves by a third from one minute to the next); operands persist between passes.
class GemmMix {
 public:
  GemmMix(std::vector<GemmShape> shapes, bool bf16) : shapes_(std::move(shapes)), bf16_(bf16) {
    for (const GemmShape& s : shapes_) operands_.emplace_back(s);
    pass_seconds();  // creates and caches the primitives
  }
  double flops() const {
    double f = 0;
    for (const GemmShape& s : shapes_) f += s.flops() * double(s.count);
    return f;
  }
  double pass_seconds() {
    double seconds = 0;
    for (size_t i = 0; i < shapes_.size(); ++i) {
      const GemmShape& s = shapes_[i];
      GemmOperands& o = operands_[i];
      const auto a = view_a(s, o.a.data()), b = view_b(s, o.b.data());
      const auto t0 = std::chrono::steady_clock::now();
      if (!cpu::detail::gemm_onednn(a, b, o.c.data(), bf16_ ? o.a16.data() : nullptr,
                                    bf16_ ? o.b16.data() : nullptr, false)) {
        // A product timed at nothing would inflate the baseline: no ratio rather than a wrong one.
        throw Error(
            fmt::format("[bench] oneDNN has only its reference loop for {} in {}; the mix "
                        "has no baseline on this host",
                        s.name, bf16_ ? "bf16" : "f32"));
      }
      seconds += double(s.count) *
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return seconds;
  }

 private:
  std::vector<GemmShape> shapes_;
  bool bf16_;
  std::vector<GemmOperands> operands_;
};

}  // namespace keel::bench
