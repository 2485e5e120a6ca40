#pragma once
// The run directory one keel train writes, claimed before anything is written there: a lock
// (RUN_DIR/.keel-lock, held until the run ends) refuses a second run on the same directory,
// naming the first; a fresh run (no --resume) into a directory that holds an earlier run is
// refused unless --overwrite, which first removes that run's files (keel's only: checkpoints,
// metrics, events, records, logs), so two runs never mix in one directory.
#include <string>

namespace keel::train {

class RunDirClaim {
 public:
  // keel::InputError "[train] ..." when another process holds the lock, when `resume` and
  // `overwrite` are both set, or when a fresh run would write over an earlier one.
  RunDirClaim(const std::string& run_dir, bool resume, bool overwrite);
  ~RunDirClaim();
  RunDirClaim(const RunDirClaim&) = delete;
  RunDirClaim& operator=(const RunDirClaim&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace keel::train
