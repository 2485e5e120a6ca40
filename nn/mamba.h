#pragma once
// A Mamba-2 mixer (state-space duality): per head h and position t, with dt_t = softplus(.) and
// A_h = -exp(A_log_h),
//   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T,   y_t = S_t C_t + D_h x_t,
// where x, B, C come from a short causal convolution of the input's projection, the result is
// gated by silu(z) through an RMSNorm and projected back. The state restarts at each document
// of a packed row (doc_ids, compared on the device; never a host branch) and the convolution
// never reaches across one. mamba_mixer computes the recurrence in chunks (within a chunk,
// products of matrices; across chunks, the chunk states carried one to the next);
// mamba_mixer_sequential is the plain recurrence, one position at a time, for tests and
// benchmarks. Internal to nn/.
#include <string>
#include <utility>
#include <vector>

#include "nn/gpt.h"
#include "nn/mamba_config.h"

namespace keel::nn {

// Parameter names (under `prefix`) and shapes for width C, inner channels I = expand * C, heads
// H = I / head_dim and state N:
//   in_proj.weight [C, 2I + 2N + H] (z, x, B, C, dt), conv.weight [conv, I + 2N],
//   conv.bias [I + 2N], dt_bias [H], A_log [H], D [H], ln_y.weight [I], out_proj.weight [I, C].
std::vector<std::pair<std::string, Shape>> mamba_param_shapes(const MambaConfig& c,
                                                              const std::string& prefix,
                                                              int64_t width);

// u [B, T, C] -> [B, T, C]. positions [B, T] restart per document; doc_ids [B, T], or undefined
// for one document per row. `model_processes` > 1: p holds this process's shards over mesh axis
// "model" (nn/tensor_parallel.h: its heads, their z and x channels, its block of B's and C's
// state columns, gathered whole after the convolution), the norm's mean square is all-reduced
// and the output projection is row-parallel.
Tensor mamba_mixer(const MambaConfig& c, const NamedTensors& p, const std::string& prefix,
                   const Tensor& u, const Tensor& positions, const Tensor& doc_ids,
                   int64_t model_processes = 1);
// The same with the recurrence taken one position at a time.
Tensor mamba_mixer_sequential(const MambaConfig& c, const NamedTensors& p,
                              const std::string& prefix, const Tensor& u, const Tensor& positions,
                              const Tensor& doc_ids);

}  // namespace keel::nn
