#pragma once
// The run directory one keel train writes, claimed before anything is written there: a lock
// (RUN_DIR/.keel-lock, held until the run ends) refuses a second run on the same directory,
// naming the first; a fresh run (no --resume) into a directory that holds an earlier run is
// refused unless --overwrite, which first moves that run's files (keel's only: checkpoints,
// metrics, events, records, logs) into RUN_DIR/previous, replacing what an older overwrite
// left there, so two runs never mix in one directory and one overwrite loses nothing.
#include <string>

#include "files/fd.h"

namespace keel::train {

class RunDirClaim {
 public:
  // keel::InputError "[train] ..." when another process holds the lock, when `resume` and
  // `overwrite` are both set, or when a fresh run would write over an earlier one.
  RunDirClaim(const std::string& run_dir, bool resume, bool overwrite);

  // What --overwrite did ("moved the earlier run (metrics.jsonl, ...) to R/previous"), or "".
  const std::string& note() const { return note_; }

 private:
  files::Fd lock_;
  std::string note_;
};

}  // namespace keel::train
