// keel_fault.so: an LD_PRELOAD layer that breaks the k-th file-system call a process makes under
// one directory, the way SQLite's test VFS does, for tests/fault_sweep.sh. Environment:
//   KEEL_FAULT_ROOT   the directory whose files are watched (required)
//   KEEL_FAULT_SCOPE  ':'-separated substrings of paths below the root whose calls are counted
//                     (empty: every call under the root)
//   KEEL_FAULT_AT     the counted call to break, from 1 (0 or unset: count only)
//   KEEL_FAULT_MODE   eio | enospc (the call fails), short (the k-th write writes half), or
//                     crash (power loss: every write and directory change not yet fsynced is
//                     undone, then the process is killed with SIGKILL)
//   KEEL_FAULT_REPORT a file that gets "fired K OP PATH MODE" when the fault fires, and at exit
//                     "calls N writes W" (the ranges of k: all counted calls, and writes only)
//   KEEL_FAULT_STASH  crash mode: a directory on the root's file system for copies of unlinked
//                     and replaced files, so a power loss can bring them back
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

template <class F>
F real(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

using OpenFn = int (*)(const char*, int, ...);
using OpenatFn = int (*)(int, const char*, int, ...);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using PwriteFn = ssize_t (*)(int, const void*, size_t, off_t);
using FdFn = int (*)(int);
using RenameFn = int (*)(const char*, const char*);
using RenameatFn = int (*)(int, const char*, int, const char*);
using MkdirFn = int (*)(const char*, mode_t);
using MkdiratFn = int (*)(int, const char*, mode_t);
using PathFn = int (*)(const char*);
using UnlinkatFn = int (*)(int, const char*, int);

struct Real {
  OpenFn open = real<OpenFn>("open");
  OpenFn open64 = real<OpenFn>("open64");
  OpenatFn openat = real<OpenatFn>("openat");
  OpenatFn openat64 = real<OpenatFn>("openat64");
  WriteFn write = real<WriteFn>("write");
  PwriteFn pwrite = real<PwriteFn>("pwrite");
  PwriteFn pwrite64 = real<PwriteFn>("pwrite64");
  FdFn fsync = real<FdFn>("fsync");
  FdFn fdatasync = real<FdFn>("fdatasync");
  FdFn close = real<FdFn>("close");
  RenameFn rename = real<RenameFn>("rename");
  RenameatFn renameat = real<RenameatFn>("renameat");
  MkdirFn mkdir = real<MkdirFn>("mkdir");
  MkdiratFn mkdirat = real<MkdiratFn>("mkdirat");
  PathFn unlink = real<PathFn>("unlink");
  PathFn rmdir = real<PathFn>("rmdir");
  PathFn remove = real<PathFn>("remove");
  UnlinkatFn unlinkat = real<UnlinkatFn>("unlinkat");
};

Real& sys() {
  static Real r;
  return r;
}

enum class Mode { count, eio, enospc, short_write, crash };

struct Config {
  std::string root;  // canonical, no trailing slash; empty: the shim does nothing
  std::vector<std::string> scope;
  long at = 0;
  Mode mode = Mode::count;
  std::string report, stash;
};

// A directory entry changed since its directory was last fsynced: undone by a power loss.
struct Change {
  enum Kind { created, renamed, unlinked, removed_dir } kind;
  std::string path, to, backup;  // renamed: path -> to; backup: the file it replaced/unlinked
  bool was_dir = false;          // created a directory, or renamed onto an empty one
  std::set<std::pair<dev_t, ino_t>> unsynced;  // directories that must be fsynced to keep it
};

struct State {
  Config config;
  std::mutex mu;
  long calls = 0;   // counted calls (only writes in short mode)
  long writes = 0;  // writes in scope, the range of k for short mode
  bool fired = false;
  std::map<int, std::string> fds;  // open descriptors under the root
  std::map<std::pair<dev_t, ino_t>, std::pair<int, off_t>> dirty;  // inode -> (dup fd, synced)
  std::vector<Change> changes;
  long stashed = 0;
};

State& state() {
  static State* s = new State;  // never destroyed: calls may arrive during exit
  return *s;
}

std::string getenv_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string canonical_dir(const std::string& dir) {
  char buf[PATH_MAX];
  if (::realpath(dir.c_str(), buf)) return buf;
  return dir;
}

// An absolute path with a canonical parent (the last part may not exist yet).
std::string absolute(int dirfd, const char* path) {
  if (!path) return {};
  std::string p = path;
  if (p.empty()) return p;
  if (p[0] != '/') {
    std::string base;
    if (dirfd == AT_FDCWD) {
      char buf[PATH_MAX];
      if (!::getcwd(buf, sizeof buf)) return p;
      base = buf;
    } else {
      char link[64], buf[PATH_MAX];
      std::snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
      const ssize_t n = ::readlink(link, buf, sizeof buf - 1);
      if (n <= 0) return p;
      base.assign(buf, static_cast<size_t>(n));
    }
    p = base + "/" + p;
  }
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  const std::string parent = slash == 0 ? "/" : p.substr(0, slash);
  const std::string name = p.substr(slash + 1);
  if (name == "." || name == "..") return canonical_dir(p);
  const std::string dir = canonical_dir(parent);
  return dir == "/" ? "/" + name : dir + "/" + name;
}

bool under_root(const std::string& path) {
  const std::string& root = state().config.root;
  return !root.empty() && path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

bool in_scope(const std::string& path) {
  if (!under_root(path)) return false;
  const Config& c = state().config;
  if (c.scope.empty()) return true;
  const std::string rel = path.substr(c.root.size());
  for (const std::string& s : c.scope) {
    if (rel.find(s) != std::string::npos) return true;
  }
  return false;
}

std::pair<dev_t, ino_t> inode_of_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  struct stat st {};
  if (::stat(slash == 0 ? "/" : path.substr(0, slash).c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

void append_report(const std::string& line) {
  const std::string& file = state().config.report;
  if (file.empty()) return;
  const int fd = sys().open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string text = line + "\n";
  (void)!sys().write(fd, text.data(), text.size());
  sys().close(fd);
}

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {
      std::vector<std::string> names;
      while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
          names.emplace_back(e->d_name);
        }
      }
      ::closedir(d);
      for (const std::string& n : names) remove_tree(path + "/" + n);
    }
    sys().rmdir(path.c_str());
  } else {
    sys().unlink(path.c_str());
  }
}

// The power cut: unsynced bytes are dropped, unsynced directory changes undone newest first.
[[noreturn]] void lose_power() {
  State& s = state();
  for (auto& [inode, kept] : s.dirty) {
    (void)!::ftruncate(kept.first, kept.second);
  }
  for (auto it = s.changes.rbegin(); it != s.changes.rend(); ++it) {
    if (it->unsynced.empty()) continue;
    switch (it->kind) {
      case Change::created:
        remove_tree(it->path);
        break;
      case Change::renamed:
        sys().rename(it->to.c_str(), it->path.c_str());
        if (!it->backup.empty()) {
          sys().rename(it->backup.c_str(), it->to.c_str());
        } else if (it->was_dir) {
          sys().mkdir(it->to.c_str(), 0755);
        }
        break;
      case Change::unlinked:
        if (!it->backup.empty()) sys().rename(it->backup.c_str(), it->path.c_str());
        break;
      case Change::removed_dir:
        sys().mkdir(it->path.c_str(), 0755);
        break;
    }
  }
  ::sync();
  ::kill(::getpid(), SIGKILL);
  std::abort();
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::eio:
      return "eio";
    case Mode::enospc:
      return "enospc";
    case Mode::short_write:
      return "short";
    case Mode::crash:
      return "crash";
    default:
      return "count";
  }
}

// True when this call is the one to break (crash mode does not return). Called with mu held.
bool counted(const char* op, const std::string& path, bool is_write) {
  State& s = state();
  if (!in_scope(path)) return false;
  if (is_write) ++s.writes;
  if (s.config.mode == Mode::short_write && !is_write) return false;
  ++s.calls;
  if (s.fired || s.config.at <= 0 || s.calls != s.config.at) return false;
  s.fired = true;
  append_report("fired " + std::to_string(s.calls) + " " + op + " " + path + " " +
                mode_name(s.config.mode));
  if (s.config.mode == Mode::crash) lose_power();
  return true;
}

int fail() {
  errno = state().config.mode == Mode::enospc ? ENOSPC : EIO;
  return -1;
}

bool crash_mode() {
  return state().config.mode == Mode::crash;
}

void record(Change c) {
  if (!crash_mode()) return;
  state().changes.push_back(std::move(c));
}

// A hard link beside the stash, so an unlinked or replaced file can come back.
std::string stash_copy(const std::string& path) {
  State& s = state();
  if (!crash_mode() || s.config.stash.empty()) return {};
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return {};
  const std::string to =
      s.config.stash + "/" + std::to_string(::getpid()) + "-" + std::to_string(++s.stashed);
  return ::link(path.c_str(), to.c_str()) == 0 ? to : std::string();
}

void note_write(int fd, off_t before) {
  State& s = state();
  if (!crash_mode()) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  const auto inode = std::make_pair(st.st_dev, st.st_ino);
  if (s.dirty.count(inode)) return;
  const int kept = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
  if (kept >= 0) s.dirty[inode] = {kept, before};
}

void note_sync(int fd) {
  State& s = state();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  const auto inode = std::make_pair(st.st_dev, st.st_ino);
  if (auto it = s.dirty.find(inode); it != s.dirty.end()) {
    sys().close(it->second.first);
    s.dirty.erase(it);
  }
  if (S_ISDIR(st.st_mode)) {
    for (Change& c : s.changes) c.unsynced.erase(inode);
  }
}

template <class OpenCall>
int traced_open(int dirfd, const char* path, int flags, mode_t mode, OpenCall call) {
  const std::string p = absolute(dirfd, path);
  if (!under_root(p)) return call(mode);
  std::lock_guard lock(state().mu);
  const bool mutating = (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0;
  struct stat st {};
  const bool existed = ::lstat(p.c_str(), &st) == 0;
  if (mutating && counted("open", p, false)) return fail();
  const int fd = call(mode);
  if (fd < 0) return fd;
  state().fds[fd] = p;
  if (!existed) record({Change::created, p, {}, {}, false, {inode_of_dir(p)}});
  return fd;
}

std::string fd_path(int fd) {
  auto it = state().fds.find(fd);
  return it == state().fds.end() ? std::string() : it->second;
}

template <class WriteCall>
ssize_t traced_write(int fd, size_t n, WriteCall call) {
  if (state().config.root.empty()) return call(n);
  std::lock_guard lock(state().mu);
  const std::string p = fd_path(fd);
  if (p.empty()) return call(n);
  struct stat st {};
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : 0;  // the size a power loss keeps
  if (counted("write", p, true)) {
    if (state().config.mode != Mode::short_write) return fail();
    note_write(fd, before);
    return call(n > 1 ? n / 2 : n);
  }
  note_write(fd, before);
  return call(n);
}

int traced_sync(int fd, FdFn call, const char* op) {
  if (state().config.root.empty()) return call(fd);
  std::lock_guard lock(state().mu);
  const std::string p = fd_path(fd);
  if (p.empty()) return call(fd);
  if (counted(op, p, false)) return fail();
  const int rc = call(fd);
  if (rc == 0) note_sync(fd);
  return rc;
}

int traced_rename(int fromfd, const char* from, int tofd, const char* to) {
  const std::string a = absolute(fromfd, from), b = absolute(tofd, to);
  auto call = [&] { return sys().renameat(fromfd, from, tofd, to); };
  if (!under_root(a) && !under_root(b)) return call();
  std::lock_guard lock(state().mu);
  if (counted("rename", b, false)) return fail();
  struct stat st {};
  const bool target_dir = ::lstat(b.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  const std::string backup = stash_copy(b);
  const int rc = call();
  if (rc != 0) {
    if (!backup.empty()) sys().unlink(backup.c_str());
    return rc;
  }
  record({Change::renamed, a, b, backup, target_dir, {inode_of_dir(a), inode_of_dir(b)}});
  return rc;
}

int traced_mkdir(int dirfd, const char* path, mode_t mode) {
  const std::string p = absolute(dirfd, path);
  if (!under_root(p)) return sys().mkdirat(dirfd, path, mode);
  std::lock_guard lock(state().mu);
  if (counted("mkdir", p, false)) return fail();
  const int rc = sys().mkdirat(dirfd, path, mode);
  if (rc == 0) record({Change::created, p, {}, {}, true, {inode_of_dir(p)}});
  return rc;
}

int traced_unlink(int dirfd, const char* path, int flags) {
  const std::string p = absolute(dirfd, path);
  if (!under_root(p)) return sys().unlinkat(dirfd, path, flags);
  std::lock_guard lock(state().mu);
  if (counted((flags & AT_REMOVEDIR) ? "rmdir" : "unlink", p, false)) return fail();
  const std::string backup = (flags & AT_REMOVEDIR) ? std::string() : stash_copy(p);
  const int rc = sys().unlinkat(dirfd, path, flags);
  if (rc != 0) {
    if (!backup.empty()) sys().unlink(backup.c_str());
    return rc;
  }
  record({(flags & AT_REMOVEDIR) ? Change::removed_dir : Change::unlinked,
          p,
          {},
          backup,
          false,
          {inode_of_dir(p)}});
  return rc;
}

mode_t mode_arg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

__attribute__((constructor)) void start() {
  Config& c = state().config;
  const std::string root = getenv_or("KEEL_FAULT_ROOT", "");
  // The compiler and other children run without the shim.
  ::unsetenv("LD_PRELOAD");
  if (root.empty()) return;
  c.root = canonical_dir(root);
  std::string scope = getenv_or("KEEL_FAULT_SCOPE", "");
  for (size_t start = 0; start <= scope.size();) {
    size_t end = scope.find(':', start);
    if (end == std::string::npos) end = scope.size();
    if (end > start) c.scope.push_back(scope.substr(start, end - start));
    start = end + 1;
  }
  c.at = std::atol(getenv_or("KEEL_FAULT_AT", "0").c_str());
  const std::string mode = getenv_or("KEEL_FAULT_MODE", "eio");
  c.mode = mode == "enospc"  ? Mode::enospc
           : mode == "short" ? Mode::short_write
           : mode == "crash" ? Mode::crash
                             : Mode::eio;
  c.report = getenv_or("KEEL_FAULT_REPORT", "");
  c.stash = getenv_or("KEEL_FAULT_STASH", "");
}

__attribute__((destructor)) void finish() {
  if (state().config.root.empty()) return;
  append_report("calls " + std::to_string(state().calls) + " writes " +
                std::to_string(state().writes));
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return traced_open(AT_FDCWD, path, flags, mode,
                     [&](mode_t m) { return sys().open(path, flags, m); });
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return traced_open(AT_FDCWD, path, flags, mode,
                     [&](mode_t m) { return sys().open64(path, flags, m); });
}

int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return traced_open(dirfd, path, flags, mode,
                     [&](mode_t m) { return sys().openat(dirfd, path, flags, m); });
}

int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return traced_open(dirfd, path, flags, mode,
                     [&](mode_t m) { return sys().openat64(dirfd, path, flags, m); });
}

int creat(const char* path, mode_t mode) {
  return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

ssize_t write(int fd, const void* buf, size_t n) {
  return traced_write(fd, n, [&](size_t m) { return sys().write(fd, buf, m); });
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t at) {
  return traced_write(fd, n, [&](size_t m) { return sys().pwrite(fd, buf, m, at); });
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t at) {
  return traced_write(fd, n, [&](size_t m) { return sys().pwrite64(fd, buf, m, at); });
}

int fsync(int fd) {
  return traced_sync(fd, sys().fsync, "fsync");
}

int fdatasync(int fd) {
  return traced_sync(fd, sys().fdatasync, "fdatasync");
}

int close(int fd) {
  if (!state().config.root.empty()) {
    std::lock_guard lock(state().mu);
    state().fds.erase(fd);
  }
  return sys().close(fd);
}

int rename(const char* from, const char* to) {
  return traced_rename(AT_FDCWD, from, AT_FDCWD, to);
}

int renameat(int fromfd, const char* from, int tofd, const char* to) {
  return traced_rename(fromfd, from, tofd, to);
}

int mkdir(const char* path, mode_t mode) {
  return traced_mkdir(AT_FDCWD, path, mode);
}

int mkdirat(int dirfd, const char* path, mode_t mode) {
  return traced_mkdir(dirfd, path, mode);
}

int unlink(const char* path) {
  return traced_unlink(AT_FDCWD, path, 0);
}

int unlinkat(int dirfd, const char* path, int flags) {
  return traced_unlink(dirfd, path, flags);
}

int rmdir(const char* path) {
  return traced_unlink(AT_FDCWD, path, AT_REMOVEDIR);
}

// glibc's remove() calls unlink and rmdir inside libc, out of reach of this layer.
int remove(const char* path) {
  struct stat st {};
  if (::lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) return rmdir(path);
  return unlink(path);
}

}  // extern "C"
