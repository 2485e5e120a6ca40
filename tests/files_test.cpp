// files/: the one reader (regular files only, bounded), the one publisher (temporary, fsync,
// rename, directory fsync) and the appender.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "files/append.h"
#include "files/cpu_limit.h"
#include "files/memory_limit.h"
#include "files/omp_wait.h"
#include "files/process.h"
#include "files/publish.h"
#include "files/read.h"
#include "ir/error.h"
#include "tests/temp_dir.h"

namespace keel::files {
namespace {

namespace fs = std::filesystem;
using testing_support::slurp;
using testing_support::TempDir;
using testing_support::write;

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// The message of the ReadError `f` throws, checked to be one line naming `path`.
template <class F>
std::string read_error(F&& f, const std::string& path) {
  try {
    f();
  } catch (const ReadError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_TRUE(m.starts_with("[files] cannot read the test input: " + path + " ")) << m;
    return m;
  }
  ADD_FAILURE() << "no ReadError for " << path;
  return "";
}

// A reader that blocks (a FIFO open, an endless device) ends the test by SIGALRM, not a hang.
class Deadline {
 public:
  Deadline() { ::alarm(20); }
  ~Deadline() { ::alarm(0); }
};

TEST(Publish, WritesTheBytesAndLeavesNoTemporary) {
  TempDir t;
  publish_file(t / "a.json", "{\"x\": 1}\n");
  EXPECT_EQ(slurp(t / "a.json"), "{\"x\": 1}\n");
  const std::string pieces[] = {"head,", "", "body,", "tail"};
  std::vector<std::string_view> views(std::begin(pieces), std::end(pieces));
  publish_file(t / "b.bin", views);
  EXPECT_EQ(slurp(t / "b.bin"), "head,body,tail");
  EXPECT_EQ(names_in(t.str()), (std::set<std::string>{"a.json", "b.bin"}));
  struct stat st {};
  ASSERT_EQ(::stat((t / "a.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

// At every step before the rename the old file is whole; a failure there removes the temporary.
TEST(Publish, ReplacesAtomicallyAndCleansUpOnFailure) {
  TempDir t;
  const std::string path = t / "record.json";
  publish_file(path, "old");
  for (std::string_view stop : {"open", "written", "synced"}) {
    PublishOptions o;
    o.hook = [&](std::string_view step) {
      EXPECT_EQ(slurp(path), "old") << step;
      if (step == stop) throw Error("stopped");
    };
    EXPECT_THROW(publish_file(path, "new and longer", o), Error) << stop;
    EXPECT_EQ(slurp(path), "old") << stop;
    EXPECT_EQ(names_in(t.str()), std::set<std::string>{"record.json"}) << stop;
  }
  std::vector<std::string> steps;
  PublishOptions o;
  o.hook = [&](std::string_view step) { steps.emplace_back(step); };
  publish_file(path, "new", o);
  EXPECT_EQ(steps, (std::vector<std::string>{"open", "written", "synced", "renamed"}));
  EXPECT_EQ(slurp(path), "new");
}

// A reader holding the old file keeps reading the old bytes: the new file is a new inode.
TEST(Publish, NeverModifiesThePublishedFileInPlace) {
  TempDir t;
  const std::string path = t / "f";
  publish_file(path, "first version");
  std::ifstream old(path, std::ios::binary);
  publish_file(path, "second");
  std::string seen((std::istreambuf_iterator<char>(old)), std::istreambuf_iterator<char>());
  EXPECT_EQ(seen, "first version");
  EXPECT_EQ(slurp(path), "second");
}

// Several writers of one file (processes sharing a cache directory, threads of one process):
// unique temporaries, and the file is always one writer's bytes, whole.
TEST(Publish, ConcurrentWritersNeverShareATemporary) {
  TempDir t;
  const std::string path = t / "entry";
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 50; ++i) publish_file(path, std::string(1000 + w, char('a' + w)));
    });
  }
  for (auto& th : writers) th.join();
  const std::string got = slurp(path);
  ASSERT_GE(got.size(), 1000u);
  EXPECT_EQ(got, std::string(got.size(), got[0]));
  EXPECT_EQ(names_in(t.str()), std::set<std::string>{"entry"});
}

// A caller's temporary name is created exclusively: an existing file there is never clobbered.
TEST(Publish, NamedTemporaryIsExclusive) {
  TempDir t;
  write(t / ".tmp.x", "someone else's");
  PublishOptions o;
  o.temp_name = ".tmp.x";
  EXPECT_THROW(publish_file(t / "x", "mine", o), Error);
  EXPECT_EQ(slurp(t / ".tmp.x"), "someone else's");
  EXPECT_FALSE(fs::exists(t / "x"));
  o.temp_name = ".tmp.y";
  publish_file(t / "x", "mine", o);
  EXPECT_EQ(names_in(t.str()), (std::set<std::string>{".tmp.x", "x"}));
}

TEST(Publish, MissingDirectoryIsOneLineNamingIt) {
  TempDir t;
  try {
    publish_file(t / "no/such/dir/f", "x");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.starts_with("[files] cannot create " + t / "no/such/dir/")) << m;
    EXPECT_NE(m.find("check that " + t / "no/such/dir" + " is a writable directory"),
              std::string::npos)
        << m;
  }
}

TEST(Publish, DirectoryOfAPath) {
  EXPECT_EQ(directory_of("a/b/c"), "a/b");
  EXPECT_EQ(directory_of("c"), ".");
  EXPECT_EQ(directory_of("/c"), "/");
}

TEST(Append, WholeRecordsAtTheEndAndErrorsNameTheFile) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  {
    AppendFile f(path, "metrics");
    f.append("{\"step\":1}\n");
    f.append("{\"step\":2}\n");
    f.sync();
  }
  EXPECT_EQ(slurp(path), "{\"step\":1}\n{\"step\":2}\n");
  try {
    AppendFile again(path, "metrics", {.exclusive = true});
    FAIL() << "an exclusive append file opened an existing one";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[files] cannot open the metrics file " + path, 0), 0u)
        << e.what();
  }
  EXPECT_THROW(AppendFile(dir / "no/such/dir/x", "metrics"), Error);
}

TEST(Append, ASingleWriterCutsOffATornLastLineAtOpen) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  std::ofstream(path) << "{\"step\":1}\n{\"step\":2,\"lo";  // a crash mid-line
  {
    AppendFile f(path, "metrics", {.single_writer = true, .lines = true});
    f.append("{\"step\":2}\n");
  }
  EXPECT_EQ(slurp(path), "{\"step\":1}\n{\"step\":2}\n");
  // A file with no newline at all is all torn; one several processes share is left alone.
  std::ofstream(path, std::ios::trunc) << "torn";
  AppendFile(path, "metrics", {.single_writer = true, .lines = true});
  EXPECT_EQ(slurp(path), "");
  std::ofstream(path, std::ios::trunc) << "torn";
  AppendFile(path, "compile log");
  EXPECT_EQ(slurp(path), "torn");
}

TEST(Read, ReadsRegularFilesUpToTheCapExactly) {
  TempDir t;
  write(t / "ten", "0123456789");
  EXPECT_EQ(read_file(t / "ten", 10, "the test input"), "0123456789");
  const std::string m = read_error([&] { read_file(t / "ten", 9, "the test input"); }, t / "ten");
  EXPECT_NE(m.find("is 10 bytes, over the cap of 9 bytes"), std::string::npos) << m;
  write(t / "empty", "");
  EXPECT_EQ(read_file(t / "empty", 0, "the test input"), "");
}

TEST(Read, MissingFileIsNamedOrNullopt) {
  TempDir t;
  const std::string m =
      read_error([&] { read_file(t / "nope", 100, "the test input"); }, t / "nope");
  EXPECT_TRUE(m.ends_with(" does not exist")) << m;
  EXPECT_FALSE(read_file_if_exists(t / "nope", 100, "the test input").has_value());
  EXPECT_FALSE(read_file_if_exists(t / "nope/below", 100, "the test input").has_value());
}

TEST(Read, RefusesAFifoWithoutBlocking) {
  TempDir t;
  const std::string fifo = t / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Deadline deadline;
  const std::string m = read_error([&] { read_file(fifo, 100, "the test input"); }, fifo);
  EXPECT_TRUE(m.ends_with(" is a FIFO, not a regular file")) << m;
}

TEST(Read, RefusesADeviceAndADirectory) {
  Deadline deadline;
  std::string m =
      read_error([] { read_file("/dev/zero", 1 << 20, "the test input"); }, "/dev/zero");
  EXPECT_TRUE(m.ends_with(" is a character device, not a regular file")) << m;
  TempDir t;
  m = read_error([&] { read_file(t.str(), 1 << 20, "the test input"); }, t.str());
  EXPECT_TRUE(m.ends_with(" is a directory, not a regular file")) << m;
}

// /proc files report size 0: the read goes to EOF, and still stops at the cap.
TEST(Read, BoundedEvenWhenTheSizeIsWrong) {
  Deadline deadline;
  const std::string status = read_file("/proc/self/status", 1 << 20, "the test input");
  EXPECT_NE(status.find("VmRSS"), std::string::npos);
  const std::string m =
      read_error([] { read_file("/proc/self/status", 16, "the test input"); }, "/proc/self/status");
  EXPECT_NE(m.find("over the cap of 16 bytes"), std::string::npos) << m;
}

TEST(Read, SymlinksFollowedUnlessRefused) {
  TempDir t;
  write(t / "target", "bytes");
  fs::create_symlink(t / "target", t / "link");
  EXPECT_EQ(read_file(t / "link", 100, "the test input"), "bytes");
  ReadOptions nofollow{.follow_symlinks = false};
  try {
    read_file(t / "link", 100, "the test input", nofollow);
    ADD_FAILURE() << "followed";
  } catch (const ReadError& e) {
    EXPECT_EQ(e.kind(), ReadError::Kind::symlink);
    EXPECT_EQ(e.problem(), t / "link" + " is a symlink; refusing to follow it");
  }
  fs::create_symlink(t / "loop", t / "loop");  // a link to itself: ELOOP when followed
  read_error([&] { read_file(t / "loop", 100, "the test input"); }, t / "loop");
}

// A machine laid out under a directory: MemTotal of 24 GiB and the process's cgroups.
struct FakeMachine {
  TempDir t;
  void file(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(t / path).parent_path());
    write(t / path, text);
  }
  FakeMachine() { file("proc/meminfo", "MemTotal:       25165824 kB\nMemFree: 1 kB\n"); }
};

// A stop request ends the child in flight with its process group (the grandchild too), and
// every later one before it starts, until children are allowed again.
TEST(Process, InterruptedChildrenAreKilledWithTheirGroup) {
  TempDir tmp;
  struct Allowed {  // later tests run their children
    ~Allowed() { allow_children(); }
  } allowed;
  const std::string pid_file = tmp / "grandchild";
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] {  // once the grandchild runs
    for (int i = 0; i < 500 && !fs::exists(pid_file); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    interrupt_children();
  });
  const ProcessResult r = run_process(
      {"sh", "-c",
       "sleep 30 & echo $! > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file + "; wait"},
      60);
  stopper.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.interrupted);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(seconds, 20);
  // Killed, or a zombie that init has yet to reap.
  const std::string grandchild = slurp(pid_file).substr(0, slurp(pid_file).find('\n'));
  ASSERT_FALSE(grandchild.empty());
  const std::string stat = "/proc/" + grandchild + "/stat";
  auto alive = [&] {
    std::ifstream in(stat);
    std::string pid, name, state;
    return static_cast<bool>(in >> pid >> name >> state) && state != "Z";
  };
  for (int i = 0; i < 100 && alive(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(alive()) << "the sleep outlived its group's interrupt";
  const ProcessResult later = run_process({"sh", "-c", "echo ran > " + pid_file});
  EXPECT_TRUE(later.interrupted);
  EXPECT_NE(slurp(pid_file), "ran\n");  // never started
  allow_children();
  const ProcessResult again = run_process({"sh", "-c", "echo ran"});
  EXPECT_FALSE(again.interrupted);
  EXPECT_EQ(again.output, "ran\n");
}

TEST(MemoryLimit, MemTotalWithoutCgroups) {
  FakeMachine m;
  EXPECT_EQ(memory_limit(m.t.str()).bytes, int64_t{24} << 30);
  EXPECT_EQ(memory_limit(m.t.str()).source, "MemTotal");
}

// cgroup v2: memory.max of the group or of any ancestor up to the mount, "max" being none; the
// mount may show the hierarchy from a subgroup on (a cgroup namespace, a container's mount).
TEST(MemoryLimit, CgroupV2TakesTheSmallestMaxUpTheHierarchy) {
  FakeMachine m;
  m.file("proc/self/cgroup", "0::/jobs/slot3/task\n");
  m.file("proc/self/mountinfo",
         "22 1 0:20 / /proc rw - proc proc rw\n"
         "31 23 0:27 /jobs /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  m.file("sys/fs/cgroup/slot3/task/memory.max", "max\n");
  m.file("sys/fs/cgroup/slot3/memory.max", "8589934592\n");
  m.file("sys/fs/cgroup/memory.max", "17179869184\n");
  const MemoryLimit got = memory_limit(m.t.str());
  EXPECT_EQ(got.bytes, int64_t{8} << 30);
  EXPECT_EQ(got.source, "/sys/fs/cgroup/slot3/memory.max");
  m.file("sys/fs/cgroup/slot3/task/memory.max", "1073741824\n");  // the group's own, lower
  EXPECT_EQ(memory_limit(m.t.str()).bytes, int64_t{1} << 30);
  // A mount whose root is only a name prefix of the group (/job vs /jobs) shows none of it:
  // the next mount does.
  m.file("proc/self/mountinfo",
         "30 23 0:27 /job /mnt/job rw - cgroup2 cgroup2 rw\n"
         "31 23 0:27 /jobs /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  m.file("mnt/job/s/slot3/task/memory.max", "1024\n");
  m.file("mnt/jobs/slot3/task/memory.max", "1024\n");
  EXPECT_EQ(memory_limit(m.t.str()).bytes, int64_t{1} << 30);
  // Both lifted, and the top one above MemTotal: MemTotal holds.
  m.file("sys/fs/cgroup/slot3/memory.max", "max\n");
  m.file("sys/fs/cgroup/slot3/task/memory.max", "max\n");
  m.file("sys/fs/cgroup/memory.max", "64424509440\n");
  EXPECT_EQ(memory_limit(m.t.str()).source, "MemTotal");
}

// cgroup v1: the memory controller's mount and the hierarchical limit (which includes the
// ancestors'); memory.limit_in_bytes where memory.stat does not say; "no limit" is a huge value.
TEST(MemoryLimit, CgroupV1ReadsTheMemoryControllersHierarchicalLimit) {
  FakeMachine m;
  m.file("proc/self/cgroup", "5:cpu,cpuacct:/a\n4:memory:/process_api/92d2\n0::/\n");
  m.file("proc/self/mountinfo",
         "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
         "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
         "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  m.file("sys/fs/cgroup/memory/process_api/92d2/memory.stat",
         "cache 0\nhierarchical_memory_limit 4294967296\nhierarchical_memsw_limit 1\n");
  m.file("sys/fs/cgroup/memory/process_api/92d2/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(memory_limit(m.t.str()).bytes, int64_t{4} << 30);
  EXPECT_EQ(memory_limit(m.t.str()).source, "/sys/fs/cgroup/memory/process_api/92d2/memory.stat");
  m.file("sys/fs/cgroup/memory/process_api/92d2/memory.stat", "cache 0\n");
  m.file("sys/fs/cgroup/memory/process_api/92d2/memory.limit_in_bytes", "2147483648\n");
  EXPECT_EQ(memory_limit(m.t.str()).bytes, int64_t{2} << 30);
  m.file("sys/fs/cgroup/memory/process_api/92d2/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(memory_limit(m.t.str()).source, "MemTotal");
}

// Damaged or unreadable files set no limit; they never throw.
TEST(MemoryLimit, DamagedFilesSetNoLimit) {
  FakeMachine m;
  m.file("proc/self/cgroup", "garbage\n0::\n:::\n0::/x\n");
  m.file("proc/self/mountinfo", "no dash here\n1 2 3 - cgroup2\n4 5 6:7 / /cg - cgroup2 c rw\n");
  m.file("cg/x/memory.max", "-5\n");
  m.file("cg/memory.max", "12abc\n");
  EXPECT_EQ(memory_limit(m.t.str()).source, "MemTotal");
  fs::remove(m.t / "proc/meminfo");
  EXPECT_EQ(memory_limit(m.t.str()).bytes, 0);
  fs::create_directories(m.t / "proc/meminfo");  // not a regular file
  EXPECT_EQ(memory_limit(m.t.str()).bytes, 0);
}

// This machine: a limit, at most MemTotal.
TEST(MemoryLimit, ThisMachineHasOne) {
  const MemoryLimit here = memory_limit();
  EXPECT_GT(here.bytes, 0);
  EXPECT_FALSE(here.source.empty());
}

TEST(CpuLimit, CountsTheCpusOfAnAffinityList) {
  EXPECT_EQ(count_cpu_list("0-1"), 2);
  EXPECT_EQ(count_cpu_list("0-3,8,10-11\n"), 7);
  EXPECT_EQ(count_cpu_list("5"), 1);
  EXPECT_EQ(count_cpu_list("3-1"), 0);
  EXPECT_EQ(count_cpu_list("a-b"), 0);
  EXPECT_EQ(count_cpu_list(""), 0);
}

// The affinity mask bounds the team; a cgroup's CPU quota bounds it further, rounded up to whole
// cores; the smallest quota up the v2 hierarchy wins; "max" is none.
TEST(CpuLimit, AffinityMaskThenTheSmallestCgroupV2Quota) {
  FakeMachine m;
  m.file("proc/self/status", "Name:\tkeel\nCpus_allowed:\tff\nCpus_allowed_list:\t0-7\n");
  EXPECT_EQ(cpu_limit(m.t.str()).allowed, 8);
  EXPECT_EQ(cpu_limit(m.t.str()).cores(), 8);
  m.file("proc/self/cgroup", "0::/jobs/slot3\n");
  m.file("proc/self/mountinfo",
         "31 23 0:27 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  m.file("sys/fs/cgroup/jobs/slot3/cpu.max", "max 100000\n");
  m.file("sys/fs/cgroup/jobs/cpu.max", "250000 100000\n");
  CpuLimit got = cpu_limit(m.t.str());
  EXPECT_EQ(got.quota, 3);
  EXPECT_EQ(got.cores(), 3);
  EXPECT_EQ(got.quota_source, "/sys/fs/cgroup/jobs/cpu.max");
  m.file("sys/fs/cgroup/jobs/slot3/cpu.max", "100000 100000\n");
  EXPECT_EQ(cpu_limit(m.t.str()).cores(), 1);
  // A quota above the mask leaves the mask in charge.
  m.file("sys/fs/cgroup/jobs/slot3/cpu.max", "max 100000\n");
  m.file("sys/fs/cgroup/jobs/cpu.max", "1600000 100000\n");
  EXPECT_EQ(cpu_limit(m.t.str()).cores(), 8);
  m.file("proc/self/status", "Cpus_allowed_list:\t2\n");
  EXPECT_EQ(cpu_limit(m.t.str()).cores(), 1);
}

TEST(CpuLimit, CgroupV1QuotaAndPeriod) {
  FakeMachine m;
  m.file("proc/self/status", "Cpus_allowed_list:\t0-15\n");
  m.file("proc/self/cgroup", "5:cpu,cpuacct:/batch/7\n4:memory:/batch/7\n");
  m.file("proc/self/mountinfo",
         "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
         "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
  m.file("sys/fs/cgroup/cpu,cpuacct/batch/7/cpu.cfs_quota_us", "-1\n");
  m.file("sys/fs/cgroup/cpu,cpuacct/batch/7/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cpu_limit(m.t.str()).cores(), 16);
  m.file("sys/fs/cgroup/cpu,cpuacct/batch/7/cpu.cfs_quota_us", "400000\n");
  const CpuLimit got = cpu_limit(m.t.str());
  EXPECT_EQ(got.cores(), 4);
  EXPECT_EQ(got.quota_source, "/sys/fs/cgroup/cpu,cpuacct/batch/7/cpu.cfs_quota_us");
}

// Damaged files set no limit and never throw; with no status file the machine's CPUs count.
TEST(CpuLimit, DamagedFilesSetNoLimit) {
  FakeMachine m;
  m.file("proc/self/status", "Cpus_allowed_list:\tgarbage\n");
  m.file("proc/self/cgroup", "0::/x\n");
  m.file("proc/self/mountinfo", "4 5 6:7 / /cg - cgroup2 c rw\n");
  m.file("cg/x/cpu.max", "-5 100000\n");
  m.file("cg/cpu.max", "12abc 100000\n");
  const CpuLimit got = cpu_limit(m.t.str());
  EXPECT_GE(got.allowed, 1);
  EXPECT_EQ(got.quota, 0);
}

TEST(CpuLimit, ThisMachineHasAtLeastOneCore) {
  EXPECT_GE(cpu_limit().cores(), 1);
}

// This test binary links keel's runtime, so it started with the bounded spin (unless the one
// running it set a wait policy): under its own name, and with what keel added taken out of the
// environment again, so its children do not inherit it.
TEST(OmpWait, StartsWithTheBoundedSpinAndKeepsItFromChildren) {
  const std::string setting = omp_wait_setting();
  if (setting.find("(set by keel)") == std::string::npos) {
    GTEST_SKIP() << "started with " << setting;
  }
  EXPECT_EQ(setting, std::string("GOMP_SPINCOUNT=") + kSpinCount + " (set by keel)");
  EXPECT_EQ(std::getenv("GOMP_SPINCOUNT"), nullptr);
  EXPECT_EQ(std::getenv("keel_added_gomp_spincount"), nullptr);
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  EXPECT_EQ(name, "files_test");
}

}  // namespace
}  // namespace keel::files
