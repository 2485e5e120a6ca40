#pragma once
// Memory calibration (contract 10): each run appends (config id, predicted peak, observed peak)
// to a calibration file; the next launch of the same config reads the newest record and, when
// the peak it implies (the prediction corrected by observed/predicted) exceeds
// launch.memory_budget_bytes, stops before compiling anything.
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/runtime.h"

namespace keel::train {

struct Calibration {
  std::string config_id;  // hash of the model config, batch shape, step layout and bundle
  int64_t predicted_peak_bytes = 0;
  int64_t observed_peak_bytes = 0;
  double ratio() const;  // observed / predicted (1 when unknown)
};

// Where a run's calibration goes and what it is of.
struct CalibrationTarget {
  std::string file;
  std::string config_id;
};
// The file lives beside the cache the run writes to (it outlives run directories), or in the
// run directory when the cache is not writable; `config_text` is everything that changes what
// the run holds at its peak.
CalibrationTarget calibration_target(const Runtime& rt, const std::string& run_dir,
                                     const std::string& config_text);

std::string calibration_id(const std::string& config_text, const std::string& bundle_hash);
// The newest record for `config_id`; keel::InputError naming file:line for a malformed line.
std::optional<Calibration> read_calibration(const std::string& file, const std::string& config_id);
// Appends by rewriting the file atomically (it stays small: one line per run).
void append_calibration(const std::string& file, const Calibration& record);
// keel::InputError "[train] memory: ..." naming both figures and the knobs when the newest
// record's predicted peak corrected by its observed/predicted ratio, times the `processes` of
// this host that each need it, exceeds `budget` (> 0; per host).
void check_memory_budget(const std::optional<Calibration>& last, int64_t budget,
                         const std::string& file, int processes = 1);
// Before the first trace of a config: its training state alone (each parameter's f32 value,
// both AdamW moments and its gradient: 16 bytes, less what sharding.zero splits), `state_bytes`
// a process, times the `processes` of this host that each hold it, must fit in `limit_bytes`
// (> 0; this host's memory or cgroup limit, or the launch's budget, named by `limit_source`);
// else keel::InputError "[train] memory: ..." naming the figures.
void check_state_fits(const std::string& model, int64_t parameters, int64_t state_bytes,
                      int processes, int64_t limit_bytes, const std::string& limit_source);

}  // namespace keel::train
