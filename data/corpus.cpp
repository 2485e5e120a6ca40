// Reading a corpus: every text file under the given paths, in path order, split into training
// and validation by a hash of the relative path so the split never changes between runs.
#include "data/corpus.h"

#include <fmt/format.h>

#include <algorithm>

#include "data/corpus_files.h"
#include "files/read.h"
#include "ir/error.h"
#include "ir/hash.h"

namespace keel::data {
namespace {

struct Found {
  std::string path;      // as found, for messages and the sort
  std::string relative;  // relative to the argument it was found under: the split's key
  uint64_t hash = 0;
};

std::string plural(int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// The non-empty regular files under `arg`; an argument holding none is an error.
std::vector<Found> list_files(const std::string& arg, std::vector<std::string>& notes) {
  CorpusListing listing = list_corpus_files(arg);
  notes.insert(notes.end(), listing.notes.begin(), listing.notes.end());
  if (listing.files.empty()) {
    throw InputError(fmt::format("[data] {}: no text files found ({} skipped)", arg,
                                 plural(listing.empty, "empty file", "empty files")));
  }
  std::vector<Found> found;
  for (CorpusFile& f : listing.files)
    found.push_back({std::move(f.path), std::move(f.relative), 0});
  return found;
}

// Bytes no text file holds: controls other than tab, newlines, VT, FF, CR and ESC.
void check_text(const std::string& path, const std::string& bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto b = static_cast<unsigned char>(bytes[i]);
    if (b < 0x09 || (b >= 0x0E && b <= 0x1F && b != 0x1B)) {
      throw InputError(fmt::format(
          "[data] {}: binary file (byte 0x{:02x} at offset {}); keel trains on text: remove it or "
          "point --data elsewhere",
          path, b, i));
    }
  }
}

// Moves the document chosen by `pick` from `from` to `to`, keeping both in path order.
template <class Pick>
void move_one(std::vector<Found>& from, std::vector<Found>& to, Pick pick) {
  auto it = std::min_element(from.begin(), from.end(), pick);
  Found f = *it;
  from.erase(it);
  to.insert(std::upper_bound(to.begin(), to.end(), f,
                             [](const Found& a, const Found& b) { return a.path < b.path; }),
            f);
}

int64_t total_bytes(const std::vector<Document>& docs) {
  int64_t n = 0;
  for (const Document& d : docs) n += static_cast<int64_t>(d.bytes.size());
  return n;
}

}  // namespace

int64_t Corpus::train_bytes() const {
  return total_bytes(train);
}
int64_t Corpus::validation_bytes() const {
  return total_bytes(validation);
}

Corpus load_corpus(const std::vector<std::string>& paths, const CorpusOptions& options) {
  if (options.validation_percent < 0 || options.validation_percent > 100) {
    throw InputError(fmt::format("[data] validation_percent {} is outside [0, 100]",
                                 options.validation_percent));
  }
  if (options.max_bytes < 0) {
    throw InputError(fmt::format("[data] max_bytes {} is negative", options.max_bytes));
  }
  if (paths.empty()) throw InputError("[data] no corpus paths given");
  std::vector<Found> files;
  std::vector<std::string> notes;
  for (const std::string& arg : paths) {
    std::vector<Found> found = list_files(arg, notes);
    files.insert(files.end(), found.begin(), found.end());
  }
  std::sort(files.begin(), files.end(), [](const Found& a, const Found& b) {
    return a.path < b.path || (a.path == b.path && a.relative < b.relative);
  });
  files.erase(std::unique(files.begin(), files.end(),
                          [](const Found& a, const Found& b) { return a.path == b.path; }),
              files.end());

  // Read in path order until max_bytes; the file that crosses the limit is kept whole.
  std::vector<Found> kept;
  std::vector<std::string> contents;
  int64_t total = 0;
  for (Found& f : files) {
    if (options.max_bytes > 0 && total >= options.max_bytes) break;
    std::string bytes = files::read_file(f.path, kMaxCorpusFileBytes, "a corpus file (--data)");
    if (bytes.empty()) continue;  // emptied since it was listed
    check_text(f.path, bytes);
    total += static_cast<int64_t>(bytes.size());
    f.hash = hash_bytes(f.relative).lo;
    kept.push_back(f);
    contents.push_back(std::move(bytes));
  }

  if (kept.empty()) throw InputError("[data] no text files found in the corpus paths");
  Corpus corpus;
  corpus.notes = std::move(notes);
  if (options.all_validation) {
    for (size_t i = 0; i < kept.size(); ++i) {
      corpus.validation.push_back({kept[i].path, std::move(contents[i])});
    }
    return corpus;
  }
  if (kept.size() == 1) {
    // One document: its tail is the validation text, at least one byte, never all of it.
    const std::string& bytes = contents[0];
    const auto n = static_cast<int64_t>(bytes.size());
    if (n < 2) {
      throw InputError(fmt::format(
          "[data] {}: a single 1-byte document cannot be split into training and validation "
          "text; give more text (keel eval --split all scores it whole)",
          kept[0].path));
    }
    int64_t tail = std::clamp<int64_t>(n * options.validation_percent / 100, 1, n - 1);
    corpus.train.push_back({kept[0].path, bytes.substr(0, static_cast<size_t>(n - tail))});
    corpus.validation.push_back({kept[0].path, bytes.substr(static_cast<size_t>(n - tail))});
    return corpus;
  }

  std::vector<Found> train, validation;
  for (const Found& f : kept) {
    (static_cast<int>(f.hash % 100) < options.validation_percent ? validation : train).push_back(f);
  }
  auto by_hash = [](const Found& a, const Found& b) {
    return a.hash < b.hash || (a.hash == b.hash && a.path < b.path);
  };
  if (validation.empty()) move_one(train, validation, by_hash);
  if (train.empty())
    move_one(validation, train, [&](const Found& a, const Found& b) {
      return by_hash(b, a);  // the largest hash: the one nearest to the training side
    });

  // Documents take their bytes in path order, matching `kept`.
  auto bytes_of = [&](const Found& f) -> std::string& {
    auto it = std::lower_bound(kept.begin(), kept.end(), f,
                               [](const Found& a, const Found& b) { return a.path < b.path; });
    return contents[static_cast<size_t>(it - kept.begin())];
  };
  for (const Found& f : train) corpus.train.push_back({f.path, std::move(bytes_of(f))});
  for (const Found& f : validation) corpus.validation.push_back({f.path, std::move(bytes_of(f))});
  return corpus;
}

}  // namespace keel::data
