// reduce: sum / max / mean over any set of axes. Size-1 dims are dropped and neighbouring dims of
// the same kind merged, so the input is kept and reduced groups in turn. When the innermost group
// is reduced each output sums contiguous runs; when it is kept, outputs advance together as lanes.
// Floats sum in double and round once; ints wrap in int64. Few outputs over a long reduction
// split it into segments whose partials combine in a fixed order: same bits for any thread count.
#include <algorithm>
#include <bit>

#include "backend/cpu/kernel_ops.h"
#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {
namespace {

enum ReduceOp { kSum = 0, kMax = 1, kMean = 2 };
constexpr int64_t kLanes = 1024;       // kept elements advanced together (8 KB of doubles)
constexpr int64_t kSegment = 1 << 15;  // elements per segment when one reduction is split
constexpr int64_t kMaxItems = 16;      // split reductions until there are this many work items

struct Plan {
  int nk = 0, nr = 0;  // outer kept dims, outer reduced dims
  int64_t ksize[KEEL_MAX_RANK], kstride[KEEL_MAX_RANK];
  int64_t rsize[KEEL_MAX_RANK], rstride[KEEL_MAX_RANK];
  int64_t lanes = 1, run = 1;  // innermost group: kept (lanes) or reduced (run)
  int64_t outer = 1, combos = 1, count = 1;
};

Plan make_plan(const keel_view& in, const std::vector<bool>& reduced) {
  int64_t size[KEEL_MAX_RANK];
  bool red[KEEL_MAX_RANK];
  int n = 0;
  Plan p;
  for (int d = 0; d < in.rank; ++d) {
    if (reduced[d]) p.count *= in.shape[d];
    if (in.shape[d] == 1) continue;
    if (n > 0 && red[n - 1] == reduced[d]) {
      size[n - 1] *= in.shape[d];
    } else {
      size[n] = in.shape[d];
      red[n++] = reduced[d];
    }
  }
  int64_t stride = 1;
  for (int g = n; g-- > 0;) {
    if (g == n - 1) {
      (red[g] ? p.run : p.lanes) = size[g];
    } else if (red[g]) {
      p.rsize[p.nr] = size[g];
      p.rstride[p.nr++] = stride;
    } else {
      p.ksize[p.nk] = size[g];
      p.kstride[p.nk++] = stride;
    }
    stride *= size[g];
  }
  std::reverse(p.rsize, p.rsize + p.nr);
  std::reverse(p.rstride, p.rstride + p.nr);
  std::reverse(p.ksize, p.ksize + p.nk);
  std::reverse(p.kstride, p.kstride + p.nk);
  for (int i = 0; i < p.nk; ++i) p.outer *= p.ksize[i];
  for (int i = 0; i < p.nr; ++i) p.combos *= p.rsize[i];
  return p;
}

int64_t offset_of(int64_t flat, int n, const int64_t* size, const int64_t* stride) {
  int64_t off = 0;
  for (int d = n; d-- > 0;) {
    off += flat % size[d] * stride[d];
    flat /= size[d];
  }
  return off;
}

// IEEE maximum of a run in a form that vectorises: a plain max (ignores NaN), plus flags for
// "saw a NaN" and "saw +0" that settle the two cases it gets wrong.
template <class T>
float float_max_run(const T* p, int64_t n) {
  float m[8];
  bool nan[8] = {}, pos_zero[8] = {};
  std::fill(m, m + 8, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  auto visit = [&](int l, float v) {
    m[l] = v > m[l] ? v : m[l];
    nan[l] |= v != v;
    pos_zero[l] |= std::bit_cast<uint32_t>(v) == 0;
  };
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) visit(l, static_cast<float>(widen(p[i + l])));
  }
  for (; i < n; ++i) visit(0, static_cast<float>(widen(p[i])));
  for (int l = 1; l < 8; ++l) {
    visit(0, m[l]);
    nan[0] |= nan[l];
    pos_zero[0] |= pos_zero[l];
  }
  if (nan[0]) return std::numeric_limits<float>::quiet_NaN();
  return m[0] == 0 && pos_zero[0] ? 0.0f : m[0];
}

template <class T, int Op>
struct Ops {
  static constexpr bool fl = is_float_v<T>;
  using Acc = std::conditional_t<fl, std::conditional_t<Op == kMax, float, double>, int64_t>;

  static Acc init() {
    if constexpr (Op != kMax) {
      return Acc{0};
    } else if constexpr (fl) {
      return -std::numeric_limits<float>::infinity();
    } else {
      return std::numeric_limits<T>::min();
    }
  }
  static Acc load(T v) {
    if constexpr (fl && Op == kMax) {
      return static_cast<float>(widen(v));
    } else {
      return widen(v);
    }
  }
  // max: NaN sticks, a NaN input wins, and +0 beats -0 (IEEE maximum, like the reference).
  static Acc step(Acc acc, Acc v) {
    if constexpr (Op != kMax) {
      if constexpr (fl) {
        return acc + v;
      } else {
        return wrap_add(acc, v);
      }
    } else if constexpr (fl) {
      const bool take = v > acc || v != v || (v == acc && !std::signbit(v));
      return acc != acc ? acc : (take ? v : acc);
    } else {
      return std::max(acc, v);
    }
  }
  static T finish(Acc acc, int64_t count) {
    if constexpr (fl) {
      if constexpr (Op == kMean) acc /= static_cast<double>(count);  // 0/0 = NaN when empty
      return narrow_float<T>(acc);
    } else {
      if constexpr (Op == kMean) acc = count == 0 ? 0 : acc / count;
      return static_cast<T>(acc);
    }
  }
  // A contiguous run folded into one accumulator; eight partial results let the loop vectorise
  // (max as defined by step is associative and commutative too).
  static Acc run(const T* p, int64_t n, Acc acc) {
    if constexpr (fl && Op == kMax) return step(acc, float_max_run(p, n));
    Acc part[8];
    std::fill(part, part + 8, init());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int l = 0; l < 8; ++l) part[l] = step(part[l], load(p[i + l]));
    }
    for (int l = 0; l < 8; ++l) acc = step(acc, part[l]);
    for (; i < n; ++i) acc = step(acc, load(p[i]));
    return acc;
  }
};

template <class T, int Op>
void reduce_typed(const T* src, T* dst, const Plan& p) {
  using O = Ops<T, Op>;
  using Acc = typename O::Acc;
  const int64_t chunks = (p.lanes + kLanes - 1) / kLanes;
  const int64_t base_items = p.outer * chunks;
  const int64_t domain = p.combos * p.run;  // reduction steps per item: run elements or lanes
  const int64_t step_size = p.run > 1 ? 1 : std::min(p.lanes, kLanes);
  int64_t segs = 1;
  if (base_items < kMaxItems) {
    segs = std::clamp<int64_t>(domain * step_size / kSegment, 1, kMaxItems / base_items);
  }
  std::vector<Acc> partial(segs > 1 ? static_cast<size_t>(base_items * segs * kLanes) : 0);
  const int64_t work = p.outer * p.lanes * p.count;
  parallel_for(base_items * segs, work, [&](int64_t begin, int64_t end) {
    Acc acc[kLanes];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item % segs, chunk = (item / segs) % chunks, o = item / (segs * chunks);
      const int64_t c0 = chunk * kLanes, width = std::min(kLanes, p.lanes - c0);
      const int64_t r0 = domain * s / segs, r1 = domain * (s + 1) / segs;
      const T* base = src + offset_of(o, p.nk, p.ksize, p.kstride) + c0;
      std::fill(acc, acc + width, O::init());
      if (p.run > 1) {  // lanes == 1: walk [r0, r1) as pieces of contiguous runs
        for (int64_t r = r0; r < r1;) {
          const int64_t pos = r % p.run, take = std::min(p.run - pos, r1 - r);
          const T* at = base + offset_of(r / p.run, p.nr, p.rsize, p.rstride) + pos;
          acc[0] = O::run(at, take, acc[0]);
          r += take;
        }
      } else {
        for (int64_t r = r0; r < r1; ++r) {
          const T* at = base + offset_of(r, p.nr, p.rsize, p.rstride);
          for (int64_t c = 0; c < width; ++c) acc[c] = O::step(acc[c], O::load(at[c]));
        }
      }
      if (segs == 1) {
        for (int64_t c = 0; c < width; ++c) dst[o * p.lanes + c0 + c] = O::finish(acc[c], p.count);
      } else {
        std::copy(acc, acc + width, partial.begin() + item * kLanes);
      }
    }
  });
  for (int64_t i = 0; segs > 1 && i < base_items; ++i) {
    const int64_t c0 = (i % chunks) * kLanes, width = std::min(kLanes, p.lanes - c0);
    for (int64_t c = 0; c < width; ++c) {
      Acc acc = partial[static_cast<size_t>(i * segs * kLanes + c)];
      for (int64_t s = 1; s < segs; ++s) {
        acc = O::step(acc, partial[static_cast<size_t>((i * segs + s) * kLanes + c)]);
      }
      dst[(i / chunks) * p.lanes + c0 + c] = O::finish(acc, p.count);
    }
  }
}

}  // namespace

void reduce(const keel_view* in, keel_view* out, int32_t op, const int64_t* axes, int32_t n_axes) {
  check_view(*in, "reduce", "input");
  check_view(*out, "reduce", "output");
  check_same_dtype(*in, *out, "reduce");
  if (op < kSum || op > kMean) fail("reduce: op {} is not 0 (sum), 1 (max) or 2 (mean)", op);
  if (in->dtype == static_cast<int32_t>(DType::boolean)) fail("reduce: bool is not a number");
  std::vector<bool> reduced(static_cast<size_t>(in->rank), false);
  int64_t kept = 1;
  for (int32_t i = 0; i < n_axes; ++i) {
    if (axes[i] < 0 || axes[i] >= in->rank || (i > 0 && axes[i] <= axes[i - 1])) {
      fail("reduce: axes must be sorted, distinct and in [0, {}) for {}", in->rank, view_str(*in));
    }
    reduced[axes[i]] = true;
  }
  for (int d = 0; d < in->rank; ++d) kept *= reduced[d] ? 1 : in->shape[d];
  if (kept != numel(*out)) {
    fail("reduce: reducing {} leaves {} elements but the output {} has {}", view_str(*in), kept,
         view_str(*out), numel(*out));
  }
  if (kept == 0) return;
  const Plan plan = make_plan(*in, reduced);
  dispatch(in->dtype, [&](auto e) {
    using T = decltype(e);
    if constexpr (!std::is_same_v<T, uint8_t>) {
      const T* src = static_cast<const T*>(in->data);
      T* dst = static_cast<T*>(out->data);
      if (op == kSum) reduce_typed<T, kSum>(src, dst, plan);
      if (op == kMax) reduce_typed<T, kMax>(src, dst, plan);
      if (op == kMean) reduce_typed<T, kMean>(src, dst, plan);
    }
  });
}

}  // namespace keel::cpu::detail
