// The corpus walker: stat-based, so every symlink decision is explicit and a loop is caught by
// the identity (device, inode) of the directories on the current path.
#include "data/corpus_files.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "files/read.h"
#include "ir/error.h"

namespace keel::data {
namespace {

namespace fs = std::filesystem;
using DirId = std::pair<dev_t, ino_t>;

constexpr size_t kMaxNotes = 10;  // a tree full of sockets must not flood the terminal

class Walker {
 public:
  explicit Walker(CorpusListing& out) : out_(out) {}

  void walk_root(const std::string& dir, const struct stat& st) {
    enter(dir, "", st);
    if (skipped_ > kMaxNotes) {
      out_.notes.push_back(fmt::format("[data] skipped {} more entries under {} (not listed)",
                                       skipped_ - kMaxNotes, dir));
    }
  }

 private:
  void note(const std::string& text) {
    if (++skipped_ <= kMaxNotes) out_.notes.push_back("[data] skipped " + text);
  }

  void enter(const std::string& dir, const std::string& relative, const struct stat& st) {
    const DirId id{st.st_dev, st.st_ino};
    visited_.insert(id);
    path_.push_back({id, dir});
    walk(dir, relative);
    path_.pop_back();
  }

  void walk(const std::string& dir, const std::string& relative) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) {
      if (relative.empty()) {
        throw InputError(fmt::format("[data] {}: cannot list: {}", dir, ec.message()));
      }
      note(fmt::format("{}: cannot list: {}", dir, ec.message()));
      return;
    }
    std::vector<fs::path> entries;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) throw InputError(fmt::format("[data] {}: cannot list: {}", dir, ec.message()));
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] != '.') entries.push_back(it->path());  // hidden: .git, swaps
    }
    // In name order: which of two links to one directory is read must not depend on readdir.
    std::sort(entries.begin(), entries.end());
    for (const fs::path& p : entries) {
      const std::string name = p.filename().string();
      visit(p.string(), relative.empty() ? name : relative + "/" + name);
    }
  }

  void visit(const std::string& path, const std::string& relative) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      note(
          fmt::format("{}: {}", path, errno == ENOENT ? "a broken symlink" : std::strerror(errno)));
      return;
    }
    if (S_ISREG(st.st_mode)) {
      if (st.st_size == 0) {
        ++out_.empty;
      } else {
        out_.files.push_back({path, relative});
      }
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      note(fmt::format("{}: {}, not a regular file", path, files::file_type_text(st.st_mode)));
      return;
    }
    const DirId id{st.st_dev, st.st_ino};
    auto ancestor =
        std::find_if(path_.begin(), path_.end(), [&](const auto& p) { return p.first == id; });
    if (ancestor != path_.end()) {
      throw InputError(fmt::format(
          "[data] {}: a symlink loop: it leads back to {}, which contains it; remove the link or "
          "point --data elsewhere",
          path, ancestor->second));
    }
    if (visited_.contains(id)) {
      note(fmt::format("{}: a directory already read under another name", path));
      return;
    }
    enter(path, relative, st);
  }

  CorpusListing& out_;
  std::vector<std::pair<DirId, std::string>>
      path_;  // the directories being walked, outermost first
  std::set<DirId> visited_;
  size_t skipped_ = 0;
};

}  // namespace

CorpusListing list_corpus_files(const std::string& arg) {
  CorpusListing out;
  struct stat st {};
  if (::stat(arg.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      throw InputError(fmt::format("[data] {}: no such file or directory", arg));
    }
    throw InputError(fmt::format("[data] {}: cannot be read: {}", arg, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    Walker(out).walk_root(arg, st);
  } else if (S_ISREG(st.st_mode)) {
    if (st.st_size == 0) {
      ++out.empty;
    } else {
      out.files.push_back({arg, fs::path(arg).filename().string()});
    }
  } else {
    throw InputError(fmt::format(
        "[data] {}: {}, not a text file or a directory; --data takes files and directories of "
        "text",
        arg, files::file_type_text(st.st_mode)));
  }
  return out;
}

}  // namespace keel::data
