#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace keel {

enum class DType : uint8_t { f32, bf16, i32, i64, boolean };

std::string_view dtype_name(DType t);  // "f32", "bf16", "i32", "i64", "bool"
std::optional<DType> parse_dtype(std::string_view name);
size_t dtype_size(DType t);
inline bool is_float(DType t) {
  return t == DType::f32 || t == DType::bf16;
}
inline bool is_int(DType t) {
  return t == DType::i32 || t == DType::i64;
}

// bf16 is the top half of an f32; conversion rounds to nearest even.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);

}  // namespace keel
