// Attention over listed keys (ir/sparse_attention.h), fused: each query reads only its S listed
// keys, so no T x T score array exists. Rows of queries run in parallel for out, dq and the
// weights; dk and dv are sums over the queries that listed a key, so there each task owns one
// (row, kv head) and walks its queries, which no other task writes.
#include <algorithm>

#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

struct Sizes {
  int64_t B, T, H, KV, D, S;
};

template <class I>
struct Problem {
  const float *q, *k, *v, *dout;
  const I* keys;
  Sizes n;
  float scale;
  const float* qrow(int64_t b, int64_t t, int64_t h) const {
    return q + ((b * n.T + t) * n.H + h) * n.D;
  }
  int64_t kv_at(int64_t b, int64_t j, int64_t kvh) const {
    return ((b * n.T + j) * n.KV + kvh) * n.D;
  }
  // Query (b, t)'s listed positions that select a key, into `pos`; returns how many.
  int64_t listed(int64_t b, int64_t t, int64_t* pos, int64_t* entry) const {
    int64_t m = 0;
    for (int64_t s = 0; s < n.S; ++s) {
      const int64_t j = static_cast<int64_t>(keys[(b * n.T + t) * n.S + s]);
      if (j >= 0 && j < n.T) {
        pos[m] = j;
        entry[m++] = s;
      }
    }
    return m;
  }
};

// The per-key vector work, one clone per ISA level (kernel_util.h): rows of D are short, and the
// baseline build would not use the machine's widest vectors.
KEEL_CPU_CLONES
float dot(const float* a, const float* b, int64_t n) {
  // Sixteen lanes summed in a fixed order: vectorisable without reassociating, the same bytes
  // on every ISA clone.
  constexpr int64_t kLanes = 16;
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) lane[i % kLanes] += a[i] * b[i];
  float acc = 0.0f;
  for (float v : lane) acc += v;
  return acc;
}

KEEL_CPU_CLONES
void add_scaled(float* out, const float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += a * x[i];
}

// The softmax of query row `qr`'s scores against its m keys into p; returns nothing for m == 0.
template <class I>
void probabilities(const Problem<I>& P, int64_t b, int64_t kvh, const float* qr, const int64_t* pos,
                   int64_t m, float* p) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t e = 0; e < m; ++e) {
    p[e] = P.scale * dot(qr, P.k + P.kv_at(b, pos[e], kvh), P.n.D);
    mx = std::max(mx, p[e]);
  }
  float l = 0.0f;
  for (int64_t e = 0; e < m; ++e) l += (p[e] = std::exp(p[e] - mx));
  for (int64_t e = 0; e < m; ++e) p[e] /= l;
}

// The scores' gradients of query row `qr` with cotangent `g` into ds, from its probabilities p:
// ds_e = scale p_e (dout . v_e - sum_e' p_e' dout . v_e'), dp the scratch for dout . v_e.
template <class I>
void score_gradients(const Problem<I>& P, int64_t b, int64_t kvh, const float* g,
                     const int64_t* pos, int64_t m, const float* p, float* ds) {
  float delta = 0.0f;  // rowsum(dout · out)
  for (int64_t e = 0; e < m; ++e) {
    ds[e] = dot(g, P.v + P.kv_at(b, pos[e], kvh), P.n.D);
    delta += p[e] * ds[e];
  }
  for (int64_t e = 0; e < m; ++e) ds[e] = p[e] * (ds[e] - delta) * P.scale;
}

// out (op 0), dq (1) or weights (4): one task per query row (b, t).
template <class I>
void by_query(const Problem<I>& P, float* out, int32_t op) {
  const Sizes& n = P.n;
  const int64_t group = n.H / n.KV;
  parallel_for(n.B * n.T, n.B * n.T * n.H * n.S * n.D, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> pos(size_t(n.S)), entry(size_t(n.S));
    std::vector<float> p(size_t(n.S)), ds(size_t(n.S));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / n.T, t = r % n.T;
      const int64_t m = P.listed(b, t, pos.data(), entry.data());
      float* row = out + r * (op == 4 ? n.S : n.H * n.D);
      std::fill(row, row + (op == 4 ? n.S : n.H * n.D), 0.0f);
      for (int64_t h = 0; h < n.H; ++h) {
        const int64_t kvh = h / group;
        const float* qr = P.qrow(b, t, h);
        probabilities(P, b, kvh, qr, pos.data(), m, p.data());
        if (op == 4) {
          for (int64_t e = 0; e < m; ++e) row[entry[e]] += p[e] / static_cast<float>(n.H);
          continue;
        }
        float* o = row + h * n.D;
        if (op == 0) {
          for (int64_t e = 0; e < m; ++e) {
            const float* vr = P.v + P.kv_at(b, pos[e], kvh);
            add_scaled(o, vr, p[e], n.D);
          }
          continue;
        }
        score_gradients(P, b, kvh, P.dout + (r * n.H + h) * n.D, pos.data(), m, p.data(),
                        ds.data());
        for (int64_t e = 0; e < m; ++e) add_scaled(o, P.k + P.kv_at(b, pos[e], kvh), ds[e], n.D);
      }
    }
  });
}

// dk (op 2) or dv (3): one task per (b, kv head), over every query of the row.
template <class I>
void by_key(const Problem<I>& P, float* out, int32_t op) {
  const Sizes& n = P.n;
  const int64_t group = n.H / n.KV;
  parallel_for(n.B * n.KV, n.B * n.T * n.H * n.S * n.D, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> pos(size_t(n.S)), entry(size_t(n.S));
    std::vector<float> p(size_t(n.S)), ds(size_t(n.S));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / n.KV, kvh = task % n.KV;
      for (int64_t j = 0; j < n.T; ++j) std::fill_n(out + P.kv_at(b, j, kvh), n.D, 0.0f);
      for (int64_t t = 0; t < n.T; ++t) {
        const int64_t m = P.listed(b, t, pos.data(), entry.data());
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* qr = P.qrow(b, t, h);
          const float* g = P.dout + ((b * n.T + t) * n.H + h) * n.D;
          probabilities(P, b, kvh, qr, pos.data(), m, p.data());
          if (op == 3) {
            for (int64_t e = 0; e < m; ++e) {
              add_scaled(out + P.kv_at(b, pos[e], kvh), g, p[e], n.D);
            }
            continue;
          }
          score_gradients(P, b, kvh, g, pos.data(), m, p.data(), ds.data());
          for (int64_t e = 0; e < m; ++e) add_scaled(out + P.kv_at(b, pos[e], kvh), qr, ds[e], n.D);
        }
      }
    }
  });
}

void check_f32(const keel_view& v, const char* what) {
  check_view(v, "sparse_attention", what);
  if (v.dtype != static_cast<int32_t>(DType::f32) || v.rank != 4) {
    fail("sparse_attention: {} {} must be f32 of rank 4", what, view_str(v));
  }
}

}  // namespace

int64_t sparse_attention_scratch(const keel_view* keys) {
  const int64_t S = keys->rank == 3 ? keys->shape[2] : 0;
  return (2 * 8 + 2 * 4) * S * omp_get_num_procs();
}

void sparse_attention(const keel_view* q, const keel_view* k, const keel_view* v,
                      const keel_view* dout, const keel_view* keys, keel_view* out, int32_t op,
                      double scale) {
  if (op < 0 || op > 4) fail("sparse_attention: op {} is not 0 to 4", op);
  check_f32(*q, "q");
  check_f32(*k, "k");
  if (op != 4) check_f32(*v, "v");
  if (op == 1 || op == 2 || op == 3) check_f32(*dout, "dout");
  check_view(*keys, "sparse_attention", "keys");
  check_view(*out, "sparse_attention", "out");
  const Sizes n{q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], keys->shape[2]};
  if (keys->rank != 3 || keys->shape[0] != n.B || keys->shape[1] != n.T || n.KV < 1 ||
      n.H % n.KV != 0 || k->shape[0] != n.B || k->shape[1] != n.T || k->shape[3] != n.D) {
    fail("sparse_attention: q {}, k {} and keys {} do not agree", view_str(*q), view_str(*k),
         view_str(*keys));
  }
  auto same_shape = [](const keel_view& a, const keel_view& b) {
    return a.rank == b.rank && std::equal(a.shape, a.shape + a.rank, b.shape);
  };
  // The result's shape: q's (out, dq), k's (dk, dv) or [B, T, S] (weights).
  keel_view want = op == 2 || op == 3 ? *k : *q;
  if (op == 4) {
    want.rank = 3;
    want.shape[2] = n.S;
  }
  if ((op != 4 && !same_shape(*v, *k)) || (dout && !same_shape(*dout, *q)) ||
      out->dtype != static_cast<int32_t>(DType::f32) || !same_shape(*out, want)) {
    fail("sparse_attention: op {} with q {} and k {} cannot take v {}, dout {} and out {}", op,
         view_str(*q), view_str(*k), op != 4 ? view_str(*v) : "-", dout ? view_str(*dout) : "-",
         view_str(*out));
  }
  auto run = [&](auto* key_data) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(key_data)>>;
    Problem<I> P{static_cast<const float*>(q->data),
                 static_cast<const float*>(k->data),
                 op == 4 ? nullptr : static_cast<const float*>(v->data),
                 dout ? static_cast<const float*>(dout->data) : nullptr,
                 key_data,
                 n,
                 static_cast<float>(scale)};
    float* o = static_cast<float*>(out->data);
    if (op == 2 || op == 3) {
      by_key(P, o, op);
    } else {
      by_query(P, o, op);
    }
  };
  if (keys->dtype == static_cast<int32_t>(DType::i32)) {
    run(static_cast<const int32_t*>(keys->data));
  } else if (keys->dtype == static_cast<int32_t>(DType::i64)) {
    run(static_cast<const int64_t*>(keys->data));
  } else {
    fail("sparse_attention: keys {} must be i32 or i64", view_str(*keys));
  }
}

}  // namespace keel::cpu::detail
