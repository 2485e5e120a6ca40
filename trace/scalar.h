#pragma once
/// @file
/// A 0-d tensor: how a per-step value (learning rate, step count) enters a program without
/// becoming a constant, so changing it never changes the program.
#include "trace/tensor.h"

namespace keel {

/// A 0-d tensor holding a per-step value; it enters a program as an input, not a constant.
class Scalar : public Tensor {
 public:
  /// A value tensor holding `value` as `dtype`.
  explicit Scalar(double value, DType dtype = DType::f32, SourceLoc loc = SourceLoc::current());
  /// Wraps a rank-0 tensor (symbolic or value); throws for any other rank.
  explicit Scalar(const Tensor& t);
  /// An i64 scalar holding `value` exactly.
  static Scalar i64(int64_t value, SourceLoc loc = SourceLoc::current());
};

}  // namespace keel
