// A process that uses the executable cache, for cache_test's multi-process tests (concurrency,
// crashes, eviction under a running process). Its backend is a fake: an "executable" is a byte
// string that execute() returns, so no compiler is involved.
//
// Usage: cache_worker DIR NAME...   (each NAME "k<i>" is a small program with a distinct key)
// Environment:
//   KEEL_CACHE_WORKER_COMPILE_MS  how long a compile takes (default 0)
//   KEEL_CACHE_WORKER_SIZE        bytes of each executable (default 4096)
//   KEEL_CACHE_WORKER_PAUSE_MS    sleep at every publish step, to widen each crash window
//   KEEL_CACHE_WORKER_KILL_AT     SIGKILL itself at this publish step (or "compile")
//   KEEL_CACHE_WORKER_MAX_BYTES   CacheConfig::max_bytes
//   KEEL_CACHE_WORKER_LOCK_TIMEOUT_S  CacheConfig::lock_timeout_s
//   KEEL_CACHE_WORKER_HOLD=1      after the lookups print "ready", wait for a line on stdin,
//                                 run every executable again and print "after" lines
//   KEEL_CACHE_WORKER_UNTIL       a file: repeat the lookups, each round in a new cache (so
//                                 from disk, not memory), until it exists; "rounds N" at the end
// Output, one line each, flushed: "step S", "compiling NAME KEY", "compiled NAME KEY",
// "got NAME KEY TIER RESULT", "note TEXT"; errors on stderr with exit status 1.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "backend/host_memory.h"
#include "cache/cache.h"
#include "ir/error.h"
#include "ir/hash.h"

namespace {

using namespace keel;

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void say(const std::string& line) {
  std::string l = line + "\n";
  // One write per line: lines from a process killed mid-run are whole or absent.
  (void)!::write(1, l.data(), l.size());
}

class FakeExecutable : public backend::Executable {
 public:
  explicit FakeExecutable(std::string bytes) : bytes_(std::move(bytes)) {}
  std::vector<backend::Buffer> execute(std::span<const backend::Buffer>) override {
    Array out(DType::i32, {static_cast<int64_t>(bytes_.size())});
    for (size_t i = 0; i < bytes_.size(); ++i) {
      out.set_i64(static_cast<int64_t>(i), static_cast<unsigned char>(bytes_[i]));
    }
    return {backend::adopt_host_array(out, backend::Device{0, "cpu"})};
  }
  std::string serialize() const override { return bytes_; }
  int64_t predicted_peak_bytes() const override { return static_cast<int64_t>(bytes_.size()); }
  std::string platform() const override { return "fake"; }

 private:
  std::string bytes_;
};

class FakeClient : public backend::Client {
 public:
  std::string platform() const override { return "fake"; }
  std::vector<backend::Device> devices() const override { return {backend::Device{0, "cpu"}}; }
  std::unique_ptr<backend::Executable> compile(const Graph&,
                                               const backend::CompileOptions&) override {
    throw Error("[fake] the worker compiles through the cache's callback only");
  }
  std::unique_ptr<backend::Executable> load(std::string_view bytes) override {
    if (bytes.substr(0, 9) != "FAKEEXE1\n") throw Error("[fake] not a fake executable");
    return std::make_unique<FakeExecutable>(std::string(bytes));
  }
  backend::Buffer to_device(const Array& host, const backend::Device& device) override {
    return backend::adopt_host_array(host, device);
  }
  backend::MemoryStats memory_stats(const backend::Device&) const override { return {}; }
};

// Program "k<i>": neg of an f32[i+2] parameter; the same in every process.
Graph program(const std::string& name) {
  int64_t i = std::atoll(name.c_str() + 1);
  Graph g(name);
  NodeId x = g.add_param(TensorType{DType::f32, {i + 2}}, SourceLoc{"cache_worker.cpp", 80});
  g.add_output(g.emit(Op::neg, {x}, Attrs{}, SourceLoc{"cache_worker.cpp", 81}));
  return g;
}

// Deterministic bytes for a program: every process compiling it produces the same executable.
std::string fake_compile(const Graph& g, size_t size) {
  std::string bytes = "FAKEEXE1\n" + graph_hash(g).hex() + "\n";
  uint64_t x = graph_hash(g).lo | 1;
  while (bytes.size() < size) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bytes.push_back(static_cast<char>('a' + x % 26));
  }
  return bytes;
}

std::string run(backend::Executable& exe) {
  std::vector<backend::Buffer> out = exe.execute({});
  const Array& a = backend::host_array(out.at(0), "fake");
  return hash_bytes(std::string_view(reinterpret_cast<const char*>(a.data()), a.nbytes())).hex();
}

void maybe_die(const std::string& at) {
  if (env_str("KEEL_CACHE_WORKER_KILL_AT") == at) ::kill(::getpid(), SIGKILL);
}

// One lookup of program `name`: compiled (once, under the key's lock) or loaded; "got" line.
std::shared_ptr<backend::Executable> lookup(cache::ExecutableCache& cache, const std::string& name,
                                            size_t size, int64_t compile_ms) {
  Graph g = program(name);
  cache::KeyParts parts;
  parts.function = name;
  parts.signature = g.node(g.params().at(0)).type.str();
  parts.graph = graph_hash(g);
  parts.bundle.fields = {{"keel.version", "test"}, {"compiler", "fake 1.0"}};
  parts.codegen = "fake-codegen";
  parts.platform = "fake";
  std::string key = parts.key().hex();
  cache::Lookup r = cache.get(parts, g, [&]() -> std::unique_ptr<backend::Executable> {
    say("compiling " + name + " " + key);
    maybe_die("compile");
    std::this_thread::sleep_for(std::chrono::milliseconds(compile_ms));
    say("compiled " + name + " " + key);
    return std::make_unique<FakeExecutable>(fake_compile(g, size));
  });
  for (const std::string& n : r.notes) say("note " + n);
  say("got " + name + " " + r.key + " " + std::string(cache::tier_name(r.tier)) + " " +
      run(*r.executable));
  return r.executable;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: cache_worker DIR NAME...\n");
    return 2;
  }
  try {
    const int64_t compile_ms = env_int("KEEL_CACHE_WORKER_COMPILE_MS", 0);
    const int64_t pause_ms = env_int("KEEL_CACHE_WORKER_PAUSE_MS", 0);
    const size_t size = static_cast<size_t>(env_int("KEEL_CACHE_WORKER_SIZE", 4096));
    cache::CacheConfig config;
    config.dir = argv[1];
    config.max_bytes = env_int("KEEL_CACHE_WORKER_MAX_BYTES", 0);
    config.lock_timeout_s = static_cast<double>(env_int("KEEL_CACHE_WORKER_LOCK_TIMEOUT_S", 900));
    config.publish_hook = [&](std::string_view step) {
      say("step " + std::string(step));
      maybe_die(std::string(step));
      if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    };
    std::vector<std::pair<std::string, std::shared_ptr<backend::Executable>>> held;
    const std::string until = env_str("KEEL_CACHE_WORKER_UNTIL");
    int64_t rounds = 0;
    do {
      held.clear();
      cache::ExecutableCache cache(config, std::make_shared<FakeClient>());
      for (int i = 2; i < argc; ++i)
        held.emplace_back(argv[i], lookup(cache, argv[i], size, compile_ms));
      ++rounds;
    } while (!until.empty() && ::access(until.c_str(), F_OK) != 0);
    if (!until.empty()) say("rounds " + std::to_string(rounds));
    if (env_str("KEEL_CACHE_WORKER_HOLD") == "1") {
      say("ready");
      std::string line;
      std::getline(std::cin, line);
      for (auto& [name, exe] : held) say("after " + name + " " + run(*exe));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error %s\n", e.what());
    return 1;
  }
}
