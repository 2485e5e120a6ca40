// `keel report RUN_DIR [-o FILE.html] [--compare OTHER_RUN]`: the run as one HTML page
// (diag/run_report.h).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>

#include "diag/run_report.h"
#include "files/publish.h"
#include "ir/error.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"

namespace keel::cli {
namespace {

struct ReportArgs {
  std::string run_dir, out, compare;
};

// An existing -o file is replaced only when it is empty or an HTML page (an earlier report):
// not a run's record or any other file given by mistake.
void refuse_to_replace_other_files(const std::string& path) {
  // Only a regular file is opened (a pipe would block); the rest publish_file refuses itself.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec))) return;
  std::ifstream in(path, std::ios::binary);
  std::string head(64, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  if (head.starts_with("\xEF\xBB\xBF")) head.erase(0, 3);  // a UTF-8 byte order mark
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!head.empty() && !head.starts_with("<!doctype html")) {
    throw InputError(fmt::format(
        "[report] {} exists and is not an HTML page; the report would replace it: give a new "
        "path or an earlier report's",
        path));
  }
}

void run_report(const ReportArgs& a) {
  for (const std::string& dir : {a.run_dir, a.compare}) {
    std::error_code ec;  // a path too long to stat is not a directory either
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      throw InputError(
          fmt::format("[report] {} is not a directory; give a run directory (the "
                      "--run-dir of keel train)",
                      dir));
    }
    // A directory no run wrote to (a corpus, a home) gets no page: it would land among its files.
    bool run = false;
    for (const char* f : {"metrics.jsonl", "compiles.jsonl", "record.json", "trace.json"}) {
      run = run || std::filesystem::exists(std::filesystem::path(dir) / f, ec);
    }
    if (!dir.empty() && !run) {
      throw InputError(
          fmt::format("[report] {} is not a run directory (it has no metrics.jsonl, "
                      "compiles.jsonl, record.json or trace.json); give the --run-dir of a keel "
                      "train",
                      dir));
    }
  }
  const diag::RunReportData data = diag::read_run_report(a.run_dir, a.compare);
  const std::string path = a.out.empty() ? a.run_dir + "/report.html" : a.out;
  refuse_to_replace_other_files(path);
  files::publish_file(path, diag::render_run_report(data));
  fmt::print("report {}{}\n", path,
             data.problems.empty()
                 ? ""
                 : fmt::format(" ({} missing or damaged input{}, named on the page)",
                               data.problems.size(), data.problems.size() == 1 ? "" : "s"));
  for (const std::string& p : data.problems) fmt::print("  {}\n", p);
}

}  // namespace

void add_report(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write RUN_DIR as one self-contained HTML page: loss, bits/byte, learning rate, grad norm, "
      "the step timeline with each compile and its reason, programs over steps, memory, MoE "
      "loads, the launch policy and bundle");
  cmd->add_option("RUN_DIR", a->run_dir, "a run directory (keel train --run-dir)")->required();
  cmd->add_option("-o,--output", a->out, "the HTML file (default RUN_DIR/report.html)");
  cmd->add_option("--compare", a->compare,
                  "another run directory: diff its policy, bundle, config");
  on_run(cmd, [a] { run_report(*a); });
}

}  // namespace keel::cli
