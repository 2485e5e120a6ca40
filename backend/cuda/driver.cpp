#include "backend/cuda/driver.h"

#include <cuda.h>
#include <fmt/format.h>

#include "backend/cuda/shared_library.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

// The versioned name a cuda.h macro maps an entry point to (cuDeviceTotalMem_v2).
#define KEEL_CU_NAME(f) KEEL_CU_STR(f)
#define KEEL_CU_STR(f) #f
#define KEEL_CU_FN(lib, f) lib.function<decltype(&f)>(KEEL_CU_NAME(f))

std::string result_text(const SharedLibrary& lib, CUresult r) {
  const char* text = nullptr;
  if (auto* get = reinterpret_cast<decltype(&cuGetErrorString)>(lib.find("cuGetErrorString"))) {
    get(r, &text);
  }
  return fmt::format("{} ({})", text ? text : "unknown CUDA error", static_cast<int>(r));
}

DriverReport ask_driver() {
  DriverReport out;
  static const SharedLibrary lib({"libcuda.so.1"});
  if (lib.empty()) {
    out.error = fmt::format("the CUDA driver (libcuda.so.1) is not installed: {}", lib.error());
    return out;
  }
  out.installed = true;
  try {
    auto cu_init = KEEL_CU_FN(lib, cuInit);
    auto cu_version = KEEL_CU_FN(lib, cuDriverGetVersion);
    auto cu_count = KEEL_CU_FN(lib, cuDeviceGetCount);
    auto cu_get = KEEL_CU_FN(lib, cuDeviceGet);
    auto cu_name = KEEL_CU_FN(lib, cuDeviceGetName);
    auto cu_memory = KEEL_CU_FN(lib, cuDeviceTotalMem);
    auto cu_attribute = KEEL_CU_FN(lib, cuDeviceGetAttribute);
    cu_version(&out.version);
    if (CUresult r = cu_init(0); r != CUDA_SUCCESS) {
      out.error = fmt::format("cuInit failed: {}", result_text(lib, r));
      return out;
    }
    int count = 0;
    if (CUresult r = cu_count(&count); r != CUDA_SUCCESS || count == 0) {
      out.error = r != CUDA_SUCCESS
                      ? fmt::format("cuDeviceGetCount failed: {}", result_text(lib, r))
                      : std::string("the driver sees no device");
      return out;
    }
    for (int i = 0; i < count; ++i) {
      CUdevice d = 0;
      DeviceInfo info;
      info.ordinal = i;
      char name[256] = {};
      size_t bytes = 0;
      if (cu_get(&d, i) != CUDA_SUCCESS || cu_name(name, sizeof name, d) != CUDA_SUCCESS ||
          cu_memory(&bytes, d) != CUDA_SUCCESS) {
        out.error = fmt::format("device {} could not be queried", i);
        return out;
      }
      info.name = name;
      info.memory_bytes = static_cast<int64_t>(bytes);
      cu_attribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
      cu_attribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
      cu_attribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
      out.devices.push_back(info);
    }
    out.alive = true;
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

std::string DriverReport::version_text() const {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

const DriverReport& driver_report() {
  static const DriverReport report = ask_driver();
  return report;
}

}  // namespace keel::cuda
