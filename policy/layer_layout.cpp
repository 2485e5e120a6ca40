#include "policy/layer_layout.h"

#include <charconv>
#include <string_view>

namespace keel::policy {

std::optional<LayerLayout> parse_layer_layout(const std::string& text) {
  if (text == "unrolled") return LayerLayout{};
  if (text == "scanned") return LayerLayout{true, 0};
  // split:N, or split:N/scanned: each segment's repeated layers looped too.
  constexpr std::string_view kScanned = "/scanned";
  const bool scanned = text.ends_with(kScanned);
  const std::string_view split =
      std::string_view(text).substr(0, text.size() - (scanned ? kScanned.size() : 0));
  if (!split.starts_with("split:") || split.size() > 10) return std::nullopt;
  int64_t n = 0;
  auto [p, ec] = std::from_chars(split.data() + 6, split.data() + split.size(), n);
  if (ec != std::errc() || p != split.data() + split.size() || n < 1 || n > 4096) {
    return std::nullopt;
  }
  return LayerLayout{scanned, n};
}

}  // namespace keel::policy
