#include "cache/key.h"

#include <fmt/format.h>

#include "cache/cache.h"

namespace keel::cache {

Hash128 key_of(const std::string& signature, const std::string& graph_hex,
               const std::string& bundle_hash, const std::string& codegen,
               const std::string& platform) {
  // Length prefixes make the encoding injective: no field can absorb its neighbour's text.
  std::string text = "keel.cache.key.v1\n";
  auto field = [&](std::string_view name, const std::string& value) {
    text += fmt::format("{}={}:{}\n", name, value.size(), value);
  };
  field("signature", signature);
  field("graph", graph_hex);
  field("bundle", bundle_hash);
  field("codegen", codegen);
  field("platform", platform);
  return hash_bytes(text);
}

Hash128 KeyParts::key() const {
  return key_of(signature, graph.hex(), bundle.hash(), codegen, platform);
}

}  // namespace keel::cache
