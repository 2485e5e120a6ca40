#include "ir/array.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ir/convert.h"
#include "ir/error.h"

namespace keel {

static const Shape& checked(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) throw Error(fmt::format("[array] negative dimension in shape {}", shape_str(shape)));
  }
  return shape;
}

Array::Array(DType dtype, Shape shape, bool zeroed)
    : dtype_(dtype),
      shape_(std::move(shape)),
      bytes_(allocate_host(keel::numel(checked(shape_)) * dtype_size(dtype), zeroed)) {}

Array::Array(DType dtype, Shape shape) : Array(dtype, std::move(shape), true) {}

Array Array::uninitialized(DType dtype, Shape shape) {
  return Array(dtype, std::move(shape), false);
}

Array Array::untouched_zeros(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(keel::numel(checked(shape))) * dtype_size(dtype);
  return adopt(dtype, std::move(shape), allocate_host_untouched(bytes));
}

Array Array::adopt(DType dtype, Shape shape, std::shared_ptr<HostBlock> block) {
  const size_t bytes = static_cast<size_t>(keel::numel(checked(shape))) * dtype_size(dtype);
  if (!block || block->size() != bytes) {
    throw Error(
        fmt::format("[array] a host block of {} bytes adopted for {}{} ({} bytes); "
                    "allocate the array's exact size",
                    block ? block->size() : 0, dtype_name(dtype), shape_str(shape), bytes));
  }
  if (reinterpret_cast<uintptr_t>(block->data()) % 64 != 0) {
    throw Error(fmt::format(
        "[array] a host block at {} adopted for {}{}; kernels read arrays 64-byte aligned: "
        "allocate blocks at a multiple of 64",
        static_cast<const void*>(block->data()), dtype_name(dtype), shape_str(shape)));
  }
  return Array(dtype, std::move(shape), std::move(block));
}

Array Array::from_f32(Shape shape, std::span<const float> values) {
  Array a(DType::f32, std::move(shape));
  if (static_cast<int64_t>(values.size()) != a.numel()) {
    throw Error(fmt::format("[array] {} values given for shape {} ({} elements)", values.size(),
                            shape_str(a.shape()), a.numel()));
  }
  if (a.nbytes() > 0) std::memcpy(a.data(), values.data(), a.nbytes());
  return a;
}

Array Array::from_i64(Shape shape, std::span<const int64_t> values, DType dtype) {
  Array a(dtype, std::move(shape));
  if (static_cast<int64_t>(values.size()) != a.numel()) {
    throw Error(fmt::format("[array] {} values given for shape {} ({} elements)", values.size(),
                            shape_str(a.shape()), a.numel()));
  }
  for (int64_t i = 0; i < a.numel(); ++i) a.set_i64(i, values[i]);
  return a;
}

Array Array::scalar(double value, DType dtype) {
  return full({}, value, dtype);
}

Array Array::full(Shape shape, double value, DType dtype) {
  Array a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.numel(); ++i) a.set_f64(i, value);
  return a;
}

template <class T>
static T load(const std::byte* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
static void store(std::byte* p, int64_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

double Array::get_f64(int64_t i) const {
  const std::byte* p = data();
  switch (dtype_) {
    case DType::f32:
      return load<float>(p, i);
    case DType::bf16:
      return bf16_to_f32(load<uint16_t>(p, i));
    case DType::i32:
      return load<int32_t>(p, i);
    case DType::i64:
      return static_cast<double>(load<int64_t>(p, i));
    case DType::boolean:
      return load<uint8_t>(p, i) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

void Array::set_f64(int64_t i, double v) {
  std::byte* p = data();
  switch (dtype_) {
    case DType::f32:
      store<float>(p, i, static_cast<float>(v));
      break;
    case DType::bf16:
      store<uint16_t>(p, i, f32_to_bf16(static_cast<float>(v)));
      break;
    case DType::i32:
      store<int32_t>(p, i, saturating_cast<int32_t>(v));
      break;
    case DType::i64:
      store<int64_t>(p, i, saturating_cast<int64_t>(v));
      break;
    case DType::boolean:
      store<uint8_t>(p, i, v != 0.0 ? 1 : 0);
      break;
  }
}

int64_t Array::get_i64(int64_t i) const {
  const std::byte* p = data();
  switch (dtype_) {
    case DType::i32:
      return load<int32_t>(p, i);
    case DType::i64:
      return load<int64_t>(p, i);
    case DType::boolean:
      return load<uint8_t>(p, i) != 0 ? 1 : 0;
    default:
      return saturating_cast<int64_t>(get_f64(i));
  }
}

void Array::set_i64(int64_t i, int64_t v) {
  std::byte* p = data();
  switch (dtype_) {
    case DType::i32:
      store<int32_t>(p, i, static_cast<int32_t>(v));
      break;
    case DType::i64:
      store<int64_t>(p, i, v);
      break;
    case DType::boolean:
      store<uint8_t>(p, i, v != 0 ? 1 : 0);
      break;
    default:
      set_f64(i, static_cast<double>(v));
      break;
  }
}

std::vector<float> Array::to_f32() const {
  std::vector<float> out(numel());
  for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<float>(get_f64(i));
  return out;
}

std::vector<int64_t> Array::to_i64() const {
  std::vector<int64_t> out(numel());
  for (int64_t i = 0; i < numel(); ++i) out[i] = get_i64(i);
  return out;
}

Array Array::clone() const {
  Array a(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(a.data(), data(), nbytes());
  return a;
}

bool Array::same_bytes(const Array& o) const {
  return dtype_ == o.dtype_ && shape_ == o.shape_ &&
         (nbytes() == 0 || std::memcmp(data(), o.data(), nbytes()) == 0);
}

std::string Array::str(size_t max_elems) const {
  std::string s = fmt::format("{}{}{{", dtype_name(dtype_), shape_str(shape_));
  int64_t n = numel();
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(max_elems); ++i) {
    if (i) s += ',';
    s += is_float(dtype_) ? fmt::format("{}", get_f64(i)) : fmt::format("{}", get_i64(i));
  }
  if (n > static_cast<int64_t>(max_elems)) s += ",...";
  return s + "}";
}

}  // namespace keel
