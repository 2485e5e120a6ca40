#pragma once
// The host shim: the CUDA backend's generated source built for the CPU behind kHostShimHeader
// (thread and block indices as loops, warp operations and barriers between fibers), one entry
// point per kernel. The emulated GPU (emulated_gpu.h) launches kernels through it, so every
// kernel keel writes is checked against the reference interpreter without a GPU.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/program.h"

namespace keel::cuda {

struct HostShimOptions {
  std::string toolkit_dir = "/usr/local/cuda";  // NVRTC's (cuda.toolkit)
  std::string arch = "sm_90";                   // what NVRTC compiles each program for
  std::string compiler = "c++";                 // builds the shim's shared object
  double compile_timeout_s = 600;
  int64_t memory_bytes = int64_t{4} << 30;  // the emulated device's capacity
};

// Runs one launch of a kernel: 0; 1 when a block's threads deadlocked at a barrier; 3 when a
// kernel its launch says does not synchronize met a barrier.
using ShimEntry = int (*)(int64_t grid, int32_t block, int synchronizes, void* const* args);

// A program's source built for the host into a shared object, with an entry per kernel.
class ShimModule {
 public:
  // Throws keel::Error "[backend.cuda] the host shim's build of <graph> failed ..." with the
  // compiler's output.
  static std::unique_ptr<ShimModule> build(const CudaProgram& program,
                                           const HostShimOptions& options);
  ~ShimModule();
  ShimModule(const ShimModule&) = delete;
  ShimModule& operator=(const ShimModule&) = delete;
  // The entry of kernel `name`; throws keel::Error when the program has no such kernel.
  ShimEntry entry(const std::string& name) const;

 private:
  explicit ShimModule(void* handle) : handle_(handle) {}
  void* handle_;
};

extern const char* const kHostShimHeader;

}  // namespace keel::cuda
