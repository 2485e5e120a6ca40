#pragma once
// The per-key compile election: an exclusive flock on locks/<key>.lock. The kernel releases it
// when the holder exits or dies, so a waiter then takes over instead of waiting forever.
#include <optional>
#include <string>

#include "cache/fs.h"

namespace keel::cache {

class KeyLock {
 public:
  // Blocks until the lock is ours; keel::Error when the lock file cannot be opened.
  static KeyLock acquire(const std::string& path);
  // nullopt when another holder has it (an entry being written or checked).
  static std::optional<KeyLock> try_acquire(const std::string& path);

 private:
  explicit KeyLock(fs::Fd fd) : fd_(std::move(fd)) {}
  fs::Fd fd_;  // closing it releases the lock
};

}  // namespace keel::cache
