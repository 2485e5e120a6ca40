#pragma once
/// @file
/// A dense host array: the payload of constants, program inputs and outputs.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/host_memory.h"
#include "ir/shape.h"

namespace keel {

/// A dense row-major host array of one dtype and static shape; copies share their bytes.
class Array {
 public:
  Array() : Array(DType::f32, Shape{}) {}
  Array(DType dtype, Shape shape);  ///< zero-filled
  /// Contents unspecified: for buffers the caller overwrites entirely, such as program outputs.
  static Array uninitialized(DType dtype, Shape shape);
  /// Zeros that take memory only where they are touched (allocate_host_untouched): stand-ins
  /// whose type alone matters, such as the results of a program prepared and not run.
  static Array untouched_zeros(DType dtype, Shape shape);
  /// An array over `block`, whose allocator recycles it (the CPU backend's outputs); keel::Error
  /// unless the block holds exactly the array's bytes.
  static Array adopt(DType dtype, Shape shape, std::shared_ptr<HostBlock> block);

  /// f32 array of `values`; keel::Error unless there are numel(shape) of them.
  static Array from_f32(Shape shape, std::span<const float> values);
  /// `values` converted to `dtype`; keel::Error unless there are numel(shape) of them.
  static Array from_i64(Shape shape, std::span<const int64_t> values, DType dtype = DType::i64);
  /// Rank-0 array holding `value` converted to `dtype`.
  static Array scalar(double value, DType dtype = DType::f32);
  /// Every element set to `value` converted to `dtype`.
  static Array full(Shape shape, double value, DType dtype = DType::f32);

  DType dtype() const { return dtype_; }                    ///< element type
  const Shape& shape() const { return shape_; }             ///< dimensions
  int64_t numel() const { return keel::numel(shape_); }     ///< number of elements
  size_t nbytes() const { return bytes_->size(); }          ///< size of the payload in bytes
  std::byte* data() { return bytes_->data(); }              ///< the payload, row-major
  const std::byte* data() const { return bytes_->data(); }  ///< the payload, row-major

  /// @name Element access
  /// Element access converting through double / int64; bool reads as 0 or 1.
  ///@{
  double get_f64(int64_t i) const;  ///< element `i` as double
  /// Stores `v` at `i`; rounds to the element type (ints truncate).
  void set_f64(int64_t i, double v);
  int64_t get_i64(int64_t i) const;    ///< element `i` as int64 (floats saturate)
  void set_i64(int64_t i, int64_t v);  ///< stores `v` at `i`, converted to the element type
  ///@}

  std::vector<float> to_f32() const;    ///< every element converted to float
  std::vector<int64_t> to_i64() const;  ///< every element converted to int64

  /// Deep copy; Arrays otherwise share their bytes.
  Array clone() const;
  bool same_bytes(const Array& other) const;     ///< same dtype, shape and bytes
  std::string str(size_t max_elems = 16) const;  ///< "f32[2]{1,2}"

 private:
  Array(DType dtype, Shape shape, bool zeroed);
  Array(DType dtype, Shape shape, std::shared_ptr<HostBlock> bytes)
      : dtype_(dtype), shape_(std::move(shape)), bytes_(std::move(bytes)) {}

  DType dtype_;
  Shape shape_;
  std::shared_ptr<HostBlock> bytes_;
};

}  // namespace keel
