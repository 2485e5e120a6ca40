#pragma once
// Memory calibration: each run appends (config+bundle key, predicted peak, observed peak) to a
// calibration file; the next launch of the same key reads the newest record and, when the
// observed peak it implies exceeds launch.memory_budget_bytes, stops before compiling anything.
#include <cstdint>
#include <optional>
#include <string>

namespace keel::train {

struct Calibration {
  std::string key;  // hash of the model config, batch shape and bundle
  int64_t predicted_peak_bytes = 0;
  int64_t observed_peak_bytes = 0;
  double ratio() const;  // observed / predicted (1 when unknown)
};

std::string calibration_key(const std::string& config_json, const std::string& bundle_hash);
// The newest record for `key`; keel::InputError naming file:line for a malformed line.
std::optional<Calibration> read_calibration(const std::string& file, const std::string& key);
// Appends by rewriting the file atomically (it stays small: one line per run).
void append_calibration(const std::string& file, const Calibration& record);
// keel::InputError "[train] memory: ..." naming the numbers and the knobs when the newest
// record's predicted peak corrected by its observed/predicted ratio exceeds `budget` (> 0).
void check_memory_budget(const std::optional<Calibration>& last, int64_t budget,
                         const std::string& file);

}  // namespace keel::train
