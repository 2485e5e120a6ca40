#pragma once
// A compiled CUDA program loaded on a GPU: its module, a plan per product, and its arena, the
// memory plan's size allocated once. Its launches are one CUDA graph per set of input and output
// addresses, up to kGraphs (a training loop alternates between two: each step's outputs are the
// next one's inputs); past that, the least recently run graph is updated in place to the new
// addresses (cuGraphExecUpdate: no new graph). Every run replays one.
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
  std::vector<KernelHandle> kernels_;       // per launch (unset for products)
  std::vector<GemmHandle> plans_;           // per launch (unset for kernels)
  std::vector<GemmHandle> distinct_plans_;  // each once: launches of one call share its plan
  std::unique_ptr<GpuMemory> arena_;
  struct RecordedGraph {
    GraphHandle graph;
    std::vector<DevicePointer> addresses;  // the inputs' and outputs' it was recorded with
    int64_t last_run = 0;
  };
  static constexpr size_t kGraphs = 4;
  std::vector<RecordedGraph> graphs_;
  int64_t runs_ = 0;
};

}  // namespace keel::cuda
