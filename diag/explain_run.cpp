// Summarises a run's compile log: which functions needed how many programs, and why.
#include "diag/explain_run.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>

#include "ir/error.h"
#include "ir/text.h"

namespace keel::diag {
namespace {

std::string count(int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string totals_text(const CompileTotals& c) {
  std::string s = fmt::format(
      "{} ({:.2f} s), {} ({:.2f} s)", count(c.compiles, "compile", "compiles"), c.compile_seconds,
      count(c.disk_hits, "load from disk", "loads from disk"), c.load_seconds);
  if (c.memory_hits) s += ", " + count(c.memory_hits, "memory hit", "memory hits");
  return s;
}

}  // namespace

RunSummary summarize_run(const std::vector<CompileEvent>& events, std::string source) {
  RunSummary s;
  s.source = std::move(source);
  std::map<std::string, size_t> index;
  std::map<std::string, std::set<std::string>> keys;
  for (const CompileEvent& e : events) {
    auto [it, added] = index.emplace(e.function, s.functions.size());
    if (added) s.functions.emplace_back();
    FunctionRun& f = s.functions[it->second];
    f.function = e.function;
    if (keys[e.function].insert(e.key).second) {
      ++f.programs;
      ++s.programs;
      f.last_new_program_step = e.step;
    }
    for (CompileTotals* c : {&f.totals, &s.totals}) {
      if (e.tier == "memory") {
        ++c->memory_hits;
      } else if (e.tier == "disk") {
        ++c->disk_hits;
        c->load_seconds += e.seconds;
      } else {
        ++c->compiles;
        c->compile_seconds += e.seconds;
      }
    }
    if (e.tier != "memory") f.events.push_back(e);
  }
  return s;
}

RunSummary summarize_run_dir(const std::string& run_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    throw InputError(fmt::format(
        "[diag] {} is not a run directory: {}", run_dir,
        std::filesystem::exists(run_dir, ec) ? "not a directory" : "it does not exist"));
  }
  std::string path = (std::filesystem::path(run_dir) / "compiles.jsonl").string();
  return summarize_run(read_compile_log(path), path);
}

std::string format_run_summary(const RunSummary& s) {
  std::string out = s.source.empty() ? "" : s.source + ": ";
  if (s.functions.empty()) return out + "no compiles or loads recorded\n";
  out += fmt::format("{}, {}; {}\n",
                     count(static_cast<int64_t>(s.functions.size()), "function", "functions"),
                     count(s.programs, "program", "programs"), totals_text(s.totals));
  for (const FunctionRun& f : s.functions) {
    out += fmt::format("{}: {}; {}", name_text(f.function),
                       count(f.programs, "program", "programs"), totals_text(f.totals));
    if (f.programs > 1)
      out += fmt::format("; last new program at step {}", f.last_new_program_step);
    out += "\n";
    for (const CompileEvent& e : f.events) {
      out += fmt::format("  step {:<6} {:<8} {:>8.2f} s  {:.12}  {}\n", e.step,
                         printable_text(e.tier), e.seconds, printable_text(e.key),
                         e.reason.empty() ? "(no reason recorded)" : printable_text(e.reason));
    }
  }
  return out;
}

}  // namespace keel::diag
