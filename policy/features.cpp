#include "policy/features.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel::policy {
namespace {

std::string field(const Bundle& b, const std::string& name) {
  auto it = b.fields.find(name);
  return it == b.fields.end() ? "" : it->second;
}

bool has_word(const std::string& words, const std::string& w) {
  size_t at = 0;
  while ((at = words.find(w, at)) != std::string::npos) {
    bool start = at == 0 || words[at - 1] == ' ';
    bool end = at + w.size() == words.size() || words[at + w.size()] == ' ';
    if (start && end) return true;
    at += w.size();
  }
  return false;
}

}  // namespace

std::vector<Feature> feature_table(const Bundle& b) {
  std::vector<Feature> out;
  std::string omp = field(b, "openmp");
  out.push_back({"openmp", !omp.empty(),
                 omp.empty()
                     ? "the backend reports no OpenMP (the ref backend runs one thread)"
                     : fmt::format("OpenMP {} (generated loops and BLAS share its pool)", omp),
                 "single-threaded loops"});
  std::string blas = field(b, "blas");
  bool blas_ok = !blas.empty() && blas != "not loaded";
  out.push_back({"blas", blas_ok,
                 blas_ok ? blas
                         : "no BLAS library loaded; install libopenblas0-openmp "
                           "(scripts/install-deps) or set codegen.blas",
                 "none: programs with dot_general cannot run"});
  std::string isa = field(b, "cpu.features");
  bool bf16_cpu = has_word(isa, "avx512_bf16") || has_word(isa, "amx_bf16");
  out.push_back({"bf16_matmul", false,
                 bf16_cpu ? "the CPU has bf16 dot instructions but keel has no bf16 GEMM kernel yet"
                          : "the CPU lacks avx512_bf16/amx_bf16, and keel has no bf16 GEMM kernel",
                 "bf16 operands are widened to f32 and multiplied in f32"});
  out.push_back({"scan_layers", true,
                 "repeated blocks are traced once and looped inside the program over stacked "
                 "parameters (keel::scan); request it to train that way",
                 "layers are unrolled into the program"});
  // No build of keel has an MPI communicator yet; nothing looks for OpenMPI.
  out.push_back({"mpi", false,
                 "no MPI support is compiled into keel: data parallelism over MPI is not "
                 "implemented yet",
                 "one process; spmd meshes must have one device"});
  return out;
}

Feature find_feature(const Bundle& bundle, const std::string& name) {
  std::vector<std::string> names;
  for (Feature& f : feature_table(bundle)) {
    if (f.name == name) return f;
    names.push_back(f.name);
  }
  throw InputError(
      fmt::format("[features] unknown feature '{}'; features: {}", name, fmt::join(names, ", ")));
}

}  // namespace keel::policy
