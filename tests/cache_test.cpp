// The executable cache: tiers and modes, integrity (corruption never executes), signatures,
// directory safety, eviction, and — through tests/cache_worker processes — one compile per key
// under concurrency and no torn entry after SIGKILL at any point of a publish.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "backend/host_memory.h"
#include "cache/cache.h"
#include "cache/layout.h"
#include "cache/signing.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "ir/text.h"
#include "ir/version.h"
#include "tests/subprocess.h"

extern char** environ;

namespace keel::cache {
namespace {

namespace sfs = std::filesystem;
using testing_support::reap_child;
using Ms = std::chrono::milliseconds;

// ---- a fake backend: an executable is a byte string that execute() returns ----

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
  int64_t predicted_peak_bytes() const override { return 1000; }
  std::string platform() const override { return "fake"; }

 private:
  std::string bytes_;
};

class FakeClient : public backend::Client {
 public:
  std::atomic<int> load_calls{0};  // every call, accepted or not
  std::string platform() const override { return "fake"; }
  std::vector<backend::Device> devices() const override { return {backend::Device{0, "cpu"}}; }
  std::unique_ptr<backend::Executable> compile(const Graph&,
                                               const backend::CompileOptions&) override {
    throw Error("[fake] compile through the cache's callback");
  }
  std::unique_ptr<backend::Executable> load(std::string_view bytes) override {
    ++load_calls;
    if (bytes.substr(0, 9) != "FAKEEXE1\n") throw Error("[fake] not a fake executable");
    return std::make_unique<FakeExecutable>(std::string(bytes));
  }
  backend::Buffer to_device(const Array& host, const backend::Device& device) override {
    return backend::adopt_host_array(host, device);
  }
  backend::MemoryStats memory_stats(const backend::Device&) const override { return {}; }
};

// Program `n` of function `fn`: neg of an f32[n+2] parameter.
Graph program(int n, const std::string& fn = "f") {
  Graph g(fn);
  NodeId x = g.add_param(TensorType{DType::f32, {n + 2}}, SourceLoc{"cache_test.cpp", 70});
  g.add_output(g.emit(Op::neg, {x}, Attrs{}, SourceLoc{"cache_test.cpp", 71}));
  return g;
}

KeyParts parts_of(const Graph& g, const std::string& compiler = "fake 1.0") {
  KeyParts p;
  p.function = g.name();
  p.signature = g.node(g.params().at(0)).type.str();
  p.graph = graph_hash(g);
  p.bundle.fields = {{"keel.version", "test"}, {"compiler", compiler}};
  p.codegen = "fake-codegen";
  p.platform = "fake";
  return p;
}

std::string fake_bytes(const Graph& g, size_t size = 4096) {
  std::string b = "FAKEEXE1\n" + graph_hash(g).hex() + "\n";
  while (b.size() < size) b.push_back(static_cast<char>('a' + b.size() % 26));
  return b;
}

std::string result_of(backend::Executable& exe) {
  std::vector<backend::Buffer> out = exe.execute({});
  const Array& a = backend::host_array(out.at(0), "fake");
  return hash_bytes(std::string_view(reinterpret_cast<const char*>(a.data()), a.nbytes())).hex();
}

// One cache user: a fresh client and a compile counter.
struct User {
  std::shared_ptr<FakeClient> client = std::make_shared<FakeClient>();
  ExecutableCache cache;
  int compiles = 0;
  explicit User(CacheConfig c) : cache(std::move(c), client) {}
  Lookup get(const Graph& g, size_t size = 4096, const std::string& compiler = "fake 1.0") {
    return cache.get(parts_of(g, compiler), g, [&]() -> std::unique_ptr<backend::Executable> {
      ++compiles;
      return std::make_unique<FakeExecutable>(fake_bytes(g, size));
    });
  }
};

// ---- files and processes ----

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (sfs::temp_directory_path() / "keel-cache-test.XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    sfs::remove_all(path, ec);
  }
  std::string cache() const { return path + "/cache"; }
  std::string entries() const { return path + "/cache/v1/entries"; }
  std::string file(const std::string& key, const char* ext) const {
    return entries() + "/" + key + "." + ext;
  }
};

CacheConfig config_for(const std::string& dir, Mode mode = Mode::readwrite) {
  CacheConfig c;
  c.dir = dir;
  c.mode = mode;
  return c;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Every path under `dir` with its size and mtime: proof that nothing was written.
std::map<std::string, std::pair<int64_t, int64_t>> snapshot(const std::string& dir) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  if (!sfs::exists(dir)) return out;
  for (const auto& e : sfs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = {st.st_size, st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
  }
  return out;
}

std::vector<std::string> temps_in(const std::string& entries) {
  std::vector<std::string> out;
  if (!sfs::exists(entries)) return out;
  for (const auto& e : sfs::directory_iterator(entries)) {
    if (e.path().filename().string().rfind(".tmp.", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

struct Worker {
  pid_t pid = -1;
  int stdin_fd = -1;
  std::string out;  // stdout file; stderr goes to out + ".err"
};

// Starts tests/cache_worker with `env` added; stdout/stderr to files.
Worker spawn_worker(const std::string& out, const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env, bool stdin_pipe = false) {
  std::string exe = std::string(KEEL_BINARY_DIR) + "/tests/cache_worker";
  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) env_s.push_back(kv);
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> argv, envp;  // built before fork: the child only calls exec-safe functions
  for (auto& s : argv_s) argv.push_back(s.data());
  for (auto& s : env_s) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  int pipe_fds[2] = {-1, -1};
  if (stdin_pipe && ::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int err_fd = ::open((out + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  Worker w;
  w.out = out;
  w.pid = ::fork();
  if (w.pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    if (stdin_pipe) ::dup2(pipe_fds[0], 0);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  if (stdin_pipe) {
    ::close(pipe_fds[0]);
    w.stdin_fd = pipe_fds[1];
  }
  return w;
}

// Exit status, or 128 + signal; -1 if it is not a child.
int wait_worker(const Worker& w) {
  const int status = reap_child(w.pid);
  if (w.stdin_fd >= 0) ::close(w.stdin_fd);
  if (status < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool wait_for_output(const Worker& w, const std::string& text, Ms timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (contains(slurp(w.out), text)) return true;
    std::this_thread::sleep_for(Ms(1));
  }
  return false;
}

std::vector<std::vector<std::string>> lines_starting(const std::string& text,
                                                     const std::string& word) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ws(line);
    std::vector<std::string> words;
    for (std::string w; ws >> w;) words.push_back(w);
    if (!words.empty() && words[0] == word) out.push_back(words);
  }
  return out;
}

// ---- keys, manifests, configuration ----

TEST(CacheKey, FunctionNameIsNotPartOfTheKeyEverythingElseIs) {
  KeyParts a = parts_of(program(1));
  KeyParts renamed = a;
  renamed.function = "another_name";
  EXPECT_EQ(a.key(), renamed.key());
  std::vector<KeyParts> changed(5, a);
  changed[0].signature = "f32[9]";
  changed[1].graph = graph_hash(program(2));
  changed[2].bundle.fields["compiler"] = "fake 2.0";
  changed[3].codegen = "other-codegen";
  changed[4].platform = "cpu";
  std::set<std::string> keys = {a.key().hex()};
  for (const KeyParts& p : changed) keys.insert(p.key().hex());
  EXPECT_EQ(keys.size(), 6u);
  // Length prefixes: moving text between neighbouring fields changes the key.
  KeyParts x = a, y = a;
  x.codegen = "ab";
  x.platform = "c";
  y.codegen = "a";
  y.platform = "bc";
  EXPECT_NE(x.key(), y.key());
}

TEST(CacheManifest, RoundTripsAndRejectsBadFieldsByName) {
  Manifest m;
  m.key = parts_of(program(1)).key().hex();
  m.function = "f";
  m.signature = "f32[3]";
  m.graph_hash = graph_hash(program(1)).hex();
  m.bundle_json = parts_of(program(1)).bundle.to_json();
  m.bundle_hash = parts_of(program(1)).bundle.hash();
  m.codegen = "fake-codegen";
  m.platform = "fake";
  m.compile_seconds = 1.5;
  m.size = 4096;
  m.checksum = hash_bytes("x").hex();
  m.created_unix = 1700000000;
  m.predicted_peak_bytes = 77;
  Manifest r = Manifest::from_json(m.to_json(), "m.json");
  EXPECT_EQ(r.to_json(), m.to_json());
  EXPECT_EQ(r.bundle_json, m.bundle_json);
  EXPECT_EQ(r.size, 4096);
  // A function name, signature or compiler path is any bytes: written as valid JSON, read back
  // exactly (the key is recomputed from them).
  Manifest odd = m;
  odd.function = "f\xff";
  odd.signature = "f32[3] \xc3";
  odd.codegen = "compiler=/opt/caf\xe9/c++";
  Manifest back = Manifest::from_json(odd.to_json(), "m.json");
  EXPECT_EQ(back.function, odd.function);
  EXPECT_EQ(back.signature, odd.signature);
  EXPECT_EQ(back.codegen, odd.codegen);

  auto error_of = [](const std::string& text) {
    try {
      Manifest::from_json(text, "/c/v1/entries/k.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  nlohmann::json j = nlohmann::json::parse(m.to_json());
  EXPECT_TRUE(contains(error_of("{not json"), "/c/v1/entries/k.json is not JSON"));
  auto with = [&](const char* field, nlohmann::json v) {
    nlohmann::json c = j;
    if (v.is_null()) {
      c.erase(field);
    } else {
      c[field] = v;
    }
    return error_of(c.dump());
  };
  EXPECT_TRUE(contains(with("size", "big"), "field 'size' must be a non-negative integer"));
  EXPECT_TRUE(contains(with("size", -1), "field 'size'"));
  EXPECT_TRUE(contains(with("checksum", nullptr), "field 'checksum' is missing"));
  EXPECT_TRUE(contains(with("key", "../../etc/passwd"), "field 'key' must be 32"));
  EXPECT_TRUE(contains(with("format", 2),
                       "field \"format\" is format 2, written by a newer keel; this keel"));
  EXPECT_TRUE(contains(with("format", "1"), "field 'format' must be an integer"));
  EXPECT_TRUE(contains(with("bundle", {{"compiler", 3}}), "field 'bundle.compiler'"));
  EXPECT_TRUE(contains(with("size", "big"), "[cache] manifest /c/v1/entries/k.json"));
}

// A newer keel's layout beside this one's is named, with what reads it; never read or touched.
TEST(CacheLayout, ANewerLayoutIsNamedWithTheVersionThatReadsIt) {
  TempDir t;
  cache::Layout layout(t.path);
  EXPECT_EQ(layout.versioned, t.path + "/v" + std::to_string(Formats::cache_layout));
  EXPECT_EQ(cache::newer_layouts_note(t.path), "");
  for (const char* d : {"v1", "v0", "v3", "v2", "vx", "v12345678"})
    sfs::create_directory(t.path + "/" + d);
  std::ofstream(t.path + "/v9");  // a file, not a layout
  EXPECT_EQ(cache::newer_layouts(t.path), (std::vector<int>{2, 3}));
  EXPECT_EQ(cache::newer_layouts_note(t.path),
            fmt::format("[cache] {} also holds layout v2, v3, written by a newer keel; this keel "
                        "({}) reads layout v1 and leaves the newer one alone: use a keel release "
                        "that reads layout v3 to see those entries",
                        t.path, kVersion));
  EXPECT_EQ(cache::newer_layouts(t.path + "/missing"), std::vector<int>{});
}

TEST(CacheConfig, DefaultDirectoryAndModeNames) {
  auto saved = [](const char* n) {
    const char* v = std::getenv(n);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(default_cache_dir(), "/x/keel");
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // invalid per the XDG spec: ignored
  EXPECT_EQ(default_cache_dir(), "/h/.cache/keel");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_dir(), "/h/.cache/keel");
  auto restore = [](const char* n, const std::optional<std::string>& v) {
    if (v) {
      ::setenv(n, v->c_str(), 1);
    } else {
      ::unsetenv(n);
    }
  };
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
  for (Mode m : {Mode::readwrite, Mode::readonly, Mode::sealed, Mode::off}) {
    EXPECT_EQ(parse_mode(mode_name(m)), m);
  }
  EXPECT_FALSE(parse_mode("rw").has_value());
  for (Sharing v : {Sharing::per_host, Sharing::shared}) {
    EXPECT_EQ(parse_sharing(sharing_name(v)), v);
  }
  EXPECT_FALSE(parse_sharing("global").has_value());
  EXPECT_EQ(tier_name(Tier::disk), "disk");
}

// ---- tiers and modes ----

TEST(CacheTiers, MissCompilesThenMemoryThenDiskInANewCache) {
  TempDir t;
  Graph g = program(1);
  User a(config_for(t.cache()));
  Lookup first = a.get(g);
  EXPECT_EQ(first.tier, Tier::compiled);
  EXPECT_EQ(a.compiles, 1);
  EXPECT_EQ(first.key, parts_of(g).key().hex());
  EXPECT_TRUE(first.notes.empty()) << joined(first.notes);
  Lookup second = a.get(g);
  EXPECT_EQ(second.tier, Tier::memory);
  EXPECT_EQ(second.executable, first.executable);
  EXPECT_EQ(a.compiles, 1);

  // The versioned layout, private directories, and a complete entry.
  EXPECT_EQ(a.cache.dir(), t.cache() + "/v1");
  for (const char* d : {"", "/v1", "/v1/entries", "/v1/locks", "/v1/quarantine"}) {
    struct stat st {};
    ASSERT_EQ(::lstat((t.cache() + d).c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
  for (const char* ext : {"bin", "kir", "json", "used"}) {
    EXPECT_TRUE(sfs::is_regular_file(t.file(first.key, ext))) << ext;
  }
  EXPECT_EQ(slurp(t.file(first.key, "bin")), fake_bytes(g));
  EXPECT_TRUE(temps_in(t.entries()).empty());

  User b(config_for(t.cache()));
  Lookup third = b.get(g);
  EXPECT_EQ(third.tier, Tier::disk);
  EXPECT_EQ(b.compiles, 0);
  EXPECT_EQ(b.client->load_calls, 1);
  EXPECT_EQ(result_of(*third.executable), result_of(*first.executable));

  std::vector<Manifest> all = b.cache.list();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key, first.key);
  EXPECT_EQ(all[0].function, "f");
  EXPECT_EQ(all[0].signature, "f32[3]");
  EXPECT_EQ(all[0].graph_hash, graph_hash(g).hex());
  EXPECT_EQ(all[0].bundle_hash, parts_of(g).bundle.hash());
  EXPECT_EQ(all[0].size, 4096);
  EXPECT_EQ(all[0].checksum, hash_bytes(fake_bytes(g)).hex());
  EXPECT_EQ(all[0].predicted_peak_bytes, 1000);
  EXPECT_GT(all[0].created_unix, 0);
}

TEST(CacheTiers, ThreadsOfOneProcessCompileAKeyOnce) {
  TempDir t;
  User u(config_for(t.cache()));
  Graph g = program(1);
  std::atomic<int> compiles{0};
  std::vector<std::thread> threads;
  std::vector<std::string> results(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      Lookup r = u.cache.get(parts_of(g), g, [&]() -> std::unique_ptr<backend::Executable> {
        ++compiles;
        std::this_thread::sleep_for(Ms(50));
        return std::make_unique<FakeExecutable>(fake_bytes(g));
      });
      results[i] = result_of(*r.executable);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(compiles, 1);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

TEST(CacheModes, ReadonlyNeverWritesAnything) {
  TempDir t;
  {  // a missing directory is not created
    User ro(config_for(t.cache(), Mode::readonly));
    Lookup r = ro.get(program(1));
    EXPECT_EQ(r.tier, Tier::compiled);
    EXPECT_TRUE(contains(joined(r.notes), "[cache] read-only: compiled 'f' in memory, not stored"));
    EXPECT_FALSE(sfs::exists(t.cache()));
  }
  User rw(config_for(t.cache()));
  Lookup warm = rw.get(program(1));
  auto before = snapshot(t.cache());
  std::this_thread::sleep_for(Ms(20));  // so a touch of .used would show in its mtime
  User ro(config_for(t.cache(), Mode::readonly));
  EXPECT_EQ(ro.get(program(1)).tier, Tier::disk);
  Lookup miss = ro.get(program(2));
  EXPECT_EQ(miss.tier, Tier::compiled);
  EXPECT_TRUE(contains(joined(miss.notes), "read-only: compiled 'f' in memory, not stored"));
  EXPECT_EQ(snapshot(t.cache()), before);
  spit(t.file(warm.key, "bin"), "FAKEEXE1\ntampered");  // a bad entry is reported, not moved
  before = snapshot(t.cache());
  User ro2(config_for(t.cache(), Mode::readonly));
  Lookup bad = ro2.get(program(1));
  EXPECT_EQ(bad.tier, Tier::compiled);
  EXPECT_EQ(ro2.client->load_calls, 0);
  EXPECT_TRUE(contains(joined(bad.notes), "left in place (read-only cache)")) << joined(bad.notes);
  std::vector<EntryCheck> checks = ro2.cache.verify_all();
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_FALSE(checks[0].ok);
  EXPECT_EQ(snapshot(t.cache()), before);
  EXPECT_THROW(ro2.cache.prune(0), Error);
}

TEST(CacheModes, SealedMissIsAnErrorNamingFunctionAndSignature) {
  TempDir t;
  User rw(config_for(t.cache()));
  rw.get(program(1));
  User sealed(config_for(t.cache(), Mode::sealed));
  EXPECT_EQ(sealed.get(program(1)).tier, Tier::disk);
  try {
    sealed.get(program(5));
    FAIL() << "a sealed miss must throw";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "[cache] sealed cache has no entry for 'f' with inputs (f32[7]")) << m;
    EXPECT_TRUE(contains(m, "the shipped cache does not cover this run")) << m;
  }
  EXPECT_EQ(sealed.compiles, 0);
}

TEST(CacheModes, OffKeepsOnlyTheMemoryTier) {
  TempDir t;
  User off(config_for(t.cache(), Mode::off));
  EXPECT_FALSE(off.cache.disk_enabled());
  EXPECT_EQ(off.get(program(1)).tier, Tier::compiled);
  EXPECT_EQ(off.get(program(1)).tier, Tier::memory);
  EXPECT_FALSE(sfs::exists(t.cache()));
  EXPECT_TRUE(off.cache.list().empty());
}

TEST(CacheModes, ForbidCompileProvesTheCacheIsWarm) {
  TempDir t;
  CacheConfig c = config_for(t.cache());
  c.forbid_compile = true;
  User cold(c);
  try {
    cold.get(program(1));
    FAIL() << "compile must be forbidden";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "[cache] compile of 'f' (inputs f32[3]")) << e.what();
    EXPECT_TRUE(
        contains(e.what(), "is forbidden (compile_cache.forbid_compile): the cache is not warm"));
  }
  EXPECT_EQ(cold.compiles, 0);
  User rw(config_for(t.cache()));
  rw.get(program(1));
  CacheConfig forbidding = config_for(t.cache());
  forbidding.forbid_compile = true;  // compile_cache.forbid_compile
  User warm(forbidding);
  EXPECT_EQ(warm.get(program(1)).tier, Tier::disk);
  EXPECT_THROW(warm.get(program(2)), Error);
  EXPECT_EQ(warm.compiles, 0);
}

TEST(CacheTiers, ThrowingCompilePublishesNothing) {
  TempDir t;
  User u(config_for(t.cache()));
  Graph g = program(1);
  EXPECT_THROW(
      u.cache.get(parts_of(g), g,
                  []() -> std::unique_ptr<backend::Executable> { throw Error("[trace] boom"); }),
      Error);
  EXPECT_TRUE(u.cache.list().empty());
  EXPECT_TRUE(sfs::is_empty(t.entries()));
  EXPECT_EQ(u.get(g).tier, Tier::compiled);
}

TEST(CacheExplain, GraphTextIsStoredAndNearestFindsTheLastUsed) {
  TempDir t;
  User a(config_for(t.cache()));
  Lookup f1 = a.get(program(1));
  std::this_thread::sleep_for(Ms(20));
  Lookup f2 = a.get(program(2));
  a.get(program(3, "g"));
  EXPECT_EQ(a.cache.graph_text(f1.key), print_graph(program(1), true));
  EXPECT_TRUE(contains(*a.cache.graph_text(f1.key), "cache_test.cpp"));
  EXPECT_FALSE(a.cache.graph_text("0123").has_value());
  EXPECT_FALSE(a.cache.graph_text(std::string(32, 'e')).has_value());
  ASSERT_TRUE(a.cache.nearest("f").has_value());
  EXPECT_EQ(a.cache.nearest("f")->key, f2.key);
  EXPECT_FALSE(a.cache.nearest("h").has_value());
  std::this_thread::sleep_for(Ms(20));
  User b(config_for(t.cache()));
  EXPECT_EQ(b.get(program(1)).tier, Tier::disk);  // a load marks f1 as used most recently
  EXPECT_EQ(b.cache.nearest("f")->key, f1.key);
  EXPECT_EQ(b.cache.list().size(), 3u);
}

// ---- integrity: a bad entry is quarantined and recompiled, never loaded ----

struct Corruption {
  const char* name;
  std::function<void(const TempDir&, const std::string& key)> apply;
  const char* expect;  // in the note and in verify_all's report
};

std::vector<Corruption> corruptions() {
  return {
      {"truncated bin",
       [](const TempDir& t, const std::string& k) {
         spit(t.file(k, "bin"), slurp(t.file(k, "bin")).substr(0, 1000));
       },
       "is truncated: 1000 bytes, its manifest says 4096"},
      {"flipped byte",
       [](const TempDir& t, const std::string& k) {
         std::string b = slurp(t.file(k, "bin"));
         b[2000] ^= 0x01;
         spit(t.file(k, "bin"), b);
       },
       "failed its checksum"},
      {"bundle edited without its hash",
       [](const TempDir& t, const std::string& k) {
         nlohmann::json j = nlohmann::json::parse(slurp(t.file(k, "json")));
         j["bundle"]["compiler"] = "fake 2.0";
         spit(t.file(k, "json"), j.dump());
       },
       "has a bundle that hashes to"},
      {"manifest of another bundle",
       [](const TempDir& t, const std::string& k) {
         User other(config_for(t.path + "/other"));
         Lookup r = other.get(program(1), 4096, "fake 2.0");
         spit(t.file(k, "json"), slurp(t.path + "/other/v1/entries/" + r.key + ".json"));
       },
       "names key"},
      {"symlinked bin",
       [](const TempDir& t, const std::string& k) {
         sfs::rename(t.file(k, "bin"), t.path + "/elsewhere.bin");  // intact bytes, elsewhere
         sfs::create_symlink(t.path + "/elsewhere.bin", t.file(k, "bin"));
       },
       "is a symlink; refusing to follow it"},
      {"symlinked manifest",
       [](const TempDir& t, const std::string& k) {
         sfs::rename(t.file(k, "json"), t.path + "/elsewhere.json");
         sfs::create_symlink(t.path + "/elsewhere.json", t.file(k, "json"));
       },
       "is a symlink; refusing to follow it"},
      {"missing bin", [](const TempDir& t, const std::string& k) { sfs::remove(t.file(k, "bin")); },
       "is missing (its manifest says 4096 bytes)"},
      {"manifest not JSON",
       [](const TempDir& t, const std::string& k) { spit(t.file(k, "json"), "{\"key\": "); },
       "is not JSON"},
  };
}

TEST(CacheIntegrity, EachCorruptionIsQuarantinedNamedAndNeverLoaded) {
  for (const Corruption& c : corruptions()) {
    SCOPED_TRACE(c.name);
    TempDir t;
    std::string key = User(config_for(t.cache())).get(program(1)).key;
    c.apply(t, key);
    User u(config_for(t.cache()));
    Lookup r = u.get(program(1));
    EXPECT_EQ(r.tier, Tier::compiled);
    EXPECT_EQ(u.client->load_calls, 0);
    EXPECT_EQ(u.compiles, 1);
    ASSERT_EQ(r.notes.size(), 1u) << joined(r.notes);
    const std::string& note = r.notes[0];
    EXPECT_TRUE(contains(note, "[cache] entry " + key + " ('f')")) << note;
    EXPECT_TRUE(contains(note, c.expect)) << note;
    EXPECT_TRUE(contains(note, "quarantined to " + t.cache() + "/v1/quarantine/" + key + "."))
        << note;
    EXPECT_TRUE(contains(note, "; recompiling")) << note;
    // The bad files moved aside (a symlink as itself); a fresh entry replaced them.
    std::string qdir = note.substr(note.find("quarantined to ") + 15);
    qdir = qdir.substr(0, qdir.find(';'));
    EXPECT_TRUE(sfs::exists(sfs::symlink_status(qdir + "/" + key + ".json"))) << qdir;
    User next(config_for(t.cache()));
    EXPECT_EQ(next.get(program(1)).tier, Tier::disk);
    EXPECT_TRUE(next.cache.verify_all().at(0).ok);
  }
}

TEST(CacheIntegrity, BackendRefusalIsQuarantinedToo) {
  TempDir t;
  std::string key = User(config_for(t.cache())).get(program(1)).key;
  // Valid checksum, digest and size, but not bytes this backend can load.
  std::string junk(4096, 'z');
  spit(t.file(key, "bin"), junk);
  nlohmann::json j = nlohmann::json::parse(slurp(t.file(key, "json")));
  j["checksum"] = hash_bytes(junk).hex();
  j["digest"] = content_digest(junk);
  spit(t.file(key, "json"), j.dump());
  User u(config_for(t.cache()));
  Lookup r = u.get(program(1));
  EXPECT_EQ(r.tier, Tier::compiled);
  EXPECT_GE(u.client->load_calls, 1);  // the bytes passed their checks, so load was tried
  EXPECT_TRUE(contains(joined(r.notes), "the fake backend refused to load it")) << joined(r.notes);
  EXPECT_TRUE(contains(joined(r.notes), "quarantined to"));
}

TEST(CacheIntegrity, VerifyAllReportsAndQuarantinesOnlyTheBadOnes) {
  TempDir t;
  User u(config_for(t.cache()));
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) keys.push_back(u.get(program(i)).key);
  corruptions()[0].apply(t, keys[1]);
  corruptions()[1].apply(t, keys[2]);
  corruptions()[4].apply(t, keys[3]);
  corruptions()[2].apply(t, keys[4]);
  spit(t.entries() + "/stray-file", "x");
  User v(config_for(t.cache()));
  std::vector<EntryCheck> checks = v.cache.verify_all();
  std::map<std::string, EntryCheck> by_key;
  for (const auto& c : checks) by_key[c.key] = c;
  ASSERT_EQ(checks.size(), 7u);
  EXPECT_TRUE(by_key[keys[0]].ok);
  EXPECT_TRUE(by_key[keys[5]].ok);
  for (int i : {1, 2, 3, 4}) {
    EXPECT_FALSE(by_key[keys[i]].ok) << i;
    EXPECT_TRUE(contains(by_key[keys[i]].problem, "[cache] entry " + keys[i] + " ('f')"));
    EXPECT_TRUE(contains(by_key[keys[i]].problem, "quarantined to"));
  }
  EXPECT_TRUE(contains(by_key[keys[1]].problem, "truncated"));
  EXPECT_TRUE(contains(by_key[keys[3]].problem, "symlink"));
  EXPECT_FALSE(by_key["stray-file"].ok);
  EXPECT_EQ(v.client->load_calls, 0);  // verifying never loads (loading can run code)
  sfs::remove(t.entries() + "/stray-file");
  for (const auto& c : v.cache.verify_all()) EXPECT_TRUE(c.ok) << c.key << c.problem;
  EXPECT_EQ(v.cache.list().size(), 2u);
}

// The key leaves the function's name out, so only the graph text can tell an edited one; the
// message spells the name as the graph text does, with no raw control characters.
TEST(CacheIntegrity, VerifyFindsAManifestNamingAnotherFunction) {
  TempDir t;
  const std::string key = User(config_for(t.cache())).get(program(1)).key;
  nlohmann::json j = nlohmann::json::parse(slurp(t.file(key, "json")));
  j["function"] = "f\x1b[2J";
  spit(t.file(key, "json"), j.dump());
  User v(config_for(t.cache()));
  ASSERT_EQ(v.cache.list().size(), 1u);  // still loadable: the name is not part of the key
  std::vector<EntryCheck> checks = v.cache.verify_all();
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_FALSE(checks[0].ok);
  EXPECT_TRUE(contains(checks[0].problem, "[cache] entry " + key + " ('\"f\\x1b[2J\"')"))
      << checks[0].problem;
  EXPECT_TRUE(contains(checks[0].problem, "its manifest names the function \"f\\x1b[2J\", and"))
      << checks[0].problem;
  EXPECT_EQ(checks[0].problem.find('\x1b'), std::string::npos);
  EXPECT_TRUE(contains(checks[0].problem, "quarantined to"));
  EXPECT_TRUE(v.cache.list().empty());
}

// ---- directory safety ----

std::string open_error(const CacheConfig& c) {
  try {
    ExecutableCache cache(c, std::make_shared<FakeClient>());
  } catch (const InputError& e) {
    return e.what();
  }
  return "opened";
}

TEST(CacheSafety, UnsafeDirectoriesAreRefusedWithTheFix) {
  TempDir t;
  User(config_for(t.cache())).get(program(1));
  std::string c = t.cache();
  ::chmod(c.c_str(), 0777);
  EXPECT_EQ(open_error(config_for(c)),
            "[cache] " + c +
                " is writable by others (mode 0777); anyone who can write it can "
                "run code as you: chmod 700 " +
                c);
  ::chmod(c.c_str(), 0770);
  EXPECT_TRUE(contains(open_error(config_for(c)), "is writable by its group (mode 0770)"));
  ::chmod(c.c_str(), 0700);
  ::chmod((c + "/v1/entries").c_str(), 0757);
  EXPECT_TRUE(contains(open_error(config_for(c)), c + "/v1/entries is writable by others"));
  ::chmod((c + "/v1/entries").c_str(), 0700);
  EXPECT_EQ(open_error(config_for(c)), "opened");
  // Readonly and sealed check too: reading executables from such a directory runs their code.
  ::chmod(c.c_str(), 0777);
  EXPECT_TRUE(contains(open_error(config_for(c, Mode::sealed)), "writable by others"));
  ::chmod(c.c_str(), 0700);

  sfs::create_directory_symlink(c, t.path + "/link");
  EXPECT_TRUE(contains(open_error(config_for(t.path + "/link")), "/link is a symlink (to "));
  sfs::rename(c + "/v1/locks", t.path + "/real-locks");
  sfs::create_directory_symlink(t.path + "/real-locks", c + "/v1/locks");
  EXPECT_TRUE(contains(open_error(config_for(c)), c + "/v1/locks is a symlink"));
  sfs::remove(c + "/v1/locks");
  sfs::rename(t.path + "/real-locks", c + "/v1/locks");
  if (::geteuid() == 0) {  // only root can give a directory away
    ASSERT_EQ(::chown(c.c_str(), 65534, 65534), 0);
    EXPECT_TRUE(contains(open_error(config_for(c)), "is owned by uid 65534, not by you"));
    ASSERT_EQ(::chown(c.c_str(), 0, 0), 0);
  }
  EXPECT_EQ(open_error(config_for(c)), "opened");
}

TEST(CacheSafety, UnsafeDirectoryCanDisableTheDiskTierWithAWarning) {
  TempDir t;
  std::string c = t.cache();
  User(config_for(c)).get(program(1));
  ::chmod(c.c_str(), 0777);
  CacheConfig cfg = config_for(c);
  cfg.unsafe_dir_is_error = false;
  auto before = snapshot(c);
  User u(cfg);
  EXPECT_FALSE(u.cache.disk_enabled());
  ASSERT_EQ(u.cache.warnings().size(), 1u);
  EXPECT_TRUE(contains(u.cache.warnings()[0], "writable by others"));
  EXPECT_TRUE(contains(u.cache.warnings()[0], "the disk tier is disabled"));
  EXPECT_EQ(u.get(program(1)).tier, Tier::compiled);  // the entry there is not trusted
  EXPECT_EQ(u.get(program(2)).tier, Tier::compiled);
  EXPECT_EQ(u.client->load_calls, 0);
  EXPECT_EQ(snapshot(c), before);
  ::chmod(c.c_str(), 0700);
}

TEST(CacheSafety, LeftoversOfDeadWritersAreRemovedButNotThoseOfLiveOnes) {
  TempDir t;
  std::string key = User(config_for(t.cache())).get(program(1)).key;
  std::string dead = parts_of(program(2)).key().hex(), live = parts_of(program(3)).key().hex();
  spit(t.entries() + "/.tmp." + dead + ".bin.999.0123456789abcdef", "partial");
  spit(t.file(dead, "kir"), "orphan without a manifest");
  spit(t.entries() + "/.tmp." + live + ".bin.998.0123456789abcdef", "being written");
  spit(t.file(live, "bin"), "published, manifest still to come");
  // A live writer holds its key's lock for the whole publish.
  int fd = ::open((t.cache() + "/v1/locks/" + live + ".lock").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  User u(config_for(t.cache()));
  EXPECT_FALSE(sfs::exists(t.file(dead, "kir")));
  EXPECT_FALSE(sfs::exists(t.entries() + "/.tmp." + dead + ".bin.999.0123456789abcdef"));
  EXPECT_TRUE(sfs::exists(t.file(live, "bin")));
  EXPECT_EQ(temps_in(t.entries()).size(), 1u);
  EXPECT_TRUE(sfs::exists(t.file(key, "bin")));
  ::close(fd);
  EXPECT_GT(u.cache.prune(-1), 0);  // no size limit: only what dead writers left
  EXPECT_TRUE(temps_in(t.entries()).empty());
  EXPECT_FALSE(sfs::exists(t.file(live, "bin")));
  EXPECT_TRUE(sfs::exists(t.file(key, "bin")));
}

// ---- sharing between hosts (issue 15) ----

// A reader (the launch elected another process to write) loads a good entry without touching
// it, and around a bad one compiles in memory: the directory stays exactly as it was.
TEST(CacheSharing, AReaderLeavesTheDirectoryExactlyAsItWas) {
  TempDir t;
  CacheConfig shared = config_for(t.cache());
  shared.sharing = Sharing::shared;
  User writer(shared);
  const Lookup written = writer.get(program(1));
  EXPECT_TRUE(written.stored);
  auto before = snapshot(t.cache());
  std::this_thread::sleep_for(Ms(20));  // so a touch of .used would show in its mtime
  User reader(shared);
  auto read = [&](const Graph& g) {
    return reader.cache.get(
        parts_of(g), g,
        [&]() -> std::unique_ptr<backend::Executable> {
          ++reader.compiles;
          return std::make_unique<FakeExecutable>(fake_bytes(g));
        },
        Access::read);
  };
  const Lookup loaded = read(program(1));
  EXPECT_EQ(loaded.tier, Tier::disk);
  EXPECT_TRUE(loaded.stored);
  const Lookup missed = read(program(2));
  EXPECT_EQ(missed.tier, Tier::compiled);
  EXPECT_FALSE(missed.stored);
  EXPECT_TRUE(contains(joined(missed.notes), "[cache] reader: compiled 'f' in memory, not stored"));
  EXPECT_EQ(snapshot(t.cache()), before);

  spit(t.file(written.key, "bin"), "FAKEEXE1\ntampered");
  before = snapshot(t.cache());
  User reader2(shared);
  const Lookup bad = reader2.cache.get(
      parts_of(program(1)), program(1),
      [&]() -> std::unique_ptr<backend::Executable> {
        return std::make_unique<FakeExecutable>(fake_bytes(program(1)));
      },
      Access::read);
  EXPECT_EQ(bad.tier, Tier::compiled);
  EXPECT_TRUE(contains(joined(bad.notes),
                       "not loaded, left in place (its writer is another "
                       "process)"))
      << joined(bad.notes);
  EXPECT_EQ(snapshot(t.cache()), before);  // not quarantined, not rewritten
  // The memory tier remembers what was stored: a second lookup says so without the disk.
  EXPECT_TRUE(read(program(1)).stored);
  EXPECT_FALSE(read(program(2)).stored);
}

// Entries record the host that built them; a host with other CPU features has another key, so
// it compiles its own entry beside the first instead of loading code for another ISA.
TEST(CacheSharing, EntriesRecordTheirHostAndAnotherIsaGetsItsOwnEntry) {
  TempDir t;
  CacheConfig a = config_for(t.cache());
  a.sharing = Sharing::shared;
  a.host = "host-a";
  User on_a(a);
  const Graph g = program(1);
  const Lookup first = on_a.get(g);
  CacheConfig b = a;
  b.host = "host-b";
  User on_b(b);
  KeyParts other_isa = parts_of(g);
  other_isa.bundle.fields["host.cpu_features"] = "avx avx2 fma";
  ASSERT_NE(other_isa.key().hex(), first.key);
  const Lookup second = on_b.cache.get(other_isa, g, [&]() -> std::unique_ptr<backend::Executable> {
    ++on_b.compiles;
    return std::make_unique<FakeExecutable>(fake_bytes(g));
  });
  EXPECT_EQ(second.tier, Tier::compiled);
  EXPECT_EQ(on_b.get(g).tier, Tier::disk);  // the same ISA loads host a's entry
  std::map<std::string, std::string> host_of;
  for (const Manifest& m : on_b.cache.list()) host_of[m.key] = m.host;
  EXPECT_EQ(host_of,
            (std::map<std::string, std::string>{{first.key, "host-a"}, {second.key, "host-b"}}));
  // A manifest from before hosts were recorded still reads, with no host.
  nlohmann::json old = nlohmann::json::parse(slurp(t.file(first.key, "json")));
  old.erase("host");
  EXPECT_EQ(Manifest::from_json(old.dump(), "old").host, "");
}

// In a shared directory a temporary may be another host's live writer's: opening the cache
// leaves it (only `keel cache prune` clears), where a per-host directory clears dead writers'.
TEST(CacheSharing, ASharedDirectoryKeepsOtherWritersTemporaries) {
  TempDir t;
  User(config_for(t.cache())).get(program(1));
  const std::string key = parts_of(program(2)).key().hex();
  const std::string temp = t.entries() + "/.tmp." + key + ".bin.999.0123456789abcdef";
  spit(temp, "being written on another host");
  CacheConfig shared = config_for(t.cache());
  shared.sharing = Sharing::shared;
  User on_shared(shared);
  EXPECT_TRUE(sfs::exists(temp));
  User on_own(config_for(t.cache()));
  EXPECT_FALSE(sfs::exists(temp));
}

// ---- eviction ----

TEST(CacheEviction, LeastRecentlyUsedGoesFirstByUnlinkNeverTruncation) {
  TempDir t;
  CacheConfig c = config_for(t.cache());
  c.max_bytes = 25000;  // two 10 kB entries fit, three do not
  User a(c);
  Lookup k0 = a.get(program(0), 10000);
  std::this_thread::sleep_for(Ms(20));
  Lookup k1 = a.get(program(1), 10000);
  std::this_thread::sleep_for(Ms(20));
  User b(c);
  EXPECT_EQ(b.get(program(0), 10000).tier, Tier::disk);  // k0 is now more recent than k1
  std::this_thread::sleep_for(Ms(20));
  int fd = ::open(t.file(k1.key, "bin").c_str(), O_RDONLY);  // like a process that loaded it
  ASSERT_GE(fd, 0);
  Lookup k2 = b.get(program(2), 10000);
  EXPECT_EQ(k2.tier, Tier::compiled);
  EXPECT_FALSE(sfs::exists(t.file(k1.key, "json")));
  EXPECT_FALSE(sfs::exists(t.file(k1.key, "bin")));
  EXPECT_TRUE(sfs::exists(t.file(k0.key, "bin")));
  EXPECT_TRUE(sfs::exists(t.file(k2.key, "bin")));
  std::string held(20000, '\0');
  ssize_t n = ::pread(fd, held.data(), held.size(), 0);
  ::close(fd);
  ASSERT_EQ(n, 10000);  // an unlinked file keeps its bytes for whoever has it open
  held.resize(10000);
  EXPECT_EQ(held, fake_bytes(program(1), 10000));
  std::vector<EntryInfo> left = b.cache.entries();
  ASSERT_EQ(left.size(), 2u);
  int64_t total = 0;
  for (const auto& e : left) total += e.bytes;
  EXPECT_LE(total, 25000);
  // An entry larger than the limit is kept until something newer replaces it.
  EXPECT_EQ(b.cache.prune(0), total);
  EXPECT_TRUE(b.cache.list().empty());
  EXPECT_EQ(b.get(program(0), 10000).tier, Tier::memory);  // the memory tier is unaffected
}

TEST(CacheEviction, AProcessKeepsRunningAnExecutableWhoseEntryWasEvicted) {
  TempDir t;
  Worker first = spawn_worker(t.path + "/first.out", {t.cache(), "k0", "k1"}, {});
  ASSERT_EQ(wait_worker(first), 0) << slurp(first.out + ".err");
  Worker holder = spawn_worker(t.path + "/holder.out", {t.cache(), "k0", "k1"},
                               {{"KEEL_CACHE_WORKER_HOLD", "1"}}, /*stdin_pipe=*/true);
  ASSERT_TRUE(wait_for_output(holder, "ready", Ms(20000))) << slurp(holder.out + ".err");
  User u(config_for(t.cache()));
  EXPECT_GT(u.cache.prune(0), 0);
  EXPECT_TRUE(u.cache.list().empty());
  EXPECT_TRUE(sfs::is_empty(t.entries()));
  ASSERT_EQ(::write(holder.stdin_fd, "go\n", 3), 3);
  ASSERT_EQ(wait_worker(holder), 0) << slurp(holder.out + ".err");
  std::string out = slurp(holder.out);
  auto got = lines_starting(out, "got"), after = lines_starting(out, "after");
  ASSERT_EQ(got.size(), 2u) << out;
  ASSERT_EQ(after.size(), 2u) << out;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i][3], "disk") << out;
    EXPECT_EQ(after[i][2], got[i][4]) << out;  // same result after the eviction
  }
}

// ---- many processes ----

// `procs` processes look up `keys` programs, each in its own order: every key is compiled by
// exactly one of them, all run the same executable, and no temporary or bad entry is left.
void race(int procs, int keys, int compile_ms) {
  TempDir t;
  std::vector<std::string> names;
  for (int k = 0; k < keys; ++k) names.push_back("k" + std::to_string(k));
  std::vector<Worker> workers;
  for (int i = 0; i < procs; ++i) {
    std::vector<std::string> args = {t.cache()};
    for (int j = 0; j < keys; ++j) args.push_back(names[(i + j) % keys]);  // different orders
    workers.push_back(spawn_worker(t.path + "/w" + std::to_string(i) + ".out", args,
                                   {{"KEEL_CACHE_WORKER_COMPILE_MS", std::to_string(compile_ms)}}));
  }
  std::map<std::string, int> compiles, tiers;
  std::map<std::string, std::set<std::string>> results, keys_of;
  for (const Worker& w : workers) {
    ASSERT_EQ(wait_worker(w), 0) << slurp(w.out + ".err");
    std::string out = slurp(w.out);
    for (const auto& l : lines_starting(out, "compiling")) ++compiles[l.at(1)];
    auto got = lines_starting(out, "got");
    ASSERT_EQ(got.size(), static_cast<size_t>(keys)) << out;
    for (const auto& l : got) {
      keys_of[l.at(1)].insert(l.at(2));
      ++tiers[l.at(3)];
      results[l.at(1)].insert(l.at(4));
    }
  }
  for (const std::string& n : names) {
    EXPECT_EQ(compiles[n], 1) << n;
    EXPECT_EQ(keys_of[n].size(), 1u) << n;
    EXPECT_EQ(results[n].size(), 1u) << n;  // every process ran the same executable
  }
  EXPECT_EQ(tiers["compiled"], keys);
  EXPECT_EQ(tiers["disk"], (procs - 1) * keys);
  EXPECT_TRUE(temps_in(t.entries()).empty());
  User v(config_for(t.cache()));
  std::vector<EntryCheck> checks = v.cache.verify_all();
  EXPECT_EQ(checks.size(), static_cast<size_t>(keys));
  for (const auto& c : checks) EXPECT_TRUE(c.ok) << c.problem;
}

TEST(CacheConcurrency, EightProcessesCompileEachKeyOnce) {
  race(8, 3, 200);
}

// Bazel's promise, at scale: 64 processes on one directory, 20 keys.
TEST(CacheConcurrency, SixtyFourProcessesTwentyKeysCompileEachKeyOnce) {
  race(64, 20, 20);
}

// Eviction (prune to nothing) 1,000 times while 8 processes load and run the entries, each
// round from disk: eviction unlinks and never truncates, so no loader ever reads a torn entry
// (one would be quarantined), crashes, or runs anything but the one executable of its key.
TEST(CacheEviction, PruneLoopingWhileEightProcessesLoadNeverTearsAnEntry) {
  TempDir t;
  const std::string stop = t.path + "/stop";
  std::vector<Worker> loaders;
  for (int i = 0; i < 8; ++i) {
    loaders.push_back(spawn_worker(
        t.path + "/l" + std::to_string(i) + ".out", {t.cache(), "k0", "k1", "k2", "k3"},
        {{"KEEL_CACHE_WORKER_UNTIL", stop}, {"KEEL_CACHE_WORKER_SIZE", "65536"}}));
  }
  for (const Worker& w : loaders) {
    ASSERT_TRUE(wait_for_output(w, "got k3", Ms(60000))) << slurp(w.out + ".err");
  }
  User pruner(config_for(t.cache()));
  int64_t freed = 0;
  for (int i = 0; i < 1000; ++i) {
    freed += pruner.cache.prune(0);
    std::this_thread::sleep_for(Ms(1));  // let loaders publish again between evictions
  }
  spit(stop, "");
  std::map<std::string, std::set<std::string>> results;
  std::map<std::string, int> tiers;
  int64_t rounds = 0;
  for (const Worker& w : loaders) {
    ASSERT_EQ(wait_worker(w), 0) << slurp(w.out + ".err");
    const std::string out = slurp(w.out);
    for (const auto& l : lines_starting(out, "got")) {
      results[l.at(1)].insert(l.at(4));
      ++tiers[l.at(3)];
    }
    for (const auto& l : lines_starting(out, "note")) {  // waiting for a lock is expected
      if (l.at(2) != "waited") ADD_FAILURE() << joined(l);
    }
    auto r = lines_starting(out, "rounds");
    ASSERT_EQ(r.size(), 1u) << out;
    rounds += std::stoll(r[0].at(1));
  }
  EXPECT_GT(freed, 0);  // the pruner did evict entries the loaders were using
  EXPECT_GT(tiers["disk"], 0);
  for (const auto& [name, r] : results) EXPECT_EQ(r.size(), 1u) << name;
  EXPECT_TRUE(sfs::is_empty(t.path + "/cache/v1/quarantine") ||
              !sfs::exists(t.path + "/cache/v1/quarantine"));
  RecordProperty("loader_rounds", std::to_string(rounds));
  RecordProperty("bytes_evicted", std::to_string(freed));
}

// A worker stopped with SIGSTOP; continued and killed when the test ends, however it ends.
struct StoppedWorker {
  const Worker& w;
  ~StoppedWorker() {
    ::kill(w.pid, SIGCONT);
    ::kill(w.pid, SIGKILL);
    wait_worker(w);
  }
};

// A lock holder that is alive but stopped (SIGSTOP) meets the waiter's deadline: the waiter
// fails near compile_cache.lock_timeout_s with one line naming the lock file and the holder's
// pid, and compiles nothing; once the holder is gone the next process compiles at once.
TEST(CacheConcurrency, StoppedLockHolderIsNamedWhenTheDeadlinePasses) {
  TempDir t;
  Worker holder = spawn_worker(t.path + "/holder.out", {t.cache(), "k0"},
                               {{"KEEL_CACHE_WORKER_COMPILE_MS", "60000"}});
  ASSERT_TRUE(wait_for_output(holder, "compiling k0", Ms(20000))) << slurp(holder.out + ".err");
  StoppedWorker stopped{holder};
  ASSERT_EQ(::kill(holder.pid, SIGSTOP), 0);
  const std::string key = lines_starting(slurp(holder.out), "compiling").at(0).at(2);

  const std::map<std::string, std::string> deadline = {{"KEEL_CACHE_WORKER_LOCK_TIMEOUT_S", "1"}};
  const auto t0 = std::chrono::steady_clock::now();
  Worker waiter = spawn_worker(t.path + "/waiter.out", {t.cache(), "k0"}, deadline);
  EXPECT_EQ(wait_worker(waiter), 1);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 5.0);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(slurp(waiter.out + ".err"),
            fmt::format("error [cache] gave up after 1 s (compile_cache.lock_timeout_s) waiting "
                        "for the lock {}/v1/locks/{}.lock, held by pid {} on host {} (stopped); it "
                        "is compiling or checking this entry and has not finished: let it finish "
                        "(or continue it if stopped), kill it, or raise "
                        "compile_cache.lock_timeout_s\n",
                        t.cache(), key, holder.pid, host));
  EXPECT_TRUE(lines_starting(slurp(waiter.out), "compiling").empty());

  ::kill(holder.pid, SIGKILL);  // the kernel releases its lock
  Worker next = spawn_worker(t.path + "/next.out", {t.cache(), "k0"}, deadline);
  ASSERT_EQ(wait_worker(next), 0) << slurp(next.out + ".err");
  EXPECT_EQ(lines_starting(slurp(next.out), "compiling").size(), 1u);
}

// ---- crashes: SIGKILL anywhere leaves old or new, never torn ----

// A killed worker's OpenMP registration, torn here on purpose as a kill at its start-up
// leaves it, is gone once the worker is reaped: the next process given that pid starts.
TEST(CacheCrash, AKilledWorkersOpenMpRegistrationIsRemovedWhenReaped) {
  TempDir t;
  Worker w = spawn_worker(t.path + "/w.out", {t.cache(), "k0"},
                          {{"KEEL_CACHE_WORKER_COMPILE_MS", "60000"}});
  ASSERT_TRUE(wait_for_output(w, "compiling k0", Ms(20000))) << slurp(w.out + ".err");
  const std::string name = testing_support::omp_registration_name(w.pid);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1024), 0);
  ::close(fd);
  ::kill(w.pid, SIGKILL);
  EXPECT_EQ(wait_worker(w), 128 + SIGKILL);
  EXPECT_EQ(::shm_open(name.c_str(), O_RDONLY, 0), -1);
  EXPECT_EQ(errno, ENOENT);
}

struct CrashCheck {
  std::map<std::string, std::string> reference;  // name -> result of an undisturbed run
  std::set<std::string> names;
  std::map<std::string, std::string> env;  // the executable size: same in every run

  // After a killed run: every entry a reader can see is complete and intact (checked without
  // writing anything), then a normal run succeeds and leaves no debris.
  void after_kill(const TempDir& t, int trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    User reader(config_for(t.cache(), Mode::readonly));
    std::vector<EntryCheck> checks = reader.cache.verify_all();
    for (const auto& c : checks) EXPECT_TRUE(c.ok) << c.key << ": " << c.problem;
    Worker next = spawn_worker(t.path + "/next.out", args(t), env);
    ASSERT_EQ(wait_worker(next), 0) << slurp(next.out + ".err");
    auto got = lines_starting(slurp(next.out), "got");
    ASSERT_EQ(got.size(), names.size());
    for (const auto& l : got) EXPECT_EQ(l.at(4), reference.at(l.at(1))) << l.at(1);
    EXPECT_TRUE(temps_in(t.entries()).empty());
    User v(config_for(t.cache()));
    checks = v.cache.verify_all();
    EXPECT_EQ(checks.size(), names.size());
    for (const auto& c : checks) EXPECT_TRUE(c.ok) << c.key << ": " << c.problem;
    EXPECT_EQ(sfs::is_empty(t.cache() + "/v1/quarantine"), true);
  }
  std::vector<std::string> args(const TempDir& t) const {
    std::vector<std::string> a = {t.cache()};
    a.insert(a.end(), names.begin(), names.end());
    return a;
  }
};

std::string last_step(const std::string& out) {
  std::string last = "start";
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("step ", 0) == 0) last = line.substr(5);
    if (line.rfind("compiling ", 0) == 0) last = "compile";
    if (line.rfind("got ", 0) == 0) last = "got " + line.substr(4, 2);
  }
  return last;
}

CrashCheck crash_reference(const std::vector<std::string>& names, const std::string& size) {
  CrashCheck cc;
  cc.names = {names.begin(), names.end()};
  cc.env = {{"KEEL_CACHE_WORKER_SIZE", size}};
  TempDir t;
  Worker w = spawn_worker(t.path + "/ref.out", cc.args(t), cc.env);
  EXPECT_EQ(wait_worker(w), 0);
  for (const auto& l : lines_starting(slurp(w.out), "got")) cc.reference[l.at(1)] = l.at(4);
  return cc;
}

TEST(CacheCrash, KillAtEveryPublishStepNeverTearsAnEntry) {
  CrashCheck cc = crash_reference({"k0"}, "4096");
  std::vector<std::string> windows = {"compile"};
  for (const auto& s : publish_steps()) windows.push_back(s);
  auto complete_from = std::find(windows.begin(), windows.end(), "json.renamed") - windows.begin();
  for (size_t i = 0; i < windows.size(); ++i) {
    SCOPED_TRACE("killed at " + windows[i]);
    TempDir t;
    std::map<std::string, std::string> env = cc.env;
    env["KEEL_CACHE_WORKER_KILL_AT"] = windows[i];
    Worker w = spawn_worker(t.path + "/w.out", cc.args(t), env);
    ASSERT_EQ(wait_worker(w), 128 + SIGKILL);
    User reader(config_for(t.cache(), Mode::readonly));
    // The manifest's rename is the instant an entry appears: before it nothing, after it all.
    EXPECT_EQ(reader.cache.list().size(), static_cast<long>(i) >= complete_from ? 1u : 0u);
    cc.after_kill(t, static_cast<int>(i));
  }
}

TEST(CacheCrash, KillAtRandomMomentsNeverTearsAnEntry) {
  CrashCheck cc = crash_reference({"k0", "k1"}, "262144");
  const int trials = 40;
  const unsigned seed = 20240611;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(0, 260);
  std::map<std::string, int> windows;  // where each kill landed
  for (int trial = 0; trial < trials; ++trial) {
    TempDir t;
    // Pauses between publish steps make every window wide enough to land in.
    std::map<std::string, std::string> env = cc.env;
    env["KEEL_CACHE_WORKER_COMPILE_MS"] = "20";
    env["KEEL_CACHE_WORKER_PAUSE_MS"] = "6";
    Worker w = spawn_worker(t.path + "/w.out", cc.args(t), env);
    // Timed from the first compile, so process start-up under load does not skew the windows.
    ASSERT_TRUE(wait_for_output(w, "compiling", Ms(20000))) << slurp(w.out + ".err");
    std::this_thread::sleep_for(Ms(delay_ms(rng)));
    ::kill(w.pid, SIGKILL);
    wait_worker(w);
    ++windows[last_step(slurp(w.out))];
    cc.after_kill(t, trial);
  }
  std::string summary;
  for (const auto& [step, n] : windows) summary += " " + step + "=" + std::to_string(n);
  std::printf("[crash] %d trials (seed %u), last step before SIGKILL:%s\n", trials, seed,
              summary.c_str());
  EXPECT_GE(windows.size(), 4u) << summary;  // kills spread over compile and publish windows
}

// ---- signed caches ----

struct Signed {
  TempDir& t;
  std::string key_file(const std::string& name) const { return t.path + "/" + name + ".key"; }
  // A writer that signs with `key` ("" : unsigned).
  CacheConfig writer(const std::string& key) const {
    CacheConfig c = config_for(t.cache());
    if (!key.empty()) c.signing_key = key_file(key);
    return c;
  }
  CacheConfig reader(Signatures mode, std::vector<std::string> trusted,
                     const std::string& key = "") const {
    CacheConfig c = writer(key);
    c.signatures = mode;
    c.trusted_keys = std::move(trusted);
    return c;
  }
};

// The error a lookup raises (under signatures = refuse), or "loaded" when it raised none.
std::string refusal(User& u, const Graph& g) {
  try {
    u.get(g);
  } catch (const Error& e) {
    return e.what();
  }
  return "loaded";
}

bool has_note(const Lookup& l, const std::string& part) {
  for (const std::string& n : l.notes) {
    if (contains(n, part)) return true;
  }
  return false;
}

TEST(CacheSigning, AWritersEntriesLoadWhereItsKeyIsTrusted) {
  TempDir t;
  Signed s{t};
  const SigningKey k = SigningKey::generate(s.key_file("a"));
  EXPECT_EQ(k.public_id().rfind("ed25519:", 0), 0u);
  User writer(s.writer("a"));
  const Lookup w = writer.get(program(0));
  ASSERT_TRUE(w.stored);
  EXPECT_TRUE(sfs::exists(t.file(w.key, "sig")));
  User reader(s.reader(Signatures::refuse, {k.public_id()}));
  const Lookup r = reader.get(program(0));
  EXPECT_EQ(r.tier, Tier::disk);
  EXPECT_EQ(reader.compiles, 0);
  for (const EntryCheck& c : reader.cache.verify_all()) EXPECT_TRUE(c.ok) << c.problem;
  // The same key file read back signs the same way.
  EXPECT_EQ(SigningKey::read(s.key_file("a")).public_id(), k.public_id());
}

// Unsigned, or signed by a key nobody trusts: never handed to the backend (so never dlopen'ed).
// A process that can sign replaces it with its own; one that cannot compiles in memory and
// leaves the directory as it was; under refuse it is an error naming the entry and the fix.
TEST(CacheSigning, UnsignedAndForeignEntriesAreNeverLoaded) {
  TempDir t;
  Signed s{t};
  const SigningKey mine = SigningKey::generate(s.key_file("mine"));
  SigningKey::generate(s.key_file("foreign"));
  User(s.writer("")).get(program(0));
  User(s.writer("foreign")).get(program(1));

  const auto before = snapshot(t.cache());
  User guest(s.reader(Signatures::recompile, {mine.public_id()}));  // trusts, cannot sign
  const Lookup g0 = guest.get(program(0));
  EXPECT_EQ(g0.tier, Tier::compiled);
  EXPECT_TRUE(has_note(g0, "it is not signed; not loaded, left in place")) << g0.notes.at(0);
  const Lookup g1 = guest.get(program(1));
  EXPECT_TRUE(has_note(g1, "which is not in compile_cache.trusted_keys")) << g1.notes.at(0);
  EXPECT_EQ(guest.client->load_calls, 0);
  EXPECT_EQ(snapshot(t.cache()), before);

  User refuser(s.reader(Signatures::refuse, {mine.public_id()}));
  const std::string unsigned_error = refusal(refuser, program(0));
  EXPECT_TRUE(contains(unsigned_error, "it is not signed; refused, never loaded"))
      << unsigned_error;
  EXPECT_EQ(refuser.client->load_calls, 0);

  User owner(s.reader(Signatures::recompile, {}, "mine"));  // trusts and signs with its key
  const Lookup o0 = owner.get(program(0));
  EXPECT_EQ(o0.tier, Tier::compiled);
  EXPECT_TRUE(has_note(o0, "quarantined")) << o0.notes.at(0);
  EXPECT_EQ(owner.client->load_calls, 0);
  User after(s.reader(Signatures::refuse, {mine.public_id()}));
  EXPECT_EQ(after.get(program(0)).tier, Tier::disk);  // now signed by a trusted key
}

void rewrite_manifest(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(slurp(path));
  edit(j);
  spit(path, j.dump(2));
}

TEST(CacheSigning, TamperedSwappedAndReplayedEntriesAreRefused) {
  TempDir t;
  Signed s{t};
  const SigningKey k = SigningKey::generate(s.key_file("k"));
  const auto trusted = s.reader(Signatures::recompile, {k.public_id()});
  auto refused = [&](const Graph& g, const std::string& why) {
    User u(trusted);
    const Lookup l = u.get(g);
    EXPECT_EQ(l.tier, Tier::compiled) << why;
    EXPECT_EQ(u.client->load_calls, 0) << why;
    EXPECT_TRUE(has_note(l, why)) << (l.notes.empty() ? "no note" : l.notes.at(0));
  };
  User writer(s.writer("k"));
  const std::string k0 = writer.get(program(0)).key, k1 = writer.get(program(1)).key;
  const std::string other = writer.get(program(0), 4096, "fake 2.0").key;  // another bundle

  // Tampered bytes with a manifest fixed up to match: checksum and digest pass, the signature
  // not.
  const std::string evil = "FAKEEXE1\nnot what was compiled";
  spit(t.file(k0, "bin"), evil);
  rewrite_manifest(t.file(k0, "json"), [&](nlohmann::json& j) {
    j["checksum"] = hash_bytes(evil).hex();
    j["digest"] = content_digest(evil);
    j["size"] = evil.size();
  });
  refused(program(0), "does not match its manifest");

  // A valid signature of another entry, swapped in.
  User(s.writer("k")).get(program(0));  // republished, signed again
  spit(t.file(k0, "sig"), slurp(t.file(k1, "sig")));
  refused(program(0), "does not match its manifest");

  // A whole signed entry of another bundle, replayed under this key's name.
  User(s.writer("k")).get(program(0));
  for (const char* ext : {"bin", "json", "kir", "sig"}) {
    spit(t.file(k0, ext), slurp(t.file(other, ext)));
  }
  refused(program(0), "names key " + other + ", not its own");
}

TEST(CacheSigning, VerifyReportsUnsignedEntriesAndSignSignsThem) {
  TempDir t;
  Signed s{t};
  const SigningKey k = SigningKey::generate(s.key_file("k"));
  User plain(s.writer(""));
  plain.get(program(0));
  plain.get(program(1));
  User checker(s.reader(Signatures::refuse, {k.public_id()}));
  std::vector<EntryCheck> checks = checker.cache.verify_all();
  ASSERT_EQ(checks.size(), 2u);
  for (const EntryCheck& c : checks) {
    EXPECT_FALSE(c.ok);
    EXPECT_TRUE(contains(c.problem, "it is not signed; intact, left in place")) << c.problem;
  }
  EXPECT_TRUE(sfs::is_empty(t.path + "/cache/v1/quarantine"));
  EXPECT_EQ(User(s.writer("")).cache.sign_all(s.key_file("k")), 2);
  for (const EntryCheck& c : checker.cache.verify_all()) EXPECT_TRUE(c.ok) << c.problem;
  EXPECT_EQ(checker.get(program(1)).tier, Tier::disk);
}

// The signature covers the manifest, and the manifest binds the executable and the graph text by
// BLAKE2b: bytes that match the XXH3 checksum of a validly signed manifest (what an attacker
// would forge, XXH3 not being collision resistant) but not its digest are never loaded.
TEST(CacheSigning, ABinaryMatchingOnlyTheChecksumIsNeverLoaded) {
  TempDir t;
  Signed s{t};
  const SigningKey k = SigningKey::generate(s.key_file("k"));
  const std::string key = User(s.writer("k")).get(program(0)).key;
  nlohmann::json j = nlohmann::json::parse(slurp(t.file(key, "json")));
  EXPECT_EQ(j.at("digest"), content_digest(slurp(t.file(key, "bin"))));
  EXPECT_EQ(j.at("graph_text_digest"), content_digest(slurp(t.file(key, "kir"))));

  // Stands in for an XXH3 collision: the checksum matches the new bytes and the manifest carries
  // a valid signature by the trusted key; only the digest still names the compiled bytes.
  const std::string evil = "FAKEEXE1\nnot what was compiled";
  spit(t.file(key, "bin"), evil);
  rewrite_manifest(t.file(key, "json"), [&](nlohmann::json& m) {
    m["checksum"] = hash_bytes(evil).hex();
    m["size"] = evil.size();
  });
  spit(t.file(key, "sig"), k.sign(slurp(t.file(key, "json"))));
  User reader(s.reader(Signatures::refuse, {k.public_id()}));
  const Lookup l = reader.get(program(0));
  EXPECT_EQ(l.tier, Tier::compiled);  // a bad entry: reported and compiled here
  EXPECT_EQ(reader.client->load_calls, 0);
  EXPECT_TRUE(has_note(l, "does not match its manifest's BLAKE2b digest"))
      << (l.notes.empty() ? "no note" : l.notes.at(0));
}

// Entries signed before manifests carried digests: loaded where signatures are off, never where
// they are required, until `keel cache sign` adds the digests and signs again.
TEST(CacheSigning, SignedEntriesWithoutDigestsLoadOnlyOnceSignedAgain) {
  TempDir t;
  Signed s{t};
  const SigningKey k = SigningKey::generate(s.key_file("k"));
  const std::string key = User(s.writer("k")).get(program(0)).key;
  rewrite_manifest(t.file(key, "json"), [](nlohmann::json& m) {
    m.erase("digest");
    m.erase("graph_text_digest");
  });
  spit(t.file(key, "sig"), k.sign(slurp(t.file(key, "json"))));
  EXPECT_EQ(User(s.writer("")).get(program(0)).tier, Tier::disk);
  User refuser(s.reader(Signatures::refuse, {k.public_id()}));
  const std::string error = refusal(refuser, program(0));
  EXPECT_TRUE(contains(error, "has no BLAKE2b digest of the executable")) << error;
  EXPECT_EQ(refuser.client->load_calls, 0);
  EXPECT_EQ(User(s.writer("")).cache.sign_all(s.key_file("k")), 1);
  nlohmann::json j = nlohmann::json::parse(slurp(t.file(key, "json")));
  EXPECT_EQ(j.at("digest"), content_digest(slurp(t.file(key, "bin"))));
  EXPECT_EQ(j.at("graph_text_digest"), content_digest(slurp(t.file(key, "kir"))));
  User after(s.reader(Signatures::refuse, {k.public_id()}));
  EXPECT_EQ(after.get(program(0)).tier, Tier::disk);
  for (const EntryCheck& c : after.cache.verify_all()) EXPECT_TRUE(c.ok) << c.problem;
}

// The graph text (.kir, read by `keel cache explain`) is bound by its digest too.
TEST(CacheSigning, EditedGraphTextIsNamedAndQuarantined) {
  TempDir t;
  Signed s{t};
  User writer(s.writer(""));
  const std::string key = writer.get(program(0)).key;
  ASSERT_TRUE(writer.cache.graph_text(key).has_value());
  spit(t.file(key, "kir"), slurp(t.file(key, "kir")) + "# edited\n");
  try {
    writer.cache.graph_text(key);
    FAIL() << "edited graph text was returned";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "is not the graph text published with it")) << e.what();
  }
  const std::vector<EntryCheck> checks = writer.cache.verify_all();
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_FALSE(checks[0].ok);
  EXPECT_TRUE(contains(checks[0].problem, "is not the graph text published with it"))
      << checks[0].problem;
  EXPECT_TRUE(contains(checks[0].problem, "quarantined")) << checks[0].problem;
}

TEST(CacheSigning, BadKeysAndSettingsAreNamed) {
  TempDir t;
  Signed s{t};
  auto input_error = [](const CacheConfig& c) {
    try {
      User u(c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(contains(input_error(s.reader(Signatures::recompile, {"ed25519:abc"})),
                       "compile_cache.trusted_keys: 'ed25519:abc' is not a public key"));
  EXPECT_TRUE(contains(input_error(s.reader(Signatures::refuse, {})), "no key is trusted"));
  spit(s.key_file("junk"), "not a key");
  ::chmod(s.key_file("junk").c_str(), 0600);
  EXPECT_TRUE(contains(input_error(s.writer("junk")), "not a keel secret key"));
  SigningKey::generate(s.key_file("open"));
  ::chmod(s.key_file("open").c_str(), 0644);
  EXPECT_TRUE(contains(input_error(s.writer("open")), "readable by group or others"));
  EXPECT_THROW(SigningKey::generate(s.key_file("open")), InputError);  // never overwritten
}

}  // namespace
}  // namespace keel::cache
