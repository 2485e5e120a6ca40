#pragma once
// keel report: one self-contained HTML page per run directory, from what the run wrote
// (metrics.jsonl, compiles.jsonl, record.json, trace.json, the calibration file). A missing or
// damaged input is named on the page and its charts are left out; it never stops the report.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace keel::diag {

// What the page is drawn from: every series the charts show, and `problems`, one line per
// input that was missing or could not be read ("metrics.jsonl:7: not JSON ...").
struct RunReportData {
  nlohmann::json data = nlohmann::json::object();
  std::vector<std::string> problems;
};

// Reads RUN_DIR; `compare_dir` (optional) is another run whose policy, bundle and config are
// diffed against this one's.
RunReportData read_run_report(const std::string& run_dir, const std::string& compare_dir = "");

// Where Debian's libjs-chart.js puts the library the page inlines.
inline constexpr const char* kChartJsPath = "/usr/share/javascript/chart.js/chart.min.js";

// The page: Chart.js inlined from `chart_js_path` (when it cannot be read the page says so and
// shows its tables only), the data as JSON, and the script that draws it.
std::string render_run_report(const RunReportData& report,
                              const std::string& chart_js_path = kChartJsPath);

// read + render + publish atomically to `out` (default RUN_DIR/report.html); returns the path.
std::string write_run_report(const std::string& run_dir, const std::string& out = "",
                             const std::string& compare_dir = "",
                             const std::string& chart_js_path = kChartJsPath);

}  // namespace keel::diag
