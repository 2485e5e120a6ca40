// The epoch order: a seeded Fisher–Yates shuffle, so each epoch visits every document once.
#include <numeric>

#include "data/stream.h"
#include "ir/rng.h"

namespace keel::data {

namespace {
constexpr uint64_t kOrderStream = 0x6f72646572ull;  // "order": apart from the FIM draws
}  // namespace

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  const uint64_t stream = splitmix64(seed ^ kOrderStream);
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t bits = rng_bits(stream, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    auto j = static_cast<int64_t>(bits % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace keel::data
