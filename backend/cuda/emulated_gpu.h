#pragma once
// A GPU emulated on the host, for machines without one: its memory is host memory (new blocks
// filled with NaN bytes, so a kernel reading what nothing wrote shows), its stream runs each
// piece of work when queued, kernels run through the host shim, products as cuBLASLt's
// column-major description, and capture records the stream for replay as a CUDA graph would.
#include <memory>

#include "backend/cuda/device_client.h"
#include "backend/cuda/gpu.h"
#include "backend/cuda/host_shim.h"

namespace keel::cuda {

// What the emulated GPU did, for tests.
struct EmulatedGpuCounters {
  int64_t kernel_launches = 0;  // run, not recorded
  int64_t products = 0;
  int64_t graph_replays = 0;
  int64_t host_copies = 0;  // copies from the device to the host
};

class EmulatedGpu : public Gpu {
 public:
  virtual EmulatedGpuCounters counters() const = 0;
};

std::shared_ptr<EmulatedGpu> make_emulated_gpu(HostShimOptions options = {});

// The CUDA client on an emulated GPU: the backend's compile, load, buffers, allocator and graph
// cache as on a device, its kernels run by the host shim.
std::shared_ptr<DeviceClient> make_host_shim_client(HostShimOptions options = {});

}  // namespace keel::cuda
