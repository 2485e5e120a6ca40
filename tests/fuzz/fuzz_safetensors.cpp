// Checkpoint tensors: safetensors headers and data, read from a file as keel reads them.
#include "tests/fuzz/fuzz_input.h"
#include "train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = keel::fuzz::write_scratch(
      "model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  keel::fuzz::refuse_only_with_keel_errors([&] { keel::train::read_safetensors(path); });
  return 0;
}
