// The fixed tiling of a product's output and the loop that spreads tiles over the team (see
// kernel_dot.h): shared by the OpenBLAS products and oneDNN's where it has no brgemm kernel.
#include <omp.h>

#include <algorithm>

#include "backend/cpu/kernel_dot.h"

namespace keel::cpu::detail {
namespace {

constexpr int64_t kTileRows = 128;
constexpr int64_t kMinTiles = 12, kMinCols = 128;

}  // namespace

Tiling tiling(int64_t batches, int64_t M, int64_t N) {
  Tiling t{M, N, std::clamp<int64_t>(M, 1, kTileRows), std::max<int64_t>(N, 1)};
  if (M == 1) t.cols = std::clamp<int64_t>(N, 1, kTileRows);  // a row vector: tile its columns
  const int64_t have = batches * t.per_batch();
  if (have > 0 && have < kMinTiles && N > kMinCols) {
    const int64_t panels = std::min((kMinTiles + have - 1) / have, N / kMinCols);
    t.cols = (N + panels - 1) / panels;
  }
  return t;
}

void for_each_tile(int64_t units, const std::function<void(int64_t)>& unit) {
  if (omp_in_parallel() || omp_get_max_threads() == 1) {
    for (int64_t u = 0; u < units; ++u) unit(u);  // every call single-threaded already
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t u = 0; u < units; ++u) unit(u);
}

}  // namespace keel::cpu::detail
