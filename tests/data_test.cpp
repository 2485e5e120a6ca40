// Data tests: the compiler's include directories, corpus loading and splitting, the packed
// batch invariants, FIM streams, determinism and exact resume from a cursor.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "data/batch.h"
#include "data/corpus.h"
#include "data/loader.h"
#include "ir/error.h"

namespace keel::data {
namespace {

namespace fs = std::filesystem;

// The message of the keel::Error `f` throws, or "" when it does not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A fresh directory under the system temp directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("keel_data_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& relative, const std::string& bytes) const {
    fs::path p = path_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& relative) const { return (path_ / relative).string(); }

 private:
  fs::path path_;
};

std::vector<std::string> paths_of(const std::vector<Document>& docs) {
  std::vector<std::string> out;
  for (const Document& d : docs) out.push_back(d.path);
  return out;
}

// Text documents (letters, spaces, newlines) with lengths drawn from [min_len, max_len].
std::vector<Document> random_docs(std::mt19937_64& rng, int count, int64_t min_len,
                                  int64_t max_len) {
  static const std::string alphabet = "abcdefghijklmnopqrstuvwxyz \n\t{}();";
  std::uniform_int_distribution<int64_t> length(min_len, max_len);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::vector<Document> docs;
  for (int i = 0; i < count; ++i) {
    std::string bytes(static_cast<size_t>(length(rng)), ' ');
    for (char& c : bytes) c = alphabet[pick(rng)];
    docs.push_back({"doc" + std::to_string(i), bytes});
  }
  return docs;
}

// The T+1 tokens each row was cut from: its tokens and its last target.
std::vector<int64_t> row_stream(const Batch& b) {
  const Shape& s = b.tokens.shape();
  const int64_t rows = s[0] * s[1], seq = s[2];
  std::vector<int64_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < seq; ++t) out.push_back(b.tokens.get_i64(r * seq + t));
    out.push_back(b.targets.get_i64(r * seq + seq - 1));
  }
  return out;
}

bool same_batch(const Batch& a, const Batch& b) {
  std::vector<Array> fa = a.fields(), fb = b.fields();
  for (size_t i = 0; i < fa.size(); ++i) {
    if (fa[i].shape() != fb[i].shape() || !fa[i].same_bytes(fb[i])) return false;
  }
  return true;
}

std::string bytes_of(std::vector<int64_t>::const_iterator begin,
                     std::vector<int64_t>::const_iterator end) {
  std::string out;
  for (auto it = begin; it != end; ++it) out += static_cast<char>(*it);
  return out;
}

// Checks that `s` is a stream of kind `kind` (plain, PSM or SPM, each part non-empty, one
// kEndOfDocument at the end) and puts the original bytes in *original.
::testing::AssertionResult unfim(const std::vector<int64_t>& s, int64_t kind,
                                 std::string* original) {
  if (s.empty() || s.back() != kEndOfDocument) {
    return ::testing::AssertionFailure() << "no kEndOfDocument at the end";
  }
  auto body_end = s.end() - 1;
  auto find = [&](int64_t token, std::vector<int64_t>::const_iterator from) {
    return std::find(from, body_end, token);
  };
  auto count = [&](int64_t token) { return std::count(s.begin(), body_end, token); };
  for (int64_t control : {kEndOfDocument, kFimPrefix, kFimSuffix, kFimMiddle}) {
    if (count(control) != (kind == 0 || control == kEndOfDocument ? 0 : 1)) {
      return ::testing::AssertionFailure()
             << "control token " << control << " appears " << count(control) << " times in a kind "
             << kind << " stream";
    }
  }
  if (kind == 0) {
    *original = bytes_of(s.begin(), body_end);
    return ::testing::AssertionSuccess();
  }
  if (s[0] != kFimPrefix) return ::testing::AssertionFailure() << "FIM stream without prefix";
  auto suffix_at = find(kFimSuffix, s.begin()), middle_at = find(kFimMiddle, s.begin());
  if (kind == 1) {
    std::string prefix = bytes_of(s.begin() + 1, suffix_at);
    std::string suffix = bytes_of(suffix_at + 1, middle_at);
    std::string middle = bytes_of(middle_at + 1, body_end);
    if (suffix_at > middle_at || prefix.empty() || suffix.empty() || middle.empty()) {
      return ::testing::AssertionFailure() << "malformed PSM stream";
    }
    *original = prefix + middle + suffix;
  } else {
    if (s[1] != kFimSuffix) return ::testing::AssertionFailure() << "SPM without suffix first";
    std::string suffix = bytes_of(suffix_at + 1, middle_at);
    std::string prefix_middle = bytes_of(middle_at + 1, body_end);
    if (suffix_at > middle_at || suffix.empty() || prefix_middle.size() < 2) {
      return ::testing::AssertionFailure() << "malformed SPM stream";
    }
    *original = prefix_middle + suffix;
  }
  return ::testing::AssertionSuccess();
}

// ---- include directories ----

TEST(IncludeDirs, SystemIncludeDirsListVector) {
  std::vector<std::string> dirs = system_include_dirs("c++");
  ASSERT_FALSE(dirs.empty());
  EXPECT_TRUE(std::any_of(dirs.begin(), dirs.end(),
                          [](const std::string& d) { return fs::exists(fs::path(d) / "vector"); }));
  for (const std::string& d : dirs) EXPECT_EQ(d.find_first_of(" \t"), std::string::npos) << d;
}

TEST(IncludeDirs, LibstdcxxDirHoldsVector) {
  std::string dir = libstdcxx_dir("c++");
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "vector")) << dir;
  EXPECT_NE(dir.find("c++/"), std::string::npos) << dir;
}

TEST(IncludeDirs, MissingCompilerIsError) {
  const std::string compiler = "keel-no-such-compiler-4821";
  EXPECT_THROW(system_include_dirs(compiler), Error);
  std::string message = error_of([&] { libstdcxx_dir(compiler); });
  EXPECT_TRUE(message.starts_with("[data] ")) << message;
  EXPECT_NE(message.find(compiler), std::string::npos) << message;
  EXPECT_TRUE(message.ends_with("; install g++ or pass --data")) << message;
}

// A compiler that runs but lists nothing: one line naming it and the way out.
TEST(IncludeDirs, ACompilerListingNoDirectoriesIsError) {
  TempDir dir;
  dir.write("quiet-cc", "#!/bin/sh\nexit 0\n");
  const std::string cc = dir / "quiet-cc";
  ::chmod(cc.c_str(), 0755);
  const std::string message = error_of([&] { system_include_dirs(cc, 10); });
  EXPECT_TRUE(message.starts_with("[data] " + cc + " listed no system include directories"))
      << message;
  EXPECT_TRUE(message.ends_with("; install g++ or pass --data")) << message;
}

// A compiler that never answers meets the probe's deadline: killed, one line, no hang.
TEST(IncludeDirs, AHangingCompilerMeetsTheDeadline) {
  TempDir dir;
  dir.write("hang-cc", "#!/bin/sh\nsleep 600\n");
  const std::string cc = dir / "hang-cc";
  ::chmod(cc.c_str(), 0755);
  const auto t0 = std::chrono::steady_clock::now();
  std::string message = error_of([&] { system_include_dirs(cc, 1); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(message.starts_with("[data] '" + cc + " -E -x c++ - -v' did not finish within 1 s"))
      << message;
  EXPECT_LT(seconds, 30);  // the deadline, not the child's 600 s
}

// ---- corpus ----

TEST(Corpus, MissingPathIsNamed) {
  TempDir dir;
  std::string missing = dir / "nothing-here";
  EXPECT_EQ(error_of([&] { load_corpus({missing}); }),
            "[data] " + missing + ": no such file or directory");
}

TEST(Corpus, EmptyDirectoryCountsEmptyFiles) {
  TempDir dir;
  dir.write("a.txt", "");
  dir.write("sub/b.txt", "");
  dir.write(".hidden", "not counted, not read");
  EXPECT_EQ(error_of([&] { load_corpus({dir.str()}); }),
            "[data] " + dir.str() + ": no text files found (2 empty files skipped)");
  TempDir nothing;
  EXPECT_EQ(error_of([&] { load_corpus({nothing.str()}); }),
            "[data] " + nothing.str() + ": no text files found (0 empty files skipped)");
}

TEST(Corpus, BinaryFileNamesFileAndOffset) {
  TempDir dir;
  dir.write("a.txt", "fine\ttext\r\n\x1b[0m\f\v");
  std::string bad = dir.write("b.txt", std::string("hello") + '\x01' + "world");
  EXPECT_EQ(error_of([&] { load_corpus({dir.str()}); }),
            "[data] " + bad +
                ": binary file (byte 0x01 at offset 5); keel trains on text: remove it or point "
                "--data elsewhere");
  fs::remove(bad);
  std::string nul = dir.write("c.txt", std::string("ab\x1f", 3));
  EXPECT_NE(error_of([&] { load_corpus({dir.str()}); }).find("byte 0x1f at offset 2"),
            std::string::npos);
  fs::remove(nul);
  EXPECT_EQ(error_of([&] { load_corpus({dir.str()}); }), "");  // tab, CR, ESC, FF, VT are text
}

TEST(Corpus, HiddenEntriesSkipped) {
  TempDir dir;
  std::string a = dir.write("a/b.txt", "bbb");
  std::string c = dir.write("c.txt", "ccc");
  dir.write(".git/config", "hidden dir");
  dir.write(".hidden", "hidden file");
  dir.write("a/.swp", "hidden in a subdirectory");
  Corpus corpus = load_corpus({dir.str()});
  std::vector<std::string> all = paths_of(corpus.train);
  for (const std::string& p : paths_of(corpus.validation)) all.push_back(p);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<std::string>{a, c}));
}

// Only regular files are read: a path given that is anything else is refused by name; inside a
// tree FIFOs are skipped with a note (reading one would hang), never opened.
TEST(Corpus, NonRegularFilesAreRefusedOrSkipped) {
  TempDir dir;
  std::string a = dir.write("a.txt", "text");
  ASSERT_EQ(::mkfifo((dir / "pipe").c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { load_corpus({dir / "pipe"}); }),
            "[data] " + (dir / "pipe") +
                ": a FIFO, not a text file or a directory; --data takes files and directories of "
                "text");
  EXPECT_EQ(error_of([&] { load_corpus({"/dev/zero"}); }),
            "[data] /dev/zero: a character device, not a text file or a directory; --data takes "
            "files and directories of text");
  Corpus corpus = load_corpus({dir.str()});
  EXPECT_EQ(paths_of(corpus.train), std::vector<std::string>{a});  // one file: split in two
  EXPECT_EQ(corpus.notes, (std::vector<std::string>{"[data] skipped " + (dir / "pipe") +
                                                    ": a FIFO, not a regular file"}));
}

// Symlinks are followed (a data set linked in is part of the corpus); a directory reached twice
// is read once; a link back into its own ancestors is a loop, refused with the link's name.
TEST(Corpus, SymlinkedDirectoriesFollowedLoopsRefused) {
  TempDir dir;
  TempDir elsewhere;
  elsewhere.write("b.txt", "linked in");
  dir.write("a.txt", "here");
  fs::create_directory_symlink(elsewhere.str(), dir / "linked");
  fs::create_directory_symlink(elsewhere.str(), dir / "linked-again");
  fs::create_symlink(dir / "missing", dir / "broken");
  Corpus corpus = load_corpus({dir.str()});
  std::vector<std::string> all = paths_of(corpus.train);
  for (const std::string& p : paths_of(corpus.validation)) all.push_back(p);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<std::string>{dir / "a.txt", dir / "linked/b.txt"}));
  EXPECT_EQ(corpus.notes,
            (std::vector<std::string>{"[data] skipped " + (dir / "broken") + ": a broken symlink",
                                      "[data] skipped " + (dir / "linked-again") +
                                          ": a directory already read under another name"}));

  fs::create_directories(dir / "sub/deeper");
  dir.write("sub/deeper/c.txt", "deep");
  fs::create_directory_symlink(dir.str(), dir / "sub/deeper/loop");
  EXPECT_EQ(error_of([&] { load_corpus({dir.str()}); }),
            "[data] " + (dir / "sub/deeper/loop") + ": a symlink loop: it leads back to " +
                dir.str() + ", which contains it; remove the link or point --data elsewhere");
}

TEST(Corpus, SortedAndDeterministic) {
  TempDir dir;
  for (std::string name : {"z.txt", "m/q.txt", "b.txt", "m/a.txt", "a.txt", "y/y/y.txt"}) {
    for (int i = 0; i < 5; ++i) dir.write(std::to_string(i) + name, "text of " + name);
  }
  CorpusOptions options{.validation_percent = 30};
  Corpus first = load_corpus({dir.str()}, options);
  Corpus second = load_corpus({dir.str()}, options);
  for (const auto* docs : {&first.train, &first.validation}) {
    std::vector<std::string> paths = paths_of(*docs);
    EXPECT_TRUE(std::is_sorted(paths.begin(), paths.end()));
  }
  EXPECT_EQ(paths_of(first.train), paths_of(second.train));
  EXPECT_EQ(paths_of(first.validation), paths_of(second.validation));
  EXPECT_EQ(first.train.size() + first.validation.size(), 30u);
  EXPECT_EQ(first.train_bytes() + first.validation_bytes(),
            second.train_bytes() + second.validation_bytes());
  for (const Document& d : first.train) {
    EXPECT_EQ(d.bytes, "text of " + d.path.substr(dir.str().size() + 2));  // "<dir>/<i><name>"
  }
}

TEST(Corpus, SplitByHashAndBothSplitsNonEmpty) {
  for (int count : {2, 3, 7}) {
    for (int percent : {0, 5, 50, 100}) {
      TempDir dir;
      for (int i = 0; i < count; ++i) dir.write("f" + std::to_string(i), "x");
      Corpus corpus = load_corpus({dir.str()}, {.validation_percent = percent});
      EXPECT_FALSE(corpus.train.empty()) << count << " files, " << percent << "%";
      EXPECT_FALSE(corpus.validation.empty()) << count << " files, " << percent << "%";
      EXPECT_EQ(corpus.train.size() + corpus.validation.size(), static_cast<size_t>(count));
    }
  }
  TempDir dir;
  for (int i = 0; i < 400; ++i) dir.write("f" + std::to_string(i), "x");
  Corpus corpus = load_corpus({dir.str()}, {.validation_percent = 25});
  EXPECT_GT(corpus.validation.size(), 60u);
  EXPECT_LT(corpus.validation.size(), 140u);
  // The split is by relative path: the same files under another directory split the same way.
  TempDir other;
  for (int i = 0; i < 400; ++i) other.write("f" + std::to_string(i), "x");
  Corpus moved = load_corpus({other.str()}, {.validation_percent = 25});
  ASSERT_EQ(moved.validation.size(), corpus.validation.size());
  for (size_t i = 0; i < moved.validation.size(); ++i) {
    EXPECT_EQ(fs::path(moved.validation[i].path).filename(),
              fs::path(corpus.validation[i].path).filename());
  }
}

TEST(Corpus, SingleDocumentSplitsItsBytes) {
  TempDir dir;
  std::string text(200, 'a');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  std::string file = dir.write("only.txt", text);
  Corpus corpus = load_corpus({file}, {.validation_percent = 5});
  ASSERT_EQ(corpus.train.size(), 1u);
  ASSERT_EQ(corpus.validation.size(), 1u);
  EXPECT_EQ(corpus.validation[0].bytes, text.substr(190));
  EXPECT_EQ(corpus.train[0].bytes + corpus.validation[0].bytes, text);
  Corpus none = load_corpus({file}, {.validation_percent = 0});
  EXPECT_EQ(none.validation_bytes(), 1);  // at least one byte
  EXPECT_EQ(none.train_bytes(), 199);
  Corpus all = load_corpus({file}, {.validation_percent = 100});
  EXPECT_EQ(all.train_bytes(), 1);  // never all of it
}

// Held-out text to score (keel eval --split all): every document whole, in path order, even a
// single document of one byte; nothing to train on.
TEST(Corpus, AllValidationKeepsEveryDocumentWhole) {
  TempDir dir;
  for (int i = 0; i < 7; ++i) dir.write("f" + std::to_string(i), std::string(size_t(i + 1), 'x'));
  Corpus corpus = load_corpus({dir.str()}, {.all_validation = true});
  EXPECT_TRUE(corpus.train.empty());
  ASSERT_EQ(corpus.validation.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(fs::path(corpus.validation[size_t(i)].path).filename(), "f" + std::to_string(i));
    EXPECT_EQ(corpus.validation[size_t(i)].bytes, std::string(size_t(i + 1), 'x'));
  }
  Corpus one = load_corpus({dir.write("one.txt", "y")}, {.all_validation = true});
  ASSERT_EQ(one.validation.size(), 1u);
  EXPECT_EQ(one.validation[0].bytes, "y");
}

TEST(Corpus, MaxBytesKeepsTheCrossingFileWhole) {
  TempDir dir;
  for (int i = 0; i < 5; ++i) dir.write("f" + std::to_string(i), std::string(10, 'x'));
  Corpus corpus = load_corpus({dir.str()}, {.max_bytes = 25});
  EXPECT_EQ(corpus.train.size() + corpus.validation.size(), 3u);
  EXPECT_EQ(corpus.train_bytes() + corpus.validation_bytes(), 30);
}

TEST(Corpus, LibstdcxxHeadersAreText) {
  Corpus corpus = load_corpus({libstdcxx_dir("c++")}, {.max_bytes = 300000});
  EXPECT_FALSE(corpus.train.empty());
  EXPECT_FALSE(corpus.validation.empty());
  EXPECT_GE(corpus.train_bytes() + corpus.validation_bytes(), 300000);
}

// ---- batches ----

void expect_canonical(const Batch& b, int64_t k, int64_t batch, int64_t seq) {
  std::vector<Array> fields = b.fields();
  ASSERT_EQ(fields.size(), 6u);
  for (size_t i = 0; i < fields.size(); ++i) {
    EXPECT_EQ(fields[i].shape(), (Shape{k, batch, seq})) << "field " << i;
    EXPECT_EQ(fields[i].dtype(), i == 2 ? DType::f32 : DType::i64) << "field " << i;
  }
}

TEST(Batch, EmptyBatchIsCanonicalZeros) {
  Batch b = empty_batch(2, 3, 5);
  expect_canonical(b, 2, 3, 5);
  for (const Array& a : b.fields()) {
    for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.get_f64(i), 0.0);
  }
  EXPECT_THROW(empty_batch(0, 3, 5), InputError);
}

TEST(Loader, ShapesAndDtypesWhateverTheLengths) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    LoaderConfig config{.micro_batches = 1 + trial % 3,
                        .batch = 1 + trial % 4,
                        .seq = 1 + trial * 3,
                        .fim_rate = 0.5,
                        .seed = static_cast<uint64_t>(trial)};
    std::vector<Document> docs = random_docs(rng, 1 + trial % 5, 1, 3 * config.seq);
    Loader loader(docs, config);
    for (int i = 0; i < 5; ++i) {
      expect_canonical(loader.next(), config.micro_batches, config.batch, config.seq);
    }
  }
}

// Checks every per-row invariant of `b`.
void expect_invariants(const Batch& b, double fim_rate) {
  const Shape& s = b.tokens.shape();
  const int64_t rows = s[0] * s[1], seq = s[2];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t i = r * seq + t;
      const int64_t token = b.tokens.get_i64(i);
      ASSERT_TRUE(token >= 0 && token < kVocab);
      if (t + 1 < seq) {
        ASSERT_EQ(b.targets.get_i64(i), b.tokens.get_i64(i + 1));
      }
      ASSERT_EQ(b.loss_mask.get_f64(i), token == kEndOfDocument ? 0.0 : 1.0);
      const int64_t kind = b.fim_kind.get_i64(i);
      ASSERT_TRUE(kind >= 0 && kind <= 2);
      if (fim_rate == 0.0) {
        ASSERT_EQ(kind, 0);
      }
      if (t == 0) {
        ASSERT_EQ(b.doc_ids.get_i64(i), 0);
        ASSERT_EQ(b.positions.get_i64(i), 0);
        continue;
      }
      const bool boundary = b.tokens.get_i64(i - 1) == kEndOfDocument;
      const int64_t step = b.doc_ids.get_i64(i) - b.doc_ids.get_i64(i - 1);
      ASSERT_EQ(step, boundary ? 1 : 0) << "row " << r << " position " << t;
      ASSERT_EQ(b.positions.get_i64(i), boundary ? 0 : b.positions.get_i64(i - 1) + 1);
      if (!boundary) {
        ASSERT_EQ(kind, b.fim_kind.get_i64(i - 1));
      }
    }
  }
}

TEST(Loader, InvariantsHoldOnRandomBatches) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t seq = 4 + trial * 5;
    const double rate = trial % 3 == 0 ? 0.0 : 0.5;
    std::vector<Document> docs = random_docs(rng, 3 + trial, 1, 3 * seq);
    Loader loader(docs, {.micro_batches = 2,
                         .batch = 3,
                         .seq = seq,
                         .fim_rate = rate,
                         .seed = static_cast<uint64_t>(trial)});
    for (int i = 0; i < 30; ++i) {
      expect_invariants(loader.next(), rate);
      if (HasFatalFailure()) return;
    }
  }
}

// The epochs' streams concatenated, each token with its document's FIM kind.
void epoch_streams(Loader& loader, size_t docs, size_t tokens, std::vector<int64_t>& stream,
                   std::vector<int64_t>& kinds) {
  for (int64_t epoch = 0; stream.size() < tokens; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < static_cast<int64_t>(docs); ++i) {
      seen.insert(loader.document_at(epoch, i));
      int64_t kind = -1;
      std::vector<int64_t> s = loader.document_tokens(epoch, i, &kind);
      stream.insert(stream.end(), s.begin(), s.end());
      kinds.insert(kinds.end(), s.size(), kind);
    }
    EXPECT_EQ(seen.size(), docs) << "epoch " << epoch << " is not a permutation";
  }
}

// Every row is row stream_row(n) of the concatenated epoch streams (tokens, targets and FIM
// kinds); with shuffle off rows come in stream order, with it on each block of
// rows_per_block() rows is a permutation of that block. With a document too short to cut, the
// loader sums epoch lengths in each epoch's order; without, from the FIM draws alone.
void expect_rows_from_streams(bool shuffle, bool short_document = true) {
  std::mt19937_64 rng(3);
  std::vector<Document> docs = random_docs(rng, 9, 3, 60);
  if (short_document) docs.push_back({"short", "ab"});
  LoaderConfig config{
      .micro_batches = 2, .batch = 2, .seq = 16, .fim_rate = 0.5, .seed = 5, .shuffle = shuffle};
  Loader loader(docs, config), index(docs, config);
  const int64_t seq = config.seq, width = seq + 1, per_batch = 4, batches = 40;
  std::vector<int64_t> rows, kinds;
  for (int i = 0; i < batches; ++i) {
    Batch b = loader.next();
    std::vector<int64_t> r = row_stream(b);
    rows.insert(rows.end(), r.begin(), r.end());
    for (int64_t j = 0; j < b.fim_kind.numel(); ++j) kinds.push_back(b.fim_kind.get_i64(j));
  }
  ASSERT_GT(loader.epoch(), 3);  // the run crossed several epochs
  const int64_t block = index.rows_per_block(), n = per_batch * batches;
  std::vector<int64_t> expected, expected_kinds;
  epoch_streams(index, docs.size(), static_cast<size_t>((n / block + 2) * block * width), expected,
                expected_kinds);
  std::set<int64_t> used;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t source = index.stream_row(r);
    EXPECT_EQ(source / block, r / block) << "row " << r << " left its block";
    if (!shuffle) {
      EXPECT_EQ(source, r);
    }
    used.insert(source);
    for (int64_t t = 0; t < width; ++t) {
      ASSERT_EQ(rows[static_cast<size_t>(r * width + t)],
                expected[static_cast<size_t>(source * width + t)])
          << "row " << r << " token " << t;
      if (t < seq) {
        ASSERT_EQ(kinds[static_cast<size_t>(r * seq + t)],
                  expected_kinds[static_cast<size_t>(source * width + t)]);
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(used.size()), n);  // no row read twice
}

TEST(Loader, RowsReproduceStreamsInOrderWithoutShuffle) {
  expect_rows_from_streams(false);
}

TEST(Loader, ShuffledRowsPermuteEachBlockOfTheStreams) {
  expect_rows_from_streams(true);
}

TEST(Loader, RowsReproduceStreamsWhenFimCanCutEveryDocument) {
  expect_rows_from_streams(true, false);
}

// Rows of one batch come from all over the corpus, not from one document's consecutive text.
TEST(Loader, ShuffledBatchRowsSpreadOverDocuments) {
  std::vector<Document> docs;
  for (int d = 0; d < 40; ++d)
    docs.push_back({"d" + std::to_string(d), std::string(500, 'a' + d % 26)});
  Loader loader(docs, {.batch = 16, .seq = 32, .seed = 1});
  Batch b = loader.next();
  std::set<int64_t> first_tokens;
  for (int64_t r = 0; r < 16; ++r) first_tokens.insert(b.tokens.get_i64(r * 32));
  EXPECT_GE(first_tokens.size(), 8u);  // in corpus order all 16 rows would start alike
}

TEST(Loader, ShuffleOrdersDifferPerEpochAndOffIsCorpusOrder) {
  std::mt19937_64 rng(1);
  std::vector<Document> docs = random_docs(rng, 30, 1, 5);
  Loader shuffled(docs, {.seed = 9});
  Loader plain(docs, {.seed = 9, .shuffle = false});
  std::vector<int64_t> e0, e1;
  for (int64_t i = 0; i < 30; ++i) {
    EXPECT_EQ(plain.document_at(3, i), i);
    e0.push_back(shuffled.document_at(0, i));
    e1.push_back(shuffled.document_at(1, i));
  }
  EXPECT_NE(e0, e1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
}

// ---- fill in the middle ----

// How many of `count` documents (each 3..300 bytes) are FIM at `rate`, checking every stream.
int fim_count(double rate, int count, int* spm) {
  std::mt19937_64 rng(21);
  std::vector<Document> docs = random_docs(rng, count, 3, 300);
  Loader loader(docs, {.fim_rate = rate, .seed = 17});
  int fim = 0;
  *spm = 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t kind = -1;
    std::vector<int64_t> s = loader.document_tokens(0, i, &kind);
    std::string original;
    EXPECT_TRUE(unfim(s, kind, &original)) << "document " << i << " kind " << kind;
    EXPECT_EQ(original, docs[static_cast<size_t>(loader.document_at(0, i))].bytes);
    fim += kind != 0;
    *spm += kind == 2;
  }
  return fim;
}

TEST(Fim, RateOneMakesEveryStreamFim) {
  int spm = 0;
  EXPECT_EQ(fim_count(1.0, 200, &spm), 200);
  EXPECT_GT(spm, 60);  // fim_spm_rate 0.5
  EXPECT_LT(spm, 140);
}

TEST(Fim, RateZeroMakesNone) {
  int spm = 0;
  EXPECT_EQ(fim_count(0.0, 200, &spm), 0);
}

TEST(Fim, RateHalfMakesAboutHalf) {
  int spm = 0;
  int fim = fim_count(0.5, 400, &spm);
  EXPECT_GE(fim, 140);
  EXPECT_LE(fim, 260);
  EXPECT_GT(spm, 0);
  EXPECT_LT(spm, fim);
}

TEST(Fim, ShortDocumentsAreNeverFim) {
  std::vector<Document> docs = {{"a", "a"}, {"b", "bc"}};
  Loader loader(docs, {.fim_rate = 1.0});
  for (int64_t epoch = 0; epoch < 20; ++epoch) {
    for (int64_t i = 0; i < 2; ++i) {
      int64_t kind = -1;
      loader.document_tokens(epoch, i, &kind);
      EXPECT_EQ(kind, 0);
    }
  }
}

// ---- determinism and resume ----

TEST(Loader, SameSeedSameBatchesOtherSeedDiffers) {
  std::mt19937_64 rng(5);
  std::vector<Document> docs = random_docs(rng, 20, 1, 50);
  LoaderConfig config{.batch = 2, .seq = 12, .fim_rate = 0.5, .seed = 42};
  Loader a(docs, config), b(docs, config);
  config.seed = 43;
  Loader c(docs, config);
  bool differs = false;
  for (int i = 0; i < 20; ++i) {
    Batch ba = a.next(), bb = b.next(), bc = c.next();
    EXPECT_TRUE(same_batch(ba, bb)) << "batch " << i;
    differs = differs || !same_batch(ba, bc);
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(a.cursor(), b.cursor());
}

TEST(Loader, ResumeFromCursorIsExact) {
  std::mt19937_64 rng(8);
  std::vector<Document> docs = random_docs(rng, 6, 1, 40);
  LoaderConfig config{.micro_batches = 2, .batch = 2, .seq = 7, .fim_rate = 0.5, .seed = 3};
  Loader reference(docs, config);
  std::vector<Batch> batches;
  std::vector<Cursor> cursors = {reference.cursor()};
  for (int i = 0; i < 30; ++i) {
    batches.push_back(reference.next());
    cursors.push_back(reference.cursor());
  }
  ASSERT_GT(reference.epoch(), 1);
  const int m = 6;
  const int64_t block = reference.rows_per_block();
  bool crossed_block = false;  // resuming inside one shuffling block and across two
  for (size_t n = 0; n + m <= batches.size(); ++n) {
    Cursor cursor = Cursor::from_json(cursors[n].to_json(), "checkpoint/cursor.json");
    ASSERT_EQ(cursor, cursors[n]);
    Loader resumed(docs, config, cursor);
    for (size_t k = 0; k < m; ++k) {
      EXPECT_TRUE(same_batch(resumed.next(), batches[n + k])) << "resumed at " << n << ", +" << k;
      EXPECT_EQ(resumed.cursor(), cursors[n + k + 1]);
    }
    crossed_block = crossed_block || cursors[n + m].row / block != cursors[n].row / block;
  }
  EXPECT_TRUE(crossed_block);
}

// The T+1 tokens of each of `rows` rows from cursor row `first`, read off the epochs' streams
// the way a loop over epochs finds them, when every epoch is `length` tokens long: stream row
// s starts in epoch s * (T+1) / length.
std::vector<int64_t> rows_by_division(Loader& index, int64_t first, int64_t rows, int64_t length,
                                      size_t docs) {
  const int64_t width = index.config().seq + 1;
  std::vector<int64_t> out;
  for (int64_t r = first; r < first + rows; ++r) {
    const int64_t at = index.stream_row(r) * width, epoch = at / length;
    std::vector<int64_t> stream;
    for (int64_t e = epoch; e <= epoch + 1; ++e) {  // a row may run into the next epoch
      for (int64_t i = 0; i < static_cast<int64_t>(docs); ++i) {
        std::vector<int64_t> s = index.document_tokens(e, i, nullptr);
        stream.insert(stream.end(), s.begin(), s.end());
      }
    }
    const auto from = stream.begin() + (at - epoch * length);
    out.insert(out.end(), from, from + width);
  }
  return out;
}

// Without FIM (or with FIM on every document it can cut) every epoch has one length, so a
// cursor far into the stream is found by division, at once, where the loop over epochs it
// replaces would run for years; the batch is the one that loop would find.
TEST(Loader, HugeCursorRowOfEqualEpochsIsFoundAtOnce) {
  std::mt19937_64 rng(11);
  std::vector<Document> docs = random_docs(rng, 7, 1, 40);
  for (double fim : {0.0, 1.0}) {
    SCOPED_TRACE("fim_rate " + std::to_string(fim));
    LoaderConfig config{.micro_batches = 2, .batch = 2, .seq = 12, .fim_rate = fim, .seed = 9};
    Loader index(docs, config);
    int64_t length = 0;
    for (int64_t i = 0; i < 7; ++i) length += std::ssize(index.document_tokens(0, i, nullptr));
    for (int64_t e : {int64_t{1}, int64_t{2}, int64_t{1000}, int64_t{1} << 40}) {  // as assumed
      int64_t n = 0;
      for (int64_t i = 0; i < 7; ++i) n += std::ssize(index.document_tokens(e, i, nullptr));
      ASSERT_EQ(n, length) << "epoch " << e;
    }
    // Near the start (a loop would agree quickly) and about 10^14 epochs in.
    for (int64_t row : {int64_t{37}, int64_t{1000000000000000}}) {
      const auto t0 = std::chrono::steady_clock::now();
      Loader resumed(docs, config, Cursor{row});
      const Batch b = resumed.next();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << row;
      EXPECT_EQ(row_stream(b), rows_by_division(index, row, 4, length, docs.size())) << row;
      EXPECT_EQ(resumed.epoch(), index.stream_row(row + 4) * 13 / length) << row;
    }
  }
}

// A row whose tokens int64 cannot index is refused in one line when the loader is built, and
// a loader just below that limit refuses the batch that would cross it.
TEST(Loader, CursorRowPastInt64TokensIsRefused) {
  std::vector<Document> docs = {{"a", "hello there"}, {"b", "general kenobi"}};
  LoaderConfig config{.micro_batches = 2, .batch = 2, .seq = 12};
  const int64_t block = Loader(docs, config).rows_per_block(), width = 13;
  const int64_t limit = INT64_MAX / (block * width) * block;
  for (int64_t row : {limit, INT64_MAX}) {
    const std::string m = error_of([&] { (void)Loader(docs, config, Cursor{row}); });
    EXPECT_EQ(m, fmt::format("[data] loader: cursor row {} is past the last row ({}) whose tokens "
                             "int64 can index with rows of 13 tokens; no run of this corpus "
                             "reads that far",
                             row, limit - 1));
  }
  Loader last(docs, config, Cursor{limit - 4});
  EXPECT_EQ(last.next().tokens.shape(), (Shape{2, 2, 12}));
  EXPECT_THROW(last.next(), InputError);
}

// With FIM on some documents each epoch's length is its own, so a row is found by summing the
// epochs before it; one further than any run could read is refused in one line, not walked.
TEST(Loader, HugeCursorRowWithVaryingEpochsIsRefusedInOneLine) {
  std::mt19937_64 rng(12);
  std::vector<Document> docs = random_docs(rng, 7, 3, 40);
  LoaderConfig config{.micro_batches = 2, .batch = 2, .seq = 12, .fim_rate = 0.5, .seed = 9};
  const auto t0 = std::chrono::steady_clock::now();
  const std::string m =
      error_of([&] { (void)Loader(docs, config, Cursor{int64_t{1000000000000000}}); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));  // ASan: ~8 s
  EXPECT_TRUE(m.starts_with("[data] loader: stream row ")) << m;
  EXPECT_NE(m.find("epochs into this corpus of 7 documents; with fim_rate 0.5"), std::string::npos)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(Cursor, JsonRoundTrip) {
  Cursor c{.row = 12345};
  EXPECT_EQ(Cursor::from_json(c.to_json(), "x"), c);
  EXPECT_EQ(Cursor::from_json(R"({"row": 2})", "x"), (Cursor{2}));
}

TEST(Cursor, FromJsonErrorsNameSourceAndField) {
  const std::string source = "run/checkpoint-100/loader.json";
  auto message = [&](const std::string& json) {
    return error_of([&] { Cursor::from_json(json, source); });
  };
  for (std::string bad : {"{", "", "[1,2,3]", "{\"row\": 1"}) {
    std::string m = message(bad);
    EXPECT_TRUE(m.starts_with("[data] " + source + ": ")) << bad << " -> " << m;
  }
  EXPECT_NE(message(R"({})").find("\"row\" is missing"), std::string::npos);
  EXPECT_NE(message(R"({"row": -1})").find("\"row\" must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(message(R"({"row": "1"})").find("\"row\""), std::string::npos);
  EXPECT_NE(message(R"({"row": 1.5})").find("\"row\""), std::string::npos);
  EXPECT_NE(message(R"({"epoch": 0, "document": 1, "offset": 0})").find("unknown cursor field"),
            std::string::npos);
  EXPECT_THROW(Cursor::from_json("nope", source), InputError);
}

TEST(Loader, ConstructorErrors) {
  std::vector<Document> none;
  EXPECT_NE(error_of([&] { (void)Loader(none, {}); }).find("no documents"), std::string::npos);
  std::vector<Document> docs = {{"a", "hello"}, {"b", "world"}};
  EXPECT_NE(error_of([&] { (void)Loader(docs, {.batch = 0}); }).find("batch must be >= 1, got 0"),
            std::string::npos);
  EXPECT_THROW(Loader(docs, {.micro_batches = 0}), InputError);
  EXPECT_THROW(Loader(docs, {.seq = -1}), InputError);
  EXPECT_NE(error_of([&] { (void)Loader(docs, {.fim_rate = 1.5}); }).find("fim_rate 1.5"),
            std::string::npos);
  EXPECT_THROW(Loader(docs, {.fim_spm_rate = -0.1}), InputError);
  EXPECT_THROW((Loader(docs, {}, Cursor{-1})), InputError);
  EXPECT_NO_THROW((Loader(docs, {}, Cursor{1000000})));  // rows go on through the epochs
  for (const std::string& m : {error_of([&] { (void)Loader(none, {}); }),
                               error_of([&] { (void)Loader(docs, {.seq = 0}); })}) {
    EXPECT_TRUE(m.starts_with("[data] ")) << m;
  }
}

}  // namespace
}  // namespace keel::data
