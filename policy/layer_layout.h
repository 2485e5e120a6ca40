#pragma once
// How a step lays out the model's layers (launch.layer_layout): one setting, which the model
// config carries (nn::GptConfig::layout) and the trainer splits its step by.
#include <cstdint>
#include <optional>
#include <string>

namespace keel::policy {

/// The layers unrolled in one program, scanned (looped over stacked parameters), or split into a
/// program every split_every layers (the seeds' barrier), each segment scanned or not.
struct LayerLayout {
  bool scanned = false;     ///< the repeated block looped over stacked parameters
  int64_t split_every = 0;  ///< 0: not split
};
/// "unrolled", "scanned", "split:N" or "split:N/scanned" (N in 1..4096); nullopt otherwise.
std::optional<LayerLayout> parse_layer_layout(const std::string& text);

}  // namespace keel::policy
