// diag tests: compile log (counting, file format, concurrent appends, bad lines), miss
// explanations, the shape guard, the run summary, the cache reports, the trace recorder and the
// run report.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "diag/cache_report.h"
#include "diag/compile_log.h"
#include "diag/explain.h"
#include "diag/explain_run.h"
#include "diag/run_report.h"
#include "diag/tb_events.h"
#include "diag/timeline.h"
#include "files/process_clock.h"
#include "ir/array.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/utf8_escape.h"
#include "tests/temp_dir.h"

namespace keel::diag {
namespace {

namespace fs = std::filesystem;

using testing_support::slurp;
using testing_support::write;
class TempDir : public testing_support::TempDir {
 public:
  TempDir() : testing_support::TempDir("diag_test") {}
};

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

template <class F>
std::string input_error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

CompileEvent ev(int64_t step, std::string fn, std::string key, std::string tier, double s,
                std::string reason) {
  return {step, step, std::move(fn), std::move(key), std::move(tier), s, std::move(reason)};
}

bool same(const CompileEvent& a, const CompileEvent& b) {
  return a.step == b.step && a.function == b.function && a.key == b.key && a.tier == b.tier &&
         a.seconds == b.seconds && a.reason == b.reason;
}

// ---- compile log ----

TEST(CompileLog, CountsEveryTierAndLogsOnlyLoadsAndCompiles) {
  TempDir tmp;
  std::string path = tmp / "run/nested/compiles.jsonl";  // parents do not exist yet
  CompileLog log(path);
  EXPECT_TRUE(fs::exists(path));  // created up front, so an all-hits run still has a log
  log.record(ev(0, "train_step", "k1", "compiled", 2.5, "first compile"));
  log.record(ev(1, "train_step", "k1", "memory", 0, ""));
  log.record(ev(2, "train_step", "k1", "memory", 0, ""));
  log.record(ev(2, "eval_step", "k2", "disk", 0.25, "first compile"));
  log.record(ev(3, "train_step", "k3", "compiled", 1.5, "input 0 shape f32[8] -> f32[4]"));
  CompileTotals c = log.totals();
  EXPECT_EQ(c.memory_hits, 2);
  EXPECT_EQ(c.disk_hits, 1);
  EXPECT_EQ(c.compiles, 2);
  EXPECT_DOUBLE_EQ(c.compile_seconds, 4.0);
  EXPECT_DOUBLE_EQ(c.load_seconds, 0.25);
  EXPECT_EQ(log.events().size(), 3u);

  std::string text = slurp(path);
  EXPECT_EQ(
      text,
      "{\"call\":0,\"function\":\"train_step\",\"key\":\"k1\",\"reason\":\"first compile\","
      "\"seconds\":2.5,\"step\":0,\"tier\":\"compiled\"}\n"
      "{\"call\":2,\"function\":\"eval_step\",\"key\":\"k2\",\"reason\":\"first compile\","
      "\"seconds\":0.25,\"step\":2,\"tier\":\"disk\"}\n"
      "{\"call\":3,\"function\":\"train_step\",\"key\":\"k3\",\"reason\":\"input 0 shape f32[8] -> "
      "f32[4]\",\"seconds\":1.5,\"step\":3,\"tier\":\"compiled\"}\n");
  std::vector<CompileEvent> back = read_compile_log(path);
  ASSERT_EQ(back.size(), 3u);
  for (size_t i = 0; i < back.size(); ++i) EXPECT_TRUE(same(back[i], log.events()[i])) << i;
}

TEST(CompileLog, AppendsToAnExistingLogAndKeepsMemoryOnlyLogsOffDisk) {
  TempDir tmp;
  std::string path = tmp / "compiles.jsonl";
  { CompileLog(path).record(ev(0, "f", "a", "compiled", 1, "first compile")); }
  { CompileLog(path).record(ev(5, "f", "a", "disk", 0.5, "first compile")); }
  EXPECT_EQ(read_compile_log(path).size(), 2u);  // a restart appends; it does not truncate

  CompileLog memory_only;
  memory_only.record(ev(0, "f", "a", "compiled", 1, "first compile"));
  EXPECT_EQ(memory_only.path(), "");
  EXPECT_EQ(memory_only.events().size(), 1u);
  EXPECT_EQ(memory_only.totals().compiles, 1);
  EXPECT_EQ(error_of([&] { memory_only.record(ev(0, "f", "a", "warm", 0, "")); }),
            "[diag] compile event for 'f' has unknown tier 'warm'");
}

TEST(CompileLog, UnopenableLogNamesThePath) {
  TempDir tmp;
  write(tmp / "file", "x");
  std::string msg = error_of([&] { CompileLog log(tmp / "file/compiles.jsonl"); });
  EXPECT_EQ(msg.rfind("[diag] cannot open compile log " + (tmp / "file/compiles.jsonl"), 0), 0u)
      << msg;
}

TEST(CompileEvent, JsonRoundTripsAwkwardReasonsOnOneLine) {
  CompileEvent e = ev(7, "f\"n", "abc", "compiled", 0.125,
                      "constant at \"a b.cpp\":3 changed 1 -> 2\nsecond line\ttab");
  std::string line = e.to_json();
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_TRUE(same(CompileEvent::from_json(line, "x"), e));
  // Bytes that are not UTF-8 (a Latin-1 file name, a function name) come back exactly.
  e.reason = "constant at caf\xe9.cpp:3";
  e.function = "f\xff\xfe";
  CompileEvent back = CompileEvent::from_json(e.to_json(), "x");
  EXPECT_EQ(back.reason, "constant at caf\xe9.cpp:3");
  EXPECT_EQ(back.function, "f\xff\xfe");
  EXPECT_TRUE(nlohmann::json::accept(e.to_json()));
}

// Long lines from many writers, each on its own descriptor: every line must come back whole.
std::string payload(int writer, int i) {
  return "w" + std::to_string(writer) + "." + std::to_string(i) + ":" +
         std::string(3000 + (writer * 131 + i * 17) % 1000, static_cast<char>('a' + writer));
}

void check_whole_lines(const std::string& path, int writers, int per_writer) {
  std::vector<CompileEvent> back = read_compile_log(path);
  ASSERT_EQ(back.size(), static_cast<size_t>(writers * per_writer));
  std::vector<int> next(static_cast<size_t>(writers), 0);
  for (const CompileEvent& e : back) {
    int w = std::stoi(e.function.substr(1));
    ASSERT_GE(w, 0);
    ASSERT_LT(w, writers);
    int& n = next[static_cast<size_t>(w)];
    EXPECT_EQ(e.reason, payload(w, n));  // and in each writer's own order
    ++n;
  }
}

TEST(CompileLog, ConcurrentThreadsOnSeparateLogsKeepLinesWhole) {
  TempDir tmp;
  std::string path = tmp / "compiles.jsonl";
  constexpr int kWriters = 6, kEach = 150;
  std::vector<std::unique_ptr<CompileLog>> logs;
  for (int i = 0; i < 2; ++i) logs.push_back(std::make_unique<CompileLog>(path));
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      CompileLog& log = *logs[static_cast<size_t>(w % 2)];
      for (int i = 0; i < kEach; ++i) {
        log.record(ev(i, "w" + std::to_string(w), "k", "compiled", 0.5, payload(w, i)));
      }
    });
  }
  for (auto& t : threads) t.join();
  check_whole_lines(path, kWriters, kEach);
  EXPECT_EQ(logs[0]->totals().compiles + logs[1]->totals().compiles, kWriters * kEach);
}

TEST(CompileLog, ConcurrentProcessesKeepLinesWhole) {
  TempDir tmp;
  std::string path = tmp / "compiles.jsonl";
  constexpr int kProcs = 4, kEach = 150;
  int start[2];  // children block on this pipe until all exist, so their writes overlap
  ASSERT_EQ(::pipe(start), 0);
  std::vector<pid_t> pids;
  for (int w = 0; w < kProcs; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(start[1]);
      char c;
      while (::read(start[0], &c, 1) > 0) {
      }
      int code = 0;
      try {
        CompileLog log(path);
        for (int i = 0; i < kEach; ++i) {
          log.record(ev(i, "w" + std::to_string(w), "k", "disk", 0.5, payload(w, i)));
        }
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(start[0]);
  ::close(start[1]);
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  check_whole_lines(path, kProcs, kEach);
}

TEST(ReadCompileLog, MalformedLinesNameFileAndLine) {
  TempDir tmp;
  std::string good = CompileEvent{0, 0, "f", "k", "compiled", 1, "first compile"}.to_json();
  auto err = [&](const std::string& bad) {
    std::string path = tmp / "c.jsonl";
    write(path, good + "\n\n" + bad + "\n" + good + "\n");
    return input_error_of([&] { read_compile_log(path); });
  };
  std::string at = "[diag] " + (tmp / "c.jsonl") + ":3: ";
  EXPECT_EQ(err("{\"step\":1,"), at + "not JSON at column 11: syntax error "
                                      "while parsing object key - unexpected end of input; "
                                      "expected string literal");
  EXPECT_EQ(err("[1,2]"), at + "expected a JSON object, got array");
  EXPECT_EQ(err(R"({"function":"f","key":"k","tier":"disk","seconds":1,"reason":""})"),
            at + "missing field 'step'");
  EXPECT_EQ(err(R"({"step":1.5,"function":"f","key":"k","tier":"disk","seconds":1,"reason":""})"),
            at + "field 'step' must be an integer, got 1.5");
  EXPECT_EQ(err(R"({"step":1,"function":"","key":"k","tier":"disk","seconds":1,"reason":""})"),
            at + "field 'function' must not be empty");
  EXPECT_EQ(err(R"({"step":1,"function":"f","key":7,"tier":"disk","seconds":1,"reason":""})"),
            at + "field 'key' must be a string, got 7");
  EXPECT_EQ(err(R"({"step":1,"function":"f","key":"k","tier":"warm","seconds":1,"reason":""})"),
            at + "field 'tier' must be \"memory\", \"disk\" or \"compiled\", got \"warm\"");
  EXPECT_EQ(err(R"({"step":1,"function":"f","key":"k","tier":"disk","seconds":-1,"reason":""})"),
            at + "field 'seconds' must be a non-negative number, got -1");
  EXPECT_EQ(err(R"({"step":1,"function":"f","key":"k","tier":"disk","seconds":1})"),
            at + "missing field 'reason'");

  write(tmp / "ok.jsonl", good + "\n  \n" + good);  // blank lines skipped, last newline optional
  EXPECT_EQ(read_compile_log(tmp / "ok.jsonl").size(), 2u);
  EXPECT_EQ(input_error_of([&] { read_compile_log(tmp / "none.jsonl"); }),
            "[files] cannot read the compile log: " + (tmp / "none.jsonl") + " does not exist");
  EXPECT_EQ(
      input_error_of([&] { read_compile_log(tmp.str()); }),
      "[files] cannot read the compile log: " + tmp.str() + " is a directory, not a regular file");
}

// ---- explaining a miss ----

SourceLoc at(uint32_t line) {
  return {"model.cpp", line};
}

Graph model(Shape in, float scale, bool extra) {
  Graph g("train_step");
  NodeId x = g.add_param({DType::f32, std::move(in)}, at(10));
  NodeId s = g.add_constant(Array::scalar(scale), at(42));
  NodeId y = g.emit(Op::mul, {x, s}, {}, at(50));
  if (extra) y = g.emit(Op::neg, {y}, {}, at(57));
  g.set_outputs({y});
  return g;
}

ProgramFacts facts(Graph g, std::string compiler = "gcc 12", std::string codegen = "flags=-O2") {
  policy::Bundle b;
  b.fields = {{"compiler.version", std::move(compiler)}, {"keel.version", "0.1.0"}};
  return {std::move(g), b, std::move(codegen)};
}

TEST(ExplainMiss, NamesEachKindOfDifference) {
  ProgramFacts base = facts(model({8, 256}, 0.5f, false));
  EXPECT_EQ(explain_miss(base, std::nullopt), "first compile");
  EXPECT_EQ(explain_miss(facts(model({8, 256}, 0.5f, false)), base),
            "same program (recompiled after eviction or a cache miss)");
  EXPECT_EQ(explain_miss(facts(model({8, 256}, 0.5f, false), "gcc 13"), base),
            "bundle field compiler.version changed: gcc 12 -> gcc 13");
  EXPECT_EQ(explain_miss(facts(model({8, 256}, 0.5f, false), "gcc 12", "flags=-O3"), base),
            "codegen option flags changed: -O2 -> -O3");
  EXPECT_EQ(explain_miss(facts(model({4, 256}, 0.5f, false)), base),
            "input 0 shape f32[8,256] -> f32[4,256]");
  EXPECT_EQ(explain_miss(facts(model({8, 256}, 0.25f, false)), base),
            "constant at model.cpp:42 changed 0.5 -> 0.25");
  EXPECT_EQ(explain_miss(facts(model({8, 256}, 0.5f, true)), base),
            "op added at model.cpp:57: neg");
  EXPECT_EQ(explain_miss(base, facts(model({8, 256}, 0.5f, true))),
            "op removed at model.cpp:57: neg");
  // Every difference is reported, stack first, program last.
  ProgramFacts all = facts(model({4, 256}, 0.5f, false), "gcc 13", "flags=-O3");
  all.bundle.fields.erase("keel.version");
  EXPECT_EQ(explain_miss(all, base),
            "bundle field compiler.version changed: gcc 12 -> gcc 13; bundle field keel.version "
            "changed: 0.1.0 -> (missing); codegen option flags changed: -O2 -> -O3; input 0 "
            "shape f32[8,256] -> f32[4,256]");
}

TEST(ExplainMiss, ComparesCodegenFingerprintsFieldByFieldWhenTheyAreKeyValues) {
  EXPECT_EQ(codegen_differences("a=1;b=2", "a=1;b=2"), std::vector<std::string>{});
  EXPECT_EQ(codegen_differences("cc=c++\nflags=-O2 -march=native\npasses=all",
                                "cc=c++\nflags=-O3 -march=native\npasses=no-cse"),
            (std::vector<std::string>{"codegen option flags changed: -O2 -march=native -> -O3 "
                                      "-march=native",
                                      "codegen option passes changed: all -> no-cse"}));
  EXPECT_EQ(codegen_differences("a=1; b=2", "a=1; c="),
            (std::vector<std::string>{"codegen option b changed: 2 -> (missing)",
                                      "codegen option c changed: (missing) -> (empty)"}));
  EXPECT_EQ(codegen_differences("c++ -O2", "c++ -O3"),
            std::vector<std::string>{"codegen options changed: c++ -O2 -> c++ -O3"});
  EXPECT_EQ(codegen_differences("a=1;a=2", "a=1"),  // duplicate keys: not a key=value map
            std::vector<std::string>{"codegen options changed: a=1;a=2 -> a=1"});
  EXPECT_EQ(codegen_differences("a=1;b=2", "b=2;a=1"),
            std::vector<std::string>{"codegen options changed: a=1;b=2 -> b=2;a=1"});
}

TEST(ExplainMiss, FactsFromStoredTextExplainAcrossRestarts) {
  Graph g = model({8, 256}, 0.5f, false);
  ProgramFacts now = facts_from_text(print_graph(model({8, 256}, 0.25f, false)),
                                     R"({"compiler.version":"gcc 12","keel.version":"0.1.0"})",
                                     "flags=-O2", "entry b");
  EXPECT_EQ(explain_miss(now, facts(g)), "constant at model.cpp:42 changed 0.5 -> 0.25");
  EXPECT_EQ(input_error_of([] {
              facts_from_text("graph g {", "{}", "", "entry x");
            }).rfind("[ir.parse] entry x:", 0),
            0u);
  EXPECT_EQ(input_error_of([] { facts_from_text("graph g {\n  return ()\n}", "[1]", "", "e"); }),
            "[bundle] e: expected an object");
}

// ---- run summary ----

TEST(RunSummary, CountsProgramsPerFunctionAndListsEachCompile) {
  std::vector<CompileEvent> events = {
      ev(0, "train_step", "aaaaaaaaaaaaaaaa", "compiled", 4.25, "first compile"),
      ev(0, "eval_step", "bbbbbbbbbbbbbbbb", "disk", 0.5, "first compile"),
      ev(1, "train_step", "aaaaaaaaaaaaaaaa", "memory", 0, ""),
      ev(40, "train_step", "cccccccccccccccc", "compiled", 3, "input 0 shape f32[8] -> f32[4]"),
      ev(41, "train_step", "aaaaaaaaaaaaaaaa", "compiled", 4, "")};
  RunSummary s = summarize_run(events, "run/compiles.jsonl");
  ASSERT_EQ(s.functions.size(), 2u);
  EXPECT_EQ(s.programs, 3);
  EXPECT_EQ(s.functions[0].programs, 2);
  EXPECT_EQ(s.functions[0].totals.compiles, 3);
  EXPECT_EQ(s.functions[0].totals.memory_hits, 1);
  EXPECT_EQ(s.functions[0].last_new_program_step, 40);
  EXPECT_EQ(format_run_summary(s),
            "run/compiles.jsonl: 2 functions, 3 programs; 3 compiles (11.25 s), 1 load from "
            "disk (0.50 s), 1 memory hit\n"
            "train_step: 2 programs; 3 compiles (11.25 s), 0 loads from disk (0.00 s), 1 "
            "memory hit; last new program at step 40\n"
            "  step 0      compiled     4.25 s  aaaaaaaaaaaa  first compile\n"
            "  step 40     compiled     3.00 s  cccccccccccc  input 0 shape f32[8] -> f32[4]\n"
            "  step 41     compiled     4.00 s  aaaaaaaaaaaa  (no reason recorded)\n"
            "eval_step: 1 program; 0 compiles (0.00 s), 1 load from disk (0.50 s)\n"
            "  step 0      disk         0.50 s  bbbbbbbbbbbb  first compile\n");
  EXPECT_EQ(format_run_summary(summarize_run({}, "x")), "x: no compiles or loads recorded\n");
}

// Names, keys and reasons come from a file: they print on one line with no control characters.
TEST(RunSummary, TextFromTheLogPrintsWithoutControlCharacters) {
  const RunSummary s = summarize_run({ev(3, "step\n\x1b[2J",
                                         "aaaa\x1b"
                                         "zzzzzzzzzzzz",
                                         "compiled", 1, "shape \"x\"\r\x07 changed")},
                                     "");
  EXPECT_EQ(format_run_summary(s),
            "1 function, 1 program; 1 compile (1.00 s), 0 loads from disk (0.00 s)\n"
            "\"step\\n\\x1b[2J\": 1 program; 1 compile (1.00 s), 0 loads from disk (0.00 s)\n"
            "  step 3      compiled     1.00 s  aaaa\\x1bzzzz  shape \"x\"\\x0d\\x07 changed\n");
}

TEST(RunSummary, ReadsARunDirectoryOrSaysWhatIsWrong) {
  TempDir tmp;
  EXPECT_EQ(input_error_of([&] { summarize_run_dir(tmp / "nope"); }),
            "[diag] " + (tmp / "nope") + " is not a run directory: it does not exist");
  EXPECT_EQ(input_error_of([&] { summarize_run_dir(tmp.str()); }),
            "[files] cannot read the compile log: " + (tmp / "compiles.jsonl") + " does not exist");
  {
    CompileLog log(tmp / "compiles.jsonl");
    log.record(ev(0, "f", "k1", "compiled", 1, "first compile"));
    log.record(ev(3, "f", "k2", "compiled", 1, "constant at m.cpp:3 changed 1 -> 2"));
  }
  RunSummary s = summarize_run_dir(tmp.str());
  EXPECT_EQ(s.source, tmp / "compiles.jsonl");
  EXPECT_EQ(s.programs, 2);
  write(tmp / "compiles.jsonl", "{oops\n");
  EXPECT_EQ(input_error_of([&] {
              summarize_run_dir(tmp.str());
            }).rfind("[diag] " + (tmp / "compiles.jsonl") + ":1: not JSON at column 2: ", 0),
            0u);
}

// ---- cache reports ----

std::vector<EntrySummary> entries() {
  return {{"aaaa1111bbbb2222", "train_step", "f32[8,256]", 2 * 1024 * 1024, 4.5, 1000, 2000},
          {"aaaa3333bbbb4444", "train_step", "f32[4,256]", 1536, 2.25, 2000, 2090},
          {"cccc5555dddd6666", "eval_step", "f32[8,256]", 100, 1, 1500, 1500}};
}

TEST(CacheReport, FormatsSizesAgesAndTheListing) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(3 * 1024 * 1024), "3.0 MiB");
  EXPECT_EQ(format_age(42), "42s");
  EXPECT_EQ(format_age(300), "5m");
  EXPECT_EQ(format_age(3 * 3600 + 5), "3h");
  EXPECT_EQ(format_age(-5), "0s");
  EXPECT_EQ(format_age(2 * 86400), "2d");
  EXPECT_EQ(format_entry_table({}, 0, "/c/v1"), "no entries in /c/v1\n");
  EXPECT_EQ(format_entry_table(entries(), 2100, "/c/v1"),
            "KEY           FUNCTION    SIGNATURE      SIZE  COMPILE  AGE     USED\n"
            "aaaa1111bbbb  train_step  f32[8,256]  2.0 MiB    4.50s  18m   1m ago\n"
            "aaaa3333bbbb  train_step  f32[4,256]  1.5 KiB    2.25s   1m  10s ago\n"
            "cccc5555dddd  eval_step   f32[8,256]    100 B    1.00s  10m  10m ago\n");
}

// A function's name comes from a manifest file: printed as the graph text spells it.
TEST(CacheReport, NamesFromFilesPrintWithoutControlCharacters) {
  std::vector<EntrySummary> e = {{"aaaa1111bbbb2222", "a\x1b[2J\nb", "f32[1]", 1, 1, 0, 0}};
  EXPECT_EQ(format_entry_table(e, 0, "/c/v1"),
            "KEY           FUNCTION       SIGNATURE  SIZE  COMPILE  AGE    USED\n"
            "aaaa1111bbbb  \"a\\x1b[2J\\nb\"  f32[1]      1 B    1.00s   0s  0s ago\n");
  EXPECT_EQ(cache_stats(e, 0).text("/c/v1"),
            "/c/v1: 1 entry, 1 B, 1.00 s of compiling stored, 0 quarantined\n"
            "  \"a\\x1b[2J\\nb\"  1 entry, 1 B, 1.00 s\n");
}

TEST(CacheReport, StatsPerFunctionAndQuarantine) {
  TempDir tmp;
  EXPECT_EQ(count_quarantined(tmp.str()), 0);
  // The cache's layout: one directory per quarantine event, "<key>.<unix time>[.n]".
  for (const char* d : {"k1.100", "k1.100.1", "k2.300"}) {
    fs::create_directories(tmp / ("quarantine/" + std::string(d)));
  }
  write(tmp / "quarantine/k1.100/k1.bin", "x");
  EXPECT_EQ(count_quarantined(tmp.str()), 2);
  CacheStats s = cache_stats(entries(), 2);
  EXPECT_EQ(s.text("/c/v1"),
            "/c/v1: 3 entries, 2.0 MiB, 7.75 s of compiling stored, 2 quarantined\n"
            "  eval_step   1 entry, 100 B, 1.00 s\n"
            "  train_step  2 entries, 2.0 MiB, 6.75 s\n");
  EXPECT_EQ(s.to_json(),
            R"({"bytes":2098788,"compile_seconds":7.75,"entries":3,"functions":{"eval_step":)"
            R"({"bytes":100,"compile_seconds":1.0,"entries":1},"train_step":{"bytes":2098688,)"
            R"("compile_seconds":6.75,"entries":2}},"quarantined":2})");
  EXPECT_EQ(cache_stats({}, 0).text("/c"),
            "/c: 0 entries, 0 B, 0.00 s of compiling stored, 0 quarantined\n");
}

// A function name is any bytes: the JSON stays valid and decodes back to the name.
TEST(CacheReport, StatsJsonKeepsAnyFunctionName) {
  std::vector<EntrySummary> es = entries();
  es[0].function = "f\xff\xc3";
  const nlohmann::json j = nlohmann::json::parse(cache_stats(es, 0).to_json());
  std::vector<std::string> names;
  for (const auto& [name, value] : j.at("functions").items()) names.push_back(utf8_to_bytes(name));
  EXPECT_NE(std::find(names.begin(), names.end(), "f\xff\xc3"), names.end());
}

TEST(CacheReport, FindsEntriesByPrefixAndTheirNearestSibling) {
  auto es = entries();
  EXPECT_EQ(find_entry(es, "cccc", "/c"), 2u);
  EXPECT_EQ(find_entry(es, "aaaa3333bbbb4444", "/c"), 1u);
  EXPECT_EQ(input_error_of([&] { find_entry(es, "ffff", "/c"); }),
            "[cache] no cache entry in /c has a key starting with 'ffff'; 'keel cache ls' lists "
            "them");
  EXPECT_EQ(input_error_of([&] { find_entry(es, "aaaa", "/c"); }),
            "[cache] 2 cache entries in /c have keys starting with 'aaaa' (aaaa1111bbbb2222, "
            "aaaa3333bbbb4444, ...); give more digits");
  EXPECT_EQ(nearest_other(es, 1), 0u);  // the earlier train_step program
  EXPECT_EQ(nearest_other(es, 0), 1u);  // the oldest one: its successor
  EXPECT_EQ(nearest_other(es, 2), std::nullopt);
  EXPECT_EQ(format_verify(3, {}), "ok: 3 entries verified\n");
  EXPECT_EQ(format_verify(3, {{"k1", "checksum mismatch; quarantined"}}),
            "bad k1: checksum mismatch; quarantined\n1 entry of 3 failed verification\n");
  EXPECT_EQ(format_verify(2, {{"k1", "[cache] entry k1: bad"}, {"k2", "[cache] entry k2: bad"}}),
            "[cache] entry k1: bad\n[cache] entry k2: bad\n2 entries of 2 failed verification\n");
  // Stray files print their problem but are not entries.
  const std::vector<std::string> junk = {"[cache] /c/junk is not a cache file"};
  EXPECT_EQ(format_verify(2, {{"k1", "bad"}}, junk),
            "bad k1: bad\n[cache] /c/junk is not a cache file\n1 entry of 2 failed "
            "verification\n1 file that is not a cache file in the entries directory\n");
  EXPECT_EQ(format_verify(2, {}, junk),
            "[cache] /c/junk is not a cache file\n2 entries verified\n1 file that is not a "
            "cache file in the entries directory\n");
}

TEST(CacheReport, ExplainsAnEntryAgainstAnother) {
  std::string bundle = R"({"compiler.version":"gcc 12"})";
  StoredProgram a{"k1", print_graph(model({8, 256}, 0.5f, false)), bundle, "flags=-O2"};
  StoredProgram b{"k2", print_graph(model({4, 256}, 0.5f, false)), bundle, "flags=-O2"};
  EXPECT_EQ(explain_entry(b, std::nullopt), "first compile");
  EXPECT_EQ(explain_entry(b, a), "input 0 shape f32[8,256] -> f32[4,256]");
  b.graph_text.reset();
  EXPECT_EQ(explain_entry(b, a),
            "no bundle or codegen difference; entry k2 has no stored graph, so the programs "
            "were not compared");
  b.codegen = "flags=-O3";
  EXPECT_EQ(explain_entry(b, a),
            "codegen option flags changed: -O2 -> -O3; entry k2 has no stored graph, so the "
            "programs were not compared");
  a.bundle_json = "nope";
  EXPECT_EQ(
      input_error_of([&] { explain_entry(b, a); }).rfind("[bundle] cache entry k1: not JSON", 0),
      0u);
}

// ---- trace events ----

// Work that ran apart from the thread that asked for it (a step's programs on the device) has a
// track of its own, named, and one per name.
TEST(Timeline, NamedTracksHoldSpansApartFromTheThreads) {
  Timeline& r = Timeline::process();
  r.clear();
  r.enable(true);
  r.complete("dispatch step 1", "dispatch", 10, 20);
  r.complete_on("device", "step 1", "step", 15, 40, {{"step", 1}});
  r.complete_on("device", "step 2", "step", 40, 60, {{"step", 2}});
  r.enable(false);
  std::map<int64_t, std::string> track;
  std::vector<nlohmann::json> spans;
  for (const auto& e : r.events()) {
    if (e["ph"] == "M" && e["name"] == "thread_name") track[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X") spans.push_back(e);
  }
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_NE(spans[0]["tid"], spans[1]["tid"]);
  EXPECT_EQ(spans[1]["tid"], spans[2]["tid"]);
  EXPECT_EQ(track[spans[1]["tid"].get<int64_t>()], "device");
  EXPECT_EQ(spans[1]["dur"].get<double>(), 25.0);
  EXPECT_EQ(spans[2]["args"]["step"], 2);
  r.clear();
}

TEST(Timeline, SpansAreRecordedOnlyWhileOnAndFormAChromeTrace) {
  Timeline& r = Timeline::process();
  r.clear();
  r.enable(false);
  { TimelineSpan ignored("off", "step"); }
  for (const auto& e : r.events()) EXPECT_EQ(e["ph"], "M") << e.dump();  // track names only
  r.enable(true);
  r.set_process(3, "rank 3 on b");
  r.name_thread("main");
  const double before = r.now_us();
  {
    TimelineSpan s("step 1", "step", {{"step", 1}});
    s.arg("extra", "x");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.enable(false);
  nlohmann::json events = r.events();
  std::vector<nlohmann::json> spans;
  for (const auto& e : events) {
    if (e["ph"] == "X") spans.push_back(e);
  }
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0]["name"], "step 1");
  EXPECT_EQ(spans[0]["cat"], "step");
  EXPECT_EQ(spans[0]["pid"], 3);
  EXPECT_EQ(spans[0]["args"]["step"], 1);
  EXPECT_EQ(spans[0]["args"]["extra"], "x");
  EXPECT_GE(spans[0]["ts"].get<double>(), before);
  EXPECT_GE(spans[0]["dur"].get<double>(), 4000.0);  // microseconds
  // Since the process started (from /proc, 10 ms ticks), not since the recorder was made.
  EXPECT_NEAR(r.now_us(), 1e6 * files::seconds_since_process_start(), 30000.0);
  bool named = false;
  for (const auto& e : events) {
    named |= e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "rank 3 on b";
  }
  EXPECT_TRUE(named);
  nlohmann::json doc = nlohmann::json::parse(trace_document({events, events}, 0));
  EXPECT_EQ(doc["traceEvents"].size(), 2 * events.size());
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  r.clear();
  r.set_process(0, "keel");
}

// ---- run report ----

// A run directory as keel train leaves it: metrics, compiles, record, trace, calibration.
void write_run(const TempDir& tmp, const std::string& dir, const std::string& cache_dir) {
  fs::create_directories(tmp / dir);
  fs::create_directories(tmp / cache_dir);
  write(tmp / (dir + "/metrics.jsonl"),
        "{\"step\":1,\"loss\":5.5,\"lr\":0.004,\"grad_norm\":6.9,\"ms_per_step\":200,"
        "\"tokens_per_s\":10000,\"compiled\":false}\n"
        "{\"step\":2,\"loss\":5.25,\"lr\":0.003,\"grad_norm\":3.5,\"ms_per_step\":150,"
        "\"tokens_per_s\":12000,\"compiled\":false,\"rank_busy_ms\":[140.5,null]}\n"
        "{\"step\":2,\"val_loss\":4.5,\"val_bits_per_byte\":6.25}\n"
        "{\"step\":3,\"loss\":4.75,\"lr\":0.002,\"grad_norm\":2.5,\"ms_per_step\":150,"
        "\"tokens_per_s\":12000,\"compiled\":true,"
        "\"moe\":{\"aux_loss\":0.1,\"load\":[[3,1],[2,2]],\"dropped_fraction\":0.125,\"steps\":1}}"
        "\n");
  write(tmp / (dir + "/compiles.jsonl"),
        ev(0, "train_step", "k1", "compiled", 2.5, "first compile").to_json() + "\n" +
            ev(2, "eval_step", "k2", "disk", 0.25, "first use in this process").to_json() + "\n" +
            ev(3, "train_step", "k3", "compiled", 1.5, "input 0 shape f32[8] -> f32[4] </script>")
                .to_json() +
            "\n");
  nlohmann::json trace = {{"traceEvents", nlohmann::json::array()}};
  for (int step = 1; step <= 3; ++step) {
    trace["traceEvents"].push_back({{"ph", "X"},
                                    {"name", "step"},
                                    {"cat", "step"},
                                    {"ts", 1e6 * step},
                                    {"dur", 1e5 * step},
                                    {"pid", 0},
                                    {"tid", 0},
                                    {"args", {{"step", step}}}});
  }
  write(tmp / (dir + "/trace.json"), trace.dump());
  write(tmp / (cache_dir + "/calibration.jsonl"),
        "{\"config_id\":\"c1\",\"predicted_peak_bytes\":100,\"observed_peak_bytes\":120}\n"
        "{\"config_id\":\"other\",\"predicted_peak_bytes\":7,\"observed_peak_bytes\":7}\n"
        "{\"config_id\":\"c1\",\"predicted_peak_bytes\":100,\"observed_peak_bytes\":110}\n");
  nlohmann::json record = {
      {"bundle", {{"compiler", "c++"}, {"host.cpu_model", "X"}}},
      {"policy", {{"launch", {{"seed", {{"origin", "default"}, {"value", 0}}}}}}},
      {"config", {{"steps", 3}, {"model", {{"name", "code-s"}}}}},
      {"time_to_first_step_s", 2.5},
      {"programs", 3},
      {"compiles", 2},
      {"memory",
       {{"predicted_peak_bytes", 100},
        {"observed_peak_bytes", 110},
        {"calibration",
         {{"file", tmp / (cache_dir + "/calibration.jsonl")}, {"config_id", "c1"}}}}},
      {"metrics", {{"first_step", 1}, {"last_step", 3}, {"train_loss", 4.75}}},
      {"ranks",
       {{{"rank", 0}, {"host", "a"}, {"predicted_peak_bytes", 100}, {"observed_peak_bytes", 110}},
        {{"rank", 1},
         {"host", "b"},
         {"predicted_peak_bytes", 100},
         {"observed_peak_bytes", 130}}}}};
  write(tmp / (dir + "/record.json"), record.dump());
}

TEST(RunReport, ReadsEverySeriesTheChartsShow) {
  TempDir tmp;
  write_run(tmp, "run", "cache");
  const RunReportData r = read_run_report(tmp / "run");
  const nlohmann::json& d = r.data;
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  ASSERT_EQ(d["steps"].size(), 3u);
  EXPECT_EQ(d["steps"][1]["loss"], 5.25);
  EXPECT_EQ(d["steps"][1]["rank_busy_ms"], nlohmann::json::parse("[140.5,null]"));
  EXPECT_FALSE(d["steps"][0].contains("rank_busy_ms"));
  ASSERT_EQ(d["evals"].size(), 1u);
  EXPECT_EQ(d["evals"][0]["val_bits_per_byte"], 6.25);
  ASSERT_EQ(d["moe"].size(), 1u);
  EXPECT_EQ(d["moe"][0]["load"][0][0], 3);
  // Distinct programs after each step that added one: 1 at step 0, 2 at step 2, 3 at step 3.
  EXPECT_EQ(d["programs"],
            nlohmann::json::parse(
                R"([{"step":0,"programs":1},{"step":2,"programs":2},{"step":3,"programs":3}])"));
  {  // a curve that flattens runs on to the last step
    TempDir flat;
    write_run(flat, "run", "cache");
    write(flat / "run/compiles.jsonl",
          ev(0, "train_step", "k1", "compiled", 2.5, "first compile").to_json() + "\n");
    EXPECT_EQ(read_run_report(flat / "run").data["programs"],
              nlohmann::json::parse(R"([{"step":0,"programs":1},{"step":3,"programs":1}])"));
  }
  // The timeline: execute seconds from the trace, compile and load seconds with their reasons.
  ASSERT_EQ(d["timeline"].size(), 4u);  // steps 0..3
  EXPECT_EQ(d["timeline"][0]["compile_s"], 2.5);
  EXPECT_EQ(d["timeline"][2]["load_s"], 0.25);
  EXPECT_NEAR(d["timeline"][2]["execute_s"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(d["timeline"][3]["compile_s"], 1.5);
  EXPECT_NE(
      d["timeline"][3]["compiles"][0].get<std::string>().find("input 0 shape f32[8] -> f32[4]"),
      std::string::npos);
  // Memory per rank and the calibration history of this config only, oldest first.
  ASSERT_EQ(d["memory"]["ranks"].size(), 2u);
  EXPECT_EQ(d["memory"]["ranks"][1]["observed_peak_bytes"], 130);
  ASSERT_EQ(d["calibration"]["history"].size(), 2u);
  EXPECT_EQ(d["calibration"]["history"][1]["observed_peak_bytes"], 110);
  EXPECT_EQ(d["policy"]["launch.seed"]["origin"], "default");
  EXPECT_EQ(d["bundle"]["compiler"], "c++");
}

// A diverged step's loss is written as null: the chart gets no point there, not a zero.
TEST(RunReport, ANonFiniteFigureIsAGapNotAZero) {
  TempDir tmp;
  write_run(tmp, "run", "cache");
  std::ofstream(tmp / "run/metrics.jsonl", std::ios::app)
      << "{\"step\":4,\"loss\":null,\"lr\":0.001,\"grad_norm\":null,\"ms_per_step\":150,"
         "\"tokens_per_s\":12000,\"compiled\":true}\n"
         "{\"step\":4,\"val_loss\":null,\"val_bits_per_byte\":null}\n";
  const RunReportData r = read_run_report(tmp / "run");
  EXPECT_TRUE(r.problems.empty()) << r.problems.front();
  ASSERT_EQ(r.data["steps"].size(), 4u);
  EXPECT_TRUE(r.data["steps"][3]["loss"].is_null()) << r.data["steps"][3];
  EXPECT_TRUE(r.data["steps"][3]["grad_norm"].is_null());
  EXPECT_EQ(r.data["steps"][3]["lr"], 0.001);
  ASSERT_EQ(r.data["evals"].size(), 2u);
  EXPECT_TRUE(r.data["evals"][1]["val_loss"].is_null());
  EXPECT_TRUE(r.data["evals"][1]["val_bits_per_byte"].is_null());
}

TEST(RunReport, DamagedAndMissingInputsAreNamedNotFatal) {
  TempDir tmp;
  write_run(tmp, "run", "cache");
  std::ofstream(tmp / "run/metrics.jsonl", std::ios::app)
      << "{\"step\":4,\"loss\":4.5,\"l";  // torn
  write(tmp / "run/record.json", "{\"bundle\": {");
  fs::remove(tmp / "run/trace.json");
  {  // an event file cut inside its second record
    EventWriter w(tmp / "run/tb");
    w.add_scalar("train/loss", 1, 5.0f, 1.0);
    w.flush();
    fs::resize_file(w.path(), fs::file_size(w.path()) - 3);
  }
  const RunReportData r = read_run_report(tmp / "run");
  std::string all;
  for (const std::string& p : r.problems) all += p + "\n";
  EXPECT_NE(all.find("metrics.jsonl:5: not a JSON object"), std::string::npos) << all;
  EXPECT_NE(all.find("record.json: not a JSON object"), std::string::npos) << all;
  EXPECT_NE(all.find("trace.json: missing"), std::string::npos) << all;
  EXPECT_NE(all.find("tb/events.out.tfevents."), std::string::npos) << all;
  EXPECT_NE(all.find("truncated"), std::string::npos) << all;
  EXPECT_EQ(r.data["steps"].size(), 3u);  // the good lines still count
  // Without the trace, execute time comes from the metrics' log points.
  EXPECT_NEAR(r.data["timeline"][1]["execute_s"].get<double>(), 0.2, 1e-12);
  const std::string page = render_run_report(r, tmp / "no-chart.js");
  EXPECT_NE(page.find("<!DOCTYPE html>"), std::string::npos);

  // An empty directory is a report that lists everything missing.
  fs::create_directories(tmp / "empty");
  const RunReportData e = read_run_report(tmp / "empty");
  EXPECT_EQ(e.problems.size(), 4u);  // metrics, compiles, trace, record
}

TEST(RunReport, ThePageInlinesChartJsAndTheDataSafely) {
  TempDir tmp;
  write_run(tmp, "run", "cache");
  write(tmp / "chart.js", "/* CHART-JS-MARKER */ window.Chart = function () {};");
  const std::string page = render_run_report(read_run_report(tmp / "run"), tmp / "chart.js");
  EXPECT_NE(page.find("CHART-JS-MARKER"), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);  // nothing fetched from the network
  EXPECT_EQ(page.find("https://"), std::string::npos);
  // A reason holding "</script>" cannot end the data element early; the data parses back.
  const std::string open = "<script id=\"keel-data\" type=\"application/json\">";
  const size_t from = page.find(open) + open.size();
  const size_t to = page.find("</script>", from);
  const nlohmann::json back = nlohmann::json::parse(page.substr(from, to - from));
  EXPECT_EQ(back["compiles"][2]["reason"], "input 0 shape f32[8] -> f32[4] </script>");
}

TEST(RunReport, CompareListsWhatDiffersFromAnotherRun) {
  TempDir tmp;
  write_run(tmp, "a", "cache");
  write_run(tmp, "b", "cache");
  nlohmann::json rec = nlohmann::json::parse(slurp(tmp / "b/record.json"));
  rec["policy"]["launch"]["seed"] = {{"origin", "--set launch.seed=7"}, {"value", 7}};
  rec["bundle"]["host.cpu_model"] = "Y";
  write(tmp / "b/record.json", rec.dump());
  const RunReportData r = read_run_report(tmp / "a", tmp / "b");
  const nlohmann::json& c = r.data["compare"];
  ASSERT_EQ(c["policy"].size(), 1u);
  EXPECT_EQ(c["policy"][0]["key"], "launch.seed");
  EXPECT_EQ(c["policy"][0]["other"]["value"], 7);
  ASSERT_EQ(c["bundle"].size(), 1u);
  EXPECT_EQ(c["bundle"][0]["this"], "X");
  EXPECT_TRUE(c["config"].empty());
}

}  // namespace
}  // namespace keel::diag
