#include "trace/scalar.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel {

Scalar::Scalar(double value, DType dtype, SourceLoc loc)
    : Tensor(Array::scalar(value, dtype), std::move(loc)) {}

Scalar::Scalar(const Tensor& t) : Tensor(t) {
  if (t.rank() != 0) {
    throw Error(fmt::format("[trace] Scalar needs a 0-d tensor; got {}", t.type().str()));
  }
}

Scalar Scalar::i64(int64_t value, SourceLoc loc) {
  Array a(DType::i64, {});
  a.set_i64(0, value);
  return Scalar(Tensor(std::move(a), std::move(loc)));
}

}  // namespace keel
