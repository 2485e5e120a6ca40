// Where a token of the concatenated stream lies: by division when every epoch has one length,
// else by summing epoch lengths forward from the nearest epoch start already known.
#include <fmt/format.h>

#include "data/loader.h"
#include "data/stream.h"
#include "ir/error.h"

namespace keel::data {
namespace {

constexpr size_t kStartsKept = 8;  // a block spans at most two epochs; a few more for epoch()

}  // namespace

int64_t Loader::epoch_length(int64_t epoch) const {
  if (equal_epochs_ > 0) return equal_epochs_;
  const FimRates rates{config_.fim_rate, config_.fim_spm_rate};
  const auto n = static_cast<int64_t>(docs_.size());
  int64_t tokens = 0;
  if (shortest_ >= 0) {
    // Every document can be cut, so the draw at each position alone decides what FIM adds:
    // the epoch's order does not matter, and the walk needs no shuffle.
    tokens = plain_tokens_;
    for (int64_t i = 0; i < n; ++i) {
      tokens += token_stream_length(shortest_, rates, config_.seed, epoch, i) - shortest_ - 1;
    }
    return tokens;
  }
  const std::vector<int64_t> order = epoch_order(n, config_.seed, epoch, config_.shuffle);
  for (int64_t i = 0; i < n; ++i) {
    const auto bytes = static_cast<int64_t>(docs_[static_cast<size_t>(order[i])].bytes.size());
    tokens += token_stream_length(bytes, rates, config_.seed, epoch, i);
  }
  return tokens;
}

Loader::Place Loader::locate(int64_t token) {
  if (equal_epochs_ > 0) {
    const int64_t epoch = token / equal_epochs_;
    return {epoch, epoch * equal_epochs_};
  }
  // Each epoch's FIM draws decide its length, so the epochs before `token` are summed in turn
  // from the nearest start known (starts_ always holds epoch 0 at token 0).
  auto known = std::prev(starts_.upper_bound(token));
  Place at{known->second, known->first};
  const auto docs = static_cast<int64_t>(docs_.size());
  int64_t walked = 0;
  for (int64_t length = epoch_length(at.epoch); token - at.start >= length;
       length = epoch_length(at.epoch)) {
    if ((walked += docs) > kMaxEpochWalk) {
      throw InputError(fmt::format(
          "[data] loader: stream row {} lies more than {} epochs into this corpus of {} "
          "documents; with fim_rate {} each epoch's length is its own, so finding the row sums "
          "the epochs before it, at most {} documents; no run of this corpus read that far",
          token / (config_.seq + 1), at.epoch, docs, config_.fim_rate, kMaxEpochWalk));
    }
    at = {at.epoch + 1, at.start + length};
  }
  if (starts_.size() >= kStartsKept) starts_.erase(std::next(starts_.begin()));  // keep epoch 0
  starts_.emplace(at.start, at.epoch);
  return at;
}

}  // namespace keel::data
