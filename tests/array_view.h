#pragma once
// A row-major keel_view over an Array's bytes, for tests that call the CPU kernels directly.
#include "backend/cpu/abi.h"
#include "ir/array.h"

namespace keel::test {

inline keel_view view(const Array& a) {
  keel_view v{};
  v.data = const_cast<std::byte*>(a.data());
  v.dtype = static_cast<int32_t>(a.dtype());
  v.rank = static_cast<int32_t>(a.shape().size());
  for (size_t d = 0; d < a.shape().size(); ++d) v.shape[d] = a.shape()[d];
  return v;
}

}  // namespace keel::test
