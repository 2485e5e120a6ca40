#pragma once
// The CUDA backend's client on one GPU (gpu.h): buffers in device memory from a caching
// allocator, each executable's planned arena allocated once, its cubin loaded as a module, its
// products planned on cuBLASLt once, and its launches captured as one CUDA graph per set of
// buffer addresses and replayed each call. The host reads device values only through
// to_host (asynchronous, counted).
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/compiled_program.h"
#include "backend/cuda/gpu.h"

namespace keel::cuda {

struct DeviceClientOptions {
  std::string toolkit_dir = "/usr/local/cuda";  // NVRTC's (cuda.toolkit)
  std::string arch = "sm_90";                   // the device's architecture
};

// What the client did since it was made, for tests and the device check.
struct DeviceClientCounters {
  int64_t host_reads = 0;      // to_host copies of device values
  int64_t graph_captures = 0;  // graphs made: one per executable run
  int64_t graph_updates = 0;   // graphs given a run's new buffer addresses in place
  int64_t graph_replays = 0;   // program runs
  int64_t driver_allocations = 0;
  int64_t cached_bytes = 0;
  int64_t product_plans = 0;  // one per distinct product of each executable loaded
};

class DeviceClient : public backend::Client {
 public:
  virtual DeviceClientCounters device_counters() const = 0;
  // An executable of `compiled` as it is (its cubin, or its source on the emulated GPU), NVRTC
  // not run: for load and for tests that change a program.
  virtual std::unique_ptr<backend::Executable> load_compiled(CompiledProgram compiled) = 0;
};

// What a CUDA executable runs, for tests.
class DeviceExecutable : public backend::Executable {
 public:
  virtual const CompiledProgram& compiled() const = 0;
};

std::shared_ptr<DeviceClient> make_device_client(std::shared_ptr<Gpu> gpu,
                                                 DeviceClientOptions options);

}  // namespace keel::cuda
