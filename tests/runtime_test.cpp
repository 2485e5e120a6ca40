#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/client.h"
#include "backend/ref/client.h"
#include "diag/compile_log.h"
#include "ir/error.h"
#include "runtime/jit.h"
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
    diag::set_current_step(0);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::shared_ptr<runtime::JitExecutor> jit(diag::GuardMode mode = diag::GuardMode::warn,
                                            bool forbid = false,
                                            std::shared_ptr<backend::Client> client = nullptr) {
    runtime::JitConfig c;
    c.client = client ? client : ref::make_ref_client();
    c.cache.dir = (root_ / "cache").string();
    c.cache.forbid_compile = forbid;
    c.guard.mode = mode;
    c.guard.warmup_steps = 1;
    c.run_dir = (root_ / "run").string();
    return std::make_shared<runtime::JitExecutor>(c);
  }

  fs::path root_;
};

Tensor f32(Shape s, float fill) {
  return Tensor(Array::full(s, fill));
}

TEST_F(JitTest, CompileThenMemoryThenDiskAfterRestart) {
  auto a = jit();
  auto f = compile("f", [](const Tensor& x) { return exp(x) * 2.0; }, {a});
  EXPECT_NEAR(f(f32({2}, 0)).to_f32()[0], 2.0f, 1e-6);
  f(f32({2}, 1));
  diag::Counters n = a->log().counters();
  EXPECT_EQ(n.compiles, 1);
  EXPECT_EQ(n.memory_hits, 1);
  EXPECT_EQ(n.disk_hits, 0);

  auto b = jit();  // a restart: new executor, same cache directory
  auto g = compile("f", [](const Tensor& x) { return exp(x) * 2.0; }, {b});
  EXPECT_NEAR(g(f32({2}, 0)).to_f32()[0], 2.0f, 1e-6);
  n = b->log().counters();
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

TEST_F(JitTest, NewShapeIsExplainedWithBothShapes) {
  auto a = jit();
  auto f = compile("step", [](const Tensor& x) { return sum(x * x); }, {a});
  f(f32({8, 4}, 1));
  f(f32({4, 4}, 1));
  std::vector<diag::CompileEvent> e = a->log().events();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_NE(e[1].reason.find("input 0 shape f32[8,4] -> f32[4,4]"), std::string::npos)
      << e[1].reason;
}

TEST_F(JitTest, ChangedConstantAcrossRestartNamesItsLine) {
  int line = 0;
  auto make = [&](double c, std::shared_ptr<Executor> ex) {
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

TEST_F(JitTest, StrictShapeGuardRejectsANewProgramAfterWarmup) {
  auto a = jit(diag::GuardMode::strict);
  auto f = compile("g", [](const Tensor& x) { return x + 1.0; }, {a});
  f(f32({2}, 0));  // step 0: warm-up
  diag::set_current_step(5);
  f(f32({2}, 1));  // same program: fine
  try {
    f(f32({3}, 1));
    FAIL() << "expected the shape guard to refuse";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[shape_guard]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2] -> f32[3]"), std::string::npos) << msg;
  }
}

TEST_F(JitTest, ForbidCompileProvesTheCacheIsWarm) {
  auto fn = [](const Tensor& x) { return tanh(x); };
  compile("h", fn, {jit()})(f32({2}, 0.5));
  EXPECT_NO_THROW(compile("h", fn, {jit(diag::GuardMode::warn, true)})(f32({2}, 0.5)));
  EXPECT_THROW(compile("h", fn, {jit(diag::GuardMode::warn, true)})(f32({5}, 0.5)), Error);
}

TEST_F(JitTest, PassesAreSwitchedOffAndDumpedFromTheEnvironment) {
  fs::path dump = root_ / "dump";
  setenv("KEEL_DUMP_PASSES", dump.c_str(), 1);
  setenv("KEEL_DISABLE_PASSES", "cse,fuse", 1);
  auto a = jit(diag::GuardMode::warn, false, cpu::make_cpu_client());
  unsetenv("KEEL_DUMP_PASSES");
  unsetenv("KEEL_DISABLE_PASSES");
  EXPECT_EQ(compile("d", [](const Tensor& x) { return x * x + x * x; }, {a})(f32({2}, 3)).to_f32(),
            (std::vector<float>{18, 18}));
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dump)) files.insert(e.path().filename().string());
  EXPECT_TRUE(files.count("d.1.canonicalize.txt")) << files.size();
  EXPECT_FALSE(files.count("d.2.cse.txt"));  // switched off: nothing to dump
  EXPECT_TRUE(files.count("d.4.fuse.txt"));
  EXPECT_TRUE(files.count("d.cpp"));  // the generated source is kept beside the dumps
  setenv("KEEL_DISABLE_PASSES", "bogus", 1);
  auto b = jit(diag::GuardMode::warn, false, cpu::make_cpu_client());
  unsetenv("KEEL_DISABLE_PASSES");
  EXPECT_THROW(compile("e", [](const Tensor& x) { return x + 1.0; }, {b})(f32({2}, 3)), Error);
}

std::string worker_output(const std::string& platform, const fs::path& cache, const fs::path& run) {
  std::string cmd = std::string(KEEL_BINARY_DIR) + "/tests/runtime_worker " + platform + " " +
                    cache.string() + " " + run.string() + " 3 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  return out;
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

}  // namespace
}  // namespace keel
