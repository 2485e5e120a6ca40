#pragma once
// The batch the benchmarks time: one document per row, every target live — what a packed
// corpus gives, without reading one.
#include <vector>

#include "data/batch.h"
#include "nn/gpt.h"

namespace keel::bench {

// K micro-batches of the config's batch and sequence length.
inline std::vector<Tensor> synthetic_batch(const nn::GptConfig& c, int64_t K = 1) {
  data::Batch b = data::empty_batch(K, c.batch, c.seq);
  for (int64_t i = 0; i < b.tokens.numel(); ++i) {
    b.tokens.set_i64(i, (i * 31) % c.vocab);
    b.targets.set_i64(i, (i * 31 + 7) % c.vocab);
    b.loss_mask.set_f64(i, 1.0);
    b.positions.set_i64(i, i % c.seq);
  }
  std::vector<Tensor> out;
  for (Array& a : b.fields()) out.emplace_back(std::move(a));
  return out;
}

}  // namespace keel::bench
