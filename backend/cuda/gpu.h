#pragma once
// What the CUDA client asks of one GPU, shaped like the driver API: memory, one in-order stream
// (copies, fills, kernel launches, cuBLASLt products), modules, graph capture and replay, and
// marks on the stream. Two GPUs implement it: the driver's (driver_gpu.cpp, a real device) and
// the emulated one (emulated_gpu.cpp: host memory and the host shim), so everything above it,
// from the allocator to the graph cache, is tested on machines without a GPU.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/cuda/compiled_program.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/program.h"

namespace keel::cuda {

using DevicePointer = uint64_t;  // CUdeviceptr: an address in the device's memory

// A point on the stream: reached once everything queued before it has run.
class StreamMark {
 public:
  virtual ~StreamMark() = default;
  virtual bool reached() const = 0;
  virtual void wait() const = 0;  // throws keel::Error naming the device's failure
};

// One launch as the stream takes it: a kernel of a loaded module (its handle) or a product.
struct KernelHandle {
  void* function = nullptr;  // CUfunction, or the emulation's entry point
};
struct GemmHandle {
  void* plan = nullptr;  // the product's descriptors and chosen algorithm
};
struct GraphHandle {
  void* graph = nullptr;  // CUgraphExec, or the emulation's recorded stream
};

class Gpu {
 public:
  virtual ~Gpu() = default;
  virtual const DeviceInfo& info() const = 0;  // name, total memory, compute capability

  // Device memory of `bytes` (256-byte aligned), or 0 when the device has no room for it.
  virtual DevicePointer allocate(int64_t bytes) = 0;
  virtual void release(DevicePointer p) noexcept = 0;  // errors ignored: used while unwinding
  // Page-locked host memory the stream copies to and from without staging.
  virtual void* allocate_host(int64_t bytes) = 0;
  virtual void release_host(void* p) = 0;

  // Stream-ordered work. `host` of copy_to_device may change once the call returns; `host` of
  // copy_to_host (page-locked) holds the bytes once a mark queued after the copy is reached.
  virtual void copy_to_device(DevicePointer to, const void* host, int64_t bytes) = 0;
  virtual void copy_to_host(void* host, DevicePointer from, int64_t bytes) = 0;
  virtual void copy_on_device(DevicePointer to, DevicePointer from, int64_t bytes) = 0;
  virtual void zero(DevicePointer p, int64_t bytes) = 0;
  virtual std::shared_ptr<StreamMark> mark() = 0;
  // Waits for everything queued: before memory or a module that queued work may use is released.
  virtual void synchronize() = 0;

  // A program's kernels: its cubin (the emulated GPU builds its source instead), then one handle
  // per kernel name, valid while the module is loaded. unload releases the module.
  virtual void* load_module(const CompiledProgram& compiled) = 0;
  // Whether load_module runs the source, not the cubin: then a compile builds both at once.
  virtual bool loads_source() const { return false; }
  virtual KernelHandle kernel(void* module, const std::string& name) = 0;
  virtual void unload_module(void* module) = 0;
  // Queues `launch` (not a product) of `kernel` with its arguments' device addresses.
  virtual void launch(KernelHandle kernel, const Launch& launch,
                      std::span<const DevicePointer> args) = 0;
  // A product's plan, its algorithm chosen once (so a step's bytes are the same run to run),
  // for operands whose addresses are multiples of `alignment` bytes (a, b, c and the addend;
  // at most 256).
  virtual GemmHandle plan_gemm(const GemmCall& call, const std::array<int, 4>& alignment) = 0;
  virtual void release_gemm(GemmHandle plan) = 0;
  // `addend`, `aux`: 0 when the call has none.
  virtual void gemm(GemmHandle plan, DevicePointer a, DevicePointer b, DevicePointer c,
                    DevicePointer addend, DevicePointer aux) = 0;

  // Between begin_capture and end_capture the stream records its work instead of running it;
  // replay queues what was recorded, as one graph launch. end_capture puts the recording in
  // `into`: when that holds a graph of the same launches it updates their arguments in place
  // (cuGraphExecUpdate, far cheaper than instantiating) and returns true; otherwise it releases
  // what `into` held, makes a new graph and returns false.
  virtual void begin_capture() = 0;
  // Ends a capture that failed part way, dropping what it recorded; never throws.
  virtual void abort_capture() noexcept = 0;
  virtual bool end_capture(GraphHandle& into) = 0;
  virtual void replay(GraphHandle graph) = 0;
  virtual void release_graph(GraphHandle graph) = 0;
};

// The driver's device `ordinal` with cuBLASLt from `toolkit_dir`; throws keel::Error
// "[backend.cuda] ..." when the driver or cuBLASLt cannot be loaded or the device is not there.
std::shared_ptr<Gpu> open_driver_gpu(int ordinal, const std::string& toolkit_dir);

}  // namespace keel::cuda
