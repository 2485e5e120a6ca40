#pragma once
/// @file
/// Structural hash: stable across processes and machines (no pointers, no unordered
/// iteration, no padding bytes). Source locations and the graph name are not part of it.
#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace keel {

/// A 128-bit hash (XXH3-128).
struct Hash128 {
  uint64_t hi = 0;                                  ///< high 64 bits
  uint64_t lo = 0;                                  ///< low 64 bits
  std::string hex() const;                          ///< 32 lowercase hex digits
  bool operator==(const Hash128&) const = default;  ///< same 128 bits
};

Hash128 hash_bytes(std::string_view bytes);  ///< XXH3-128 of `bytes`
/// The structural hash of `g`: of its canonical text without locations or name.
Hash128 graph_hash(const Graph& g);

}  // namespace keel
