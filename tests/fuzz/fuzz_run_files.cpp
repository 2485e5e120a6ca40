// What keel report and keel explain read from a run directory: metrics.jsonl, compiles.jsonl,
// record.json and trace.json (parts separated by "--8<--" lines). The report never refuses:
// damaged parts are named on the page; explain refuses with one line.
#include "diag/explain_run.h"
#include "diag/run_report.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = keel::fuzz::parts_of(keel::fuzz::text_of(data, size), 4);
  keel::fuzz::write_scratch("metrics.jsonl", parts[0]);
  keel::fuzz::write_scratch("compiles.jsonl", parts[1]);
  keel::fuzz::write_scratch("record.json", parts[2]);
  keel::fuzz::write_scratch("trace.json", parts[3]);
  const std::string dir = keel::fuzz::scratch_dir();
  const keel::diag::RunReportData report = keel::diag::read_run_report(dir);
  keel::diag::render_run_report(report, dir + "/no-chart.js");
  keel::fuzz::refuse_only_with_keel_errors(
      [&] { keel::diag::format_run_summary(keel::diag::summarize_run_dir(dir)); });
  return 0;
}
