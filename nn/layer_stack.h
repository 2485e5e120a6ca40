#pragma once
// The stack of blocks in the program. Unrolled by default; with GptConfig::layout.scanned,
// structurally identical blocks are traced once and looped inside the program over their
// stacked parameters (keel::scan), so the program, and its compile time, do not grow with
// depth. A stack that is not one repeated block has each homogeneous run scanned and the rest
// unrolled, and the plan says why in one line. Internal to nn/.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/block.h"

namespace keel::nn {

struct LayerRun {
  int64_t first = 0;    // its first layer
  int64_t period = 1;   // layers per body
  int64_t repeats = 1;  // body iterations; 1: the run is unrolled
};

struct LayerPlan {
  std::vector<LayerRun> runs;  // in layer order, covering every layer once
  std::string why;             // one line: what is scanned, or why a stack is unrolled
};

// One letter per layer first..first+count-1: d dense, m MoE; D and M the same with an n-gram
// memory; s, t, S and T the same four with Mamba-2 mixing instead of attention.
std::string layer_kinds(const GptConfig& c, int64_t first, int64_t count);

// The plan for layers first..first+count-1 (each of a kind, per layer_kinds): the
// shortest block that repeats over all of them, else from each layer on the longest stretch
// repeating some block at least twice (layers that start none are unrolled).
LayerPlan layer_plan(const GptConfig& c, int64_t first, int64_t count);

// Parameters as a scanned stack is best fed: with c.layout.scanned, slot j of each scanned run
// starting at layer f is stored stacked as scan.f.j.<rest> [R, ...] (the run's R layers), so
// the step takes, updates and returns a few stacked tensors whatever the depth; the other
// parameters keep their names. Host arrays in and out; unstack gives back the per-layer names
// (checkpoints are always per layer).
NamedTensors stack_layer_params(const GptConfig& c, const NamedTensors& per_layer);
NamedTensors unstack_layer_params(const GptConfig& c, const NamedTensors& stacked);
// The names and types stack_layer_params would give, without any data.
std::map<std::string, TensorType> stack_layer_types(
    const GptConfig& c, const std::map<std::string, TensorType>& per_layer);

// Each stacked tensor's name and the per-layer names it holds, in order: what
// stack_layer_params would make of parameters of these names.
std::vector<std::pair<std::string, std::vector<std::string>>> stacked_layer_names(
    const GptConfig& c, const std::map<std::string, TensorType>& per_layer);

// Stacked parameters a scan reads one layer at a time (ZeRO stage 3's slices, train/): the scan
// takes each one's `held` tensor as a constant, and iteration i's layer is layer(name, held, i)
// (the whole layer's values; i an i64 scalar) plus iteration i's slice of the stack the
// parameters give under that name, which is what the gradient is taken against (zeros of -0.0,
// so the sum is the fetched layer exactly). The fetched values carry no gradient.
struct LayerSource {
  NamedTensors held;  // by stacked name (scan.F.J.<rest>)
  std::function<Tensor(const std::string& name, const Tensor& held, const Tensor& index)> layer;
};

// Layers first..first+count-1 on x, per layer_plan when c.layout.scanned (else unrolled); layer
// i's parameters are named h.(i - name_offset), or come stacked (stack_layer_params).
Tensor run_layers(const GptConfig& c, const NamedTensors& p, int64_t first, int64_t count,
                  int64_t name_offset, const Tensor& x, const Context& ctx, BlockTotals& totals);

}  // namespace keel::nn
