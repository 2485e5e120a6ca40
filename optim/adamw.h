#pragma once
// AdamW whose every per-step value (learning rate, betas, eps, weight decay, step count) is a
// device tensor, so changing any of them never changes the program.
#include <map>
#include <string>

#include "trace/ops.h"

namespace keel::optim {

using Params = std::map<std::string, Tensor>;

struct AdamWScalars {
  Tensor lr, beta1, beta2, eps, weight_decay;
  Tensor step;  // 1-based step count, f32
};

struct AdamWResult {
  Params params, m, v;
};

// One decoupled-weight-decay Adam update for every entry of `params`. Weight decay applies to
// entries whose name `decays` (matrices; not biases, norms or embeddings by default).
AdamWResult adamw_update(const Params& params, const Params& grads, const Params& m,
                         const Params& v, const AdamWScalars& s);

// Default decay rule: rank >= 2 and not an embedding ("wte", "wpe"); for stacked layer
// parameters (names under "scan.") the rank of one layer's slice.
bool default_decays(const std::string& name, const Tensor& param);

}  // namespace keel::optim
