#pragma once
// A STREAM-style triad (a = b + s·c over f32 arrays, on the OpenMP team, first-touched by the
// same threads): the memory bandwidth a bandwidth-bound update can hope for, measured in the
// run that measures the update. Bytes counted as STREAM does: two reads and one write.
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "bench/child_process.h"

namespace keel::bench {

inline double triad_gb_per_s(int64_t n, int reps) {
  std::unique_ptr<float[]> a(new float[static_cast<size_t>(n)]);
  std::unique_ptr<float[]> b(new float[static_cast<size_t>(n)]);
  std::unique_ptr<float[]> c(new float[static_cast<size_t>(n)]);
  float *pa = a.get(), *pb = b.get(), *pc = c.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 0.0f;
    pb[i] = 1.0f;
    pc[i] = 2.0f;
  }
  std::vector<double> times;
  for (int r = 0; r <= reps; ++r) {  // run 0 warms the pages and the thread team
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) times.push_back(dt);
  }
  return 3.0 * 4.0 * static_cast<double>(n) / median(times) / 1e9;
}

}  // namespace keel::bench
