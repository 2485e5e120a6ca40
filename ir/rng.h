#pragma once
// The counter-based generator behind rng_uniform; every backend computes exactly this.
#include <cstdint>

namespace keel {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of draw number `counter` from stream `seed`.
inline uint64_t rng_bits(uint64_t seed, uint64_t counter, uint64_t i) {
  return splitmix64(splitmix64(seed ^ splitmix64(counter)) + i);
}

// Uniform in [0, 1) with 24 bits, exact in f32.
inline float rng_uniform01(uint64_t seed, uint64_t counter, uint64_t i) {
  return static_cast<float>(rng_bits(seed, counter, i) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace keel
