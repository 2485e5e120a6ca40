// XXH3-128 over the location-free, name-free text form: the text is already canonical
// (sorted attributes, exact float bits) and independent of the machine.
#include "ir/hash.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "ir/text.h"

namespace keel {

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", hi, lo);
}

Hash128 hash_bytes(std::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.high64, h.low64};
}

Hash128 graph_hash(const Graph& g) {
  // The version tag changes every hash if the encoding ever changes meaning.
  return hash_bytes("keel.graph.v1\n" + print_graph_body(g, /*with_locations=*/false));
}

}  // namespace keel
