// Deadlines of waits on other processes, and what each thread is waiting in.
#include "dist/deadline.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>

#include "ir/hash.h"

namespace keel::dist {
namespace {

std::mutex limits_mu;
WaitLimits limits;

thread_local std::string current_program;
thread_local bool current_first_run = false;
thread_local std::string current_wait;
thread_local bool current_long_wait = false;
thread_local bool current_wait_differs = false;
thread_local std::string current_chain;  // every open scope's text, outermost first

bool long_deadline() {
  return current_first_run || current_long_wait;
}

}  // namespace

void set_wait_limits(WaitLimits l) {
  std::lock_guard lock(limits_mu);
  limits = l;
}

WaitLimits wait_limits() {
  std::lock_guard lock(limits_mu);
  return limits;
}

ProgramScope::ProgramScope(std::string program, bool first_run)
    : saved_program_(std::move(current_program)), saved_first_(current_first_run) {
  current_program = std::move(program);
  current_first_run = first_run;
}

ProgramScope::~ProgramScope() {
  current_program = std::move(saved_program_);
  current_first_run = saved_first_;
}

WaitScope::WaitScope(std::string what, bool long_wait, bool differs_by_process)
    : saved_(std::move(current_wait)),
      saved_chain_(current_chain),
      saved_long_(current_long_wait),
      saved_differs_(current_wait_differs) {
  current_chain += (current_chain.empty() ? "" : " > ") + what;
  current_wait = std::move(what);
  current_long_wait = long_wait || saved_long_;
  current_wait_differs = differs_by_process || saved_differs_;
}

WaitScope::~WaitScope() {
  current_wait = std::move(saved_);
  current_chain = std::move(saved_chain_);
  current_long_wait = saved_long_;
  current_wait_differs = saved_differs_;
}

double current_timeout_s() {
  const WaitLimits l = wait_limits();
  return long_deadline() ? l.first_run_timeout_s : l.timeout_s;
}

std::string wait_context() {
  std::string s = current_wait.empty() ? "a collective" : current_wait;
  if (!current_program.empty()) {
    s += fmt::format(" in {}program '{}'", current_first_run ? "the first run of " : "",
                     current_program);
  }
  return s;
}

std::string wait_path() {
  std::string s = current_chain.empty() ? "a collective" : current_chain;
  if (!current_program.empty()) s += fmt::format(" in program '{}'", current_program);
  return s;
}

uint64_t wait_site() {
  if (current_wait_differs) return 0;
  // Every enclosing scope (a gather's own scope inside the evaluation's), and the program; not
  // whether this is the program's first run here, which a re-prepared program changes.
  const uint64_t h = hash_bytes(wait_path()).lo;
  return h == 0 ? 1 : h;
}

namespace {
std::atomic<bool> shared_failure{false};
}  // namespace

void mark_failure_shared() {
  shared_failure = true;
}
bool failure_shared() {
  return shared_failure;
}

std::string missing_peers_message(int rank, const std::string& host,
                                  const std::vector<int>& missing,
                                  const std::vector<std::string>& hosts, double waited_s) {
  std::string who;
  for (int r : missing) {
    const std::string& h = static_cast<size_t>(r) < hosts.size() ? hosts[size_t(r)] : "?";
    who += fmt::format("{}rank {} (host {})", who.empty() ? "" : ", ", r, h);
  }
  const bool first = long_deadline();
  return fmt::format(
      "[dist] {} did not arrive within {:.0f} s: rank {} (host {}) was waiting in {}; the "
      "launch ends here (a stopped or hung process, or a lost network); raise "
      "spmd.{} if the wait is legitimate, or resume from the last checkpoint",
      who, waited_s, rank, host, wait_context(),
      first ? "first_run_timeout_s" : "collective_timeout_s");
}

}  // namespace keel::dist
