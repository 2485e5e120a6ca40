#include "runtime/jit.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "backend/registry.h"
#include "diag/log.h"
#include "diag/timeline.h"
#include "dist/communicator.h"
#include "dist/deadline.h"
#include "ir/collective.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "ir/text.h"
#include "runtime/agreement.h"
#include "runtime/program_record.h"
#include "runtime/writer_election.h"

namespace keel::runtime {
namespace {

// Adapts a backend Executable to the Runnable that compile() calls; every run after the first
// is a memory-tier hit and is counted as one.
class ExecutableRunnable : public Runnable {
 public:
  ExecutableRunnable(std::shared_ptr<backend::Executable> exe, diag::CompileLog* log,
                     std::string function, std::string key)
      : exe_(std::move(exe)), log_(log), function_(std::move(function)), key_(std::move(key)) {}

  std::vector<Buffer> run(std::span<const Buffer> inputs) override {
    const bool again = ran_.exchange(true);
    if (again) log_->record({-1, -1, function_, key_, "memory", 0, ""});
    dist::ProgramScope scope(function_, !again);  // waits on peers name this program
    diag::TimelineSpan span(function_,
                            "execute");  // every step: nothing built while tracing is off
    if (span.on()) span.arg("key", key_.substr(0, 12));
    return exe_->execute(inputs);
  }

 private:
  std::shared_ptr<backend::Executable> exe_;
  diag::CompileLog* log_;
  std::string function_;
  std::string key_;
  std::atomic<bool> ran_{false};
};

std::string signature_of(const Graph& g) {
  std::string s;
  for (NodeId p : g.params()) {
    if (!s.empty()) s.push_back(',');
    s.append(g.node(p).type.str());
  }
  return s;
}

// A client is required; a compile without settings gets the backend's defaults, so its key names
// what it compiles with.
JitConfig completed(JitConfig c) {
  if (!c.client) throw Error("[jit] no backend client given; set JitConfig::client");
  if (!c.compile.backend_settings) c.compile.backend_settings = c.client->default_settings();
  return c;
}

policy::Bundle bundle_of(const backend::Client& client, const backend::CompileOptions& compile) {
  const backend::Toolchain t = client.toolchain(compile);
  return policy::detect_bundle(t.name, t.version, t.flags, client.bundle_fields());
}

// The codegen part of a key: the compile options and the mesh they run in.
std::string codegen_key(const backend::CompileOptions& compile, const std::string& mesh) {
  return compile.fingerprint() + ";mesh=" + mesh;
}

}  // namespace

CachedJit::CachedJit(JitConfig config)
    : config_(completed(std::move(config))),
      bundle_(bundle_of(*config_.client, config_.compile)),
      codegen_(codegen_key(config_.compile, config_.mesh)),
      cache_(config_.cache, config_.client),
      log_(config_.run_dir.empty() ? "" : config_.run_dir + "/" + config_.log_name),
      guard_(config_.guard) {
  for (const std::string& w : cache_.warnings()) diag::log(diag::LogLevel::warn, w);
}

void CachedJit::set_mesh(const std::string& mesh) {
  std::lock_guard lock(mu_);
  config_.mesh = mesh;
  codegen_ = codegen_key(config_.compile, mesh);
}

std::string CachedJit::name() const {
  return config_.client->platform();
}

cache::KeyParts CachedJit::key_parts(const Graph& g) const {
  cache::KeyParts parts;
  parts.function = g.name();
  parts.signature = signature_of(g);
  parts.graph = graph_hash(g);
  parts.bundle = bundle_;
  parts.codegen = codegen_;
  parts.platform = config_.client->platform();
  return parts;
}

std::optional<diag::ProgramFacts> CachedJit::previous(const std::string& function,
                                                      const std::string& key) const {
  {
    std::lock_guard lock(mu_);
    auto it = last_.find(function);
    if (it != last_.end()) return it->second;
  }
  // Across restarts the nearest earlier program comes from the disk tier's manifests; the
  // entry for this very key is not an earlier program.
  std::optional<cache::Manifest> m = cache_.nearest(function);
  if (!m || m->key == key) return std::nullopt;
  try {
    std::optional<std::string> text = cache_.graph_text(m->key);
    if (!text) return std::nullopt;
    return diag::facts_from_text(*text, m->bundle_json, m->codegen, m->key);
  } catch (const Error&) {
    return std::nullopt;  // an unreadable or edited neighbour only costs the explanation
  }
}

void CachedJit::count_call(const std::string& name) {
  counts_.count_call(name);
}

// One program on its way to an executable.
struct CachedJit::Preparation {
  const Graph& graph;
  const ProgramRequest& request;
  double started_us = 0;   // when prepare() began, on the timeline
  cache::KeyParts parts;   // its key
  diag::ProgramFacts now;  // what explains it against the next one
  bool had_previous = false;
  std::string reason;     // why it is new
  int64_t step = 0;       // the host's step, else the function's own call
  bool everyone = false;  // every process agreed to run it
  bool memory_checked = false;
  cache::Lookup found;
};

std::shared_ptr<Runnable> CachedJit::prepare(const Graph& graph, const ProgramRequest& request) {
  if (config_.before_prepare) config_.before_prepare();
  Preparation p = key(graph, request);
  explain(p);
  guard(p);
  agree(p);
  look_up(p);
  return record(p);
}

CachedJit::Preparation CachedJit::key(const Graph& graph, const ProgramRequest& request) const {
  diag::Timeline& timeline = diag::Timeline::process();
  const double now_us = timeline.now_us();
  timeline.complete("trace " + graph.name(), "trace", now_us - 1e6 * request.trace_seconds, now_us,
                    {{"nodes", graph.size()}, {"defined_at", request.defined_at.str()}});
  cache::KeyParts parts = key_parts(graph);
  const int64_t host_step = step_.load();
  return Preparation{graph,
                     request,
                     now_us,
                     std::move(parts),
                     diag::ProgramFacts{graph, bundle_, codegen_, request.input_names},
                     false,
                     "",
                     host_step >= 0 ? host_step : request.call,
                     false,
                     false,
                     {}};
}

void CachedJit::explain(Preparation& p) const {
  std::optional<diag::ProgramFacts> before = previous(p.graph.name(), p.parts.key().hex());
  p.had_previous = before.has_value();
  p.reason = diag::explain_miss(p.now, before);
}

void CachedJit::guard(const Preparation& p) {
  const FunctionCounts::Use use = counts_.use(p.graph.name(), p.parts.key().hex());
  const int64_t calls = std::max(p.request.call, use.calls);
  const int64_t programs = std::max(p.request.programs, use.programs);
  const std::string warning = guard_.admit(p.graph.name(), calls, programs, p.reason,
                                           p.request.defined_at.str(), programs, p.request.planned);
  if (!warning.empty()) diag::log(diag::LogLevel::warn, warning);
}

void CachedJit::agree(Preparation& p) const {
  // Every process of the launch must be about to run this very program; else all stop here.
  p.everyone = agree_on_program(dist::world(), p.parts.key(), p.now);
}

void CachedJit::look_up(Preparation& p) {
  // Memory is checked once the plan exists, before the C++ compiler runs: a program too large
  // to run costs no compile. A program loaded instead is checked in record().
  auto compile = [&] {
    backend::CompileOptions options = config_.compile;
    options.before_build = [&](int64_t peak) {
      check_program_memory(p.graph.name(), peak, "before compiling it");
      p.memory_checked = true;
    };
    return config_.client->compile(p.graph, options);
  };
  // Every process prepares it: one writer per cache directory compiles, the others only read.
  try {
    p.found = p.everyone ? elected_lookup(dist::world(), cache_, p.parts, p.graph, compile)
                         : cache_.get(p.parts, p.graph, compile);
  } catch (const cache::SealedMiss& e) {
    throw cache::SealedMiss(fmt::format(
        "{}; stopped before running it. '{}' (defined at {}) needed a new program because: {}. "
        "Fix: prewarm the cache from a run that needed it (keel cache prewarm RUN_DIR) or run "
        "with compile_cache.mode=readwrite",
        e.what(), p.graph.name(), p.request.defined_at.str(), p.reason));
  }
  for (const std::string& note : p.found.notes) diag::log(diag::LogLevel::warn, note);
  if (!p.had_previous && p.found.tier == cache::Tier::disk) p.reason = "first use in this process";
}

std::map<std::string, CollectiveTraffic> CachedJit::traffic_as_run(const Graph& graph) const {
  // The graph passes move and repeat collectives (place_collectives); rerunning them (tens of
  // ms for gpt2-m's step) is paid only by a program that exchanges with peers on a backend that
  // lowers.
  const backend::BackendSpec& spec = backend::find_backend(config_.client->platform());
  if (spec.passes.empty() || !exchanges_with_peers(graph)) return collective_traffic(graph);
  passes::PassOptions o = config_.compile.passes;
  o.bf16_matmul = config_.compile.matmul_precision == "bf16";
  return collective_traffic(passes::rewritten(graph, o));
}

std::shared_ptr<Runnable> CachedJit::record(Preparation& p) {
  const Graph& graph = p.graph;
  const cache::Lookup& found = p.found;
  diag::Timeline& timeline = diag::Timeline::process();
  const char* what = found.tier == cache::Tier::compiled ? "compile"
                     : found.tier == cache::Tier::disk   ? "load"
                                                         : "lookup";
  timeline.complete(fmt::format("{} {}", what, graph.name()), what, p.started_us, timeline.now_us(),
                    {{"key", found.key},
                     {"reason", p.reason},
                     {"signature", p.parts.signature},
                     {"step", p.step},
                     {"seconds", found.seconds}});
  log_.record({p.step, p.request.call, graph.name(), found.key,
               std::string(cache::tier_name(found.tier)), found.seconds, p.reason});
  diag::log(diag::LogLevel::info,
            fmt::format("[jit] {} {} ({}) in {:.2f} s: {}", graph.name(),
                        found.tier == cache::Tier::compiled ? "compiled" : "loaded from the cache",
                        found.key.substr(0, 12), found.seconds, p.reason));
  const int64_t peak = found.executable->predicted_peak_bytes();
  if (!p.memory_checked) check_program_memory(graph.name(), peak, "before running it");
  const bool first_here = counts_.add_program(graph.name(), p.parts.key().hex());
  std::string mesh;
  {
    std::lock_guard lock(mu_);
    last_[graph.name()] = std::move(p.now);
    mesh = config_.mesh;
    predicted_peak_ = std::max(predicted_peak_, peak);
    int64_t inputs = 0;
    for (NodeId id : graph.params()) inputs += graph.node(id).type.bytes();
    program_memory_[graph.name()] = {peak, inputs};
  }
  if (first_here && !config_.run_dir.empty()) {
    // What `keel cache prewarm` compiles from; a run that cannot record it still runs.
    try {
      write_program_record(config_.run_dir, {graph.name(), found.key, p.parts.signature, mesh,
                                             print_graph(graph), "", traffic_as_run(graph)});
    } catch (const std::exception& e) {
      diag::log(diag::LogLevel::warn, fmt::format("[jit] program record of '{}' not written: {}",
                                                  graph.name(), e.what()));
    }
  }
  return std::make_shared<ExecutableRunnable>(found.executable, &log_, graph.name(), found.key);
}

Event CachedJit::after_dispatched() const {
  return config_.client->after_dispatched(config_.client->devices().at(0));
}

backend::MemoryStats CachedJit::memory_stats() const {
  return config_.client->memory_stats(config_.client->devices().at(0));
}

void CachedJit::release_cached_memory() {
  config_.client->release_cached_memory(config_.client->devices().at(0));
}

Buffer CachedJit::to_device(const Array& host) {
  return config_.client->to_device(host, config_.client->devices().at(0));
}

Buffer CachedJit::allocate(DType dtype, const Shape& shape, bool zeroed) {
  return config_.client->allocate(dtype, shape, config_.client->devices().at(0), zeroed);
}

cache::Lookup CachedJit::prewarm(const Graph& graph) {
  cache::Lookup found = cache_.get(key_parts(graph), graph,
                                   [&] { return config_.client->compile(graph, config_.compile); });
  for (const std::string& note : found.notes) diag::log(diag::LogLevel::warn, note);
  return found;
}

void CachedJit::check_program_memory(const std::string& function, int64_t peak,
                                     const char* when) const {
  const backend::Device device = config_.client->devices().at(0);
  if (device.host_memory) return check_host_memory(function, peak, when);
  // A device's memory has no swap: a program past its capacity would fail at its first run,
  // after the compile, so it is refused now.
  const int64_t capacity = config_.client->memory_stats(device).bytes_limit;
  if (capacity > 0 && peak > capacity) {
    throw Error(fmt::format(
        "[jit] program '{}' is predicted to need {} bytes at its peak, more than the {} bytes "
        "of {}; refused {}; fix: a smaller batch or model, or less kept for the backward "
        "(launch.layer_layout = split:N, or scanned with launch.remat_layers)",
        function, peak, capacity, device.str(), when));
  }
}

void CachedJit::check_host_memory(const std::string& function, int64_t peak,
                                  const char* when) const {
  // The physical device is the host; any program may run in all its processes at once (those a
  // leader runs alone are counted as if the others ran them too: safe, not exact).
  const std::string host = dist::process_place().host;
  const int64_t here = dist::processes_on_this_host();
  const int64_t need = peak * here;
  const std::string what =
      here == 1 ? fmt::format("{} bytes at its peak", peak)
                : fmt::format(
                      "{} bytes at its peak in each of the {} processes on host {}, {} "
                      "bytes together",
                      peak, here, host, need);
  if (config_.memory_budget_bytes > 0 && need > config_.memory_budget_bytes) {
    throw Error(fmt::format(
        "[jit] program '{}' is predicted to need {} but launch.memory_budget_bytes is {} per "
        "host; refused {}; fix: a smaller batch or model, fewer processes per host, or a larger "
        "budget",
        function, what, config_.memory_budget_bytes, when));
  }
  if (config_.memory_limit_bytes > 0 && need > config_.memory_limit_bytes) {
    diag::log(
        diag::LogLevel::warn,
        fmt::format("[jit] program '{}' is predicted to need {}, more than the {} bytes of "
                    "memory this process may use on host {} ({}); expect swapping or an "
                    "out-of-memory kill; set launch.memory_budget_bytes to refuse it instead",
                    function, what, config_.memory_limit_bytes, host, config_.memory_limit_source));
  }
}

std::map<std::string, CachedJit::ProgramMemory> CachedJit::program_memory() const {
  std::lock_guard lock(mu_);
  return program_memory_;
}

int64_t CachedJit::predicted_peak_bytes() const {
  std::lock_guard lock(mu_);
  return predicted_peak_;
}

}  // namespace keel::runtime
