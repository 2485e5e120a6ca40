// The loader: the epochs' token streams concatenated and cut into rows of T+1 tokens, read in a
// seeded order within blocks of one epoch's worth of rows.
#include "data/loader.h"

#include <fmt/format.h>

#include <algorithm>

#include "data/stream.h"
#include "ir/error.h"
#include "ir/rng.h"

namespace keel::data {
namespace {

constexpr uint64_t kRowStream = 0x726f7773ull;  // "rows": apart from the order and FIM draws
constexpr size_t kLayoutsKept = 4;              // a block spans at most two epochs

void check_rate(const char* name, double rate) {
  if (!(rate >= 0.0 && rate <= 1.0)) {  // also refuses NaN
    throw InputError(fmt::format("[data] loader: {} {} is outside [0, 1]", name, rate));
  }
}

void check_size(const char* name, int64_t value) {
  if (value < 1) {
    throw InputError(fmt::format("[data] loader: {} must be >= 1, got {}", name, value));
  }
}

}  // namespace

Loader::Loader(const std::vector<Document>& documents, LoaderConfig config, Cursor cursor)
    : docs_(documents), config_(config), cursor_(cursor) {
  if (docs_.empty()) throw InputError("[data] loader: no documents to load");
  check_size("micro_batches", config_.micro_batches);
  check_size("batch", config_.batch);
  check_size("seq", config_.seq);
  check_rate("fim_rate", config_.fim_rate);
  check_rate("fim_spm_rate", config_.fim_spm_rate);
  if (cursor_.row < 0) {
    throw InputError(fmt::format("[data] loader: cursor row {} is negative", cursor_.row));
  }
  const int64_t width = config_.seq + 1;
  const int64_t first = layout(0).start.back();
  block_rows_ = std::max<int64_t>(1, first / width);
  // A row's block ends at most block_rows_ rows later: every token of a row below the limit
  // has an index int64 holds.
  row_limit_ = INT64_MAX / (block_rows_ * width) * block_rows_;
  if (cursor_.row >= row_limit_) {
    throw InputError(fmt::format(
        "[data] loader: cursor row {} is past the last row ({}) whose tokens int64 can index "
        "with rows of {} tokens; no run of this corpus reads that far",
        cursor_.row, row_limit_ - 1, width));
  }
  const FimRates rates{config_.fim_rate, config_.fim_spm_rate};
  int64_t varying = 0;
  shortest_ = INT64_MAX;
  for (const Document& d : docs_) {
    const auto n = static_cast<int64_t>(d.bytes.size());
    varying += fim_varies_length(n, rates);
    plain_tokens_ += token_stream_length(n, {}, config_.seed, 0, 0);
    shortest_ = std::min(shortest_, n);
  }
  equal_epochs_ = varying == 0 ? first : 0;
  if (varying != std::ssize(docs_)) shortest_ = -1;
  starts_ = {{0, 0}};
  (void)epoch();  // a cursor that cannot be found is refused here, not at the first batch
}

const Loader::EpochLayout& Loader::layout(int64_t epoch) const {
  auto found = layouts_.find(epoch);
  if (found != layouts_.end()) return found->second;
  if (layouts_.size() >= kLayoutsKept) layouts_.erase(layouts_.begin());
  EpochLayout l;
  const auto n = static_cast<int64_t>(docs_.size());
  l.order = epoch_order(n, config_.seed, epoch, config_.shuffle);
  l.start.assign(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const auto bytes = static_cast<int64_t>(docs_[static_cast<size_t>(l.order[i])].bytes.size());
    l.start[i + 1] =
        l.start[i] + token_stream_length(bytes, {config_.fim_rate, config_.fim_spm_rate},
                                         config_.seed, epoch, i);
  }
  return layouts_.emplace(epoch, std::move(l)).first->second;
}

int64_t Loader::document_at(int64_t epoch, int64_t index) const {
  const auto n = static_cast<int64_t>(docs_.size());
  if (index < 0 || index >= n || epoch < 0) {
    throw Error(fmt::format("[data] loader: document {} of epoch {} is outside 0..{}", index, epoch,
                            n - 1));
  }
  return layout(epoch).order[static_cast<size_t>(index)];
}

std::vector<int64_t> Loader::document_tokens(int64_t epoch, int64_t index,
                                             int64_t* fim_kind) const {
  const Document& doc = docs_[static_cast<size_t>(document_at(epoch, index))];
  return token_stream(doc.bytes, {config_.fim_rate, config_.fim_spm_rate}, config_.seed, epoch,
                      index, fim_kind);
}

int64_t Loader::stream_row(int64_t n) {
  const int64_t block = n / block_rows_;
  if (block != perm_block_) {
    perm_ = epoch_order(block_rows_, splitmix64(config_.seed ^ kRowStream), block, config_.shuffle);
    perm_block_ = block;
  }
  return block * block_rows_ + perm_[static_cast<size_t>(n % block_rows_)];
}

int64_t Loader::epoch() {
  return locate(stream_row(cursor_.row) * (config_.seq + 1)).epoch;
}

// Tokens [row * (T+1), (row+1) * (T+1)) of the concatenated stream, with their documents' kinds.
void Loader::fill_row(int64_t row, int64_t stream_row, std::vector<int64_t>& tokens,
                      std::vector<int64_t>& kinds) {
  const int64_t width = config_.seq + 1;
  const int64_t at = stream_row * width;
  auto [epoch, epoch_start] = locate(at);
  const std::vector<int64_t>& start = layout(epoch).start;
  int64_t index =
      std::upper_bound(start.begin(), start.end(), at - epoch_start) - start.begin() - 1;
  int64_t offset = at - epoch_start - start[static_cast<size_t>(index)];
  for (int64_t filled = 0; filled < width;) {
    int64_t kind = 0;
    const std::vector<int64_t> stream = document_tokens(epoch, index, &kind);
    const int64_t n = std::min(width - filled, static_cast<int64_t>(stream.size()) - offset);
    const auto out = static_cast<size_t>(row * width + filled);
    std::copy_n(stream.begin() + offset, n, tokens.begin() + static_cast<ptrdiff_t>(out));
    std::fill_n(kinds.begin() + static_cast<ptrdiff_t>(out), n, kind);
    filled += n;
    offset = 0;
    if (++index == static_cast<int64_t>(docs_.size())) {
      index = 0;
      ++epoch;
    }
  }
}

Batch Loader::next() {
  const int64_t rows = config_.micro_batches * config_.batch, seq = config_.seq;
  if (cursor_.row > row_limit_ - rows) {
    throw InputError(fmt::format(
        "[data] loader: the rows after cursor row {} pass the last row ({}) whose tokens int64 "
        "can index; no run of this corpus reads that far",
        cursor_.row, row_limit_ - 1));
  }
  std::vector<int64_t> stream(static_cast<size_t>(rows * (seq + 1))), stream_kind(stream.size());
  for (int64_t r = 0; r < rows; ++r) fill_row(r, stream_row(cursor_.row++), stream, stream_kind);

  const auto total = static_cast<size_t>(rows * seq);
  std::vector<int64_t> tokens(total), targets(total), positions(total), doc_ids(total),
      fim_kind(total);
  std::vector<float> loss_mask(total);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t segment = 0, position = 0;
    for (int64_t t = 0; t < seq; ++t) {
      const auto i = static_cast<size_t>(r * seq + t), s = static_cast<size_t>(r * (seq + 1) + t);
      if (t > 0 && tokens[i - 1] == kEndOfDocument) {
        ++segment;
        position = 0;
      }
      tokens[i] = stream[s];
      targets[i] = stream[s + 1];
      fim_kind[i] = stream_kind[s];
      positions[i] = position++;
      doc_ids[i] = segment;
      loss_mask[i] = tokens[i] == kEndOfDocument ? 0.0f : 1.0f;
    }
  }

  Shape shape{config_.micro_batches, config_.batch, seq};
  return {Array::from_i64(shape, tokens),    Array::from_i64(shape, targets),
          Array::from_f32(shape, loss_mask), Array::from_i64(shape, positions),
          Array::from_i64(shape, doc_ids),   Array::from_i64(shape, fim_kind)};
}

}  // namespace keel::data
