#include "backend/cpu/backend_spec.h"

#include <fmt/format.h>

#include "backend/cpu/blas.h"
#include "backend/cpu/client.h"
#include "backend/cpu/compiler.h"
#include "backend/cpu/features.h"
#include "backend/cpu/settings.h"
#include "ir/error.h"
#include "passes/pipeline.h"

namespace keel::cpu {
namespace {

using backend::Check;
using backend::CheckStatus;

std::shared_ptr<backend::Client> client_for(const policy::LaunchPolicy& p) {
  const std::string& compiler = p.string("cpu.compiler");
  if (!find_program(compiler)) {
    throw Error(fmt::format(
        "[backend.cpu] compiler '{}' (cpu.compiler, from {}) not found; install g++ "
        "(scripts/install-deps) or set cpu.compiler; 'keel probe' checks the whole backend",
        compiler, p.setting("cpu.compiler").origin.text()));
  }
  try {
    return make_cpu_client(p.string("cpu.blas"));
  } catch (const Error& e) {
    throw Error(fmt::format("{}; 'keel probe' checks the whole backend", e.what()));
  }
}

Check check_compiler(const policy::LaunchPolicy& p) {
  const std::string& name = p.string("cpu.compiler");
  std::optional<std::string> path = find_program(name);
  if (!path) {
    return {"compiler", CheckStatus::fail, fmt::format("'{}' (cpu.compiler) not found", name),
            "install g++ (scripts/install-deps) or set cpu.compiler to a C++ compiler"};
  }
  const auto deadline = p.integer("cpu.compile_timeout_s");
  ProcessResult r = run_process({*path, "--version"}, static_cast<double>(deadline));
  if (r.timed_out) {
    return {"compiler", CheckStatus::fail,
            fmt::format("{} --version did not finish within {} s (cpu.compile_timeout_s)", *path,
                        deadline),
            "check that cpu.compiler is a working C++ compiler"};
  }
  std::string first = r.output.substr(0, r.output.find('\n'));
  if (r.exit_code != 0 || first.empty()) {
    return {"compiler", CheckStatus::fail,
            fmt::format("{} --version exited {}: {}", *path, r.exit_code, first),
            "check that cpu.compiler is a working C++ compiler"};
  }
  return {"compiler", CheckStatus::pass, fmt::format("{}: {}", *path, first), ""};
}

Check check_blas(const policy::LaunchPolicy& p) {
  try {
    auto lib = load_blas(p.string("cpu.blas"));
    double gflops = measure_sgemm_gflops(512, 5);
    return {"blas", CheckStatus::pass,
            fmt::format("{}: {}; sgemm 512^3 {:.1f} GFLOP/s", lib->name, lib->config, gflops), ""};
  } catch (const Error& e) {
    return {"blas", CheckStatus::fail, e.what(),
            "install libopenblas0-openmp (scripts/install-deps) or set cpu.blas"};
  }
}

}  // namespace

backend::BackendSpec backend_spec() {
  backend::BackendSpec s;
  s.name = "cpu";
  s.summary =
      "C++ generated for the whole program, built by the system compiler and loaded from "
      "memory; oneDNN and OpenBLAS products; OpenMP";
  s.passes = passes::pass_names();  // what cpu::lower runs, with lowering_target()
  s.configure_compile = [](const policy::LaunchPolicy& p, backend::CompileOptions& o) {
    o.backend_settings = settings_from(p);
    o.matmul_precision = p.string("cpu.matmul_precision");
  };
  s.make_client = client_for;
  s.bundle_part = [](const policy::LaunchPolicy& p, const backend::CompileOptions& o) {
    backend::BundlePart part;
    try {
      part.fields = make_cpu_client(p.string("cpu.blas"))->bundle_fields();
    } catch (const Error&) {
      part.fields = {{"blas", "not loaded"}, {"blas.library", p.string("cpu.blas")}};
    }
    part.toolchain = toolchain_of(settings_of(o));
    return part;
  };
  s.set_threads = set_blas_threads;
  s.installation_checks = [](const policy::LaunchPolicy& p) {
    return std::vector<Check>{check_compiler(p), check_blas(p)};
  };
  s.features = features;
  s.check_launch = check_launch;
  s.miscompile_workaround = "cpu.opt_level = 0";
  return s;
}

}  // namespace keel::cpu
