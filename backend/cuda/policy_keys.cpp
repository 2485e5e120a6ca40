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
  policy::KeySpec precision = policy::make_choice(
      "cuda", "matmul_precision", "f32", {"f32", "bf16"},
      "products: f32 on cuBLASLt (no TF32), or bf16 operands (rounded to nearest even) with f32 "
      "accumulation and results, on the tensor cores");
  precision.codegen = true;
  b.keys.push_back(precision);
  policy::KeySpec addends = policy::make_key(
      "cuda", "product_addends", Kind::boolean, true,
      "a product read only by an add adds the other operand itself (cuBLASLt's C with beta = 1, "
      "or its bias epilogue); false: the add is a kernel of its own");
  addends.codegen = true;
  b.keys.push_back(addends);
  policy::KeySpec gelu = policy::make_key(
      "cuda", "gelu_epilogues", Kind::boolean, true,
      "a product followed by GELU (tanh form) stores GELU of its sum, and the backward's product "
      "followed by GELU's gradient stores that (cuBLASLt's GELU epilogues); false: kernels of "
      "their own");
  gelu.codegen = true;
  b.keys.push_back(gelu);
  // The same programs, run elsewhere: not in the cache key.
  b.keys.push_back(policy::make_key(
      "cuda", "emulate", Kind::boolean, false,
      "run the programs on keel's emulated GPU (kernels built for the host by cpu.compiler, "
      "products as cuBLASLt describes them) instead of a device: slow; for debugging kernels "
      "without a GPU"));
  return b;
}

}  // namespace keel::cuda
