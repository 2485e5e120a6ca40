#pragma once
// The serialized form of a CPU executable (backend/executable_bytes.h): one JSON header line,
// "\n", then the raw bytes of the shared object. The header names the program, its signature,
// its memory needs and the size and checksum of the shared object, so a load can reject bad
// bytes before mapping any code.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace keel::cpu {

// What a serialized CPU executable says of itself before its shared object: the program's
// name, its input and output types, donations and memory.
struct ExecutableHeader {
  std::string graph_name;
  std::vector<TensorType> inputs;   // one per graph parameter, in order
  std::vector<TensorType> outputs;  // one per graph output, in order
  std::vector<int32_t> aliases;     // per output: the input it is written into (donation), or -1
  int64_t arena_bytes = 0;
  int64_t predicted_peak_bytes = 0;
};

constexpr std::string_view kExecutableMagic = "keel-cpu-executable";

std::string serialize_program(const ExecutableHeader& info, std::string_view so_bytes);

// Checks the header (magic, ABI version, types, sizes, checksum) and returns the program info;
// `so_bytes` is set to the shared object inside `bytes`. Throws keel::InputError
// "[backend.cpu] load: ..." naming what is wrong.
ExecutableHeader deserialize_program(std::string_view bytes, std::string_view& so_bytes);

}  // namespace keel::cpu
