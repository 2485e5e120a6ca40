// Reading a corpus: every text file under the given paths, in path order, split into training
// and validation by a hash of the relative path so the split never changes between runs.
#include "data/corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "files/read.h"
#include "ir/error.h"
#include "ir/hash.h"

namespace keel::data {
namespace {

namespace fs = std::filesystem;

struct Found {
  std::string path;      // as found, for messages and the sort
  std::string relative;  // relative to the argument it was found under: the split's key
  uint64_t hash = 0;
};

bool hidden(const fs::path& p) {
  std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

std::string plural(int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// The non-empty regular files under `arg`; an argument holding none is an error.
std::vector<Found> list_files(const std::string& arg) {
  std::error_code ec;
  fs::file_status status = fs::status(arg, ec);
  if (!fs::exists(status))
    throw InputError(fmt::format("[data] {}: no such file or directory", arg));
  std::vector<Found> found;
  int64_t empty = 0;
  auto consider = [&](const fs::path& file, const std::string& relative) {
    std::error_code size_ec;
    if (fs::file_size(file, size_ec) == 0 && !size_ec) {
      ++empty;
    } else {
      found.push_back({file.string(), relative, 0});
    }
  };
  if (fs::is_directory(status)) {
    fs::recursive_directory_iterator it(arg, fs::directory_options::skip_permission_denied, ec);
    if (ec) throw InputError(fmt::format("[data] {}: cannot list: {}", arg, ec.message()));
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) throw InputError(fmt::format("[data] {}: cannot list: {}", arg, ec.message()));
      if (hidden(it->path())) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) {
        consider(it->path(), it->path().lexically_relative(arg).generic_string());
      }
    }
  } else {
    consider(arg, fs::path(arg).filename().string());
  }
  if (found.empty()) {
    throw InputError(fmt::format("[data] {}: no text files found ({} skipped)", arg,
                                 plural(empty, "empty file", "empty files")));
  }
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
  for (const std::string& arg : paths) {
    std::vector<Found> found = list_files(arg);
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
  if (kept.size() == 1) {
    // One document: its tail is the validation text, at least one byte, never all of it.
    const std::string& bytes = contents[0];
    const auto n = static_cast<int64_t>(bytes.size());
    if (n < 2) {
      throw InputError(fmt::format(
          "[data] {}: a single 1-byte document cannot be split into training and validation text",
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
