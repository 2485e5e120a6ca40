// Spellings of scalars in the text form: floats as shortest round-trip decimals (NaNs with
// their bits) and escaped strings.
#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <limits>

#include "ir/text.h"

namespace keel {
namespace {

// IEEE layout of a `width`-bit float (64, 32, or 16 for bf16).
struct Layout {
  int width, mant_bits;
  uint64_t exp_mask() const { return (width == 64 ? 0x7ffull : 0xffull) << mant_bits; }
  uint64_t quiet_nan() const { return exp_mask() | (uint64_t{1} << (mant_bits - 1)); }
  uint64_t sign() const { return uint64_t{1} << (width - 1); }
};
constexpr Layout kF64{64, 52}, kF32{32, 23}, kBf16{16, 7};

std::string nan_text(uint64_t bits, Layout l) {
  if (bits == l.quiet_nan()) return "nan";
  if (bits == (l.quiet_nan() | l.sign())) return "-nan";
  return fmt::format("nan(0x{:0{}x})", bits, l.width / 4);
}

std::optional<uint64_t> parse_nan(std::string_view s, Layout l) {
  if (s == "nan") return l.quiet_nan();
  if (s == "-nan") return l.quiet_nan() | l.sign();
  if (!s.starts_with("nan(0x") || !s.ends_with(")")) return std::nullopt;
  uint64_t bits = 0;
  const char* end = s.data() + s.size() - 1;
  auto r = std::from_chars(s.data() + 6, end, bits, 16);
  bool is_nan = (bits & l.exp_mask()) == l.exp_mask() && (bits & ~l.exp_mask() & (l.sign() - 1));
  if (r.ec != std::errc() || r.ptr != end || (l.width < 64 && bits >> l.width) || !is_nan) {
    return std::nullopt;
  }
  return bits;
}

// Finite values via from_chars (exact rounding), plus inf and -inf.
template <class T>
std::optional<T> parse_plain(std::string_view s) {
  if (s == "inf" || s == "-inf") {
    return s[0] == '-' ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  }
  if (s.find_first_not_of("-+.0123456789eE") != std::string_view::npos) return std::nullopt;
  T v{};
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string f32_text(float f) {
  if (std::isnan(f)) return nan_text(std::bit_cast<uint32_t>(f), kF32);
  return fmt::format("{}", f);  // fmt's shortest form reads back as the same float
}

// Shortest "%.Ng" that, read as f32 then rounded to bf16 (what the parser does), gives `b`.
std::string bf16_text(uint16_t b) {
  float f = bf16_to_f32(b);
  if (std::isnan(f)) return nan_text(b, kBf16);
  for (int p = 1; p < 10 && std::isfinite(f); ++p) {
    std::string s = fmt::format("{:.{}g}", f, p);
    std::optional<float> back = parse_plain<float>(s);
    if (back && f32_to_bf16(*back) == b) return s;
  }
  return fmt::format("{}", f);
}

std::string f64_text(double d) {
  if (std::isnan(d)) return nan_text(std::bit_cast<uint64_t>(d), kF64);
  std::string s = fmt::format("{}", d);
  if (s.find_first_not_of("-0123456789") == std::string::npos) s += ".0";
  return s;
}

std::optional<float> parse_f32_text(std::string_view s) {
  if (auto bits = parse_nan(s, kF32)) return std::bit_cast<float>(static_cast<uint32_t>(*bits));
  return parse_plain<float>(s);
}

std::optional<uint16_t> parse_bf16_text(std::string_view s) {
  if (auto bits = parse_nan(s, kBf16)) return static_cast<uint16_t>(*bits);
  std::optional<float> f = parse_plain<float>(s);
  if (!f) return std::nullopt;
  return f32_to_bf16(*f);
}

std::optional<double> parse_f64_text(std::string_view s) {
  if (auto bits = parse_nan(s, kF64)) return std::bit_cast<double>(*bits);
  return parse_plain<double>(s);
}

std::string quoted_text(std::string_view s, bool unicode_escapes) {
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += unicode_escapes ? fmt::format("\\u{:04X}", u) : fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string printable_text(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    const bool c1 = u == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(s[i + 1]) <= 0x9f;  // U+0080..U+009F
    if (c1) {
      out += fmt::format("\\xc2\\x{:02x}", static_cast<unsigned char>(s[++i]));
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<std::string> unescape_text(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\') {
      out += body[i];
      continue;
    }
    char e = ++i < body.size() ? body[i] : '\0';
    unsigned v = 0;
    if (e == '\\' || e == '"') {
      out += e;
    } else if (e == 'n' || e == 't') {
      out += e == 'n' ? '\n' : '\t';
    } else if (const char* p = body.data() + i; e == 'x' && i + 3 <= body.size() &&
                                                std::from_chars(p + 1, p + 3, v, 16).ptr == p + 3) {
      out += static_cast<char>(v);
      i += 2;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace keel
