#pragma once
// Gradient accumulation inside a traced step: K micro-batches, each a forward and backward of
// the model, summed from zeros in the fixed tree of dist/fixed_order.h (K odd: in index order;
// K even: tree of each half), then all-reduced over the mesh axis "data" in the same tree, so
// N processes with K micro-batches each compute what one process with N*K does, bit for bit.
// With K > 1 each level is a keel::scan, so the program grows with log2 K, not K; the unrolled
// form is kept for K = 1 and as the reference the scanned sums equal bit for bit.
#include <set>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "nn/tensor_parallel.h"

namespace keel::train {

using Counters = std::map<std::string, Tensor>;

// What the micro-batches add up.
struct MicroSums {
  NamedTensors grads;            // of the objective, per parameter
  Tensor loss;                   // next-token loss / live targets of the whole step
  Tensor aux;                    // MoE router losses / K
  std::vector<Tensor> mtp_loss;  // per MTP depth, / its live targets
  Tensor indexer;                // sparse attention's indexer KL / the step's query positions
  Counters counters;             // MoE load and dropped counts, added onto the step's input
};

enum class Accumulation { automatic, unrolled, scanned };

// The mesh axis data parallelism splits the batch over.
using nn::kDataAxis;

struct AccumulateOptions {
  Accumulation how = Accumulation::automatic;  // automatic: scanned when K > 1
  // The gradients as each process's flat slice of every one (train/moment_shards.h),
  // reduce-scattered; else all-reduced whole.
  bool scatter_grads = false;
  // Non-empty (ZeRO stage 3): the parameters are this process's flat slices of tensors of these
  // types, gathered whole inside each micro-batch; the gradients are of the whole tensors.
  std::map<std::string, TensorType> gathered_params = {};
  // Non-empty: only these parameters are differentiated (the others are constants of the
  // objective) and the gradients hold theirs alone (the indexer warm-up, StepOptions).
  std::set<std::string> trained = {};
};

// Inside a trace: the sums over the micro-batches of batch fields [K, B, T] (tokens, targets,
// loss_mask, positions, doc_ids, ...), starting from zeros and from `counters`. `denominators`
// as step_denominators gives them (over every process). The results are the same on every
// process, except the gradients when scattered.
MicroSums accumulate_micro_batches(const nn::GptConfig& config, const NamedTensors& p,
                                   const std::vector<Tensor>& batch,
                                   const std::vector<Tensor>& denominators,
                                   const Counters& counters, const AccumulateOptions& o = {});
// Inside a trace: the whole tensors (of `types`) from this process's flat slices `slices` over
// the data axis, the same on every process.
NamedTensors gather_slices(const NamedTensors& slices,
                           const std::map<std::string, TensorType>& types);

}  // namespace keel::train
