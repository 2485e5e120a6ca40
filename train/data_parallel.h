#pragma once
// Data parallelism as the trainer sees it: the processes on the mesh axis "data" split every
// step's micro-batches and every evaluation's batches. Batches are a function of the global
// micro-batch index, so the global batch is the same for any number of processes; the step
// program reduces over the axis itself (train/accumulate.h).
#include <string>
#include <vector>

#include "data/batch.h"
#include "runtime/runtime.h"
#include "trace/bucketed.h"
#include "trace/tensor.h"

namespace keel::train {

struct DataShare {
  int64_t ranks = 1;   // processes on the data axis
  int64_t rank = 0;    // this process's index on it
  bool leader = true;  // world rank 0: writes checkpoints, metrics and the run record
};

DataShare data_share(const Runtime& rt);

// This process's micro-batches [rank*K, (rank+1)*K) of a global batch of ranks*K.
std::vector<Tensor> share_of(const data::Batch& global, const DataShare& share, int64_t K);

// Every process's `mine`, in data-axis order (all processes call it together).
std::vector<float> gather_over_data(const std::vector<float>& mine);

// Every process's text, in world rank order (all processes call it together).
std::vector<std::string> gather_text_over_world(const std::string& mine);
// Every process's text, in data-axis order (all processes call it together).
std::vector<std::string> gather_text_over_data(const std::string& mine);
// The bucket figures of work split over the data axis, as one process doing all of it would
// have them: calls and positions summed, the buckets used joined (all processes call it).
BucketStats gather_bucket_stats(const BucketStats& mine);
// Every process of the launch waits here for the leader's own work (`what`: a checkpoint,
// sampling), with the long deadline (spmd.first_run_timeout_s), so the next collective's short
// one does not count it. No-op in one process.
void wait_for_leader(const std::string& what);
// What the processes say to each other after step `step`: the stop request every one acts on
// (train/stop_request.h; the lowest rank's that has one, else 0), and each one's busy seconds
// since it last said (not waiting for its peers), by world rank. All processes call it
// together; in one process it returns `stop` and no busy figures.
struct AfterStep {
  int stop = 0;
  std::vector<double> busy_s;
};
AfterStep agree_after_step(int stop, double busy_s, int64_t step);

// The note a log line gets when one process is clearly the slowest (busy at least 1.5x the
// median of the others and 10 ms more): "  slowest: rank 1 (host b), busy 812 ms a step, 2.1x
// the others"; else "".
std::string straggler_note(const std::vector<double>& busy_ms);

}  // namespace keel::train
