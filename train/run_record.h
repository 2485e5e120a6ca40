#pragma once
// RUN_DIR/record.json: what ran (bundle, policy with origins, options), what it cost
// (time to first step, programs, compiles, cache, predicted and observed memory) and the final
// metrics. Published atomically.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/runtime.h"
#include "train/train_state.h"
#include "train/trainer.h"

namespace keel::train {

// Host reads of device-held values (keel::host_read_count) over a run, and in its steps: a
// reporting step logs, evaluates or checkpoints (reads its figures or state); a quiet step does
// none of that. Lone reads (keel::lone_host_read_count) waited for a copy nothing overlapped.
struct HostReads {
  int64_t total = 0;  // from the start of the run to its record
  int64_t quiet_steps = 0, in_quiet_steps = 0;
  int64_t reporting_steps = 0, in_reporting_steps = 0, lone_in_reporting_steps = 0;
};

struct RunFigures {
  double time_to_first_step_s = 0;
  std::vector<double> step_seconds;  // every step after the first
  double tokens_per_step = 0;
  int64_t predicted_peak_bytes = 0, observed_peak_bytes = 0;
  StateBytes state;                              // this process's training state
  std::vector<StateTensorLayout> state_layout;   // and how each tensor of it lies
  int64_t zero = 0, data_processes = 1;          // sharding.zero and the data axis's size
  int64_t model_processes = 1;                   // the processes the blocks split over
  std::string calibration_file, calibration_id;  // where this config's history is
  // What the state's Variables hold at the end, measured from their buffers: parameters and both
  // moments (the gradients live inside the step's program only).
  StateBytes held;
  HostReads host_reads;
  // The indexer warm-up (--indexer-warmup) this run did: its steps and the indexers' KL at its
  // first and last; no steps when none ran.
  struct IndexerWarmup {
    int64_t steps = 0;
    double first_kl = 0, last_kl = 0;
  } indexer_warmup;
};

// Every process gathers each one's figures (rank, host, threads, programs, compiles, cache
// hits, predicted and observed peak memory); the leader writes the record with all of them
// under "ranks". Returns the record's path. All processes call it together.
std::string write_run_record(Runtime& rt, const TrainOptions& o, const TrainResult& result,
                             RunFigures figures, bool leader = true);

}  // namespace keel::train
