#include "backend/cpu/blas.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "backend/cpu/blas_table.h"
#include "ir/error.h"

namespace keel::cpu {
namespace {

std::mutex mu;
std::shared_ptr<const BlasLibrary> current;

template <class Fn>
Fn symbol(void* handle, const std::string& library, const char* name) {
  void* p = dlsym(handle, name);
  if (!p) {
    throw Error(
        fmt::format("[backend.cpu] BLAS library '{}' has no symbol {}; set cpu.blas to a CBLAS "
                    "library such as OpenBLAS",
                    library, name));
  }
  return reinterpret_cast<Fn>(p);
}

// OpenBLAS 0.3.21's DYNAMIC_ARCH picks kernels by CPU model and falls back to Prescott (SSE3)
// on a model it does not know: measured 3-4x slower SGEMM on an AVX-512 Xeon here. So keel names
// the core from the ISA the CPU reports, unless OPENBLAS_CORETYPE is already set. The core shows
// in the BLAS config string, which is part of the bundle and so of every cache key.
void choose_openblas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const char* core = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    core = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    core = "Haswell";
  }
  if (core) setenv("OPENBLAS_CORETYPE", core, 0);
}

}  // namespace

namespace detail {
BlasTable blas_table;
}

std::shared_ptr<const BlasLibrary> load_blas(const std::string& name) {
  std::lock_guard lock(mu);
  if (current) {
    if (current->name == name) return current;
    throw Error(
        fmt::format("[backend.cpu] BLAS library '{}' requested but '{}' is already in use in this "
                    "process; one BLAS per process: set cpu.blas once, at launch",
                    name, current->name));
  }
  choose_openblas_core();
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    throw Error(fmt::format(
        "[backend.cpu] BLAS library '{}' could not be loaded: {}; install libopenblas0-openmp "
        "(scripts/install-deps) or set cpu.blas to a CBLAS library",
        name, dlerror()));
  }
  detail::BlasTable t;
  t.sgemm = symbol<decltype(t.sgemm)>(handle, name, "cblas_sgemm");
  t.sgemv = symbol<decltype(t.sgemv)>(handle, name, "cblas_sgemv");
  auto* get_config = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_config"));
  t.set_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"));
  auto* get_threads = reinterpret_cast<int (*)()>(dlsym(handle, "openblas_get_num_threads"));
  detail::blas_table = t;
  auto lib = std::make_shared<BlasLibrary>();
  lib->name = name;
  lib->config = get_config ? get_config() : "CBLAS (vendor unknown: no openblas_get_config)";
  lib->threads = get_threads ? get_threads() : 0;
  lib->handle = handle;
  current = lib;
  return current;
}

std::shared_ptr<const BlasLibrary> loaded_blas() {
  std::lock_guard lock(mu);
  return current;
}

double measure_sgemm_gflops(int n, int reps) {
  if (!loaded_blas()) throw Error("[backend.cpu] no BLAS library loaded yet");
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {  // run 0 warms caches and the thread pool
    auto t0 = std::chrono::steady_clock::now();
    detail::blas_table.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n,
                             b.data(), n, 0.0f, c.data(), n);
    std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (r > 0) rates.push_back(2.0 * n * n * n / dt.count() / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

void set_blas_threads(int threads) {
  std::lock_guard lock(mu);
  if (current && detail::blas_table.set_threads) detail::blas_table.set_threads(threads);
}

}  // namespace keel::cpu
