#pragma once
// Element counts of a config's tensors, checked before any shape is built: the products that
// build them would otherwise wrap around silently for a huge width, vocab or layer count.
#include <string>

#include "nn/gpt.h"

namespace keel::nn {

// Parameters (each tensor, each layer, the total) and the largest activations of a step must
// count at most INT64_MAX / 8 elements, so their bytes fit int64 too. keel::InputError
// "[nn] SOURCE: field 'vocab' (N) x 'width' (M) is more elements than ..." naming the fields.
void check_gpt_sizes(const GptConfig& c, const std::string& source);

}  // namespace keel::nn
