#pragma once
/// @file
/// AdamW whose every per-step value (learning rate, betas, eps, weight decay, step count) is a
/// device tensor, so changing any of them never changes the program.
#include <map>
#include <set>
#include <string>

#include "trace/ops.h"

/// Optimizers whose per-step values are tensors, so changing them never changes the program.
namespace keel::optim {

/// The per-step values of an update, each a scalar tensor.
struct AdamWScalars {
  Tensor lr;            ///< learning rate
  Tensor beta1;         ///< decay of the first moment m
  Tensor beta2;         ///< decay of the second moment v
  Tensor eps;           ///< added to sqrt(v) (after bias correction) in the denominator
  Tensor weight_decay;  ///< decoupled weight decay, scaled by lr
  Tensor step;          ///< 1-based step count, f32
};

/// The updated parameters and optimizer state.
struct AdamWResult {
  NamedTensors params;  ///< parameters after the update
  NamedTensors m;       ///< first moment (moving average of the gradients)
  NamedTensors v;       ///< second moment (uncentred variance of the gradients)
};

/// One decoupled-weight-decay Adam update for every entry of `params`. Weight decay applies to
/// the entries default_decays accepts (matrices; not biases, norms or embeddings).
AdamWResult adamw_update(const NamedTensors& params, const NamedTensors& grads,
                         const NamedTensors& m, const NamedTensors& v, const AdamWScalars& s);
/// The same, weight decay applying to the entries named in `decayed` (slices of parameters,
/// whose own rank does not say what they are).
AdamWResult adamw_update(const NamedTensors& params, const NamedTensors& grads,
                         const NamedTensors& m, const NamedTensors& v, const AdamWScalars& s,
                         const std::set<std::string>& decayed);

/// Default decay rule: rank >= 2 and not an embedding table ("wte", "wpe", an n-gram memory's
/// "*.engram.table"); for stacked layer parameters (names under "scan.") the rank of one layer's
/// slice.
bool default_decays(const std::string& name, const Tensor& param);
/// The same from the parameter's whole shape (a slice's own does not say).
bool default_decays(const std::string& name, const Shape& shape);

}  // namespace keel::optim
