// make bench: dot_general's GEMMs per shape class of a GPT-2 step (gpt2-s and gpt2-m), on
// OpenBLAS and on oneDNN in f32 (as keel runs them, and oneDNN threaded as it likes: step_bench's
// baseline), and on oneDNN in bf16 (as keel runs them, operand rounding included, and threaded
// on rounded operands: the bf16 baseline), with the library
// kernel_matmul.cpp picks for each; the table behind that choice.
// Usage: gemm_bench --help
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/client.h"
#include "bench/command_line.h"
#include "bench/gemm_shapes.h"

namespace {

using namespace keel;
using cpu::detail::GemmLibrary;

void table(const std::string& preset, int reps) {
  const nn::GptConfig c = nn::gpt_preset(preset);
  std::vector<bench::GemmShape> shapes = bench::gpt_gemm_shapes(c);
  for (const bench::GemmShape& v : bench::vector_shapes(c)) shapes.push_back(v);
  std::printf("%s, %d threads, GFLOP/s (median of %d):\n", preset.c_str(), omp_get_max_threads(),
              reps);
  std::printf("  %-34s %4s %5s %5s %5s  %8s %8s %8s %8s %8s %8s  %-8s %s\n", "shape", "B", "M", "N",
              "K", "OpenBLAS", "OpenBLAS", "oneDNN", "oneDNN", "oneDNN", "oneDNN", "faster",
              "chosen");
  std::printf("  %-34s %4s %5s %5s %5s  %8s %8s %8s %8s %8s %8s  %-8s %s\n", "", "", "", "", "",
              "tiles", "threaded", "f32", "threaded", "bf16", "bf16 thr", "f32", "f32/bf16");
  for (const bench::GemmShape& s : shapes) {
    const double blas = bench::gemm_gflops(s, GemmLibrary::openblas, KEEL_MATMUL_F32, reps);
    const double threaded = bench::blas_threaded_gflops(s, reps);
    const double dnnl = bench::gemm_gflops(s, GemmLibrary::onednn, KEEL_MATMUL_F32, reps);
    // step_bench's baseline: the bare primitive threaded as oneDNN likes (on AVX2 hosts keel
    // runs it in fixed one-thread tiles instead: the f32 column).
    const double dnnl_threaded = bench::onednn_gflops(s, false, reps);
    // Without native bf16 (AVX2 hosts) oneDNN has no bf16 product: the column says n/a.
    const double bf16 = cpu::detail::onednn_native_bf16()
                            ? bench::gemm_gflops(s, GemmLibrary::onednn, KEEL_MATMUL_BF16, reps)
                            : std::nan("");
    const double bf16_threaded =
        cpu::detail::onednn_native_bf16() ? bench::onednn_gflops(s, true, reps) : std::nan("");
    bench::GemmOperands o(s);
    const auto a = bench::view_a(s, o.a.data()), b = bench::view_b(s, o.b.data());
    std::printf(
        "  %-34s %4lld %5lld %5lld %5lld  %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f  %-8s %s/%s\n",
        s.name.c_str(), static_cast<long long>(s.batch), static_cast<long long>(s.M),
        static_cast<long long>(s.N), static_cast<long long>(s.K), blas, threaded, dnnl,
        dnnl_threaded, bf16, bf16_threaded, blas > dnnl ? "openblas" : "onednn",
        cpu::detail::library_name(cpu::detail::choose_library(a, b, KEEL_MATMUL_F32)),
        cpu::detail::library_name(cpu::detail::choose_library(a, b, KEEL_MATMUL_BF16)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int reps = 10;
    std::vector<std::string> presets = {"gpt2-s", "gpt2-m"};
    bench::CommandLine options{"GEMM GFLOP/s per GPT shape on OpenBLAS and oneDNN, f32 and bf16"};
    options.positive("--reps", reps, "timed calls per shape (median)");
    options.list_of("--presets", presets, {"gpt2-s", "gpt2-m"},
                    "gpt2-s and/or gpt2-m (the GEMM mix is theirs), comma-separated");
    if (std::optional<int> status = options.parse(argc, argv)) return *status;
    cpu::make_cpu_client();  // loads OpenBLAS
    std::printf("%s\n", cpu::detail::onednn_description().c_str());
    for (const std::string& p : presets) table(p, reps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
