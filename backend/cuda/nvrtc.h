#pragma once
// NVRTC, opened with dlopen: compiles generated CUDA C to a cubin for one architecture in this
// process, with no GPU and no driver, and reports each kernel's registers and spills.
#include <string>
#include <vector>

#include "backend/cuda/kernel_resources.h"

namespace keel::cuda {

struct Cubin {
  std::string bytes;  // what cuModuleLoadData loads
  std::string log;    // NVRTC's and ptxas' messages
  std::vector<KernelResources> kernels;
};

class Nvrtc {
 public:
  // The NVRTC of `toolkit_dir` (cuda.toolkit), else the loader's by soname; throws keel::Error
  // naming both tries and the fix when it cannot be loaded.
  static const Nvrtc& load(const std::string& toolkit_dir);
  std::string version() const;  // "13.0"
  // `source` compiled for `arch` ("sm_90"); throws keel::Error "[backend.cuda] NVRTC could not
  // compile <name> ..." with the first lines of its log.
  Cubin compile(const std::string& source, const std::string& name, const std::string& arch) const;
  // What compile passes NVRTC besides the architecture, for the bundle's toolchain.
  static std::vector<std::string> options();
  // The architectures it can compile for, as "sm_90".
  std::vector<std::string> architectures() const;

 private:
  Nvrtc() = default;
  struct Api;
  const Api* api_ = nullptr;
};

}  // namespace keel::cuda
