#include "nn/mamba.h"

#include <fmt/format.h>

#include "ir/error.h"
#include "nn/block.h"
#include "nn/layers.h"
#include "nn/tensor_parallel.h"
#include "trace/collectives.h"

namespace keel::nn {
namespace {

// A log-decay that exp turns into 0 without an infinity reaching a gradient.
constexpr double kMasked = -1e30;

Tensor silu(const Tensor& v) {
  return v * sigmoid(v);
}

// log(1 + exp(v)) without overflow.
Tensor softplus(const Tensor& v) {
  return maximum(v, full({}, 0.0)) + log(1.0 + exp(-abs(v)));
}

// The causal depthwise convolution of x [B, T, F] with weight [K, F]: tap k reads the position
// K-1-k places earlier, never before the document's start; plus bias [F].
Tensor causal_conv(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Tensor& positions) {
  const int64_t K = weight.shape()[0], F = weight.shape()[1];
  Tensor acc = bias;
  for (int64_t k = 0; k < K; ++k) {
    Tensor tap = reshape(slice(weight, {k, 0}, {k + 1, F}), {1, 1, F});
    acc = acc + earlier_in_document(x, positions, K - 1 - k, 0.0) * tap;
  }
  return acc;
}

// What the input projection and the convolution give the recurrence.
struct Projected {
  Tensor z;     // [B, T, I]: the gate
  Tensor x;     // [B, T, H, P]
  Tensor b, c;  // [B, T, N]
  Tensor dt;    // [B, T, H], after softplus
  Tensor a;     // [B, T, H]: dt * A, each position's log-decay (<= 0)
  Tensor doc;   // [B, T]: document ids (zeros for one per row)
};

// Split over M processes of "model" (M > 1), each holds its share of the heads, of z and x, and
// of B's and C's state columns, which it gathers whole after the convolution.
Projected project(const MambaConfig& m, const NamedTensors& p, const std::string& prefix,
                  const Tensor& u, const Tensor& positions, const Tensor& doc_ids, int64_t M) {
  const int64_t B = u.shape()[0], T = u.shape()[1], C = u.shape()[2];
  const int64_t I = m.expand * C / M, N = m.state / M, P = m.head_dim, H = I / P;
  const Tensor in = M > 1 ? pvary(u, kModelAxis) : u;
  Tensor all = matmul(in, p.at(under(prefix, "in_proj.weight")));  // [B, T, 2I + 2N + H]
  Projected out;
  out.z = slice(all, {0, 0, 0}, {B, T, I});
  Tensor xbc = silu(causal_conv(slice(all, {0, 0, I}, {B, T, 2 * I + 2 * N}),
                                p.at(under(prefix, "conv.weight")),
                                p.at(under(prefix, "conv.bias")), positions));
  out.x = reshape(slice(xbc, {0, 0, 0}, {B, T, I}), {B, T, H, P});
  out.b = slice(xbc, {0, 0, I}, {B, T, I + N});
  out.c = slice(xbc, {0, 0, I + N}, {B, T, I + 2 * N});
  if (M > 1) {  // every head reads all N: its gradient is the processes' uses summed
    out.b = all_gather(out.b, kModelAxis, 2);
    out.c = all_gather(out.c, kModelAxis, 2);
  }
  out.dt = softplus(slice(all, {0, 0, 2 * I + 2 * N}, {B, T, 2 * I + 2 * N + H}) +
                    p.at(under(prefix, "dt_bias")));
  out.a = out.dt * reshape(-exp(p.at(under(prefix, "A_log"))), {1, 1, H});
  out.doc = doc_ids.defined() ? doc_ids : full({B, T}, 0.0, DType::i64);
  return out;
}

// y [B, T, H, P] plus the skip D x, gated by silu(z) through the RMSNorm, projected to [B, T, C].
// Split over M processes, the norm's mean square is over every process's channels and the
// projection row-parallel.
Tensor finish(const NamedTensors& p, const std::string& prefix, const Projected& in,
              const Tensor& y, int64_t M) {
  const int64_t B = y.shape()[0], T = y.shape()[1], H = y.shape()[2], P = y.shape()[3];
  Tensor skip = in.x * reshape(p.at(under(prefix, "D")), {1, 1, H, 1});
  Tensor gated = reshape(y + skip, {B, T, H * P}) * silu(in.z);
  const Tensor& out = p.at(under(prefix, "out_proj.weight"));
  const Tensor& weight = p.at(under(prefix, "ln_y.weight"));
  if (M == 1) return matmul(rms_norm(gated, weight), out);
  // Back into this process's channels through pvary: its gradient sums every process's use.
  const Tensor square = pvary(all_reduce(sum(gated * gated, {-1}, true), kModelAxis), kModelAxis) *
                        (1.0 / static_cast<double>(H * P * M));
  const Tensor normed = gated * rsqrt(square + kRmsNormEps) * weight;
  return all_reduce(matmul_partial(normed, out, kModelAxis), kModelAxis);
}

Tensor f32(const Tensor& t) {
  return cast(t, DType::f32);
}

// The recurrence one position at a time: S [B, H, P, N].
Tensor ssd_sequential(const Projected& in) {
  const Shape& s = in.x.shape();
  const int64_t B = s[0], T = s[1], H = s[2], P = s[3], N = in.b.shape()[2];
  Tensor state = full({B, H, P, N}, 0.0);
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < T; ++t) {
    Tensor dt = reshape(slice(in.dt, {0, t, 0}, {B, t + 1, H}), {B, H, 1, 1});
    Tensor x = reshape(slice(in.x, {0, t, 0, 0}, {B, t + 1, H, P}), {B, H, P, 1});
    Tensor b = reshape(slice(in.b, {0, t, 0}, {B, t + 1, N}), {B, 1, 1, N});
    Tensor c = reshape(slice(in.c, {0, t, 0}, {B, t + 1, N}), {B, 1, 1, N});
    if (t > 0) {  // the state goes on within a document, and restarts at the next
      Tensor same = f32(eq(slice(in.doc, {0, t}, {B, t + 1}), slice(in.doc, {0, t - 1}, {B, t})));
      Tensor decay = exp(reshape(slice(in.a, {0, t, 0}, {B, t + 1, H}), {B, H})) * same;
      state = state * reshape(decay, {B, H, 1, 1});
    }
    state = state + dt * x * b;
    ys.push_back(reshape(sum(state * c, {3}), {B, 1, H, P}));
  }
  return ys.size() == 1 ? ys[0] : concat(ys, 1);
}

// The recurrence in chunks of Q positions. Within a chunk, with cs the cumulative log-decay,
// y_i = sum_{j <= i, same document} exp(cs_i - cs_j) (C_i . B_j) dt_j x_j as products of
// [Q, Q] matrices, plus the previous chunk's end state decayed by exp(cs_i) where i is still in
// that state's document; each chunk's end state is carried to the next.
Tensor ssd_chunked(const Projected& in, int64_t Q) {
  const Shape& s = in.x.shape();
  const int64_t B = s[0], T = s[1], H = s[2], P = s[3], N = in.b.shape()[2];
  const int64_t Tp = (T + Q - 1) / Q * Q;  // padded at the end: causal, so nothing reads it
  auto padded = [&](const Tensor& v, double fill) {
    if (Tp == T) return v;
    Axes low(v.shape().size(), 0), high(v.shape().size(), 0);
    high[1] = Tp - T;
    return pad(v, low, high, fill);
  };
  const Tensor x = padded(in.x, 0), dt = padded(in.dt, 0), a = padded(in.a, 0);
  const Tensor bm = padded(in.b, 0), cm = padded(in.c, 0), doc = padded(in.doc, -1);
  const Tensor causal = ge(iota({Q, Q}, 0), iota({Q, Q}, 1));  // i >= j
  Tensor state, prev_doc;
  std::vector<Tensor> ys;
  for (int64_t at = 0; at < Tp; at += Q) {
    Tensor xh = transpose(slice(x, {0, at, 0, 0}, {B, at + Q, H, P}), {0, 2, 1, 3});  // [B,H,Q,P]
    Tensor dth = transpose(slice(dt, {0, at, 0}, {B, at + Q, H}), {0, 2, 1});         // [B,H,Q]
    Tensor cs = transpose(cumsum(slice(a, {0, at, 0}, {B, at + Q, H}), 1), {0, 2, 1});
    Tensor bc = slice(bm, {0, at, 0}, {B, at + Q, N});
    Tensor cc = slice(cm, {0, at, 0}, {B, at + Q, N});
    Tensor dc = slice(doc, {0, at}, {B, at + Q});
    Tensor same = eq(reshape(dc, {B, Q, 1}), reshape(dc, {B, 1, Q}));
    Tensor live = reshape(gt(f32(causal) * f32(same), full({}, 0.5)), {B, 1, Q, Q});
    Tensor diff = reshape(cs, {B, H, Q, 1}) - reshape(cs, {B, H, 1, Q});
    Tensor decay = exp(select(live, diff, full({}, kMasked)));  // [B, H, Q, Q]
    Tensor cb = dot_general(cc, bc, {{0}, {0}, {2}, {2}});      // [B, Q, Q]
    Tensor w = decay * reshape(cb, {B, 1, Q, Q}) * reshape(dth, {B, H, 1, Q});
    Tensor y = dot_general(w, xh, {{0, 1}, {0, 1}, {3}, {2}});  // [B, H, Q, P]
    Tensor last_doc = slice(dc, {0, Q - 1}, {B, Q});            // [B, 1]
    Tensor cs_end = slice(cs, {0, 0, Q - 1}, {B, H, Q});        // [B, H, 1]
    if (state.defined()) {
      Tensor into = exp(cs) * reshape(f32(eq(dc, prev_doc)), {B, 1, Q});  // [B, H, Q]
      Tensor read = dot_general(state, cc, {{0}, {0}, {3}, {2}});         // [B, H, P, Q]
      y = y + transpose(read, {0, 1, 3, 2}) * reshape(into, {B, H, Q, 1});
    }
    Tensor to_end = exp(cs_end - cs) * reshape(f32(eq(dc, last_doc)), {B, 1, Q});  // [B, H, Q]
    Tensor fresh = dot_general(xh * reshape(to_end * dth, {B, H, Q, 1}), bc,
                               {{0}, {0}, {2}, {1}});  // [B, H, P, N]
    if (state.defined()) {
      Tensor carry = exp(cs_end) * reshape(f32(eq(last_doc, prev_doc)), {B, 1, 1});  // [B, H, 1]
      state = state * reshape(carry, {B, H, 1, 1}) + fresh;
    } else {
      state = fresh;
    }
    prev_doc = last_doc;
    ys.push_back(y);
  }
  Tensor all = transpose(ys.size() == 1 ? ys[0] : concat(ys, 2), {0, 2, 1, 3});  // [B,Tp,H,P]
  return Tp == T ? all : slice(all, {0, 0, 0, 0}, {B, T, H, P});
}

}  // namespace

void MambaConfig::validate(const std::string& source, int64_t width) const {
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format("[nn] {}: field 'mamba': {}", source, what));
  };
  if (state < 1) throw bad(fmt::format("'state' must be >= 1, got {}", state));
  if (head_dim < 1) throw bad(fmt::format("'head_dim' must be >= 1, got {}", head_dim));
  if (expand < 1 || expand > 16) {
    throw bad(fmt::format("'expand' must be in 1..16, got {}", expand));
  }
  if (conv < 1 || conv > 16) throw bad(fmt::format("'conv' must be in 1..16, got {}", conv));
  if (chunk < 1) throw bad(fmt::format("'chunk' must be >= 1, got {}", chunk));
  int64_t inner = 0;
  if (__builtin_mul_overflow(expand, width, &inner)) {
    throw bad(
        fmt::format("'expand' {} x width {} overflows int64; use a smaller width", expand, width));
  }
  if (inner % head_dim != 0) {
    throw bad(
        fmt::format("'head_dim' {} must divide the inner channels (expand {} x width {} = {})",
                    head_dim, expand, width, expand * width));
  }
}

std::vector<std::pair<std::string, Shape>> mamba_param_shapes(const MambaConfig& c,
                                                              const std::string& prefix,
                                                              int64_t width) {
  const int64_t I = c.expand * width, N = c.state, H = I / c.head_dim;
  return {{under(prefix, "in_proj.weight"), {width, 2 * I + 2 * N + H}},
          {under(prefix, "conv.weight"), {c.conv, I + 2 * N}},
          {under(prefix, "conv.bias"), {I + 2 * N}},
          {under(prefix, "dt_bias"), {H}},
          {under(prefix, "A_log"), {H}},
          {under(prefix, "D"), {H}},
          {under(prefix, "ln_y.weight"), {I}},
          {under(prefix, "out_proj.weight"), {I, width}}};
}

Tensor mamba_mixer(const MambaConfig& c, const NamedTensors& p, const std::string& prefix,
                   const Tensor& u, const Tensor& positions, const Tensor& doc_ids,
                   int64_t model_processes) {
  const Projected in = project(c, p, prefix, u, positions, doc_ids, model_processes);
  return finish(p, prefix, in, ssd_chunked(in, c.chunk), model_processes);
}

Tensor mamba_mixer_sequential(const MambaConfig& c, const NamedTensors& p,
                              const std::string& prefix, const Tensor& u, const Tensor& positions,
                              const Tensor& doc_ids) {
  const Projected in = project(c, p, prefix, u, positions, doc_ids, 1);
  return finish(p, prefix, in, ssd_sequential(in), 1);
}

}  // namespace keel::nn
