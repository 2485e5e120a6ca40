#pragma once
/// @file
/// safetensors, the format other tools read: an 8-byte little-endian header length, a JSON
/// header (padded with spaces to a multiple of 8) naming each tensor's dtype, shape and
/// data_offsets, then the data. Written atomically; read with every field checked.
#include <functional>
#include <map>
#include <string>

#include "ir/array.h"
#include "ir/graph.h"

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
/// name order, written and dropped before the next: a file larger than what memory holds at
/// once (a checkpoint's moments, gathered from every process one tensor at a time).
void write_safetensors_streamed(const std::string& path,
                                const std::map<std::string, TensorType>& types,
                                const std::function<Array(const std::string& name)>& tensor,
                                const std::map<std::string, std::string>& metadata = {});

/// The contents of a safetensors file.
struct SafetensorsFile {
  TensorMap tensors;                            ///< every tensor, by name
  std::map<std::string, std::string> metadata;  ///< the header's `__metadata__` strings
};

/// Reads `path`; keel::InputError with one line naming the file and what is wrong: shorter than 8
/// bytes, header length beyond the file or above 100 MB, header not a JSON object, a tensor entry
/// without dtype/shape/data_offsets, an unknown dtype, offsets that do not match the shape,
/// gaps or overlaps between tensors, data block size different from what the header covers,
/// tensors that do not match the header's kChecksumKey (a file without one is not checked).
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace keel::train
