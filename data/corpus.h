#pragma once
// Corpora: text files read whole, checked to be text, split into training and validation
// documents deterministically (by a hash of the path, never by chance).
#include <cstdint>
#include <string>
#include <vector>

namespace keel::data {

struct Document {
  std::string path;   // as found (for messages)
  std::string bytes;  // the file's contents; never empty
};

struct Corpus {
  std::vector<Document> train;
  std::vector<Document> validation;
  std::vector<std::string> notes;  // "[data] skipped <path>: <why>" for entries not read
  int64_t train_bytes() const;
  int64_t validation_bytes() const;
};

// The C++ compiler's system include directories (`<compiler> -E -x c++ - -v`, the lines after
// "#include <...> search starts here:"), in its order. keel::Error when the compiler cannot
// run, lists none, or does not finish within `timeout_s` (then it is killed).
std::vector<std::string> system_include_dirs(const std::string& compiler, double timeout_s = 60);
// The libstdc++ headers directory among them (the first whose path has a "c++/<version>"
// component and holds a "vector" header). keel::InputError "[data] no libstdc++ headers found
// in <compiler>'s include directories (...); install g++ or pass --data" when none.
std::string libstdcxx_dir(const std::string& compiler);
// The default corpus: the system C++ compiler's (`c++`) libstdc++ headers, whichever backend
// runs and whatever compiler it builds with, so the data does not follow a backend's settings.
std::string default_corpus_dir();

// A corpus file is read whole into memory; a larger one is refused by name (split it).
inline constexpr int64_t kMaxCorpusFileBytes = int64_t{256} << 20;

struct CorpusOptions {
  int validation_percent = 5;   // of documents, chosen by hash of the relative path
  int64_t max_bytes = 0;        // stop reading after this many bytes in total; 0: no limit
  bool all_validation = false;  // every document whole in validation, none in train (held-out
                                // text to score, not to train on)
};

// Reads every regular file under each path (a file or a directory, walked as
// list_corpus_files in data/corpus_files.h says: hidden entries skipped, symlinks followed, a
// loop refused), sorted by path so the result never depends on directory order. Empty files
// are skipped. Errors are keel::InputError, one line naming the path:
//   "[data] <path>: no such file or directory"
//   "[data] <path>: a FIFO, not a text file or a directory; ..." for a path given that is neither
//   "[data] <link>: a symlink loop: it leads back to <dir>, which contains it; ..."
//   "[files] cannot read a corpus file (--data): <file> is N bytes, over the cap of
//    kMaxCorpusFileBytes bytes"
//   "[data] <path>: no text files found (N empty files skipped)" for a directory with nothing
//   "[data] <file>: binary file (byte 0x00 at offset 123); keel trains on text: remove it or
//    point --data elsewhere" for any byte < 0x09 or 0x0E..0x1F except ESC (0x1B)
// Both splits are non-empty when there are at least 2 documents (one document goes to train
// and its last validation_percent of bytes, at least one byte, become the validation text).
Corpus load_corpus(const std::vector<std::string>& paths, const CorpusOptions& options = {});

}  // namespace keel::data
