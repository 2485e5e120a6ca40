#pragma once
/// @file
/// What a Mamba-2 (SSD) mixer is made of. The block is nn/mamba.h.
#include <cstdint>
#include <string>

namespace keel::nn {

/// A Mamba-2 mixer: an input-dependent state-space model over `expand` x width channels in heads
/// of `head_dim`, each head's state `head_dim` x `state`, computed in chunks of `chunk` positions.
struct MambaConfig {
  int64_t state = 64;     ///< N: the state's size per channel (the B and C projections' width)
  int64_t head_dim = 32;  ///< P: channels per head (one decay per head)
  int64_t expand = 2;     ///< inner channels = expand x width
  int64_t conv = 4;       ///< the causal depthwise convolution's width
  int64_t chunk = 32;     ///< positions per chunk of the SSD algorithm
  /// keel::InputError naming `source` for an out-of-range field, or inner channels that `width`
  /// does not split into heads.
  void validate(const std::string& source, int64_t width) const;
  bool operator==(const MambaConfig&) const = default;  ///< every field equal
};

}  // namespace keel::nn
