#pragma once
// Structural hash: stable across processes and machines (no pointers, no unordered
// iteration, no padding bytes). Source locations and the graph name are not part of it.
#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace keel {

struct Hash128 {
  uint64_t hi = 0;
  uint64_t lo = 0;
  std::string hex() const;  // 32 lowercase hex digits
  bool operator==(const Hash128&) const = default;
};

Hash128 hash_bytes(std::string_view bytes);
Hash128 graph_hash(const Graph& g);

}  // namespace keel
