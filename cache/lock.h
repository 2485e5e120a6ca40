#pragma once
// The per-key compile election: an exclusive flock on locks/<key>.lock. The kernel releases it
// when the holder exits or dies, so a waiter then takes over; a holder that is alive but stuck
// (stopped, hung) meets the waiter's deadline instead.
//
// The holder writes "pid N host H" into the lock file once it holds the lock and empties it
// before letting go, so a waiter that gives up can name it: flock has no owner query, and
// /proc/locks neither sees holders on other hosts of a shared cache directory nor names them
// across pid namespaces. Lock files are never unlinked, so the text stays with the lock.
#include <optional>
#include <string>

#include "cache/fs.h"

namespace keel::cache {

class KeyLock {
 public:
  // Waits until the lock is ours, at most `timeout_s` seconds; then keel::Error "[cache] gave up
  // after T s (compile_cache.lock_timeout_s) waiting for the lock FILE held by pid N on host H
  // (stopped) ...". keel::Error also when the lock file cannot be opened.
  // `unlocked_ok`: on storage without flock, go on unlocked (a shared directory, where the
  // launch elects one writer per key itself; publishing stays atomic).
  static KeyLock acquire(const std::string& path, double timeout_s, bool unlocked_ok = false);
  // nullopt when another holder has it (an entry being written or checked).
  static std::optional<KeyLock> try_acquire(const std::string& path);

  KeyLock(KeyLock&&) = default;
  KeyLock& operator=(KeyLock&&) = delete;
  ~KeyLock();  // empties the holder text, then closing the file releases the lock

 private:
  explicit KeyLock(fs::Fd fd);
  fs::Fd fd_;
};

}  // namespace keel::cache
