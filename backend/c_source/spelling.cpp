// C spellings of types and values. Floats are written as hex literals (exact) or, when not
// finite, as their bit patterns, so NaN payloads, infinities and -0 survive compilation.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/c_source/c_source.h"

namespace keel::c_source {
namespace {

std::string float_text(float f, bool in_expr) {
  if (!std::isfinite(f)) {
    return fmt::format("__builtin_bit_cast(float, 0x{:08x}u)", std::bit_cast<uint32_t>(f));
  }
  std::string s = fmt::format("{:a}f", static_cast<double>(f));
  return in_expr && s[0] == '-' ? "(" + s + ")" : s;
}

std::string int_text(int64_t v, DType t) {
  if (t == DType::i32) {
    if (v == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
    return v < 0 ? fmt::format("({})", v) : fmt::format("{}", v);
  }
  if (v == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
  return v < 0 ? fmt::format("({}LL)", v) : fmt::format("{}LL", v);
}

std::string element_text(const Array& a, int64_t i, bool in_expr) {
  switch (a.dtype()) {
    case DType::f32: {
      float f = 0;
      std::memcpy(&f, a.data() + 4 * i, 4);  // the exact bits, NaN payloads included
      return float_text(f, in_expr);
    }
    case DType::bf16: {
      uint16_t bits = 0;
      std::memcpy(&bits, a.data() + 2 * i, 2);
      return float_text(bf16_to_f32(bits), in_expr);
    }
    case DType::i32:
      return int_text(a.get_i64(i), DType::i32);
    case DType::i64: {
      const std::string s = int_text(a.get_i64(i), DType::i64);
      return in_expr ? "int64_t" + (s[0] == '(' ? s : "(" + s + ")") : s;
    }
    case DType::boolean:
      return in_expr ? fmt::format("uint8_t({})", a.get_i64(i)) : fmt::format("{}", a.get_i64(i));
  }
  fail("internal: dtype code {} has no C spelling", static_cast<int>(a.dtype()));
}

}  // namespace

std::string_view storage_type(DType t) {
  switch (t) {
    case DType::f32:
      return "float";
    case DType::bf16:
      return "uint16_t";
    case DType::i32:
      return "int32_t";
    case DType::i64:
      return "int64_t";
    case DType::boolean:
      return "uint8_t";
  }
  fail("internal: dtype code {} has no C type", static_cast<int>(t));
}

std::string_view compute_type(DType t) {
  return t == DType::bf16 ? "float" : storage_type(t);
}

std::string literal(const Array& a, int64_t i) {
  return element_text(a, i, /*in_expr=*/true);
}

std::string constant_array(const Array& a, std::string_view name, std::string_view qualifiers) {
  std::string s =
      fmt::format("{} {} {}[{}] = {{", qualifiers, storage_type(a.dtype()), name, a.numel());
  for (int64_t i = 0; i < a.numel(); ++i) {
    s += i % 8 == 0 ? "\n    " : " ";
    if (a.dtype() == DType::bf16) {
      uint16_t bits = 0;
      std::memcpy(&bits, a.data() + 2 * i, 2);
      s += fmt::format("0x{:04x}", bits);
    } else {
      s += element_text(a, i, /*in_expr=*/false);
    }
    s += ',';
  }
  return s + "};\n";
}

std::string load_expr(DType t, const std::string& raw) {
  switch (t) {
    case DType::bf16:
      return "keel_bf2f(" + raw + ")";
    case DType::boolean:
      return "uint8_t(" + raw + " != 0)";  // any nonzero byte reads as true, as in the reference
    default:
      return raw;
  }
}

std::string store_expr(DType t, const std::string& value) {
  return t == DType::bf16 ? "keel_f2bf(" + value + ")" : value;
}

}  // namespace keel::c_source
