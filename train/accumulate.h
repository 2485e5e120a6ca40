#pragma once
// Gradient accumulation inside a traced step: K micro-batches, each a forward and backward of
// the model, summed in the order of their index from zeros. With K > 1 the micro-batch is the
// body of a keel::scan, so the program and its compile time do not grow with K; the unrolled
// form is kept for K = 1 and as the reference the scanned sums equal bit for bit.
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace keel::train {

using nn::Params;
using Counters = std::map<std::string, Tensor>;

// What the micro-batches add up.
struct MicroSums {
  Params grads;                  // of the objective, per parameter
  Tensor loss;                   // next-token loss / live targets of the whole step
  Tensor aux;                    // MoE router losses / K
  std::vector<Tensor> mtp_loss;  // per MTP depth, / its live targets
  Counters counters;             // MoE load and dropped counts, added onto the step's input
};

enum class Accumulation { automatic, unrolled, scanned };

// Inside a trace: the sums over the micro-batches of batch fields [K, B, T] (tokens, targets,
// loss_mask, positions, doc_ids, ...), starting from zeros and from `counters`. `denominators`
// as step_denominators gives them. automatic: scanned when K > 1.
MicroSums accumulate_micro_batches(const nn::GptConfig& config, const Params& p,
                                   const std::vector<Tensor>& batch,
                                   const std::vector<Tensor>& denominators,
                                   const Counters& counters,
                                   Accumulation how = Accumulation::automatic);

}  // namespace keel::train
