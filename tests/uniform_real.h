#pragma once
// std::uniform_real_distribution<double>(lo, hi) over std::mt19937_64, value for value as
// libstdc++ draws it, without its cost at -O0: its generate_canonical takes a long-double
// logarithm on every draw, a fifth of some kernel tests' time in the sanitizer tree.
#include <cmath>
#include <random>

namespace keel::testing_support {

inline double uniform_real(std::mt19937_64& g, double lo, double hi) {
  double unit = static_cast<double>(g()) / 18446744073709551616.0;  // g() / 2^64
  if (unit >= 1.0) unit = std::nextafter(1.0, 0.0);
  return unit * (hi - lo) + lo;
}

}  // namespace keel::testing_support
