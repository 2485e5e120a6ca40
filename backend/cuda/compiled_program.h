#pragma once
// A program compiled for one GPU architecture: the launch table, the cubin NVRTC made of its
// source, and ptxas' report of each kernel; what the executable cache holds for the CUDA
// backend (serialize_program), so a warm restart loads the cubin and compiles nothing.
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernel_resources.h"
#include "backend/cuda/program.h"

namespace keel::cuda {

struct CompiledProgram {
  CudaProgram program;  // with its source: what the emulated GPU builds, and dumps show
  std::string arch;     // "sm_90"
  std::string cubin;
  std::vector<KernelResources> kernels;
};

// Lowers `graph` for CUDA and generates its program (options.before_build sees its predicted
// peak). Throws keel::Error "[backend.cuda] ..." for a unit without a kernel.
// For `arch` ("sm_90"): tensor cores (bf16 products) from sm_80.
CudaProgram generate_program(const Graph& graph, const backend::CompileOptions& options,
                             const std::string& arch = "sm_90");
// `program` compiled with the NVRTC of `toolkit_dir` for `arch`. Throws keel::Error
// "[backend.cuda] ..." with NVRTC's errors, and for a kernel that spills registers.
CompiledProgram compile_generated(CudaProgram program, const std::string& toolkit_dir,
                                  const std::string& arch);

constexpr std::string_view kExecutableMagic = "keel-cuda-executable";
// 2: the source travels with the cubin; 3: addends; 4: activations (an older keel would run a
// GELU with a bias as the bias alone); 5: donation (aliases, copies before the launches).
constexpr int kExecutableFormat = 5;

// backend/executable_bytes.h's form: the header holds the launch table, the payload is the cubin.
std::string serialize_program(const CompiledProgram& compiled);
// Checks every field (kernels the launches name, argument places inside their buffers, the
// cubin an ELF image) and returns the program. Throws keel::InputError
// "[backend.cuda] load: ...; recompile the program" naming what is wrong.
CompiledProgram deserialize_program(std::string_view bytes);

}  // namespace keel::cuda
