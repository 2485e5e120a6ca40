#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/client.h"
#include "backend/cpu/features.h"
#include "backend/cpu/policy_keys.h"
#include "backend/cpu/settings.h"
#include "backend/cpu/target.h"
#include "backend/ref/client.h"
#include "backend/registry.h"
#include "diag/compile_log.h"
#include "dist/communicator.h"
#include "files/omp_wait.h"
#include "ir/error.h"
#include "ir/hash.h"
#include "passes/pipeline.h"
#include "policy/resolve.h"
#include "policy/schema.h"
#include "runtime/backends.h"
#include "runtime/jit.h"
#include "runtime/policy_config.h"
#include "runtime/probe.h"
#include "runtime/program_record.h"
#include "runtime/runtime.h"
#include "runtime/threads.h"
#include "runtime/writer_election.h"
#include "tests/subprocess.h"
#include "trace/compile.h"
#include "trace/ops.h"

namespace keel {
namespace {

namespace fs = std::filesystem;

class JitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("keel-jit-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::shared_ptr<runtime::CachedJit> jit(runtime::GuardMode mode = runtime::GuardMode::warn,
                                          bool forbid = false,
                                          std::shared_ptr<backend::Client> client = nullptr,
                                          backend::CompileOptions options = {}) {
    runtime::JitConfig c;
    c.client = client ? client : ref::make_ref_client();
    c.compile = std::move(options);
    c.cache.dir = (root_ / "cache").string();
    c.cache.forbid_compile = forbid;
    c.guard.mode = mode;
    c.guard.warmup_steps = 1;
    c.run_dir = (root_ / "run").string();
    return std::make_shared<runtime::CachedJit>(c);
  }

  fs::path root_;
};

Tensor f32(Shape s, float fill) {
  return Tensor(Array::full(s, fill));
}

// ---- shape guard (runtime/shape_guard.h) ----

template <class F>
std::string guard_error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every function object of one name counts together; a program already prepared is not new.
TEST(FunctionCounts, CountEveryObjectOfANameTogether) {
  runtime::FunctionCounts c;
  EXPECT_EQ(c.use("f", "k1").calls, 0);
  c.count_call("f");
  c.count_call("f");
  c.count_call("g");
  EXPECT_TRUE(c.add_program("f", "k1"));
  EXPECT_FALSE(c.add_program("f", "k1"));
  EXPECT_TRUE(c.add_program("f", "k2"));
  EXPECT_EQ(c.use("f", "k3").calls, 2);
  EXPECT_EQ(c.use("f", "k3").programs, 2);
  EXPECT_EQ(c.use("f", "k1").programs, 1);  // k1 itself is not an earlier program
  EXPECT_EQ(c.use("g", "k1").programs, 0);
}

TEST(ShapeGuard, ModesAndNames) {
  for (runtime::GuardMode m :
       {runtime::GuardMode::off, runtime::GuardMode::warn, runtime::GuardMode::strict}) {
    EXPECT_EQ(runtime::parse_guard_mode(runtime::guard_mode_name(m)), m);
  }
  EXPECT_EQ(runtime::parse_guard_mode("Strict"), std::nullopt);
  EXPECT_EQ(guard_error_of([] {
              runtime::ShapeGuard({runtime::GuardMode::warn, -1, 8});
            }),
            "[shape_guard] warmup_steps (-1) and max_programs_per_function (8) must be >= 0");
}

TEST(ShapeGuard, OffAdmitsEverythingSilently) {
  runtime::ShapeGuard g({runtime::GuardMode::off, 0, 1});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(g.admit("f", 100 + i, i, "why"), "");
}

// The function's own calls measure its warm-up; its first program is never a violation.
TEST(ShapeGuard, WarnExplainsAfterTheFunctionsWarmup) {
  runtime::ShapeGuard g({runtime::GuardMode::warn, 2, 0});
  EXPECT_EQ(g.admit("f", 0, 0, "first compile"), "");
  EXPECT_EQ(g.admit("f", 1, 1, "input 0 shape f32[8] -> f32[4]"), "");
  EXPECT_EQ(g.admit("eval", 100, 0, "first compile"), "");  // first program: never
  EXPECT_EQ(g.admit("f", 12, 2, "constant at m.cpp:3 changed 1 -> 2", "train.cpp:7"),
            "[shape_guard] new program for 'f' (defined at train.cpp:7) at its call 12: constant "
            "at m.cpp:3 changed 1 -> 2");
}

// keel::bucketed's programs are planned: after warm-up they are no drift to warn or refuse about,
// but the budget still holds.
TEST(ShapeGuard, PlannedProgramsOnlyCountAgainstTheBudget) {
  runtime::ShapeGuard g({runtime::GuardMode::strict, 1, 3});
  EXPECT_EQ(g.admit("sample_step", 12, 1, "input 0 shape i64[1,8] -> i64[1,16]", "", -1, true), "");
  EXPECT_EQ(g.admit("sample_step", 20, 2, "input 0 shape i64[1,16] -> i64[1,24]", "", -1, true),
            "");
  EXPECT_THROW(g.admit("sample_step", 30, 3, "input 0 shape", "", -1, true), Error);
  EXPECT_THROW(g.admit("sample_step", 12, 1, "input 0 shape"), Error);  // unplanned: strict
}

TEST(ShapeGuard, StrictRefusesAfterWarmup) {
  runtime::ShapeGuard g({runtime::GuardMode::strict, 1, 0});
  EXPECT_EQ(g.admit("f", 0, 0, "first compile"), "");
  EXPECT_EQ(g.admit("g", 7, 0, "first compile"), "");
  EXPECT_EQ(guard_error_of([&] { g.admit("f", 12, 1, "input 0 shape f32[8] -> f32[4]"); }),
            "[shape_guard] new program for 'f' at its call 12: input 0 shape f32[8] -> f32[4]; "
            "fix the line or input named above, pad lengths that vary to a few buckets "
            "(keel::bucketed), or set shape_guard.mode=warn");
}

TEST(ShapeGuard, BudgetCapsProgramsEvenDuringWarmup) {
  for (runtime::GuardMode m : {runtime::GuardMode::warn, runtime::GuardMode::strict}) {
    runtime::ShapeGuard g({m, 100, 2});
    EXPECT_EQ(g.admit("f", 1, 1, "input 0 shape f32[8] -> f32[4]"), "");
    EXPECT_EQ(guard_error_of([&] { g.admit("f", 2, 2, "input 0 shape f32[4] -> f32[3]"); }),
              "[shape_guard] 'f' needs program 3 but shape_guard.max_programs_per_function = 2: "
              "input 0 shape f32[4] -> f32[3]");
  }
}

TEST_F(JitTest, CompileThenMemoryThenDiskAfterRestart) {
  auto a = jit();
  auto f = compile("f", [](const Tensor& x) { return exp(x) * 2.0; }, {a});
  EXPECT_NEAR(f(f32({2}, 0)).to_f32()[0], 2.0f, 1e-6);
  f(f32({2}, 1));
  diag::CompileTotals n = a->log().totals();
  EXPECT_EQ(n.compiles, 1);
  EXPECT_EQ(n.memory_hits, 1);
  EXPECT_EQ(n.disk_hits, 0);

  auto b = jit();  // a restart: new executor, same cache directory
  auto g = compile("f", [](const Tensor& x) { return exp(x) * 2.0; }, {b});
  EXPECT_NEAR(g(f32({2}, 0)).to_f32()[0], 2.0f, 1e-6);
  n = b->log().totals();
  EXPECT_EQ(n.compiles, 0);
  EXPECT_EQ(n.disk_hits, 1);
  std::vector<diag::CompileEvent> lines =
      diag::read_compile_log((root_ / "run/compiles.jsonl").string());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].tier, "compiled");
  EXPECT_EQ(lines[0].reason, "first compile");
  EXPECT_EQ(lines[1].tier, "disk");
  EXPECT_EQ(lines[0].key, lines[1].key);
}

// The JIT's device is its client's: a host-made argument is placed by the client, and the memory
// the JIT reports (the run record's observed peak) is the client's figure, not the host's.
TEST_F(JitTest, PlacesValuesAndReportsMemoryThroughItsClient) {
  struct CountingClient : backend::Client {  // the reference client, with figures of its own
    std::shared_ptr<backend::Client> ref = ref::make_ref_client();
    int placed = 0;
    std::string platform() const override { return ref->platform(); }
    std::vector<backend::Device> devices() const override { return ref->devices(); }
    backend::Toolchain toolchain(const backend::CompileOptions& o) const override {
      return ref->toolchain(o);
    }
    std::unique_ptr<backend::Executable> compile(const Graph& g,
                                                 const backend::CompileOptions& o) override {
      return ref->compile(g, o);
    }
    std::unique_ptr<backend::Executable> load(std::string_view bytes) override {
      return ref->load(bytes);
    }
    backend::Buffer to_device(const Array& host, const backend::Device& device) override {
      ++placed;
      return ref->to_device(host, device);
    }
    backend::MemoryStats memory_stats(const backend::Device&) const override {
      return {111, 222, 333};
    }
  };
  auto client = std::make_shared<CountingClient>();
  auto j = jit(runtime::GuardMode::warn, false, client);
  EXPECT_EQ(j->memory_stats().peak_bytes_in_use, 222);
  auto f = compile("plus_one", [](const Tensor& x) { return x + 1.0; }, {j, {}});
  const Tensor y = f(f32({2}, 1));
  EXPECT_EQ(client->placed, 1);
  EXPECT_EQ(f(y).to_f32(), (std::vector<float>{3, 3}));
  EXPECT_EQ(client->placed, 1);  // a program's result stays on the device
}

// A program over the budget is refused once its memory plan exists, before the C++ compiler
// runs: here the compiler does not exist, so only a refusal that comes first can pass.
TEST_F(JitTest, AProgramOverTheBudgetIsRefusedBeforeItsCompile) {
  runtime::JitConfig c;
  c.client = cpu::make_cpu_client();
  c.cache.mode = cache::Mode::off;
  cpu::Settings missing;
  missing.compiler = "keel-no-such-compiler";
  c.compile = cpu::with_settings(c.compile, missing);
  c.memory_budget_bytes = 64;
  auto j = std::make_shared<runtime::CachedJit>(c);
  JitScope scope(j);
  auto f = compile("wide", [](const Tensor& x) { return x * 2.0; });
  try {
    f(f32({256}, 1.0f));
    FAIL() << "a program over the budget ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("launch.memory_budget_bytes is 64 per host; refused "
                                         "before compiling it"),
              std::string::npos)
        << e.what();
  }
}

// On a device whose memory is not the host's, the device's own capacity bounds a program, not
// the host's: past it the program is refused before its first run, naming the device.
TEST_F(JitTest, AProgramPastItsDevicesCapacityIsRefusedBeforeItRuns) {
  struct SmallDeviceClient : backend::Client {  // the reference client, behind a 64-byte device
    std::shared_ptr<backend::Client> ref = ref::make_ref_client();
    std::string platform() const override { return ref->platform(); }
    std::vector<backend::Device> devices() const override { return {{0, "small", false}}; }
    std::unique_ptr<backend::Executable> compile(const Graph& g,
                                                 const backend::CompileOptions& o) override {
      return ref->compile(g, o);
    }
    std::unique_ptr<backend::Executable> load(std::string_view bytes) override {
      return ref->load(bytes);
    }
    backend::Buffer to_device(const Array& host, const backend::Device&) override {
      return ref->to_device(host, ref->devices().at(0));
    }
    backend::MemoryStats memory_stats(const backend::Device&) const override { return {0, 0, 64}; }
  };
  JitScope scope(jit(runtime::GuardMode::warn, false, std::make_shared<SmallDeviceClient>()));
  auto narrow = compile("narrow", [](const Tensor& x) { return x * 2.0; });
  EXPECT_EQ(narrow(f32({2}, 1.0f)).to_f32(), (std::vector<float>{2, 2}));
  auto wide = compile("wide", [](const Tensor& x) { return x * 2.0; });
  try {
    (void)wide(f32({256}, 1.0f));
    FAIL() << "a program past the device's capacity ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[jit] program 'wide' is predicted to need "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("more than the 64 bytes of small:0; refused before"),
              std::string::npos)
        << e.what();
  }
}

// Issue 15: the memory a process may use (MemTotal, or its cgroup's cap) bounds what it may
// need; above it, one warning names the program, the figures, the host and what set the limit
// (a budget would make it an error).
TEST_F(JitTest, AProgramAboveTheMemoryLimitIsWarnedAbout) {
  runtime::JitConfig c;
  c.client = ref::make_ref_client();
  c.cache.mode = cache::Mode::off;
  c.memory_limit_bytes = 100;
  c.memory_limit_source = "/sys/fs/cgroup/a/memory.max";
  auto j = std::make_shared<runtime::CachedJit>(c);
  JitScope scope(j);
  auto f = compile("wide", [](const Tensor& x) { return x * 2.0; });
  testing::internal::CaptureStderr();
  f(f32({256}, 1.0f));
  const std::string text = testing::internal::GetCapturedStderr();
  EXPECT_NE(text.find(fmt::format("[jit] program 'wide' is predicted to need {} bytes at its "
                                  "peak, more than the 100 bytes of memory this process may use "
                                  "on host {} (/sys/fs/cgroup/a/memory.max); expect swapping",
                                  j->predicted_peak_bytes(), dist::process_place().host)),
            std::string::npos)
      << text;
}

TEST_F(JitTest, NewShapeIsExplainedWithBothShapes) {
  auto a = jit();
  auto f = compile("step", [](const Tensor& x) { return sum(x * x); }, {a});
  f(f32({8, 4}, 1));
  f(f32({4, 4}, 1));
  std::vector<diag::CompileEvent> e = a->log().events();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_NE(e[1].reason.find("input 0 (argument 0) shape f32[8,4] -> f32[4,4]"), std::string::npos)
      << e[1].reason;
}

// The input that changed is named as the caller wrote it: its argument and the leaf's path.
TEST_F(JitTest, NewShapeNamesTheArgumentAndLeaf) {
  auto a = jit();
  auto f = compile(
      "named",
      [](const NamedTensors& p, const Tensor& x) { return sum(p.at("w") * x) + sum(p.at("b")); },
      {a});
  f(NamedTensors{{"b", f32({2}, 1)}, {"w", f32({4}, 1)}}, f32({4}, 1));
  f(NamedTensors{{"b", f32({3}, 1)}, {"w", f32({4}, 1)}}, f32({4}, 1));
  f(NamedTensors{{"b", f32({3}, 1)}, {"w", f32({6}, 1)}}, f32({6}, 1));
  std::vector<diag::CompileEvent> e = a->log().events();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_NE(e[1].reason.find("input 0 (argument 0 leaf 'b') shape f32[2] -> f32[3]"),
            std::string::npos)
      << e[1].reason;
  EXPECT_NE(e[2].reason.find("input 1 (argument 0 leaf 'w') shape f32[4] -> f32[6]"),
            std::string::npos)
      << e[2].reason;
  // Named arguments (CompileOptions::argument_names) are called by their names.
  CompileOptions named{a};
  named.argument_names = {"params"};
  auto g = compile(
      "named2", [](const NamedTensors& p, const Tensor& x) { return sum(p.at("w")) + sum(x); },
      named);
  g(NamedTensors{{"w", f32({4}, 1)}}, f32({4}, 1));
  g(NamedTensors{{"w", f32({4}, 1)}}, f32({2}, 1));
  e = a->log().events();
  ASSERT_EQ(e.size(), 5u);
  EXPECT_NE(e[4].reason.find("input 1 (argument 1) shape f32[4] -> f32[2]"), std::string::npos)
      << e[4].reason;
  g(NamedTensors{{"w", f32({2}, 1)}}, f32({2}, 1));
  e = a->log().events();
  ASSERT_EQ(e.size(), 6u);
  EXPECT_NE(e[5].reason.find("input 0 (params leaf 'w') shape f32[4] -> f32[2]"), std::string::npos)
      << e[5].reason;
}

TEST_F(JitTest, NamedListElementsAreCalledByTheirNames) {
  // CompileOptions::element_names: "batch leaf 'targets'", not "batch leaf '[1]'"; elements past
  // the names keep their positions.
  auto a = jit();
  CompileOptions o{a};
  o.argument_names = {"batch"};
  o.element_names[0] = {"tokens", "targets"};
  auto f = compile(
      "listed",
      [](const std::vector<Tensor>& b) {
        Tensor total = sum(b[0]);
        for (size_t i = 1; i < b.size(); ++i) total = total + sum(b[i]);
        return total;
      },
      o);
  f(std::vector<Tensor>{f32({2}, 1), f32({2}, 1), f32({2}, 1)});
  f(std::vector<Tensor>{f32({2}, 1), f32({3}, 1), f32({2}, 1)});
  f(std::vector<Tensor>{f32({2}, 1), f32({3}, 1), f32({4}, 1)});
  const auto e = a->log().events();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_NE(e[1].reason.find("input 1 (batch leaf 'targets') shape f32[2] -> f32[3]"),
            std::string::npos)
      << e[1].reason;
  EXPECT_NE(e[2].reason.find("input 2 (batch leaf '[2]') shape f32[2] -> f32[4]"),
            std::string::npos)
      << e[2].reason;
}

TEST_F(JitTest, ChangedConstantAcrossRestartNamesItsLine) {
  int line = 0;
  auto make = [&](double c, std::shared_ptr<Jit> ex) {
    return compile("scale",
                   [&line, c](const Tensor& x) {
                     line = __LINE__ + 1;
                     return x * c;
                   },
                   {ex});
  };
  make(2.0, jit())(f32({3}, 1));
  auto b = jit();
  make(3.0, b)(f32({3}, 1));
  std::vector<diag::CompileEvent> e = b->log().events();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].tier, "compiled");
  EXPECT_NE(e[0].reason.find("runtime_test.cpp:" + std::to_string(line)), std::string::npos)
      << e[0].reason;
  EXPECT_NE(e[0].reason.find("2 -> 3"), std::string::npos) << e[0].reason;
}

// A neighbouring entry whose manifest was edited to name this function (its graph text names
// another) costs only the explanation: the miss still compiles.
TEST_F(JitTest, AnEditedNeighbourOnlyCostsTheExplanation) {
  auto a = jit();
  compile("scale", [](const Tensor& x) { return x * 2.0; }, {a})(f32({3}, 1));
  compile("shift", [](const Tensor& x) { return x + 1.0; }, {a})(f32({3}, 1));  // the newest
  int edited = 0;
  for (const auto& e : fs::directory_iterator(root_ / "cache/v1/entries")) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"function\": \"shift\"");
    if (at == std::string::npos) continue;
    std::string changed = text;
    changed.replace(at, 19, "\"function\": \"scale\"");
    std::ofstream(e.path()) << changed;
    ++edited;
  }
  ASSERT_EQ(edited, 1);
  auto b = jit();
  compile("scale", [](const Tensor& x) { return x * 3.0; }, {b})(f32({3}, 1));
  const std::vector<diag::CompileEvent> e = b->log().events();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].tier, "compiled");
}

// Contract 7 in user code: the guard counts the function's own calls, so no host step is needed.
// Ten calls, then a new shape: strict refuses naming the input that changed and where the
// function was defined; the refused program never runs and is not kept.
TEST_F(JitTest, StrictShapeGuardRefusesANewProgramAfterTheFunctionsWarmup) {
  auto a = jit(runtime::GuardMode::strict);
  const int line = __LINE__ + 1;
  auto f = compile("g", [](const Tensor& x) { return x + 1.0; }, {a});
  for (int i = 0; i < 10; ++i) f(f32({2}, static_cast<float>(i)));
  try {
    f(f32({3}, 1));
    FAIL() << "expected the shape guard to refuse";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[shape_guard] new program for 'g'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("runtime_test.cpp:" + std::to_string(line)), std::string::npos) << msg;
    EXPECT_NE(msg.find("at its call 10"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input 0 (argument 0) shape f32[2] -> f32[3]"), std::string::npos) << msg;
  }
  EXPECT_EQ(f.programs().size(), 1u);
  EXPECT_EQ(a->log().totals().compiles, 1);
}

// A function re-created with keel::compile on every call (a lambda built in the loop) is one
// function to the guard: its name's calls and programs count, so a new shape after warm-up is
// refused as it is for one function object; the same shape again only costs a memory hit.
TEST_F(JitTest, StrictShapeGuardCountsAFunctionReCreatedInALoopAsOne) {
  auto a = jit(runtime::GuardMode::strict);
  auto make = [&] { return compile("g", [](const Tensor& x) { return x + 1.0; }, {a}); };
  for (int i = 0; i < 10; ++i) make()(f32({2}, static_cast<float>(i)));
  EXPECT_EQ(a->log().totals().compiles, 1);
  try {
    make()(f32({3}, 1));
    FAIL() << "expected the shape guard to refuse";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[shape_guard] new program for 'g'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at its call 10"), std::string::npos) << msg;
  }
  EXPECT_EQ(a->log().totals().compiles, 1);
}

// Warn admits the program with one explanation line and the compile log records the call it
// happened at; a second function's first program, however late, is never a violation.
TEST_F(JitTest, WarnShapeGuardExplainsAndALateFirstProgramIsNoViolation) {
  auto a = jit(runtime::GuardMode::warn);
  auto f = compile("g", [](const Tensor& x) { return x * 2.0; }, {a});
  auto late = compile("eval", [](const Tensor& x) { return sum(x); }, {a});
  for (int i = 0; i < 10; ++i) f(f32({2}, 1));
  testing::internal::CaptureStderr();
  late(f32({5}, 1));  // first program of 'eval' after f's warm-up
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  testing::internal::CaptureStderr();
  EXPECT_EQ(f(f32({4}, 1)).shape(), (Shape{4}));
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("[shape_guard] new program for 'g'"), std::string::npos) << warned;
  EXPECT_NE(warned.find("input 0 (argument 0) shape f32[2] -> f32[4]"), std::string::npos)
      << warned;
  EXPECT_EQ(std::count(warned.begin(), warned.end(), '\n'), 1) << warned;
  std::vector<diag::CompileEvent> e =
      diag::read_compile_log((root_ / "run/compiles.jsonl").string());
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].call, 0);
  EXPECT_EQ(e[1].function, "eval");
  EXPECT_EQ(e[1].call, 0);
  EXPECT_EQ(e[2].call, 10);
  EXPECT_EQ(e[2].step, 10);  // no host step declared: the function's own
  a->set_step(123);          // a training loop declares its step; the log records it
  f(f32({7}, 1));
  EXPECT_EQ(a->log().events().back().step, 123);
  EXPECT_EQ(a->log().events().back().call, 11);
}

TEST_F(JitTest, ForbidCompileProvesTheCacheIsWarm) {
  auto fn = [](const Tensor& x) { return tanh(x); };
  compile("h", fn, {jit()})(f32({2}, 0.5));
  EXPECT_NO_THROW(compile("h", fn, {jit(runtime::GuardMode::warn, true)})(f32({2}, 0.5)));
  EXPECT_THROW(compile("h", fn, {jit(runtime::GuardMode::warn, true)})(f32({5}, 0.5)), Error);
}

// Issue 16: every program a run prepares is recorded; prewarming from the records into another
// cache gives the very keys the run used, and a sealed cache then serves the run without a
// compile, while a program it lacks stops with its signature and the reason.
TEST_F(JitTest, RecordedProgramsPrewarmACacheThatASealedRunUsesAlone) {
  auto fn = [](const Tensor& x) { return exp(x) * 3.0; };
  auto a = jit();
  compile("f", fn, {a})(f32({2, 3}, 0.5));
  compile("f", fn, {a})(f32({4}, 0.5));
  const std::vector<runtime::ProgramRecord> records =
      runtime::read_program_records((root_ / "run").string());
  ASSERT_EQ(records.size(), 2u);
  std::set<std::string> logged;
  for (const diag::CompileEvent& e : a->log().events()) logged.insert(e.key);

  runtime::JitConfig c;
  c.client = ref::make_ref_client();
  c.cache.dir = (root_ / "prewarmed").string();
  runtime::CachedJit warm(c);
  std::set<std::string> prewarmed;
  for (const runtime::PrewarmResult& r : runtime::prewarm_programs(warm, records)) {
    EXPECT_EQ(r.tier, "compiled");
    EXPECT_EQ(r.key, r.record.key);
    prewarmed.insert(r.key);
  }
  EXPECT_EQ(prewarmed, logged);
  EXPECT_EQ(runtime::prewarm_programs(warm, records)[0].tier, "memory");

  c.cache.mode = cache::Mode::sealed;
  auto sealed = std::make_shared<runtime::CachedJit>(c);
  EXPECT_NEAR(compile("f", fn, {sealed})(f32({4}, 0.0)).to_f32()[0], 3.0f, 1e-6);
  EXPECT_EQ(sealed->log().totals().compiles, 0);
  try {
    compile("f", fn, {sealed})(f32({5}, 0.0));
    FAIL() << "a sealed cache compiled";
  } catch (const cache::SealedMiss& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("sealed cache has no entry for 'f' with inputs (f32[5]"), std::string::npos)
        << m;
    EXPECT_NE(m.find("needed a new program because: input 0 (argument 0) shape"), std::string::npos)
        << m;
    EXPECT_NE(m.find("runtime_test.cpp"), std::string::npos) << m;  // where f was defined
  }
}

TEST_F(JitTest, ProgramRecordsThatAreMissingOrDamagedAreOneLine) {
  EXPECT_THROW(runtime::read_program_records((root_ / "none").string()), InputError);
  fs::create_directories(root_ / "run/programs");
  EXPECT_THROW(runtime::read_program_records((root_ / "run").string()), InputError);
  std::ofstream(root_ / "run/programs/k.json") << "{\"function\": \"f\", \"key\": 3}";
  try {
    runtime::read_program_records((root_ / "run").string());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("k.json: field \"key\" is missing or not a string"),
              std::string::npos)
        << e.what();
  }
}

// The policy key names exactly the passes lower() runs, in their order.
TEST(PolicyPasses, DisablePassesAllowsEveryPassByName) {
  const policy::KeySpec* k = policy::find_key("passes.disable");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->allowed, passes::pass_names());
}

// Launch policy reaches the compiler: passes switched off and dumped from codegen keys.
TEST_F(JitTest, PassesAreSwitchedOffAndDumpedFromThePolicy) {
  fs::path dump = root_ / "dump";
  policy::PolicySources s;
  s.sets = {"passes.disable=cse,fuse", "passes.dump=true", "diag.dump_dir=" + dump.string()};
  backend::CompileOptions o = runtime::compile_options_from(policy::resolve_policy(s));
  EXPECT_EQ(cpu::settings_of(o).flags.front(), "-O2");
  auto a = jit(runtime::GuardMode::warn, false, cpu::make_cpu_client(), o);
  EXPECT_EQ(compile("d", [](const Tensor& x) { return x * x + x * x; }, {a})(f32({2}, 3)).to_f32(),
            (std::vector<float>{18, 18}));
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dump / "passes")) {
    files.insert(e.path().filename().string());
  }
  EXPECT_TRUE(files.count("d.1.canonicalize.txt")) << files.size();
  EXPECT_FALSE(files.count("d.3.cse.txt"));            // switched off: nothing to dump
  EXPECT_FALSE(files.count("d.2.bf16_operands.txt"));  // f32 matmuls: not run
  EXPECT_TRUE(files.count("d.8.fuse.txt"));
  EXPECT_TRUE(files.count("d.cpp"));  // the generated source is kept beside the dumps
}

// The settings that change generated code change the key; the others do not.
TEST_F(JitTest, CodegenPolicyIsInTheKeyAndOtherPolicyIsNot) {
  Graph g("k");
  NodeId x = g.add_param({DType::f32, {4}});
  g.set_outputs({g.emit(Op::tanh, {x}, {}, {})});
  auto key_with = [&](std::vector<std::string> sets) {
    policy::PolicySources s;
    s.sets = std::move(sets);
    policy::LaunchPolicy p = policy::resolve_policy(s);
    return jit(runtime::GuardMode::warn, false, cpu::make_cpu_client(),
               runtime::compile_options_from(p))
        ->key_for(g)
        .hex();
  };
  std::string base = key_with({});
  EXPECT_EQ(key_with({"diag.log_level=debug", "launch.seed=4", "shape_guard.mode=strict"}), base);
  // Deadlines reach the compiler and the cache but change no code, so no key.
  policy::PolicySources deadlines;
  deadlines.sets = {"cpu.compile_timeout_s=5", "compile_cache.lock_timeout_s=7"};
  EXPECT_EQ(cpu::settings_of(runtime::compile_options_from(policy::resolve_policy(deadlines)))
                .compile_timeout_s,
            5);
  EXPECT_EQ(runtime::cache_config_from(policy::resolve_policy(deadlines)).lock_timeout_s, 7);
  EXPECT_EQ(key_with(deadlines.sets), base);
  EXPECT_NE(key_with({"cpu.opt_level=1"}), base);
  EXPECT_NE(key_with({"cpu.flags=-march=x86-64,-fopenmp"}), base);
  EXPECT_NE(key_with({"passes.disable=fuse"}), base);
  EXPECT_NE(key_with({"cpu.compiler=clang++"}), base);
  EXPECT_NE(key_with({"cpu.matmul_precision=bf16"}), base);
  EXPECT_EQ(key_with({"cpu.matmul_precision=f32"}), base);
  // The same codegen settings from a profile, the environment or --set: the same key.
  EXPECT_EQ(key_with({"cpu.opt_level=2"}), base);
  // cpu.blas reaches the key through the bundle (one BLAS per process, so compare bundles).
  policy::PolicySources other;
  other.sets = {"cpu.blas=libnot-a-blas.so.0"};
  EXPECT_NE(launch_bundle(policy::resolve_policy(other)).hash(),
            launch_bundle(policy::resolve_policy({})).hash());
  // Every key the schema marks as changing generated code is one of the cases above.
  std::set<std::string> marked;
  for (const policy::KeySpec& k : policy::policy_schema()) {
    if (k.codegen) marked.insert(k.name());
  }
  std::set<std::string> expected{"cpu.blas",  "cpu.compiler",         "passes.disable",
                                 "cpu.flags", "cpu.matmul_precision", "cpu.opt_level"};
  if (policy::find_key("cuda", "arch")) {  // where CUDA is built: the CUDA backend's
    expected.insert(
        {"cuda.arch", "cuda.matmul_precision", "cuda.product_addends", "cuda.gelu_epilogues"});
  }
  EXPECT_EQ(marked, expected);
}

// A bundle field that changes (another compiler, BLAS, CPU, keel revision) changes the key.
TEST_F(JitTest, BundleChangesChangeTheKey) {
  cache::KeyParts parts;
  parts.function = "f";
  parts.signature = "f32[4]";
  parts.graph = hash_bytes("graph");
  parts.bundle = policy::detect_bundle("c++", "g++ 12", {"-O2"}, {{"blas", "OpenBLAS 0.3.21"}});
  parts.codegen = "c";
  parts.platform = "cpu";
  const Hash128 base = parts.key();
  for (const char* field :
       {"blas", "compiler.version", "compiler.flags", "host.cpu_features", "keel.revision", "os"}) {
    ASSERT_TRUE(parts.bundle.fields.count(field)) << field;  // a stale name would pass below
    cache::KeyParts other = parts;
    other.bundle.fields[field] += " (other)";
    EXPECT_NE(other.key(), base) << field;
  }
}

std::string worker_path(const std::string& name) {
  return std::string(KEEL_BINARY_DIR) + "/tests/" + name;
}

// Line of `marker` in tests/startup_worker.cpp, so errors are checked to name the exact line.
int marker_line(const std::string& marker) {
  std::ifstream in(std::string(KEEL_SOURCE_DIR) + "/tests/startup_worker.cpp");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find("// marker:" + marker) != std::string::npos) return n;
  }
  return -1;
}

testing_support::CommandResult startup(const std::string& scenario) {
  return testing_support::run_command(worker_path("startup_worker") + " " + scenario + " 2>&1");
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(StartupContract, TensorBeforeInitNamesTheLineTheRuleAndTheFix) {
  auto r = startup("tensor-before-init");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "[runtime] tensor created at ")) << r.output;
  EXPECT_TRUE(has(r.output, "startup_worker.cpp:" + std::to_string(marker_line("before-init")) +
                                " before keel::Runtime::init"))
      << r.output;
  EXPECT_TRUE(has(r.output, "fix: create the keel::Runtime first thing in main")) << r.output;
  auto s = startup("scalar-before-init");
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_TRUE(has(s.output, "before keel::Runtime::init")) << s.output;
}

TEST(StartupContract, PhasesGoUninitialisedInitialisedRunningAndBack) {
  auto r = startup("lifecycle");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "uninitialised\ninitialised\nrunning\nuninitialised\nok\n");
}

TEST(StartupContract, PolicyChangesAfterInitAreErrors) {
  auto r = startup("policy-after-init");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "[runtime] policy change 'cpu.opt_level=3'")) << r.output;
  EXPECT_TRUE(has(r.output, "fix: pass --set cpu.opt_level=3 or KEEL_CPU_OPT_LEVEL")) << r.output;
  auto e = startup("env-after-init");
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_TRUE(has(e.output,
                  "[runtime] KEEL_CPU_OPT_LEVEL changed after Runtime::init "
                  "(unset -> \"3\"); it would be silently ignored"))
      << e.output;
  // In this process: the runtime's policy is frozen.
  EXPECT_TRUE(Runtime::current().policy().frozen());
  EXPECT_THROW(Runtime::current().update_policy("launch.seed=1"), Error);
}

TEST(StartupContract, SpmdAndMeshChangesOnlyBeforeTensors) {
  auto ok = startup("spmd-before-tensors");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(ok.output, "data=1,model=1 1\nok\n");
  auto late = startup("spmd-after-tensors");
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_TRUE(has(late.output, "[runtime] enable_spmd at ")) << late.output;
  EXPECT_TRUE(has(late.output, "after tensors exist (the first was created at ")) << late.output;
  EXPECT_TRUE(has(late.output, "startup_worker.cpp:" + std::to_string(marker_line("first-tensor"))))
      << late.output;
  auto mesh = startup("mesh-after-tensors");
  EXPECT_EQ(mesh.exit_code, 1);
  EXPECT_TRUE(has(mesh.output, "[runtime] set_mesh at ")) << mesh.output;
  auto big = startup("mesh-too-big");
  EXPECT_EQ(big.exit_code, 1);
  EXPECT_TRUE(has(big.output, "mesh data=4 has 4 devices but this launch has 1 process(es)"))
      << big.output;
}

TEST(StartupContract, OneRuntimePerProcess) {
  auto r = startup("two-runtimes");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "while another is alive; rule: one runtime per process")) << r.output;
}

TEST(StartupContract, UnavailableFeaturesWarnOrFailPerPolicy) {
  auto warn = startup("feature-warn");
  EXPECT_EQ(warn.exit_code, 0) << warn.output;
  EXPECT_TRUE(has(warn.output, "[features] bf16_matmul is unavailable")) << warn.output;
  EXPECT_TRUE(has(warn.output, "falling back to: cpu.matmul_precision = f32")) << warn.output;
  EXPECT_TRUE(has(warn.output, "fallbacks 1")) << warn.output;
  auto error = startup("feature-error");
  EXPECT_EQ(error.exit_code, 1);
  EXPECT_TRUE(has(error.output, "features.on_unavailable = error")) << error.output;
}

TEST(StartupContract, MemoryBudgetRefusesAProgramBeforeItRuns) {
  auto r = startup("memory-budget");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "[jit] program 'big' is predicted to need")) << r.output;
  EXPECT_TRUE(has(r.output, "launch.memory_budget_bytes is 64")) << r.output;
}

const runtime::ProbeCheck& check_named(const runtime::ProbeReport& r, const std::string& name) {
  for (const runtime::ProbeCheck& c : r.checks) {
    if (c.name == name) return c;
  }
  static const runtime::ProbeCheck none("(no check named " + name + ")", runtime::ProbeStatus::skip,
                                        "", "");
  ADD_FAILURE() << "no probe check named " << name;
  return none;
}

// Every registered backend is probed, the launch's first: installed, then compiled and checked
// against the interpreter, then reloaded; then the launch as a whole.
TEST(Probe, HealthySetupPassesEveryCheck) {
  fs::path dir = fs::temp_directory_path() / ("keel-probe-" + std::to_string(getpid()));
  policy::PolicySources s;
  s.sets = {"compile_cache.dir=" + dir.string()};
  runtime::ProbeReport r = runtime::run_probe(policy::resolve_policy(s));
  fs::remove_all(dir);
  std::vector<std::string> names;
  for (const runtime::ProbeCheck& c : r.checks) {
    names.push_back(c.name);
    // A backend this machine cannot run (cuda without a GPU) is probed, not required.
    const backend::BackendSpec* spec =
        c.backend.empty() ? nullptr : &backend::find_backend(c.backend);
    if (spec && spec->unavailable_here &&
        !spec->unavailable_here(policy::resolve_policy(s)).empty()) {
      continue;
    }
    EXPECT_EQ(c.status, runtime::ProbeStatus::pass) << c.name << ": " << c.detail;
  }
  const std::vector<std::string> first = {"cpu.compiler", "cpu.blas", "cpu.compile_run",
                                          "cpu.warm_restart"};
  ASSERT_GE(names.size(), 8u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 4), first);
  EXPECT_EQ(names[names.size() - 2], "openmp");
  EXPECT_EQ(names.back(), "cache_dir");
  EXPECT_EQ(check_named(r, "ref.compile_run").backend, "ref");
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(has(r.text(), "backend cpu (launch.backend): ")) << r.text();
  EXPECT_TRUE(has(r.text(), "backend ref (registered; not this launch's): ")) << r.text();
  EXPECT_TRUE(has(r.text(), "probe: alive")) << r.text();
  EXPECT_TRUE(has(check_named(r, "cpu.blas").detail, "GFLOP/s"));
  EXPECT_TRUE(has(r.json(), "\"launch_backend\": \"cpu\"")) << r.json();
}

TEST(Probe, BrokenCompilerFailsAndSkipsWhatNeedsIt) {
  policy::PolicySources s;
  s.sets = {"cpu.compiler=/nonexistent/c++", "compile_cache.mode=off"};
  runtime::ProbeReport r = runtime::run_probe(policy::resolve_policy(s));
  EXPECT_FALSE(r.ok());
  const runtime::ProbeCheck& compiler = check_named(r, "cpu.compiler");
  EXPECT_EQ(compiler.status, runtime::ProbeStatus::fail);
  EXPECT_TRUE(has(compiler.detail, "'/nonexistent/c++' (cpu.compiler) not found"));
  EXPECT_TRUE(has(compiler.next, "install g++"));
  const runtime::ProbeCheck& compiled = check_named(r, "cpu.compile_run");
  EXPECT_EQ(compiled.status, runtime::ProbeStatus::skip);
  EXPECT_TRUE(has(compiled.detail, "compiler failed")) << compiled.detail;
  EXPECT_EQ(check_named(r, "cache_dir").status, runtime::ProbeStatus::skip);  // off: said
  EXPECT_TRUE(has(r.json(), "\"status\": \"FAIL\"")) << r.json();
}

// The launch's backend must be alive; another registered one is reported, not required.
TEST(Probe, OnlyTheLaunchsBackendCanFailTheProbe) {
  policy::PolicySources s;
  s.sets = {"cpu.compiler=/nonexistent/c++", "compile_cache.mode=off", "launch.backend=ref"};
  runtime::ProbeReport r = runtime::run_probe(policy::resolve_policy(s));
  EXPECT_EQ(r.checks.front().name, "ref.compile_run");
  EXPECT_EQ(check_named(r, "cpu.compiler").status, runtime::ProbeStatus::fail);
  EXPECT_TRUE(r.ok()) << r.text();
  EXPECT_TRUE(has(r.text(), "backend cpu (registered; not this launch's)")) << r.text();
}

TEST(Probe, UnsafeCacheDirectoryFails) {
  fs::path dir = fs::temp_directory_path() / ("keel-probe-open-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::all);
  policy::PolicySources s;
  s.sets = {"compile_cache.dir=" + dir.string()};
  runtime::ProbeReport r = runtime::run_probe(policy::resolve_policy(s));
  fs::remove_all(dir);
  EXPECT_FALSE(r.ok());
  const runtime::ProbeCheck& c = check_named(r, "cache_dir");
  EXPECT_EQ(c.status, runtime::ProbeStatus::fail);
  EXPECT_TRUE(has(c.detail, "is writable by others (mode 0777)")) << c.detail;
  EXPECT_TRUE(has(c.next, "chmod 700")) << c.next;
}

TEST(Probe, ReadOnlyCacheThatDoesNotExistFails) {
  policy::PolicySources s;
  s.sets = {"compile_cache.dir=/nonexistent/keel-cache", "compile_cache.mode=readonly"};
  runtime::ProbeReport r = runtime::run_probe(policy::resolve_policy(s));
  const runtime::ProbeCheck& c = check_named(r, "cache_dir");
  EXPECT_EQ(c.status, runtime::ProbeStatus::fail);
  EXPECT_TRUE(has(c.detail, "never creates it")) << c.detail;
}

// The lowering's options come from passes.*, the rest from the backend the options are for: the
// CPU's settings from cpu.*, none for the interpreter (so its fingerprint names no compiler).
TEST(PolicyConfig, EachBackendAddsItsOwnCompileSettings) {
  policy::PolicySources s;
  s.sets = {"launch.backend=ref", "cpu.opt_level=1", "passes.disable=cse"};
  const policy::LaunchPolicy p = policy::resolve_policy(s);
  const backend::CompileOptions ref = runtime::compile_options_from(p);
  EXPECT_EQ(ref.backend_settings, nullptr);
  EXPECT_EQ(ref.passes.disabled, (std::set<std::string>{"cse"}));
  EXPECT_FALSE(has(ref.fingerprint(), "compiler=")) << ref.fingerprint();
  const backend::CompileOptions on_cpu = runtime::compile_options_for(p, "cpu");
  ASSERT_NE(on_cpu.backend_settings, nullptr);
  EXPECT_EQ(cpu::settings_of(on_cpu).flags.front(), "-O1");
  EXPECT_EQ(on_cpu.passes.disabled, ref.passes.disabled);
  EXPECT_TRUE(has(on_cpu.fingerprint(), "compiler=\"c++\";flags=[\"-O1\","))
      << on_cpu.fingerprint();
}

// Each backend declares its own settings and registers them while the program starts: the
// schema's cpu.* keys are exactly cpu's, launch.backend's values are the registered backends,
// and a registration once the schema is read, twice, or of another group's keys is refused.
TEST(BackendRegistry, EachBackendOwnsItsPolicyGroupAndLaunchBackendNamesThem) {
  // cuda is registered where the CUDA toolkit was found at build time (KEEL_CUDA).
  const bool cuda = policy::find_key("cuda", "arch") != nullptr;
  std::vector<std::string> expected{"cpu", "ref"};
  if (cuda) expected.push_back("cuda");
  EXPECT_EQ(policy::policy_backends(), expected);
  const policy::KeySpec* choice = policy::find_key("launch.backend");
  ASSERT_NE(choice, nullptr);
  EXPECT_EQ(choice->allowed, policy::policy_backends());
  EXPECT_EQ(std::get<std::string>(choice->fallback), "cpu");
  EXPECT_EQ(choice->doc, std::string("cpu: compiled C++; ref: the reference interpreter") +
                             (cuda ? "; cuda: NVIDIA GPUs through CUDA" : ""));
  std::vector<std::string> in_schema, declared;
  for (const policy::KeySpec& k : policy::policy_schema()) {
    if (k.group == "cpu") in_schema.push_back(k.name());
    EXPECT_NE(k.group, "ref") << k.name();  // ref has no settings of its own
  }
  for (const policy::KeySpec& k : cpu::policy_keys().keys) declared.push_back(k.name());
  EXPECT_EQ(in_schema, declared);
  EXPECT_EQ(declared.size(), 6u);
  // Every backend a launch can choose is one the registry can make.
  for (const std::string& name : policy::policy_backends()) {
    EXPECT_NO_THROW(backend::find_backend(name)) << name;
  }

  // The refusal's message; "" when the registration was taken (a failure here).
  auto refusal = [](policy::BackendKeys keys) -> std::string {
    try {
      policy::register_backend_keys(std::move(keys));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  policy::BackendKeys late{"late", "a backend registered too late", {}, {}, {}};
  late.keys.push_back(policy::make_integer("late", "threads", 1, 1, 8, "threads"));
  std::string why = refusal(late);
  EXPECT_TRUE(has(why,
                  "[policy] backend 'late' registered its policy keys after the launch "
                  "policy's schema was read"))
      << why;
  EXPECT_EQ(policy::find_key("late.threads"), nullptr);
  why = refusal({"late", "", {policy::make_integer("cpu", "threads", 1, 1, 8, "")}, {}, {}});
  EXPECT_TRUE(has(why,
                  "backend 'late' registered cpu.threads: a backend's keys are in its "
                  "own group (late.*)"))
      << why;
  why = refusal(cpu::policy_keys());
  EXPECT_TRUE(has(why, "[policy] backend 'cpu' registered its policy keys twice")) << why;
  for (const char* bad : {"", "Cpu", "launch", "compile", "spmd_x"}) {
    EXPECT_THROW(policy::register_backend_keys({bad, "", {}, {}, {}}), Error) << bad;
  }
  policy::BackendKeys repeated{
      "late", "", {policy::make_integer("late", "n", 1, 1, 8, "")}, {}, {}};
  repeated.keys.push_back(repeated.keys.front());
  why = refusal(repeated);
  EXPECT_TRUE(has(why, "registered late.n twice")) << why;
  // A former name is a "group.key" no key has and no other rename claims, and the new one a key
  // the backend registers; a rename within its own group is one (launch.barrier_every_n_layers).
  for (const auto& [before, what] : std::map<std::string, std::string>{
           {"codegen", "a former name is a \"group.key\""},
           {"late.n", "but late.n is a key (the policy's or this backend's)"},
           {"launch.seed", "but launch.seed is a key (the policy's or this backend's)"},
           {"codegen.flags", "but codegen.flags is already renamed"},
           {"codegen.dump_passes", "but codegen.dump_passes is already renamed"}}) {
    policy::BackendKeys moved{"late", "", {policy::make_integer("late", "n", 1, 1, 8, "")}, {}, {}};
    moved.renamed[before] = "late.n";
    why = refusal(moved);
    EXPECT_TRUE(has(why, fmt::format("[policy] backend 'late' renamed {} to late.n", before)) &&
                has(why, what))
        << why;
  }
  // Nor may a backend register a key under a name renamed before (backend "codegen": a free
  // group name since the CPU's keys moved to cpu.*).
  why = refusal({"codegen", "", {policy::make_integer("codegen", "flags", 1, 1, 8, "")}, {}, {}});
  EXPECT_TRUE(
      has(why, "[policy] backend 'codegen' registered codegen.flags, a name renamed before"))
      << why;
  policy::BackendKeys unknown{"late", "", {policy::make_integer("late", "n", 1, 1, 8, "")}, {}, {}};
  unknown.renamed["codegen.n"] = "late.m";
  why = refusal(unknown);
  EXPECT_TRUE(has(why, "and the new one a key the backend registers")) << why;
  policy::BackendKeys own{"late", "", {policy::make_integer("late", "n", 1, 1, 8, "")}, {}, {}};
  own.renamed["late.old"] = "late.n";  // free: refused only because the schema is fixed by now
  why = refusal(own);
  EXPECT_TRUE(has(why, "after the launch policy's schema was read")) << why;
  // The CPU's former codegen.* names are its own renames, refused naming the new key.
  EXPECT_EQ(policy::renamed_keys().at("codegen.opt_level"), "cpu.opt_level");
  EXPECT_EQ(cpu::policy_keys().renamed.at("codegen.blas"), "cpu.blas");
  // A backend's policy group is the name it registered its keys under.
  const auto& groups = policy::policy_groups();
  EXPECT_NE(std::find(groups.begin(), groups.end(), "cpu"), groups.end());
  // The CPU's compile settings from a default launch are its defaults, so a compile without any
  // (runtime::CachedJit fills them from the client) has the same key.
  EXPECT_EQ(cpu::settings_from(policy::resolve_policy({}))->fingerprint(),
            cpu::Settings{}.fingerprint());
  EXPECT_EQ(cpu::make_cpu_client()->default_settings()->fingerprint(),
            cpu::Settings{}.fingerprint());
}

// Backends are found by name; an unknown one is one error naming those there are; a name is
// registered once; a backend registered at run time is probed and listed like the built-in ones.
TEST(BackendRegistry, FindsBackendsByNameAndListsThem) {
  const std::vector<std::string> names = registered_backend_names();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "cpu");
  EXPECT_EQ(names[1], "ref");
  // A backend's own settings are the policy group of its name: cpu has one, ref none.
  const auto& groups = policy::policy_groups();
  EXPECT_NE(std::find(groups.begin(), groups.end(), "cpu"), groups.end());
  EXPECT_EQ(std::find(groups.begin(), groups.end(), "ref"), groups.end());
  try {
    backend::find_backend("tpu");
    ADD_FAILURE() << "an unknown backend was found";
  } catch (const InputError& e) {
    EXPECT_TRUE(
        has(e.what(), "[backend] no backend named 'tpu' is registered (registered: cpu, ref"))
        << e.what();
  }
  EXPECT_THROW(backend::register_backend(backend::find_backend("ref")), Error);
  backend::BackendSpec fake = backend::find_backend("ref");
  fake.name = "fake";
  fake.summary = "a backend whose device is missing";
  fake.installation_checks = [](const policy::LaunchPolicy&) {
    return std::vector<backend::Check>{
        {"device", backend::CheckStatus::fail, "no device", "lend one"}};
  };
  backend::register_backend(fake);
  EXPECT_EQ(registered_backend_names().back(), "fake");
  policy::PolicySources s;
  s.sets = {"compile_cache.mode=off"};
  const runtime::ProbeReport r = runtime::run_probe(policy::resolve_policy(s));
  EXPECT_EQ(check_named(r, "fake.device").status, runtime::ProbeStatus::fail);
  EXPECT_EQ(check_named(r, "fake.compile_run").status, runtime::ProbeStatus::skip);
  EXPECT_TRUE(r.ok()) << r.text();
  bool listed = false;
  for (const policy::Feature& f : backend_features(policy::resolve_policy(s))) {
    listed = listed || (f.name == "backend.fake" && f.available);
  }
  EXPECT_TRUE(listed);
}

// Each backend names the lowering it runs, and keel features lists it: the CPU backend's list is
// what its compile runs (cpu::lower's log, pass by pass), the interpreter runs the graph as traced.
TEST(Backends, EachNamesTheLoweringItRuns) {
  registered_backend_names();
  const backend::BackendSpec& cpu_spec = backend::find_backend("cpu");
  EXPECT_TRUE(backend::find_backend("ref").passes.empty());
  Graph g("lowering");
  const NodeId x = g.add_param({DType::f32, {4, 8}});
  g.add_output(g.emit(
      Op::tanh, {g.emit(Op::transpose, {x}, {{"perm", std::vector<int64_t>{1, 0}}}, {})}, {}, {}));
  const passes::Lowered l = cpu::lower(g);
  ASSERT_EQ(l.log.size(), cpu_spec.passes.size());
  for (size_t i = 0; i < l.log.size(); ++i) {
    EXPECT_EQ(l.log[i].rfind(cpu_spec.passes[i] + ":", 0), 0u) << l.log[i];
  }
  EXPECT_EQ(l.options.target.name, "cpu");
  EXPECT_EQ(l.log[6], "fold_layout: 1 layout ops read in place");  // the CPU's loops read strides
  policy::PolicySources s;
  s.sets = {"compile_cache.mode=off"};
  std::map<std::string, std::string> why;
  for (const policy::Feature& f : backend_features(policy::resolve_policy(s))) why[f.name] = f.why;
  EXPECT_TRUE(has(why["backend.cpu"],
                  "(settings: [cpu]; lowering: canonicalize, bf16_operands, "
                  "cse, dce, recompute_elementwise, place_collectives, fold_layout, fuse, "
                  "concat_in_place, plan_memory)"))
      << why["backend.cpu"];
  EXPECT_TRUE(has(why["backend.ref"], "(runs the traced graph as it is)")) << why["backend.ref"];
}

// Each backend judges its own features from a launch's bundle and refuses the keys of its group
// this host or launch cannot honour; the runtime only asks every registered backend.
TEST(Backends, EachJudgesItsFeaturesAndRefusesKeysItCannotHonour) {
  policy::Bundle b;
  b.fields = {{"openmp", "201511"}, {"blas", "OpenBLAS 0.3.21"}, {"host.cpu_features", "avx2 fma"}};
  const std::vector<policy::Feature> t = feature_table(b);
  std::vector<std::string> names;
  for (const policy::Feature& f : t) names.push_back(f.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"openmp", "blas", "bf16_matmul", "scan_layers", "mpi"}));
  // features.request takes exactly these: each backend declares the names it judges.
  EXPECT_EQ(policy::find_key("features.request")->allowed, names);
  EXPECT_TRUE(policy::find_feature(t, "openmp").available);
  EXPECT_TRUE(policy::find_feature(t, "blas").available);
  const policy::Feature bf16 = policy::find_feature(t, "bf16_matmul");
  EXPECT_FALSE(bf16.available);
  EXPECT_TRUE(has(bf16.why, "lacks avx512_bf16 and amx_bf16 (bundle host.cpu_features)"))
      << bf16.why;
  EXPECT_TRUE(has(bf16.fallback, "f32"));
  // Both the host's flags and a oneDNN that uses them are needed.
  EXPECT_TRUE(cpu::bf16_matmul_feature("avx512f avx512_bf16", "oneDNN 2.6.3 (isa avx512_core_bf16)")
                  .available);
  EXPECT_TRUE(cpu::bf16_matmul_feature("amx_bf16", "oneDNN 2.6.3 (isa avx512_core_amx)").available);
  const policy::Feature no_lib = cpu::bf16_matmul_feature("avx512_bf16", "");
  EXPECT_FALSE(no_lib.available);
  EXPECT_TRUE(has(no_lib.why, "no oneDNN")) << no_lib.why;
  const policy::Feature capped =
      cpu::bf16_matmul_feature("avx512_bf16", "oneDNN 2.6.3 (isa avx512_core)");
  EXPECT_FALSE(capped.available);
  EXPECT_TRUE(has(capped.why, "ONEDNN_MAX_CPU_ISA")) << capped.why;
  EXPECT_FALSE(cpu::bf16_matmul_feature("avx512_bf16x avx2", "oneDNN 2.6.3 (isa avx512_core_bf16)")
                   .available);
  policy::Bundle unloaded = b;
  unloaded.fields["blas"] = "not loaded";
  EXPECT_FALSE(policy::find_feature(feature_table(unloaded), "blas").available);

  auto refusal = [](std::vector<std::string> sets, const policy::Bundle& bundle) {
    policy::PolicySources s;
    s.sets = std::move(sets);
    try {
      check_backend_keys(policy::resolve_policy(s), bundle);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(refusal({"cpu.matmul_precision=bf16", "launch.backend=ref"}, b),
            "[backend.cpu] cpu.matmul_precision = bf16 (from --set cpu.matmul_precision=bf16) "
            "needs launch.backend = cpu; the ref backend multiplies in f32; set "
            "cpu.matmul_precision = f32");
  EXPECT_TRUE(has(refusal({"cpu.matmul_precision=bf16"}, b),
                  "[backend.cpu] cpu.matmul_precision = bf16 (from --set "
                  "cpu.matmul_precision=bf16) but bf16_matmul is unavailable: the CPU lacks"));
  policy::Bundle native = b;
  native.fields["host.cpu_features"] = "avx512f avx512_bf16";
  native.fields["onednn"] = "oneDNN 2.6.3 (isa avx512_core_bf16)";
  EXPECT_EQ(refusal({"cpu.matmul_precision=bf16"}, native), "(accepted)");
  EXPECT_EQ(refusal({}, b), "(accepted)");
  EXPECT_EQ(refusal({"launch.backend=ref"}, b), "(accepted)");
  // What keel probe suggests when a backend's compiled code disagrees with the reference.
  EXPECT_EQ(backend::find_backend("cpu").miscompile_workaround, "cpu.opt_level = 0");
  EXPECT_EQ(backend::find_backend("ref").miscompile_workaround, "");
}

std::string worker_output(const std::string& platform, const fs::path& cache, const fs::path& run) {
  std::string cmd = std::string(KEEL_BINARY_DIR) + "/tests/runtime_worker " + platform + " " +
                    cache.string() + " " + run.string() + " 3 2>&1";
  testing_support::CommandResult r = testing_support::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// The "loss ..." lines only: stderr notes (e.g. waiting for another process's compile) vary.
std::string losses_of(const std::string& out) {
  std::string losses, line;
  std::istringstream in(out);
  while (std::getline(in, line)) {
    if (line.rfind("loss ", 0) == 0) losses += line + "\n";
  }
  return losses;
}

// 8 processes on one empty cache directory run the same programs at once: each program is
// compiled exactly once in total (counted from their logs) and every process gets the same
// losses, bit for bit.
TEST_F(JitTest, EightProcessesCompileEachProgramOnce) {
  const int n = 8;
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    fs::path run = root_ / ("run" + std::to_string(i));
    pid_t pid = fork();
    if (pid == 0) {
      std::string out = worker_output("cpu", root_ / "cache", run);
      std::ofstream(run.string() + ".out") << out;
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  std::map<std::string, int> compiles_per_key;
  std::set<std::string> losses;
  for (int i = 0; i < n; ++i) {
    fs::path run = root_ / ("run" + std::to_string(i));
    std::ifstream in(run.string() + ".out");
    std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_NE(out.find("compiles"), std::string::npos) << out;
    losses.insert(losses_of(out));
    for (const diag::CompileEvent& e : diag::read_compile_log((run / "compiles.jsonl").string())) {
      if (e.tier == "compiled") ++compiles_per_key[e.key];
    }
  }
  EXPECT_EQ(losses.size(), 1u);
  EXPECT_NE(*losses.begin(), "");
  ASSERT_EQ(compiles_per_key.size(), 2u);  // init and train_step
  for (const auto& [key, count] : compiles_per_key) EXPECT_EQ(count, 1) << key;
  for (const auto& entry : fs::recursive_directory_iterator(root_ / "cache")) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

// The warm restart loads the compiled executable and reproduces the cold run exactly.
TEST_F(JitTest, WarmRestartOfTheCpuBackendLoadsAndMatches) {
  std::string cold = worker_output("cpu", root_ / "cache", root_ / "cold");
  std::string warm = worker_output("cpu", root_ / "cache", root_ / "warm");
  EXPECT_NE(cold.find("compiles 2 disk_hits 0"), std::string::npos) << cold;
  EXPECT_NE(warm.find("compiles 0 disk_hits 2"), std::string::npos) << warm;
  EXPECT_EQ(losses_of(cold), losses_of(warm));
  std::string ref = worker_output("ref", root_ / "refcache", root_ / "ref");
  EXPECT_NE(losses_of(ref), "");
}

// Issue 15: "{host}" in compile_cache.dir names a directory per host on storage every host
// sees; the layout says who writes: rank 0 for a shared directory, each host's lowest rank
// for per-host ones.
TEST(CacheLayout, HostInTheDirectoryAndOneWriterPerDirectory) {
  policy::PolicySources s;
  s.sets = {"compile_cache.dir=/scratch/{host}/keel-{host}"};
  const cache::CacheConfig c = runtime::cache_config_from(policy::resolve_policy(s));
  EXPECT_EQ(c.dir, "/scratch/" + c.host + "/keel-" + c.host);
  EXPECT_FALSE(c.host.empty());
  EXPECT_EQ(c.sharing, cache::Sharing::per_host);
  s.sets = {"compile_cache.dir=/scratch/keel", "compile_cache.layout=shared"};
  EXPECT_EQ(runtime::cache_config_from(policy::resolve_policy(s)).sharing, cache::Sharing::shared);
  const std::vector<std::string> hosts = {"a", "a", "b", "b", "a"};
  std::vector<int> shared, per_host;
  for (int r = 0; r < 5; ++r) {
    shared.push_back(runtime::cache_writer_of(r, cache::Sharing::shared, hosts));
    per_host.push_back(runtime::cache_writer_of(r, cache::Sharing::per_host, hosts));
  }
  EXPECT_EQ(shared, (std::vector<int>{0, 0, 0, 0, 0}));
  EXPECT_EQ(per_host, (std::vector<int>{0, 0, 2, 2, 0}));
  // A directory per host cannot be the one directory every host shares.
  s.sets = {"compile_cache.dir=/scratch/keel-{host}", "compile_cache.layout=shared"};
  try {
    runtime::cache_config_from(policy::resolve_policy(s));
    ADD_FAILURE() << "a shared layout in a directory per host was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("[policy] compile_cache.layout = shared but "
                                         "compile_cache.dir '/scratch/keel-{host}' names a "
                                         "directory per host"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
// Threads: the policy's number wins; else the host's cores (capped by the CPU quota) shared by
// the launcher's processes there, within the affinity mask; OMP_NUM_THREADS holds for a lone
// process only.
TEST(ThreadPlan, SharesTheHostsCoresWithinTheMaskAndTheQuota) {
  files::CpuLimit sixteen{16, 0, ""};
  EXPECT_EQ(runtime::plan_threads(0, 1, sixteen, 16, 0).threads, 16);
  EXPECT_EQ(runtime::plan_threads(0, 4, sixteen, 16, 0).threads, 4);
  EXPECT_EQ(runtime::plan_threads(3, 4, sixteen, 16, 0).threads, 3);
  EXPECT_EQ(runtime::plan_threads(3, 4, sixteen, 16, 0).why, "launch.threads");
  // mpirun bound each of 2 ranks to one core of 2.
  files::CpuLimit bound{1, 0, ""};
  EXPECT_EQ(runtime::plan_threads(0, 2, bound, 2, 0).threads, 1);
  // A container granted 2 cores of time on a 64-core machine.
  files::CpuLimit quota{64, 2, "/sys/fs/cgroup/cpu.max"};
  const runtime::ThreadPlan q = runtime::plan_threads(0, 1, quota, 64, 0);
  EXPECT_EQ(q.threads, 2);
  EXPECT_EQ(q.host_cores, 2);
  EXPECT_NE(q.why.find("CPU quota, /sys/fs/cgroup/cpu.max"), std::string::npos) << q.why;
  EXPECT_FALSE(q.oversubscribed);
  const runtime::ThreadPlan many = runtime::plan_threads(0, 3, quota, 64, 0);
  EXPECT_EQ(many.threads, 1);
  EXPECT_TRUE(many.oversubscribed);
  EXPECT_EQ(runtime::plan_threads(0, 1, sixteen, 16, 5).threads, 5);
  EXPECT_EQ(runtime::plan_threads(0, 1, sixteen, 16, 5).why, "OMP_NUM_THREADS");
  EXPECT_EQ(runtime::plan_threads(0, 2, sixteen, 16, 5).threads, 8);
}

// Built by clang, keel links LLVM's libomp, which ignores GOMP_SPINCOUNT and spins 200 ms by
// default: keel gives it KMP_BLOCKTIME=0 before its first parallel region (files/omp_wait.h).
TEST(OmpWait, LibompThreadsSleepAtOnceWhenKeelIsBuiltByClang) {
  using GetBlocktime = int (*)();
  const auto blocktime = reinterpret_cast<GetBlocktime>(dlsym(RTLD_DEFAULT, "kmp_get_blocktime"));
  if (!blocktime) GTEST_SKIP() << "no libomp in this process: keel built by g++ runs on libgomp";
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("KMP_BLOCKTIME")) {
    GTEST_SKIP() << "the environment sets a wait policy: " << files::omp_wait_setting();
  }
  if (!std::getenv("KEEL_TEST_FRESH_PROCESS")) {  // also in a process that ran no other test
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::string run =
        "KEEL_TEST_FRESH_PROCESS=1 '" + self +
        "' --gtest_filter=OmpWait.LibompThreadsSleepAtOnceWhenKeelIsBuiltByClang"
        " >/dev/null 2>&1";
    EXPECT_EQ(std::system(run.c_str()), 0) << "failed alone: " << run;
  }
  EXPECT_NE(files::omp_wait_setting().find(std::string(files::kLibompBlocktime) + " (set by keel)"),
            std::string::npos)
      << files::omp_wait_setting();
  EXPECT_EQ(blocktime(), 0);
  EXPECT_EQ(std::getenv("KMP_BLOCKTIME"), nullptr);
}

}  // namespace keel
