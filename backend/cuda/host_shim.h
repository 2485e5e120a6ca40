#pragma once
// The host shim: the CUDA backend's generated programs run on the CPU, so every kernel keel
// writes is checked against the reference interpreter on machines without a GPU. Its client
// lowers and generates as the CUDA backend does, compiles the source with NVRTC for the target
// architecture (refusing kernels that spill registers), and runs the same source built by the
// system C++ compiler behind kHostShimHeader, one block at a time.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernel_resources.h"
#include "backend/cuda/program.h"

namespace keel::cuda {

struct HostShimOptions {
  std::string toolkit_dir = "/usr/local/cuda";  // NVRTC's (cuda.toolkit)
  std::string arch = "sm_90";                   // what NVRTC compiles each program for
  std::string compiler = "c++";                 // builds the shim's shared object
  double compile_timeout_s = 600;
};

// A client on the host's memory (cpu:0) whose executables run the CUDA backend's kernels there.
// compile throws keel::Error "[backend.cuda] ..." for a unit without a kernel yet, for NVRTC's
// errors, and for a kernel that spills ("<kernel>: 16 bytes spill stores").
std::shared_ptr<backend::Client> make_host_shim_client(HostShimOptions options = {});

// What a shim executable runs: the generated program and ptxas' report of each of its kernels
// (compiled by NVRTC for HostShimOptions::arch).
class ShimExecutable : public backend::Executable {
 public:
  virtual const CudaProgram& program() const = 0;
  virtual const std::vector<KernelResources>& kernels() const = 0;
};

// `program` built for the shim as it is (NVRTC not run): for tests that change a program's
// source.
std::unique_ptr<ShimExecutable> make_shim_executable(CudaProgram program,
                                                     const HostShimOptions& options = {});

extern const char* const kHostShimHeader;

}  // namespace keel::cuda
