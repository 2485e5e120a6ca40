#pragma once
// A dense host array: the payload of constants, program inputs and outputs.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/host_memory.h"
#include "ir/shape.h"

namespace keel {

class Array {
 public:
  Array() : Array(DType::f32, Shape{}) {}
  Array(DType dtype, Shape shape);  // zero-filled
  // Contents unspecified: for buffers the caller overwrites entirely, such as program outputs.
  static Array uninitialized(DType dtype, Shape shape);

  static Array from_f32(Shape shape, std::span<const float> values);
  static Array from_i64(Shape shape, std::span<const int64_t> values, DType dtype = DType::i64);
  static Array scalar(double value, DType dtype = DType::f32);
  // Every element set to `value` converted to `dtype`.
  static Array full(Shape shape, double value, DType dtype = DType::f32);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return keel::numel(shape_); }
  size_t nbytes() const { return bytes_->size(); }
  std::byte* data() { return bytes_->data(); }
  const std::byte* data() const { return bytes_->data(); }

  // Element access converting through double / int64; bool reads as 0 or 1.
  double get_f64(int64_t i) const;
  void set_f64(int64_t i, double v);  // rounds to the element type (ints truncate)
  int64_t get_i64(int64_t i) const;
  void set_i64(int64_t i, int64_t v);

  std::vector<float> to_f32() const;
  std::vector<int64_t> to_i64() const;

  // Deep copy; Arrays otherwise share their bytes.
  Array clone() const;
  bool same_bytes(const Array& other) const;
  std::string str(size_t max_elems = 16) const;  // "f32[2]{1,2}"

 private:
  Array(DType dtype, Shape shape, bool zeroed);

  DType dtype_;
  Shape shape_;
  std::shared_ptr<HostBlock> bytes_;
};

}  // namespace keel
