#include "backend/cuda/policy_keys.h"

namespace keel::cuda {

policy::BackendKeys policy_keys() {
  using policy::Kind;
  policy::BackendKeys b{"cuda", "NVIDIA GPUs through CUDA", {}, {}, {}};
  // Where NVRTC, cuBLASLt and cuDNN are looked for first (then the loader's path); which ones
  // loaded is in the bundle, so the folder itself changes no key.
  b.keys.push_back(policy::make_key("cuda", "toolkit", Kind::string, std::string("/usr/local/cuda"),
                                    "the CUDA 13 toolkit's folder (NVRTC, cuBLASLt, cuDNN)"));
  policy::KeySpec arch = policy::make_key(
      "cuda", "arch", Kind::string, std::string("native"),
      "the GPU architecture kernels are compiled for: native (the device's) or sm_NN");
  arch.codegen = true;
  b.keys.push_back(arch);
  return b;
}

}  // namespace keel::cuda
