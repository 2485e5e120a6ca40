#pragma once
// Private to the loader: the seeded epoch order and the per-document token stream. Both depend
// only on (seed, epoch, index), which is what lets a cursor resume exactly.
#include <cstdint>
#include <string_view>
#include <vector>

namespace keel::data {

// A permutation of 0..n-1 (Fisher–Yates keyed on (seed, epoch)), or the identity.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

struct FimRates {
  double fim_rate = 0.0;
  double spm_rate = 0.5;
};

// 0 plain, 1 PSM or 2 SPM: the FIM draw for (seed, epoch, index) on a document of n bytes.
int64_t fim_kind_of(int64_t n, FimRates rates, uint64_t seed, int64_t epoch, int64_t index);
// Whether the FIM draw can change the stream length of an n-byte document: rates strictly
// between 0 and 1 and a document long enough to cut. When no document's can, every epoch has
// the same length.
bool fim_varies_length(int64_t n, FimRates rates);
// The length of token_stream(...) for a document of n bytes, without building it.
int64_t token_stream_length(int64_t n, FimRates rates, uint64_t seed, int64_t epoch, int64_t index);

// `bytes` as tokens, FIM-rearranged when the draw for (seed, epoch, index) says so, then
// kEndOfDocument. *fim_kind (when not null) gets 0 plain, 1 PSM or 2 SPM.
std::vector<int64_t> token_stream(std::string_view bytes, FimRates rates, uint64_t seed,
                                  int64_t epoch, int64_t index, int64_t* fim_kind);

}  // namespace keel::data
