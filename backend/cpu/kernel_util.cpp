// View checks shared by every kernel entry: cheap (O(rank)) guards against ABI misuse.
#include <fmt/ranges.h>

#include <algorithm>

#include "backend/cpu/kernel_util.h"

namespace keel::cpu::detail {

std::string view_str(const keel_view& v) {
  const bool known = v.dtype >= 0 && v.dtype <= static_cast<int32_t>(DType::boolean);
  const int32_t rank = std::clamp<int32_t>(v.rank, 0, KEEL_MAX_RANK);
  return fmt::format("{}[{}]",
                     known ? dtype_name(static_cast<DType>(v.dtype)) : std::string_view("?"),
                     fmt::join(v.shape, v.shape + rank, ","));
}

void check_view(const keel_view& v, const char* op, const char* what, bool strided_ok) {
  if (v.dtype < 0 || v.dtype > static_cast<int32_t>(DType::boolean)) {
    fail("{}: {} has dtype code {}, not a keel dtype", op, what, v.dtype);
  }
  if (v.rank < 0 || v.rank > KEEL_MAX_RANK) {
    fail("{}: {} has rank {}; the ABI allows 0 to {}", op, what, v.rank, KEEL_MAX_RANK);
  }
  for (int32_t d = 0; d < v.rank; ++d) {
    if (v.shape[d] < 0) fail("{}: {} {} has a negative dimension", op, what, view_str(v));
  }
  if (v.data == nullptr && numel(v) > 0) fail("{}: {} {} has no data", op, what, view_str(v));
  if (v.strided && !strided_ok) {
    fail("{}: {} {} is strided, but this kernel reads row-major views only", op, what, view_str(v));
  }
}

void check_same_dtype(const keel_view& a, const keel_view& b, const char* op) {
  if (a.dtype != b.dtype) {
    fail("{}: {} and {} differ in dtype", op, view_str(a), view_str(b));
  }
}

}  // namespace keel::cpu::detail
