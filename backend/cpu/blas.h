#pragma once
// The BLAS library GEMMs run on, loaded with dlopen at client creation (cpu.blas), so a
// missing or wrong library is one clear error (and a probe FAIL) rather than a loader abort.
// One BLAS per process: the kernels call the library loaded first.
#include <memory>
#include <string>

namespace keel::cpu {

struct BlasLibrary {
  std::string name;    // as asked for: a path or a soname
  std::string config;  // openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  int threads = 0;     // openblas_get_num_threads() after loading
  void* handle = nullptr;
};

// Loads `name` (once per process) and makes it the library the GEMM kernels call. Throws
// keel::Error "[backend.cpu] BLAS library '<name>' could not be loaded: <dlerror>; ..." or, when
// a different library is already in use, names both.
std::shared_ptr<const BlasLibrary> load_blas(const std::string& name);
// The library in use, or null before load_blas.
std::shared_ptr<const BlasLibrary> loaded_blas();
// Median GFLOP/s of an n x n x n sgemm over `reps` runs on the loaded library (keel::Error
// before load_blas).
double measure_sgemm_gflops(int n, int reps);
// Sets the BLAS thread count (no-op before load_blas).
void set_blas_threads(int threads);

}  // namespace keel::cpu
