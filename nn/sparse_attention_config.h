#pragma once
/// @file
/// What a sparse attention layer (DSA-style) is made of; a field of nn::GptConfig. The block is
/// nn/sparse_attention.h.
#include <cstdint>
#include <string>

namespace keel::nn {

/// Sparse attention: each query attends a local window (itself and the positions just before
/// it) and the `keys` earlier positions of its document that a light indexer scores highest.
struct SparseAttentionConfig {
  int64_t keys = 64;          ///< positions the indexer picks per query, beyond the window
  int64_t window = 16;        ///< the query and the window - 1 positions before it, always read
  int64_t indexer_heads = 4;  ///< the indexer's query heads
  int64_t indexer_dim = 32;   ///< the indexer's query and key width
  /// keel::InputError naming `source` for an out-of-range field (`seq`: the model's length).
  void validate(const std::string& source, int64_t seq) const;
  bool operator==(const SparseAttentionConfig&) const = default;  ///< every field equal
};

}  // namespace keel::nn
