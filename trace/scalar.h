#pragma once
// A 0-d tensor: how a per-step value (learning rate, step count) enters a program without
// becoming a constant, so changing it never changes the program.
#include "trace/tensor.h"

namespace keel {

class Scalar : public Tensor {
 public:
  explicit Scalar(double value, DType dtype = DType::f32, SourceLoc loc = SourceLoc::current());
  // Wraps a rank-0 tensor (symbolic or value); throws for any other rank.
  explicit Scalar(const Tensor& t);
  static Scalar i64(int64_t value, SourceLoc loc = SourceLoc::current());
};

}  // namespace keel
