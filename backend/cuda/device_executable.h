#pragma once
// A compiled CUDA program loaded on a GPU: its module, a plan per product, and its arena, the
// memory plan's size allocated once. A run allocates its outputs, then replays the CUDA graph
// captured for that set of input and output addresses (capturing it the first time), so a
// training loop whose allocator hands back the same blocks replays without capturing.
#include <map>
#include <memory>
#include <vector>

#include "backend/cuda/device_client.h"
#include "backend/cuda/device_memory.h"

namespace keel::cuda {

class LoadedExecutable final : public DeviceExecutable {
 public:
  LoadedExecutable(std::shared_ptr<DeviceState> state, CompiledProgram compiled);
  ~LoadedExecutable() override;

  std::vector<Buffer> execute(std::span<const Buffer> args) override;
  std::string serialize() const override { return serialize_program(compiled_); }
  int64_t predicted_peak_bytes() const override { return compiled_.program.predicted_peak_bytes; }
  std::string platform() const override { return "cuda"; }
  const CompiledProgram& compiled() const override { return compiled_; }
  // The cubin NVRTC made while the emulated GPU built the source, so this serializes whole.
  void attach_cubin(std::string cubin, std::vector<KernelResources> kernels) {
    compiled_.cubin = std::move(cubin);
    compiled_.kernels = std::move(kernels);
  }

  static constexpr size_t kGraphsKept = 8;  // address sets; the oldest graph goes first

 private:
  // Queues the program's launches and copies on the stream (captured by the caller).
  void record(std::span<const DevicePointer> inputs, std::span<const DevicePointer> outputs);

  std::shared_ptr<DeviceState> state_;
  CompiledProgram compiled_;
  void* module_ = nullptr;
  std::vector<KernelHandle> kernels_;  // per launch (unset for products)
  std::vector<GemmHandle> plans_;      // per launch (unset for kernels)
  std::unique_ptr<GpuMemory> arena_;
  std::map<std::vector<DevicePointer>, GraphHandle> graphs_;
  std::vector<std::vector<DevicePointer>> graph_order_;  // oldest first
};

}  // namespace keel::cuda
