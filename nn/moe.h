#pragma once
// A mixture-of-experts feed-forward layer with a static shape: top-k routing over E routed
// SwiGLU experts plus one shared expert. Each expert takes at most `capacity` token choices,
// a number fixed from the configuration and the (static) token count at trace time, never from
// the batch's content; choices past it are dropped in a fixed order (every token's first choice
// before any second choice, tokens in order), so any batch of the same shape runs the same
// program. Load and drop counters come out as device tensors for the host to read at log
// points.
#include <string>

#include "nn/gpt.h"
#include "nn/moe_config.h"

namespace keel::nn {

// Parameter names (under `prefix`) and shapes for width C and hidden F:
//   router.weight [C, E], experts.c_fc.weight [E, C, 2F], experts.c_proj.weight [E, F, C],
//   shared.c_fc.weight [C, 2F], shared.c_proj.weight [F, C] (shared only when enabled).
std::vector<std::pair<std::string, Shape>> moe_param_shapes(const MoeConfig& c,
                                                            const std::string& prefix,
                                                            int64_t width, int64_t hidden);

// Whether the parameter `name` is a MoE layer's routed experts' weight (experts.c_fc or
// experts.c_proj), stacked or not.
bool is_routed_expert(const std::string& name);

struct MoeOutput {
  Tensor y;         // [B, T, C]
  Tensor aux_loss;  // f32 scalar: the weighted router z-loss plus load-balancing loss
  Tensor load;      // f32 [E]: token choices routed to each expert, before capacity
  Tensor dropped;   // f32 scalar: token choices dropped for capacity
};

// x [B, T, C]; the expert widths come from the parameters' shapes. With `model_processes` > 1
// the routed experts are this process's block of them over "model" (nn/tensor_parallel.h): it
// routes every token as the whole layer does, runs the choices of its experts, and the outputs
// are all-reduced (each choice's output is one process's, zeros elsewhere). Given per source,
// [D, held, ...] with D the processes of "data" (expert parallelism, whose processes each hold
// different tokens), the experts are this process's block over "data", D copies of it: each
// process routes its own tokens with its own capacity and sends each expert's slots to that
// expert's process (all_to_all), which runs one product per source and expert with copy s for
// source s (so each source's gradient comes apart), and the outputs come back the same way.
MoeOutput moe_ffn(const MoeConfig& c, const NamedTensors& p, const std::string& prefix,
                  const Tensor& x, int64_t model_processes = 1);

}  // namespace keel::nn
