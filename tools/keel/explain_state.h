#pragma once
// `keel explain RUN_DIR`'s table of the training state: each tensor's global shape, how its
// gradient and moments lie over the data axis, and its bytes on each process (record.json's
// "state"; train/run_record.h writes it).
#include <string>

namespace keel::cli {

// The table, or "" when RUN_DIR has no record.json or its record has no "state" (a run that
// stopped before its record, or one from before the field). keel::InputError naming the file
// and the field when the record is damaged.
std::string describe_state(const std::string& run_dir);

}  // namespace keel::cli
