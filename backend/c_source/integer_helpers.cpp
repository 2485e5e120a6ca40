// The integer rules of docs/ops.md as C helpers, the same text in the CPU's C++ and in CUDA C
// (where NVRTC's -default-device makes them device functions).
#include "backend/c_source/c_source.h"

namespace keel::c_source {

const char* const kIntegerHelpers = R"KEEL(
// Integer division truncates; by zero gives 0; MIN / -1 wraps instead of trapping.
inline int32_t keel_idiv32(int32_t a, int32_t b) {
  return b == 0 ? 0 : b == -1 ? static_cast<int32_t>(0u - static_cast<uint32_t>(a)) : a / b;
}
inline int64_t keel_idiv64(int64_t a, int64_t b) {
  return b == 0 ? 0 : b == -1 ? static_cast<int64_t>(static_cast<uint64_t>(0) - static_cast<uint64_t>(a)) : a / b;
}

// Float to int truncates toward zero, saturates, and maps NaN and infinities to 0.
inline int32_t keel_f2i32(float x) {
  const double v = x;
  if (!(v - v == 0.0)) return 0;
  if (v <= -2147483648.0) return -2147483647 - 1;
  if (v >= 2147483647.0) return 2147483647;
  return static_cast<int32_t>(v);
}
inline int64_t keel_f2i64(float x) {
  const double v = x;
  if (!(v - v == 0.0)) return 0;
  if (v < -9223372036854775808.0) return -9223372036854775807LL - 1;
  if (v >= 9223372036854775808.0) return 9223372036854775807LL;
  return static_cast<int64_t>(v);
}
)KEEL";

}  // namespace keel::c_source
