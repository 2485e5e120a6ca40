#pragma once
/// @file
/// What a mixture-of-experts layer is made of; a field of nn::GptConfig. The layer is nn/moe.h.
#include <cstdint>
#include <string>

namespace keel::nn {

/// A mixture-of-experts feed-forward: E routed SwiGLU experts, top_k of them per token.
struct MoeConfig {
  int64_t experts = 4;            ///< routed experts E
  int64_t top_k = 2;              ///< choices per token
  double capacity_factor = 1.25;  ///< capacity = ceil(factor * tokens * top_k / experts)
  int64_t hidden = 0;             ///< each expert's SwiGLU width; 0: the model's mlp_hidden
  bool shared_expert = true;      ///< one more SwiGLU expert every token goes through
  double router_z_weight = 1e-3;  ///< weight of mean(logsumexp(router logits)^2)
  double balance_weight = 1e-2;   ///< weight of E * sum_e(fraction routed_e * mean prob_e)
  /// keel::InputError naming `source` for an out-of-range field.
  void validate(const std::string& source) const;
  bool operator==(const MoeConfig&) const = default;  ///< every field equal
};

/// Choice slots per expert for `tokens` tokens: ceil(capacity_factor * tokens * top_k / E),
/// at least 1 and at most tokens.
int64_t moe_capacity(const MoeConfig& c, int64_t tokens);

}  // namespace keel::nn
