#pragma once
/// @file
/// Element types of arrays and tensors.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace keel {

/// An element type: 32-bit float, bfloat16, 32- and 64-bit signed integers, or bool (one byte).
enum class DType : uint8_t { f32, bf16, i32, i64, boolean };

std::string_view dtype_name(DType t);  ///< "f32", "bf16", "i32", "i64", "bool"
/// The dtype named `name` (as dtype_name spells it); nullopt if none.
std::optional<DType> parse_dtype(std::string_view name);
size_t dtype_size(DType t);  ///< bytes per element
/// f32 or bf16.
inline bool is_float(DType t) {
  return t == DType::f32 || t == DType::bf16;
}
/// i32 or i64 (bool is neither float nor int).
inline bool is_int(DType t) {
  return t == DType::i32 || t == DType::i64;
}

/// bf16 is the top half of an f32; conversion rounds to nearest even.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);  ///< exact: the bits become the top half of an f32

}  // namespace keel
