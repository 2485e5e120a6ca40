#include "runtime/probe.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/builtin/builtin.h"
#include "backend/registry.h"
#include "cache/cache.h"
#include "cache/layout.h"
#include "cache/safe_dir.h"
#include "files/omp_wait.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"
#include "runtime/policy_config.h"
#include "runtime/threads.h"

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

std::vector<Array> probe_inputs() {
  Array x(DType::f32, {16, 32}), w(DType::f32, {32, 32});
  for (int64_t i = 0; i < x.numel(); ++i) x.set_f64(i, std::sin(0.37 * static_cast<double>(i)));
  for (int64_t i = 0; i < w.numel(); ++i) w.set_f64(i, std::cos(0.11 * static_cast<double>(i)) / 8);
  return {x, w};
}

// The probe's inputs moved to the client's first device, run, and its one output moved back.
Array run_on(backend::Client& client, backend::Executable& exe) {
  std::vector<backend::Buffer> in;
  for (const Array& a : probe_inputs()) in.push_back(client.to_device(a, client.devices().at(0)));
  return exe.execute(in).at(0).to_host().get();
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

ProbeStatus status_of(backend::CheckStatus s) {
  switch (s) {
    case backend::CheckStatus::pass:
      return ProbeStatus::pass;
    case backend::CheckStatus::fail:
      return ProbeStatus::fail;
    case backend::CheckStatus::skip:
      return ProbeStatus::skip;
  }
  return ProbeStatus::skip;
}

// Installed is not alive: once a backend's own checks pass, the probe graph is compiled on its
// client and checked against the reference interpreter, then reloaded from its bytes.
std::vector<ProbeCheck> check_backend(const policy::LaunchPolicy& p,
                                      const backend::BackendSpec& spec) {
  std::vector<ProbeCheck> out;
  std::string failed;
  if (spec.installation_checks) {
    for (backend::Check& c : spec.installation_checks(p)) {
      if (c.status == backend::CheckStatus::fail && failed.empty()) failed = c.name;
      out.push_back({c.name, status_of(c.status), std::move(c.detail), std::move(c.next)});
    }
  }
  ProbeCheck compiled{"compile_run", Status::skip, "", ""};
  ProbeCheck reload{"warm_restart", Status::skip, "", ""};
  if (!failed.empty()) {
    compiled.detail = fmt::format("needs what the checks above find ({} failed)", failed);
    reload.detail = "needs a compiled program";
  } else {
    try {
      Graph g = probe_graph();
      std::shared_ptr<backend::Client> client = spec.make_client(p);
      backend::CompileOptions options = compile_options_for(p, spec.name);
      options.passes.dump_dir.clear();
      auto exe = client->compile(g, options);
      Array got = run_on(*client, *exe);
      std::shared_ptr<backend::Client> ref = backend::find_backend("ref").make_client(p);
      Array want = run_on(*ref, *ref->compile(g, {}));
      if (auto bad = mismatch(got, want, 1e-4)) {
        compiled = {
            "compile_run", Status::fail, "compiled program is wrong: " + *bad,
            spec.miscompile_workaround.empty()
                ? "report a keel bug with 'keel bundle --json'"
                : "report a keel bug with 'keel bundle --json'; try " + spec.miscompile_workaround};
      } else {
        compiled = {"compile_run", Status::pass,
                    fmt::format("16x32 GEMM + tanh + reduction compiled for {} and matched the "
                                "reference interpreter",
                                client->platform()),
                    ""};
        auto again = client->load(exe->serialize());
        Array warm = run_on(*client, *again);
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
                  "fix the error above, or the backend's settings (keel policy keys)"};
      reload.detail = "needs a compiled program";
    }
  }
  out.push_back(std::move(compiled));
  out.push_back(std::move(reload));
  for (ProbeCheck& c : out) {
    c.name = spec.name + "." + c.name;
    c.backend = spec.name;
  }
  return out;
}

// The team keel would use for one process here, as Runtime sizes it.
ProbeCheck check_openmp(const policy::LaunchPolicy& p) {
  const ThreadPlan plan = plan_threads_here(p, 1);
  omp_set_num_threads(plan.threads);
  int seen = 0;
#pragma omp parallel
  {
#pragma omp single
    seen = omp_get_num_threads();
  }
  std::string detail = fmt::format("{} thread(s) ran a parallel region ({}); idle threads: {}",
                                   seen, plan.why, files::omp_wait_setting());
  if (seen != plan.threads) {
    return {"openmp", Status::fail, detail + fmt::format("; expected {}", plan.threads),
            "check OMP_THREAD_LIMIT and OMP_DYNAMIC"};
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
    if (c.status == ProbeStatus::fail && (c.backend.empty() || c.backend == launch_backend))
      return false;
  }
  return true;
}

std::string ProbeReport::text() const {
  std::string out;
  std::string backend;
  for (const ProbeCheck& c : checks) {
    if (c.backend != backend) {
      backend = c.backend;
      for (const auto& [name, summary] : backends) {
        if (name != backend) continue;
        out += fmt::format(
            "backend {}{}: {}\n", name,
            name == launch_backend ? " (launch.backend)" : " (registered; not this launch's)",
            summary);
      }
    }
    // Details and advice name paths, which may hold any byte: one line each, always.
    out += fmt::format("{}  {:<16} {}\n", probe_status_name(c.status), c.name,
                       printable_text(c.detail));
    if (!c.next.empty()) out += fmt::format("      {:<16} next: {}\n", "", printable_text(c.next));
  }
  out += ok() ? "probe: alive\n" : "probe: NOT alive (see FAIL above)\n";
  return out;
}

std::string ProbeReport::json() const {
  nlohmann::ordered_json j;
  j["ok"] = ok();
  j["launch_backend"] = launch_backend;
  j["backends"] = nlohmann::ordered_json::array();
  for (const auto& [name, summary] : backends) {
    j["backends"].push_back({{"name", name}, {"summary", summary}});
  }
  j["checks"] = nlohmann::ordered_json::array();
  for (const ProbeCheck& c : checks) {
    j["checks"].push_back({{"name", c.name},
                           {"status", probe_status_name(c.status)},
                           {"backend", c.backend},
                           {"detail", bytes_to_utf8(c.detail)},
                           {"next", bytes_to_utf8(c.next)}});
  }
  return j.dump(2);
}

ProbeReport run_probe(const policy::LaunchPolicy& p) {
  ProbeReport r;
  omp_set_num_threads(plan_threads_here(p, 1).threads);
  backend::register_builtin_backends();
  r.launch_backend = p.string("launch.backend");
  // Every registered backend, the launch's first; only the launch's can fail the probe.
  std::vector<std::string> names = backend::backend_names();
  std::stable_partition(names.begin(), names.end(),
                        [&](const std::string& n) { return n == r.launch_backend; });
  for (const std::string& name : names) {
    const backend::BackendSpec& spec = backend::find_backend(name);
    r.backends.push_back({name, spec.summary});
    for (ProbeCheck& c : check_backend(p, spec)) r.checks.push_back(std::move(c));
  }
  r.checks.push_back(check_openmp(p));
  r.checks.push_back(check_cache_dir(p));
  return r;
}

}  // namespace keel::runtime
