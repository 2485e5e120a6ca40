#pragma once
// A deterministic, seeded loader. Each epoch visits the documents in a seeded order, optionally
// turned into fill-in-the-middle examples; the epochs' token streams, concatenated, are cut into
// rows of seq+1 tokens, and the rows are read in a seeded order within blocks of one epoch's
// worth of rows, so a batch holds rows from all over the corpus rather than one file's
// consecutive lines. A document cut by a row boundary continues in another row as a new
// segment. The cursor is the number of rows read; a loader built from a cursor continues
// exactly where the one that produced it stopped.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/corpus.h"

namespace keel::data {

// Documents summed, at most, to find where a cursor's row lies when FIM makes each epoch's
// length its own: under a second, and more documents than a CPU run reads in days.
inline constexpr int64_t kMaxEpochWalk = int64_t{1} << 26;

struct LoaderConfig {
  int64_t micro_batches = 1;  // K
  int64_t batch = 8;          // B
  int64_t seq = 256;          // T
  double fim_rate = 0.0;      // fraction of documents turned into FIM examples
  double fim_spm_rate = 0.5;  // of those, the fraction in suffix-prefix-middle order
  uint64_t seed = 0;
  bool shuffle = true;  // false: documents and rows in corpus order
};

// Where the loader is: how many rows it has handed out. Everything else is derived from
// (seed, corpus, row), so any row >= 0 is a place in the endless stream of epochs.
struct Cursor {
  int64_t row = 0;
  std::string to_json() const;
  // keel::InputError naming `source` and the field on malformed JSON.
  static Cursor from_json(const std::string& json, const std::string& source);
  bool operator==(const Cursor&) const = default;
};

class Loader {
 public:
  // `documents` must outlive the loader. keel::InputError when there are none, or when B, T or
  // K is < 1, or a rate is outside [0, 1], or the cursor's row is negative or past the rows
  // whose tokens int64 can index. The cursor's row is found at once: in O(1) when every epoch
  // has the same length (no FIM, or FIM on every document it can cut), else by summing the
  // epochs before it, at most kMaxEpochWalk documents' worth (beyond that, InputError).
  Loader(const std::vector<Document>& documents, LoaderConfig config, Cursor cursor = {});
  Batch next();
  const Cursor& cursor() const { return cursor_; }
  const LoaderConfig& config() const { return config_; }
  // The epoch the next row starts in.
  int64_t epoch();
  // Rows per shuffling block: the first epoch's whole rows (at least 1).
  int64_t rows_per_block() const { return block_rows_; }
  // The row of the concatenated stream that the loader's `n`-th row reads.
  int64_t stream_row(int64_t n);

  // The token stream of document `index` of `epoch`: its bytes, FIM-rearranged with control
  // tokens when the seeded draw for (epoch, document) says so, then kEndOfDocument. Exposed
  // for tests.
  std::vector<int64_t> document_tokens(int64_t epoch, int64_t index, int64_t* fim_kind) const;
  // Which corpus document is at `index` in `epoch`'s order.
  int64_t document_at(int64_t epoch, int64_t index) const;

 private:
  struct EpochLayout {
    std::vector<int64_t> order;  // corpus index of each position
    std::vector<int64_t> start;  // first token of each position within the epoch; then the end
  };
  struct Place {
    int64_t epoch, start;  // the epoch holding a token, and its first token in the stream
  };
  const EpochLayout& layout(int64_t epoch) const;
  int64_t epoch_length(int64_t epoch) const;  // tokens in `epoch`'s stream
  Place locate(int64_t token);                // the epoch holding token `token` of the stream
  void fill_row(int64_t row, int64_t stream_row, std::vector<int64_t>& tokens,
                std::vector<int64_t>& kinds);

  const std::vector<Document>& docs_;
  LoaderConfig config_;
  Cursor cursor_;
  int64_t block_rows_ = 1;
  int64_t row_limit_ = 0;              // rows below this have all their tokens within int64
  int64_t equal_epochs_ = 0;           // the length of every epoch, or 0 when FIM draws vary it
  int64_t plain_tokens_ = 0;           // an epoch's tokens without FIM
  int64_t shortest_ = -1;              // the shortest document's bytes when FIM can cut every one
  std::map<int64_t, int64_t> starts_;  // epoch start token -> epoch, a few known
  mutable std::map<int64_t, EpochLayout> layouts_;  // the few epochs in use
  int64_t perm_block_ = -1;
  std::vector<int64_t> perm_;  // row order within block perm_block_
};

}  // namespace keel::data
