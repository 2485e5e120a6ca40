#include "runtime/runtime.h"

#include <fmt/format.h>
#include <omp.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "backend/builtin/builtin.h"
#include "backend/registry.h"
#include "diag/log.h"
#include "dist/deadline.h"
#include "dist/mesh.h"
#include "files/host.h"
#include "files/memory_limit.h"
#include "files/omp_wait.h"
#include "ir/error.h"
#include "ir/utf8_escape.h"
#include "policy/features.h"
#include "policy/resolve.h"
#include "runtime/backends.h"
#include "runtime/policy_config.h"
#include "runtime/threads.h"
#include "trace/collectives.h"

namespace keel {
namespace {

// The mesh's collectives for programs to run, and its axis sizes for tracing.
void install_mesh(const runtime::Mesh& mesh) {
  backend::set_collectives(std::make_shared<dist::MeshCollectives>(dist::world(), mesh));
  std::map<std::string, int64_t> axes;
  for (size_t i = 0; i < mesh.axes.size(); ++i) axes[mesh.axes[i]] = mesh.shape[i];
  set_trace_mesh(std::move(axes));
}

std::mutex g_mu;
Runtime* g_current = nullptr;

// The KEEL_* variables that are policy, as they were at init.
std::map<std::string, std::string> policy_environment() {
  std::map<std::string, std::string> out;
  std::map<std::string, std::string> env = policy::keel_environment();
  for (const policy::KeySpec& k : policy::policy_schema()) {
    auto it = env.find(k.env_name());
    if (it != env.end()) out[it->first] = it->second;
  }
  return out;
}

}  // namespace

Runtime::Runtime(policy::LaunchPolicy policy, RuntimeOptions options, SourceLoc loc)
    : policy_(std::move(policy)) {
  std::lock_guard lock(g_mu);
  if (g_current) {
    throw Error(fmt::format(
        "[runtime] keel::Runtime created at {} while another is alive; rule: one runtime per "
        "process; fix: create it once in main and pass it (or Runtime::current()) down",
        loc.str()));
  }
  policy_.freeze();
  diag::set_log_level(*diag::parse_log_level(policy_.string("diag.log_level")));
  // Threads per process: the policy's, or this host's cores shared by its processes (MPI's
  // local size), so N ranks on one host, or a container's CPU quota, do not oversubscribe.
  const dist::ProcessPlace& here = dist::process_place();
  const runtime::ThreadPlan plan = runtime::plan_threads_here(policy_, here.local_size);
  threads_ = plan.threads;
  threads_why_ = plan.why;
  oversubscribed_ = plan.oversubscribed;
  omp_set_num_threads(threads_);
  if (oversubscribed_) {
    diag::log(diag::LogLevel::warn,
              fmt::format("[runtime] {} processes share the {} cores of {} ({} thread(s) each), "
                          "so they contend for cores; launch at most {} ranks per host",
                          here.local_size, plan.host_cores, here.host, threads_, plan.host_cores));
  }
  backend::register_builtin_backends();
  const backend::BackendSpec& backend = backend::find_backend(policy_.string("launch.backend"));
  std::shared_ptr<backend::Client> client =
      options.client ? options.client : backend.make_client(policy_);
  if (backend.set_threads) backend.set_threads(threads_);
  mesh_ = runtime::mesh_from_policy(policy_, runtime::launch_process_count());
  spmd_ = policy_.boolean("spmd.enabled");
  runtime::check_mesh(mesh_, runtime::launch_process_count(),
                      "spmd (" + policy_.setting("spmd.mesh_shape").origin.text() + ")");

  runtime::JitConfig jc;
  jc.client = client;
  jc.compile = runtime::compile_options_from(policy_);
  jc.cache = runtime::cache_config_from(policy_);
  jc.guard = runtime::guard_config_from(policy_);
  jc.run_dir = options.run_dir;
  jc.mesh = mesh_.str();
  if (here.rank > 0) jc.log_name = fmt::format("compiles.rank{}.jsonl", here.rank);
  jc.memory_budget_bytes = policy_.integer("launch.memory_budget_bytes");
  const files::MemoryLimit limit = files::memory_limit();
  jc.memory_limit_bytes = limit.bytes;
  jc.memory_limit_source = limit.source;
  // Every new program first checks that nobody changed launch settings under the process.
  jc.before_prepare = [this] { check_environment(); };
  jit_ = std::make_shared<runtime::CachedJit>(jc);
  bundle_ = jit_->bundle();
  // A backend key this host cannot honour (bf16 products without native bf16) is refused here,
  // not emulated slowly or computed in f32 unasked.
  check_backend_keys(policy_, bundle_);
  for (const std::string& name : policy_.strings("features.request")) use_feature(name);

  environment_ = policy_environment();
  // Last, after everything that can throw: a failed init leaves no global state behind.
  dist::set_wait_limits({static_cast<double>(policy_.integer("spmd.collective_timeout_s")),
                         static_cast<double>(policy_.integer("spmd.first_run_timeout_s"))});
  install_mesh(mesh_);
  set_current_jit(jit_);
  set_startup_phase(StartupPhase::initialised);
  g_current = this;
}

Runtime::~Runtime() {
  try {  // no program may still run once the collectives below are uninstalled
    after_dispatched().wait();
  } catch (...) {  // a failed run's error was its outputs', for whoever read them
  }
  std::lock_guard lock(g_mu);
  set_current_jit(nullptr);
  backend::set_collectives(nullptr);
  set_trace_mesh({});
  set_startup_phase(StartupPhase::uninitialised);
  g_current = nullptr;
}

Runtime& Runtime::current(SourceLoc loc) {
  std::lock_guard lock(g_mu);
  if (!g_current) {
    throw Error(fmt::format(
        "[runtime] Runtime::current() at {} but no keel::Runtime is alive; fix: create one "
        "first thing in main (keel::Runtime runtime(policy))",
        loc.str()));
  }
  return *g_current;
}

bool Runtime::active() {
  std::lock_guard lock(g_mu);
  return g_current != nullptr;
}

void Runtime::update_policy(const std::string& assignment, SourceLoc loc) {
  std::string key = assignment.substr(0, assignment.find('='));
  const policy::KeySpec* spec = policy::find_key(key);
  std::string env = spec ? spec->env_name() : "KEEL_<GROUP>_<KEY>";
  throw Error(fmt::format(
      "[runtime] policy change '{}' at {} after Runtime::init; rule: launch policy is frozen "
      "when the runtime starts (nothing may change under compiled programs); fix: pass --set "
      "{} or {} at launch, or put it in the profile",
      assignment, loc.str(), assignment, env));
}

void Runtime::change_mesh(runtime::Mesh mesh, bool spmd, const SourceLoc& loc, const char* what) {
  if (phase() == StartupPhase::running) {
    std::optional<SourceLoc> first = first_tensor_location();
    throw Error(fmt::format(
        "[runtime] {} at {} after tensors exist (the first was created at {}); rule: SPMD and "
        "the mesh are fixed before any tensor exists, because every tensor is laid out on "
        "them; fix: set spmd.enabled and spmd.mesh_* in the profile, or call it right after "
        "creating the Runtime",
        what, loc.str(), first ? first->str() : "<unknown>"));
  }
  runtime::check_mesh(mesh, runtime::launch_process_count(), loc.str());
  install_mesh(mesh);
  mesh_ = std::move(mesh);
  jit_->set_mesh(mesh_.str());
  spmd_ = spmd;
}

void Runtime::enable_spmd(runtime::Mesh mesh, SourceLoc loc) {
  change_mesh(std::move(mesh), true, loc, "enable_spmd");
}

void Runtime::set_mesh(runtime::Mesh mesh, SourceLoc loc) {
  change_mesh(std::move(mesh), spmd_, loc, "set_mesh");
}

const dist::ProcessPlace& Runtime::place() const {
  return dist::process_place();
}

int64_t Runtime::axis_index(const std::string& axis) const {
  return mesh_.axis_size(axis) > 0 ? backend::collectives().axis_index(axis) : 0;
}

bool Runtime::use_feature(const std::string& name) {
  policy::Feature f = policy::find_feature(feature_table(bundle_), name);
  if (f.available) return true;
  std::string line =
      fmt::format("[features] {} is unavailable: {}; falling back to: {}", name, f.why, f.fallback);
  if (policy_.string("features.on_unavailable") == "error") {
    throw InputError(fmt::format(
        "[features] {} is unavailable: {} (features.on_unavailable = error, from {}); fix: "
        "drop it from features.request or allow the fallback ({})",
        name, f.why, policy_.setting("features.on_unavailable").origin.text(), f.fallback));
  }
  diag::log(diag::LogLevel::warn, line);
  fallbacks_.push_back(line);
  return false;
}

void Runtime::check_environment() const {
  std::map<std::string, std::string> now = policy_environment();
  if (now == environment_) return;
  for (const policy::KeySpec& k : policy::policy_schema()) {
    auto a = environment_.find(k.env_name());
    auto b = now.find(k.env_name());
    std::string before = a == environment_.end() ? "unset" : "\"" + a->second + "\"";
    std::string after = b == now.end() ? "unset" : "\"" + b->second + "\"";
    if (before == after) continue;
    throw Error(fmt::format(
        "[runtime] {} changed after Runtime::init ({} -> {}); it would be silently ignored: "
        "the policy was frozen at init; fix: set it before launch (or --set {}=...)",
        k.env_name(), before, after, k.name()));
  }
}

policy::Bundle launch_bundle(const policy::LaunchPolicy& p) {
  backend::register_builtin_backends();
  const backend::BackendSpec& backend = backend::find_backend(p.string("launch.backend"));
  backend::CompileOptions o = runtime::compile_options_from(p);
  const backend::BundlePart part = backend.bundle_part(p, o);
  return policy::detect_bundle(part.toolchain.name, part.toolchain.version, part.toolchain.flags,
                               part.fields);
}

std::string Runtime::record_json() const {
  nlohmann::ordered_json j;
  j["policy"] = nlohmann::ordered_json::parse(policy_.to_json(true));
  j["bundle"] = nlohmann::ordered_json::parse(bundle_.to_json());
  j["bundle_hash"] = bundle_.hash();
  j["mesh"] = bytes_to_utf8(mesh_.str());
  j["spmd"] = spmd_;
  const dist::ProcessPlace& here = dist::process_place();
  j["process"] = {{"rank", here.rank},
                  {"size", here.size},
                  {"local_rank", here.local_rank},
                  {"local_size", here.local_size},
                  {"host", bytes_to_utf8(here.host)},
                  {"threads", threads_},
                  {"threads_from", bytes_to_utf8(threads_why_)},
                  {"omp_wait", bytes_to_utf8(files::omp_wait_setting())},
                  {"oversubscribed", oversubscribed_}};
  j["fallbacks"] = bytes_to_utf8(fallbacks_);
  return j.dump(2);
}

}  // namespace keel
