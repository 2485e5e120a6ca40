#include "ir/utf8_escape.h"

namespace keel {
namespace {

unsigned char byte_at(std::string_view s, size_t i) {
  return static_cast<unsigned char>(s[i]);
}

// Length of the well-formed UTF-8 sequence starting at s[i] (Unicode Table 3-7), or 0: no
// overlong forms, no surrogates, nothing above U+10FFFF.
size_t sequence_length(std::string_view s, size_t i) {
  const unsigned char c = byte_at(s, i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte_at(s, i + 1) < lo || byte_at(s, i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte_at(s, i + k) < 0x80 || byte_at(s, i + k) > 0xBF) return 0;
  }
  return n;
}

// U+10FF80..U+10FFFF is F4 8F BE..BF 80..BF.
bool reserved_at(std::string_view s, size_t i) {
  return i + 4 <= s.size() && byte_at(s, i) == 0xF4 && byte_at(s, i + 1) == 0x8F &&
         byte_at(s, i + 2) >= 0xBE && byte_at(s, i + 2) <= 0xBF && byte_at(s, i + 3) >= 0x80 &&
         byte_at(s, i + 3) <= 0xBF;
}

void append_escaped(std::string& out, unsigned char b) {
  const char32_t cp = kByteEscapeBase + b;
  out += static_cast<char>(0xF0 | (cp >> 18));
  out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  out += static_cast<char>(0x80 | (cp & 0x3F));
}

}  // namespace

std::string bytes_to_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = sequence_length(bytes, i);
    if (n == 0 || reserved_at(bytes, i)) {
      // A reserved code point is escaped byte by byte, so decoding cannot mistake it for one.
      const size_t count = n == 0 ? 1 : n;
      for (size_t k = 0; k < count; ++k) append_escaped(out, byte_at(bytes, i + k));
      i += count;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string utf8_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (reserved_at(text, i)) {
      const unsigned b =
          0x80 | ((byte_at(text, i + 2) & 0x01) << 6) | (byte_at(text, i + 3) & 0x3F);
      out += static_cast<char>(b);
      i += 4;
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::vector<std::string> bytes_to_utf8(const std::vector<std::string>& bytes) {
  std::vector<std::string> out;
  out.reserve(bytes.size());
  for (const std::string& b : bytes) out.push_back(bytes_to_utf8(b));
  return out;
}

std::vector<std::string> utf8_to_bytes(const std::vector<std::string>& texts) {
  std::vector<std::string> out;
  out.reserve(texts.size());
  for (const std::string& t : texts) out.push_back(utf8_to_bytes(t));
  return out;
}

}  // namespace keel
