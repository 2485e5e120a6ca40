#pragma once
// Where a run's metrics go: RUN_DIR/metrics.jsonl (one JSON line per log point, written with a
// single write each) and TensorBoard event files in RUN_DIR/tb.
#include <string>

#include "diag/tb_events.h"
#include "files/append.h"
#include "train/trainer.h"

namespace keel::train {

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
