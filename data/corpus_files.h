#pragma once
// Finding a corpus's files under one --data argument, without reading them.
#include <cstdint>
#include <string>
#include <vector>

namespace keel::data {

struct CorpusFile {
  std::string path;      // as found, for messages and the sort
  std::string relative;  // relative to the argument it was found under: the split's key
};

struct CorpusListing {
  std::vector<CorpusFile> files;   // non-empty regular files
  int64_t empty = 0;               // empty regular files skipped
  std::vector<std::string> notes;  // "[data] skipped <path>: <why>", one line each
};

// `arg` itself must be a regular file or a directory (a symlink to one is followed). A directory
// is walked recursively: hidden entries are skipped; symlinks are followed, but a directory
// reached a second time is skipped with a note, and one that leads back into its own ancestors
// (a loop) is a keel::InputError naming the link; FIFOs, devices, sockets and broken links inside
// are skipped with a note. A missing or unlistable `arg` is a keel::InputError naming it.
CorpusListing list_corpus_files(const std::string& arg);

}  // namespace keel::data
