#include "backend/cpu/features.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel::cpu {
namespace {

std::string field(const policy::Bundle& b, const std::string& name) {
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

policy::Feature bf16_matmul_feature(const std::string& cpu_features, const std::string& onednn) {
  policy::Feature f{"bf16_matmul", false, "", "cpu.matmul_precision = f32 (f32 matmuls)"};
  const bool cpu = has_word(cpu_features, "avx512_bf16") || has_word(cpu_features, "amx_bf16");
  // oneDNN names the ISA its kernels use; below avx512_core_bf16 it would emulate bf16 dot
  // products (or, below avx512_core, have no bf16 matmul), so keel refuses instead.
  const bool lib = onednn.find("isa avx512_core_bf16") != std::string::npos ||
                   onednn.find("isa avx512_core_amx") != std::string::npos;
  if (!cpu) {
    f.why =
        "the CPU lacks avx512_bf16 and amx_bf16 (bundle host.cpu_features), so bf16 products "
        "would be emulated";
  } else if (onednn.empty()) {
    f.why = "no oneDNN in this backend (install libdnnl-dev: scripts/install-deps)";
  } else if (!lib) {
    f.why = fmt::format("{} does not use bf16 instructions (is ONEDNN_MAX_CPU_ISA set?)", onednn);
  } else {
    f.available = true;
    f.why = fmt::format("CPU avx512_bf16{} and {}: set cpu.matmul_precision = bf16",
                        has_word(cpu_features, "amx_bf16") ? "/amx_bf16" : "", onednn);
  }
  return f;
}

std::vector<policy::Feature> features(const policy::Bundle& b) {
  std::vector<policy::Feature> out;
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
                           "(scripts/install-deps) or set cpu.blas",
                 "none: programs with dot_general cannot run"});
  out.push_back(bf16_matmul_feature(field(b, "host.cpu_features"), field(b, "onednn")));
  return out;
}

void check_launch(const policy::LaunchPolicy& p, const policy::Bundle& bundle) {
  if (p.string("cpu.matmul_precision") != "bf16") return;
  const std::string origin = p.setting("cpu.matmul_precision").origin.text();
  if (p.string("launch.backend") != "cpu") {
    throw InputError(fmt::format(
        "[backend.cpu] cpu.matmul_precision = bf16 (from {}) needs launch.backend = cpu; the {} "
        "backend multiplies in f32; set cpu.matmul_precision = f32",
        origin, p.string("launch.backend")));
  }
  policy::Feature f =
      bf16_matmul_feature(field(bundle, "host.cpu_features"), field(bundle, "onednn"));
  if (!f.available) {
    throw InputError(fmt::format(
        "[backend.cpu] cpu.matmul_precision = bf16 (from {}) but bf16_matmul is unavailable: "
        "{}; set cpu.matmul_precision = f32",
        origin, f.why));
  }
}

}  // namespace keel::cpu
