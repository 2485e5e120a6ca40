#pragma once
// One transformer block and what it needs, shared by the whole-model forward (nn/gpt.cpp) and
// the layer stack (nn/layer_stack.h). Internal to nn/.
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace keel::nn {

// What every block needs besides its input: the documents and rotary angles.
struct Context {
  Tensor doc_ids;   // [B, T]: attention stays within a document; undefined: one per row
  Tensor cos, sin;  // rotary: [B, T, 1, D/2]; undefined for learned positions
};

// What the MoE layers of a forward pass report, gathered as the blocks run.
struct MoeTotals {
  std::vector<Tensor> load;  // [n, E] row blocks, in layer order
  Tensor aux, dropped;       // undefined until an MoE layer ran
  void add(const MoeTotals& more);
};

std::string under(const std::string& prefix, const char* rest);  // prefix + "." + rest
// The configured norm (layernorm or rmsnorm) with the parameters under `prefix`.
Tensor norm(const GptConfig& c, const NamedTensors& p, const std::string& prefix, const Tensor& x);
// Pre-norm block under `prefix`: x + attn(norm_1(x)), then + mlp(norm_2(x)) (or experts, when
// `moe`, adding to `totals`).
Tensor block(const GptConfig& c, const NamedTensors& p, const std::string& prefix, bool moe,
             const Tensor& x, const Context& ctx, MoeTotals& totals);

}  // namespace keel::nn
