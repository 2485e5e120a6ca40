#pragma once
/// @file
/// safetensors, the format other tools read: an 8-byte little-endian header length, a JSON
/// header (padded with spaces to a multiple of 8) naming each tensor's dtype, shape and
/// data_offsets, then the data. Written atomically; read with every field checked.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"

namespace keel::files {
class Fd;
}

namespace keel::train {

/// Tensors by name.
using TensorMap = std::map<std::string, Array>;

/// The `__metadata__` key keel writes its checksum under (other readers ignore it).
inline constexpr const char* kChecksumKey = "keel.checksum";

/// "xxh3-128:<32 hex digits>" over every tensor's name, dtype, shape and bytes, in name order.
std::string tensors_checksum(const TensorMap& tensors);

/// Writes `tensors` (f32 "F32", bf16 "BF16", i32 "I32", i64 "I64", bool "BOOL") and
/// `metadata` (always with "format": "pt", and kChecksumKey: tensors_checksum) to `path`
/// through a temporary name, fsync and rename.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// The same file as write_safetensors of the tensors `types` names, each asked of `tensor` in
/// `order` (empty: name order), written in its place and dropped before the next: a file larger
/// than what memory holds at once (a checkpoint's moments, gathered from every process one
/// tensor at a time, a scanned stack's layers together).
void write_safetensors_streamed(const std::string& path,
                                const std::map<std::string, TensorType>& types,
                                const std::function<Array(const std::string& name)>& tensor,
                                const std::map<std::string, std::string>& metadata = {},
                                const std::vector<std::string>& order = {});

/// The contents of a safetensors file.
struct SafetensorsFile {
  TensorMap tensors;                            ///< every tensor, by name
  std::map<std::string, std::string> metadata;  ///< the header's `__metadata__` strings
};

/// A safetensors file open for reading one tensor at a time, so no more than one of its tensors
/// need be in memory (a resume taking its shards of a checkpoint larger than memory). Opening
/// reads and checks the header; keel::InputError with one line naming the file and what is
/// wrong: shorter than 8 bytes, header length beyond the file or above 100 MB, header not a JSON
/// object, a tensor entry without dtype/shape/data_offsets, an unknown dtype, offsets that do not
/// match the shape, gaps or overlaps between tensors, data block size different from what the
/// header covers. The file stays open, so a file removed meanwhile is still read whole.
class SafetensorsReader {
 public:
  /// Opens `path`. `whole`: every tensor will be held at once, so a file larger than the memory
  /// this process may use is refused first (keel::InputError).
  explicit SafetensorsReader(const std::string& path, bool whole = false);
  /// The file's path, as given.
  const std::string& path() const { return path_; }
  /// Every tensor's dtype and shape, by name.
  const std::map<std::string, TensorType>& types() const { return types_; }
  /// The header's `__metadata__` strings.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Tensor `name`, read from the file (keel::Error for a name the file has not).
  Array read(const std::string& name);
  /// keel::InputError when the tensors read do not match the header's kChecksumKey ("damaged,
  /// ... use another copy"), or when one was never read (an internal error); a file without a
  /// checksum is not checked.
  void check_checksum() const;
  /// Reads every tensor not read yet, one at a time, then check_checksum(): whether a value found
  /// wrong is the file's damage.
  void check_checksum_reading_the_rest();

 private:
  struct Stored {
    uint64_t begin = 0;         // in the data block
    std::string checksum_line;  // once read
  };
  std::string path_;
  std::shared_ptr<const files::Fd> fd_;  // shared: readers are copied into callbacks
  uint64_t data_start_ = 0;
  std::map<std::string, TensorType> types_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, Stored> stored_;
};

/// Reads `path` whole: SafetensorsReader's checks (`whole`) and tensors that do not match the
/// header's kChecksumKey, each keel::InputError.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace keel::train
