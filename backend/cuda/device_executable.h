#pragma once
// A compiled CUDA program loaded on a GPU: its module, a plan per product, and its arena, the
// memory plan's size allocated once. Its launches are one CUDA graph, captured at the first run;
// a run whose inputs and outputs lie elsewhere than the last one's records the launches again and
// updates the graph's arguments in place (no new graph), then every run replays it.
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

 private:
  // Queues the program's launches and copies on the stream (captured by the caller).
  void record(std::span<const DevicePointer> inputs, std::span<const DevicePointer> outputs);

  std::shared_ptr<DeviceState> state_;
  CompiledProgram compiled_;
  void* module_ = nullptr;
  std::vector<KernelHandle> kernels_;  // per launch (unset for products)
  std::vector<GemmHandle> plans_;      // per launch (unset for kernels)
  std::unique_ptr<GpuMemory> arena_;
  GraphHandle graph_;
  std::vector<DevicePointer> graph_addresses_;  // the inputs' and outputs' it was recorded with
};

}  // namespace keel::cuda
