#pragma once
// The CUDA driver (libcuda.so.1, installed with the GPU's kernel driver, never the toolkit's
// stub), opened with dlopen: whether it is there and which devices it sees, for keel probe and
// for the client, which needs one device alive.
#include <cstdint>
#include <string>
#include <vector>

namespace keel::cuda {

// One GPU as the driver describes it.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;          // "NVIDIA H200"
  int64_t memory_bytes = 0;  // total device memory
  int major = 0, minor = 0;  // compute capability: 9.0 on Hopper
  int multiprocessors = 0;
  std::string arch() const { return "sm_" + std::to_string(major * 10 + minor); }  // "sm_90"
};

// What the driver says on this machine: installed (the library loads) and alive (cuInit
// succeeds and sees a device).
struct DriverReport {
  bool installed = false;
  bool alive = false;
  int version = 0;    // cuDriverGetVersion: 13000 for 13.0
  std::string error;  // why not installed or not alive, one line
  std::vector<DeviceInfo> devices;
  std::string version_text() const;  // "13.0"
};

// Loads the driver once per process and asks it; never throws.
const DriverReport& driver_report();

}  // namespace keel::cuda
