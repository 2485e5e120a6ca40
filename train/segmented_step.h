#pragma once
// The train step split at layer barriers (launch.layer_layout = split:n) for memory
// headroom. Per micro-batch: the embedding program, one forward program per segment of n
// layers (only each segment's input is kept), the head program (losses and their gradient), one
// backward program per segment that recomputes its forward, the embedding's backward; then one
// update program. Segments of one structure share a program, so the set of programs is fixed
// by the config for the whole run, and none grows with depth. It computes what
// make_train_step's one program computes (tested equal to rounding). Like it, it writes the
// parameters, moments, counters and gradient sums in place of its arguments (donation). Each
// micro-batch's sums start from zeros and the host adds them in the tree of dist/fixed_order.h;
// the update program all-reduces them over the data axis, so N processes with K micro-batches
// each compute what one process with N*K does, bit for bit, when N is a power of two or K is 1.
// Under tensor parallelism each program takes this process's shards of the tensors the blocks
// split over "model" (their gradient sums too), and the update sums the norm over the axis.
// Under ZeRO (StepOptions' split_*) the update takes the moments' slices (stage 1), scatters the
// gradient sums (2), and at stage 3 every program takes its parameters' slices and gathers them.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/gpt.h"
#include "train/step.h"

namespace keel::train {

// Per program name: predicted peak bytes and the bytes of its inputs (as the JIT reports them).
using ProgramMemoryMap = std::map<std::string, std::pair<int64_t, int64_t>>;

class SegmentedStep {
 public:
  // A program every config.layout.split_every layers; keel::InputError when that is < 1.
  // options.donate: whether the programs write the new state and the running sums in place
  // (options.accumulation does not apply: the host loops over micro-batches).
  explicit SegmentedStep(const nn::GptConfig& config, StepOptions options = {});

  // Same arguments and results as TrainStepFn; consumes params, m, v and counters likewise.
  StepOutputs operator()(const NamedTensors& p, const NamedTensors& m, const NamedTensors& v,
                         const Counters& counters, const std::vector<Tensor>& batch,
                         const std::vector<Scalar>& scalars) const;
  // Traces and prepares (compiles or loads) every program the step runs, running none.
  void prepare(const NamedTensors& p, const NamedTensors& m, const NamedTensors& v,
               const Counters& counters, const std::vector<Tensor>& batch,
               const std::vector<Scalar>& scalars) const;

  // (first layer, layer count) of each segment.
  const std::vector<std::pair<int64_t, int64_t>>& segments() const { return segments_; }
  // The names of the programs a step of one micro-batch runs (fixed by the config); with more,
  // "accumulate" adds them up.
  std::vector<std::string> program_names() const;
  // What the host holds between programs (parameters, moments, the gradient sums of
  // `micro_batches` in their tree, the segment inputs of one micro-batch) plus the largest
  // program's peak beyond its own inputs. `data_processes`: what ZeRO splits the state over.
  int64_t predicted_peak_bytes(const ProgramMemoryMap& programs, int64_t batch, int64_t seq,
                               int64_t micro_batches, int64_t data_processes = 1) const;

 private:
  struct Programs;
  StepOutputs run(bool prepare_only, const NamedTensors& p, const NamedTensors& m,
                  const NamedTensors& v, const Counters& counters, const std::vector<Tensor>& batch,
                  const std::vector<Scalar>& scalars) const;

  nn::GptConfig config_;
  StepOptions options_;
  std::vector<std::pair<int64_t, int64_t>> segments_;
  std::vector<std::string> patterns_;  // per segment: nn::layer_kinds of its layers
  std::shared_ptr<Programs> programs_;
};

}  // namespace keel::train
