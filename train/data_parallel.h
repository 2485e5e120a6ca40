#pragma once
// Data parallelism as the trainer sees it: the processes on the mesh axis "data" split every
// step's micro-batches and every evaluation's batches. Batches are a function of the global
// micro-batch index, so the global batch is the same for any number of processes; the step
// program reduces over the axis itself (train/accumulate.h).
#include <string>
#include <vector>

#include "data/batch.h"
#include "runtime/runtime.h"
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
// Every process of the launch waits here for the leader's own work (`what`: a checkpoint,
// sampling), with the long deadline (spmd.first_run_timeout_s), so the next collective's short
// one does not count it. No-op in one process.
void wait_for_leader(const std::string& what);
// The stop request (train/stop_request.h) every process acts on after step `step`: the lowest
// rank's that has one, else 0. All processes call it together; no-op in one process.
int agreed_stop_request(int mine, int64_t step);

}  // namespace keel::train
