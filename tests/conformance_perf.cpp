// The performance mode of the conformance suite, as ggml's test-backend-ops has one: each op's
// conformance case is compiled alone on every backend and run --reps times; the line gives the
// median per call and the ratio to the reference interpreter in the same run. The shapes are the
// cases' own (small), so it measures what one call of an op costs, not peak throughput (gemm,
// attention and step benchmarks measure that).
#include "tests/conformance_perf.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "runtime/backends.h"
#include "tests/backend_clients.h"
#include "tests/backend_cpu_cases.h"

namespace keel::cpu_test {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Timing {
  double compile_s = 0, median_us = 0;
};

Timing time_program(const std::string& backend_name, const TestProgram& p, int reps) {
  backend::Client& client = client_of(backend_name);
  Timing t;
  const Clock::time_point start = Clock::now();
  std::unique_ptr<backend::Executable> exe = client.compile(p.g, {});
  t.compile_s = seconds_since(start);
  const std::vector<backend::Buffer> args = buffers(client, p.inputs);
  const backend::Device device = client.devices().at(0);
  exe->execute(args);  // warm-up: first-touch pages, thread team
  client.after_dispatched(device).wait();
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point s = Clock::now();
    exe->execute(args);
    client.after_dispatched(device).wait();  // the run, not only its dispatch
    us.push_back(seconds_since(s) * 1e6);
  }
  std::sort(us.begin(), us.end());
  t.median_us = reps % 2 ? us[reps / 2] : (us[reps / 2 - 1] + us[reps / 2]) / 2;
  return t;
}

// One line per op (those in `ops`, or all): the reference's median call, then each backend's.
void time_every_op(const std::map<std::string, Builder>& cases, const std::vector<std::string>& ops,
                   const std::vector<std::string>& backends, int reps) {
  int timed = 0;
  for (const OpInfo& info : all_ops()) {
    const std::string name(info.name);
    if (!ops.empty() && std::find(ops.begin(), ops.end(), name) == ops.end()) continue;
    TestProgram p(name);
    cases.at(name)(p);
    if (p.g.outputs().empty()) continue;  // scan_result: timed within scan's program
    const Timing ref = time_program("ref", p, reps);
    std::string line = fmt::format("op {:<22} ref {:9.1f} us", name, ref.median_us);
    for (const std::string& b : backends) {
      const Timing t = time_program(b, p, reps);
      line += fmt::format(" | {} {:9.1f} us ({:.3f}x ref), compile {:.0f} ms", b, t.median_us,
                          t.median_us / std::max(ref.median_us, 1e-3), t.compile_s * 1e3);
    }
    std::printf("%s\n", line.c_str());
    ++timed;
  }
  std::string others;
  for (const std::string& b : backends) others += " and " + b;
  std::printf("%d ops timed on ref%s, %d calls each (median after one warm-up call)\n", timed,
              others.c_str(), reps);
}

}  // namespace

int run_conformance_perf(int argc, char** argv) {
  int reps = 20;
  std::vector<std::string> ops;
  std::vector<std::string> backends = registered_backend_names();
  CLI::App app{
      "conformance_test --perf: every op's conformance program compiled alone and timed on "
      "every backend against the reference interpreter"};
  bool perf = true;  // how main() chose this mode; the option is here so CLI11 accepts it
  app.add_flag("--perf", perf, "the performance mode instead of the tests");
  app.add_option("--reps", reps, "timed calls per op and backend (median)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--ops", ops, "only these ops, comma-separated (default: every op)")
      ->delimiter(',');
  app.add_option("--backends", backends, "backends besides ref, comma-separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(registered_backend_names()));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "[conformance] %s; run 'conformance_test --perf --help' for usage\n",
                 e.what());
    return 2;
  }
  const auto cases = op_cases();
  for (const std::string& name : ops) {
    if (cases.find(name) == cases.end()) {
      std::fprintf(stderr, "[conformance] --ops: '%s' is not an op with a conformance case\n",
                   name.c_str());
      return 2;
    }
  }
  std::erase(backends, std::string("ref"));
  std::erase_if(backends, [](const std::string& b) {  // one line for a backend it cannot run
    const std::string why = unavailable_here(b);
    if (!why.empty()) std::printf("conformance --perf: %s skipped: %s\n", b.c_str(), why.c_str());
    return !why.empty();
  });
  try {
    time_every_op(cases, ops, backends, reps);
  } catch (const Error& e) {  // a backend that cannot compile or run an op: its own line
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[conformance] unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace keel::cpu_test
