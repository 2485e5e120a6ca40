#pragma once
// Float to integer the way every keel backend casts (docs/ops.md, cast): truncate toward zero,
// saturate at the type's range, non-finite gives 0. One definition, so backends cannot drift.
#include <cmath>
#include <limits>

namespace keel {

template <class I>
I saturating_cast(double v) {
  if (!std::isfinite(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();  // 2^63 for i64: saturate, never UB
  return static_cast<I>(v);
}

}  // namespace keel
