#include "runtime/probe.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/cpu/blas.h"
#include "backend/cpu/client.h"
#include "backend/cpu/compiler.h"
#include "backend/ref/client.h"
#include "cache/cache.h"
#include "cache/layout.h"
#include "cache/safe_dir.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"
#include "runtime/policy_config.h"

namespace keel::runtime {
namespace {

using Status = ProbeStatus;

// y = sum(tanh(x . w) * x, axis 1): a GEMM through BLAS, a fused elementwise loop and a
// reduction, the three kinds of code a training step is made of.
Graph probe_graph() {
  Graph g("probe");
  NodeId x = g.add_param({DType::f32, {16, 32}});
  NodeId w = g.add_param({DType::f32, {32, 32}});
  Attrs dot = {{"lhs_batch", std::vector<int64_t>{}},
               {"rhs_batch", std::vector<int64_t>{}},
               {"lhs_contract", std::vector<int64_t>{1}},
               {"rhs_contract", std::vector<int64_t>{0}}};
  NodeId h = g.emit(Op::tanh, {g.emit(Op::dot_general, {x, w}, dot, {})}, {}, {});
  NodeId y = g.emit(Op::reduce_sum, {g.emit(Op::mul, {h, x}, {}, {})},
                    {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}, {});
  g.set_outputs({y});
  return g;
}

std::vector<backend::Buffer> probe_inputs() {
  Array x(DType::f32, {16, 32}), w(DType::f32, {32, 32});
  for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, std::sin(0.37 * static_cast<double>(i)));
  for (int64_t i = 0; i < w.numel(); ++i) w.set_f64(i, std::cos(0.11 * static_cast<double>(i)) / 8);
  backend::Device cpu{0, "cpu"};
  return {backend::Buffer(x, cpu), backend::Buffer(w, cpu)};
}

// The largest relative difference, or an explanation when the shapes differ.
std::optional<std::string> mismatch(const Array& got, const Array& want, double rtol) {
  if (got.shape() != want.shape()) return "output shapes differ";
  for (int64_t i = 0; i < got.numel(); ++i) {
    double a = got.get_f64(i), b = want.get_f64(i);
    if (!(std::abs(a - b) <= rtol * std::max(1.0, std::abs(b)))) {
      return fmt::format("element {} is {} but the reference interpreter gives {}", i, a, b);
    }
  }
  return std::nullopt;
}

ProbeCheck check_compiler(const policy::LaunchPolicy& p) {
  const std::string& name = p.string("codegen.compiler");
  std::optional<std::string> path = cpu::find_program(name);
  if (!path) {
    return {"compiler", Status::fail, fmt::format("'{}' (codegen.compiler) not found", name),
            "install g++ (scripts/install-deps) or set codegen.compiler to a C++ compiler"};
  }
  const auto deadline = p.integer("codegen.compile_timeout_s");
  cpu::ProcessResult r = cpu::run_process({*path, "--version"}, static_cast<double>(deadline));
  if (r.timed_out) {
    return {"compiler", Status::fail,
            fmt::format("{} --version did not finish within {} s (codegen.compile_timeout_s)",
                        *path, deadline),
            "check that codegen.compiler is a working C++ compiler"};
  }
  std::string first = r.output.substr(0, r.output.find('\n'));
  if (r.exit_code != 0 || first.empty()) {
    return {"compiler", Status::fail,
            fmt::format("{} --version exited {}: {}", *path, r.exit_code, first),
            "check that codegen.compiler is a working C++ compiler"};
  }
  return {"compiler", Status::pass, fmt::format("{}: {}", *path, first), ""};
}

ProbeCheck check_blas(const policy::LaunchPolicy& p) {
  try {
    auto lib = cpu::load_blas(p.string("codegen.blas"));
    double gflops = cpu::measure_sgemm_gflops(512, 5);
    return {"blas", Status::pass,
            fmt::format("{}: {}; sgemm 512^3 {:.1f} GFLOP/s", lib->name, lib->config, gflops), ""};
  } catch (const Error& e) {
    return {"blas", Status::fail, e.what(),
            "install libopenblas0-openmp (scripts/install-deps) or set codegen.blas"};
  }
}

ProbeCheck check_openmp(const policy::LaunchPolicy& p) {
  int want = omp_get_max_threads();
  int seen = 0;
#pragma omp parallel
  {
#pragma omp single
    seen = omp_get_num_threads();
  }
  int64_t asked = p.integer("launch.threads");
  std::string detail = fmt::format("{} thread(s) ran a parallel region (launch.threads = {}{})",
                                   seen, asked, asked == 0 ? ": one per core" : "");
  if (seen != want) {
    return {"openmp", Status::fail, detail + fmt::format("; expected {}", want),
            "check OMP_NUM_THREADS / OMP_THREAD_LIMIT and cgroup CPU limits"};
  }
  return {"openmp", Status::pass, detail, ""};
}

ProbeCheck check_cache_dir(const policy::LaunchPolicy& p) {
  cache::CacheConfig c = cache_config_from(p);
  if (c.mode == cache::Mode::off) {
    return {"cache_dir", Status::skip, "compile_cache.mode = off: no disk tier to check", ""};
  }
  std::string dir = c.dir.empty() ? cache::default_cache_dir() : c.dir;
  bool writes = c.mode == cache::Mode::readwrite;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(dir, ec))) {
    if (!writes) {
      return {"cache_dir", Status::fail,
              fmt::format("{} does not exist and compile_cache.mode = {} never creates it", dir,
                          cache::mode_name(c.mode)),
              "warm it once with compile_cache.mode = readwrite, or point compile_cache.dir at "
              "a warmed cache"};
    }
    try {
      cache::prepare_layout(cache::Layout(dir), /*create=*/true);
    } catch (const Error& e) {
      return {"cache_dir", Status::fail, e.what(), "set compile_cache.dir to a directory you own"};
    }
  }
  if (std::optional<std::string> why = cache::unsafe_reason(dir)) {
    std::error_code ec;  // chmod helps a directory others can write, not a file
    return {"cache_dir", Status::fail, *why,
            std::filesystem::is_directory(dir, ec)
                ? fmt::format("chmod 700 {} (or set compile_cache.dir to a directory only you "
                              "can write)",
                              dir)
                : std::string("set compile_cache.dir (--cache-dir) to a directory")};
  }
  if (!writes) {
    if (::access(dir.c_str(), R_OK | X_OK) != 0) {
      return {"cache_dir", Status::fail, fmt::format("{} is not readable", dir),
              fmt::format("chmod u+rx {}", dir)};
    }
    return {"cache_dir", Status::pass,
            fmt::format("{}: yours, mode safe, read-only by policy ({})", dir,
                        cache::mode_name(c.mode)),
            ""};
  }
  std::string probe = fmt::format("{}/.probe.{}", dir, ::getpid());
  FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) {
    return {"cache_dir", Status::fail, fmt::format("{} is not writable", dir),
            fmt::format("chmod u+w {} or set compile_cache.mode = readonly", dir)};
  }
  std::fclose(f);
  std::filesystem::remove(probe, ec);
  return {"cache_dir", Status::pass, fmt::format("{}: yours, mode safe, writable", dir), ""};
}

}  // namespace

const char* probe_status_name(ProbeStatus s) {
  switch (s) {
    case ProbeStatus::pass:
      return "PASS";
    case ProbeStatus::fail:
      return "FAIL";
    case ProbeStatus::skip:
      return "SKIP";
  }
  return "?";
}

bool ProbeReport::ok() const {
  for (const ProbeCheck& c : checks) {
    if (c.status == ProbeStatus::fail) return false;
  }
  return true;
}

std::string ProbeReport::text() const {
  std::string out;
  for (const ProbeCheck& c : checks) {
    // Details and advice name paths, which may hold any byte: one line each, always.
    out += fmt::format("{}  {:<13} {}\n", probe_status_name(c.status), c.name,
                       printable_text(c.detail));
    if (!c.next.empty()) out += fmt::format("      {:<13} next: {}\n", "", printable_text(c.next));
  }
  out += ok() ? "probe: alive\n" : "probe: NOT alive (see FAIL above)\n";
  return out;
}

std::string ProbeReport::json() const {
  nlohmann::ordered_json j;
  j["ok"] = ok();
  j["checks"] = nlohmann::ordered_json::array();
  for (const ProbeCheck& c : checks) {
    j["checks"].push_back({{"name", c.name},
                           {"status", probe_status_name(c.status)},
                           {"detail", bytes_to_utf8(c.detail)},
                           {"next", bytes_to_utf8(c.next)}});
  }
  return j.dump(2);
}

ProbeReport run_probe(const policy::LaunchPolicy& p) {
  ProbeReport r;
  if (int64_t threads = p.integer("launch.threads"); threads > 0) {
    omp_set_num_threads(static_cast<int>(threads));
  }
  ProbeCheck compiler = check_compiler(p);
  ProbeCheck blas = check_blas(p);
  r.checks.push_back(compiler);
  ProbeCheck compiled{"compile_run", Status::skip, "", ""};
  ProbeCheck reload{"warm_restart", Status::skip, "", ""};
  if (compiler.status != Status::pass || blas.status != Status::pass) {
    compiled.detail = fmt::format("needs a working compiler and BLAS ({} failed)",
                                  compiler.status != Status::pass ? "compiler" : "blas");
    reload.detail = "needs a compiled program";
  } else {
    try {
      Graph g = probe_graph();
      auto client = cpu::make_cpu_client(p.string("codegen.blas"));
      backend::CompileOptions options = compile_options_from(p);
      options.passes.dump_dir.clear();
      auto exe = client->compile(g, options);
      std::vector<backend::Buffer> in = probe_inputs();
      Array got = exe->execute(in).at(0).array();
      auto ref = ref::make_ref_client();
      Array want = ref->compile(g, {})->execute(in).at(0).array();
      if (auto bad = mismatch(got, want, 1e-4)) {
        compiled = {"compile_run", Status::fail, "compiled program is wrong: " + *bad,
                    "report a keel bug with 'keel bundle --json'; try codegen.opt_level = 0"};
      } else {
        compiled = {"compile_run", Status::pass,
                    fmt::format("16x32 GEMM + tanh + reduction compiled with {} and matched "
                                "the reference interpreter",
                                options.compiler),
                    ""};
        auto again = client->load(exe->serialize());
        Array warm = again->execute(in).at(0).array();
        if (auto diff = mismatch(warm, got, 0)) {
          reload = {"warm_restart", Status::fail, "reloaded program differs: " + *diff,
                    "report a keel bug with 'keel bundle --json'"};
        } else {
          reload = {"warm_restart", Status::pass,
                    fmt::format("serialized ({} bytes), reloaded without compiling, same result "
                                "bit for bit",
                                exe->serialize().size()),
                    ""};
        }
      }
    } catch (const Error& e) {
      compiled = {"compile_run", Status::fail, e.what(),
                  "fix the compiler error above, or set codegen.compiler / codegen.flags"};
      reload.detail = "needs a compiled program";
    }
  }
  r.checks.push_back(compiled);
  r.checks.push_back(reload);
  r.checks.push_back(blas);
  r.checks.push_back(check_openmp(p));
  r.checks.push_back(check_cache_dir(p));
  return r;
}

}  // namespace keel::runtime
