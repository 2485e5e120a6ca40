#pragma once
// Any byte string as valid UTF-8 and back, exactly: JSON holds only valid UTF-8, but samples,
// paths and environment values are bytes. Valid UTF-8 maps to itself, except that code points
// in the reserved range U+10FF80..U+10FFFF (private use, plane 16) are escaped like stray bytes.
// Each byte b >= 0x80 that is not part of a well-formed sequence (or that belongs to a reserved
// code point) becomes U+10FF00 + b. bytes_to_utf8 then utf8_to_bytes returns every byte
// string unchanged; for text without stray bytes or reserved code points both are the identity.
#include <string>
#include <string_view>
#include <vector>

namespace keel {

inline constexpr char32_t kByteEscapeBase = 0x10FF00;  // byte b -> U+10FF00 + b (b >= 0x80)

// Always valid UTF-8.
std::string bytes_to_utf8(std::string_view bytes);
// The inverse: reserved code points become their byte; anything else is copied as it is.
std::string utf8_to_bytes(std::string_view text);

std::vector<std::string> bytes_to_utf8(const std::vector<std::string>& bytes);
std::vector<std::string> utf8_to_bytes(const std::vector<std::string>& texts);

}  // namespace keel
