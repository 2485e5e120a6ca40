// make bench, under mpirun: keel's all_reduce (the step program's, a compiled all_reduce over
// the mesh axis "data", summed in the fixed order of dist/fixed_order.h) against a raw
// MPI_Allreduce of the same buffer (whatever order Open MPI picks), alternating, median of
// --reps after one warm-up each. Rank 0 prints. Usage: mpirun -np 2 allreduce_bench --help
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "bench/child_process.h"
#include "bench/command_line.h"
#include "dist/communicator.h"
#include "dist/fixed_order.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "trace/collectives.h"
#include "trace/compile.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace keel;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    double mb = 43.0;  // the gradient size for gpt2-s
    int reps = 10;
    bench::CommandLine options{
        "keel's all_reduce (compiled, fixed order) against a raw MPI_Allreduce"};
    options.in_range("--mb", mb, 0.001, 4096.0, "buffer size in MB (f32)");
    options.positive("--reps", reps, "timed calls of each (median)");
    if (std::optional<int> status = options.parse(argc, argv)) return *status;
    policy::PolicySources sources;
    sources.sets = {"compile_cache.dir=" +
                        (std::filesystem::temp_directory_path() / "keel-allreduce-bench").string(),
                    "shape_guard.mode=off"};
    Runtime runtime(policy::resolve_policy(sources));
    dist::Communicator& world = dist::world();
    const auto n = static_cast<int64_t>(mb * 1e6 / 4);
    std::vector<float> x(static_cast<size_t>(n)), y(x.size());
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = 0.001f * float(i % 1000) + float(world.rank());
    auto program = compile(
        "all_reduce_bench", [](const Tensor& t) { return all_reduce(t, "data"); },
        [] {
          CompileOptions o;
          o.varying_arguments[0] = {"data"};
          return o;
        }());
    const Tensor input(Array::from_f32({n}, x));
    std::vector<double> raw, ours, direct;
    for (int r = 0; r <= reps; ++r) {
      world.barrier();
      auto t = Clock::now();
      MPI_Allreduce(x.data(), y.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double a = seconds_since(t);
      world.barrier();
      t = Clock::now();
      const Tensor out = program(input);
      const double b = seconds_since(t);
      world.barrier();
      t = Clock::now();
      dist::all_reduce(world, ReduceKind::sum, DType::f32, x.data(), y.data(), n);
      const double c = seconds_since(t);
      if (r > 0) {
        raw.push_back(a);
        ours.push_back(b);
        direct.push_back(c);
      }
    }
    if (world.rank() == 0) {
      const double m_raw = bench::median(raw), m_ours = bench::median(ours);
      std::printf(
          "all_reduce %.1f MB f32 over %d processes (%d threads each; %s): MPI_Allreduce %.2f ms, "
          "keel program %.2f ms (%.2fx of MPI's), its exchange alone %.2f ms (%.2fx); fixed "
          "order, every process the same bits; median of %d\n",
          mb, world.size(), runtime.threads(), runtime.place().host.c_str(), 1000 * m_raw,
          1000 * m_ours, m_ours / m_raw, 1000 * bench::median(direct),
          bench::median(direct) / m_raw, reps);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
