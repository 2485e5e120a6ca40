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

namespace keel::nn {

struct MoeConfig {
  int64_t experts = 4;            // routed experts E
  int64_t top_k = 2;              // choices per token
  double capacity_factor = 1.25;  // capacity = ceil(factor * tokens * top_k / experts)
  int64_t hidden = 0;             // each expert's SwiGLU width; 0: the model's mlp_hidden
  bool shared_expert = true;      // one more SwiGLU expert every token goes through
  double router_z_weight = 1e-3;  // weight of mean(logsumexp(router logits)^2)
  double balance_weight = 1e-2;   // weight of E * sum_e(fraction routed_e * mean prob_e)
  void validate(const std::string& source) const;
};

// Choice slots per expert for `tokens` tokens: ceil(capacity_factor * tokens * top_k / E),
// at least 1 and at most tokens.
int64_t moe_capacity(const MoeConfig& c, int64_t tokens);

// Parameter names (under `prefix`) and shapes for width C and hidden F:
//   router.weight [C, E], experts.c_fc.weight [E, C, 2F], experts.c_proj.weight [E, F, C],
//   shared.c_fc.weight [C, 2F], shared.c_proj.weight [F, C] (shared only when enabled).
std::vector<std::pair<std::string, Shape>> moe_param_shapes(const MoeConfig& c,
                                                            const std::string& prefix,
                                                            int64_t width, int64_t hidden);

struct MoeOutput {
  Tensor y;         // [B, T, C]
  Tensor aux_loss;  // f32 scalar: the weighted router z-loss plus load-balancing loss
  Tensor load;      // f32 [E]: token choices routed to each expert, before capacity
  Tensor dropped;   // f32 scalar: token choices dropped for capacity
};

// x [B, T, C]; the expert widths come from the parameters' shapes.
MoeOutput moe_ffn(const MoeConfig& c, const Params& p, const std::string& prefix, const Tensor& x);

}  // namespace keel::nn
