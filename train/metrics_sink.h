#pragma once
// Where a run's metrics go: RUN_DIR/metrics.jsonl (one JSON line per log point, written with a
// single write each) and TensorBoard event files in RUN_DIR/tb.
#include <string>

#include "diag/tb_events.h"
#include "files/append.h"
#include "train/trainer.h"

namespace keel::train {

// A resumed run continues from its checkpoint's step: the log points of steps after it (from the
// run that went on past it and stopped) are dropped from metrics.jsonl, which is rewritten
// atomically, so the file holds each step once. Returns how many lines were dropped.
int64_t drop_metrics_after(const std::string& run_dir, int64_t step);

class MetricsSink {
 public:
  // keel::Error naming the file when metrics.jsonl cannot be opened for appending. A torn last
  // line a crash left behind is cut off first.
  explicit MetricsSink(const std::string& run_dir);
  // A training log point; `moe` adds the MoE fields (counters summed over `moe_steps` steps).
  void step(const StepLog& s, bool moe, int64_t moe_steps);
  void eval(const EvalLog& e);

 private:
  void line(const std::string& json);
  files::AppendFile out_;
  diag::EventWriter tb_;
};

}  // namespace keel::train
