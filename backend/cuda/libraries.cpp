#include "backend/cuda/libraries.h"

#include <fmt/format.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "backend/cuda/nvrtc.h"
#include "backend/cuda/shared_library.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

// `getter` of the library `soname` (from `toolkit_dir`/lib64, else the loader's path): a
// size_t such as 130100 for 13.1.0 (cuBLASLt) or 91900 for 9.19.0 (cuDNN).
LibraryVersion size_t_version(const std::string& toolkit_dir, const std::string& soname,
                              const char* getter, int major_unit, int minor_unit) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<SharedLibrary>> libs;
  std::lock_guard lock(mu);
  auto& lib = libs[toolkit_dir + "/" + soname];
  if (!lib) {
    lib = std::make_unique<SharedLibrary>(
        std::vector<std::string>{toolkit_dir + "/lib64/" + soname, soname});
  }
  LibraryVersion v;
  if (lib->empty()) {
    v.error = fmt::format("{} could not be loaded: {}", soname, lib->error());
    return v;
  }
  auto* get = reinterpret_cast<size_t (*)()>(lib->find(getter));
  if (!get) {
    v.error = fmt::format("{} has no {}", lib->name(), getter);
    return v;
  }
  const size_t n = get();
  v.found = true;
  v.version = fmt::format("{}.{}.{}", n / major_unit, n % major_unit / minor_unit, n % minor_unit);
  return v;
}

}  // namespace

LibraryVersion nvrtc_version(const std::string& toolkit_dir) {
  LibraryVersion v;
  try {
    v.version = Nvrtc::load(toolkit_dir).version();
    v.found = true;
  } catch (const Error& e) {
    v.error = e.what();
  }
  return v;
}

LibraryVersion cublaslt_version(const std::string& toolkit_dir) {
  return size_t_version(toolkit_dir, "libcublasLt.so.13", "cublasLtGetVersion", 10000, 100);
}

LibraryVersion cudnn_version(const std::string& toolkit_dir) {
  return size_t_version(toolkit_dir, "libcudnn.so.9", "cudnnGetVersion", 10000, 100);
}

}  // namespace keel::cuda

namespace keel::cuda {

std::map<std::string, std::string> bundle_fields(const std::string& toolkit_dir,
                                                 const std::string& arch) {
  return {{"cuda.nvrtc", nvrtc_version(toolkit_dir).text()},
          {"cuda.cublaslt", cublaslt_version(toolkit_dir).text()},
          {"cuda.cudnn", cudnn_version(toolkit_dir).text()},
          {"cuda.arch", arch}};
}

}  // namespace keel::cuda
