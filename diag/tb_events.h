#pragma once
// TensorBoard event files, written in TensorBoard's own record format so TensorBoard opens the
// folder: records of u64 length, masked CRC-32C of the length, an Event protobuf (hand-encoded:
// wall_time, step, file_version or summary{value{tag, simple_value}}), masked CRC-32C of it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "files/append.h"

namespace keel::diag {

uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);

class EventWriter {
 public:
  // Creates `dir` if needed and opens events.out.tfevents.<10-digit time>.<host>.<pid>.<n>;
  // the first record carries file_version "brain.Event:2". keel::Error when it cannot.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void add_scalar(const std::string& tag, int64_t step, float value, double wall_time);
  void flush();  // the records added so far reach the file and are fsynced; keel::Error
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  files::AppendFile file_;
  std::string pending_;  // records not yet written
};

struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  float value = 0;
  double wall_time = 0;
};

// Reads an event file back, checking both CRCs of every record; keel::InputError naming the
// file and byte offset of the first bad record. Returns the scalars (the version record is
// skipped). For tests and `keel` tools.
std::vector<ScalarEvent> read_scalar_events(const std::string& path);

}  // namespace keel::diag
