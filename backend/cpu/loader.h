#pragma once
// A generated shared object loaded from bytes in memory: they go to a memfd and dlopen maps
// /proc/self/fd/N, so no file on disk is needed and evicting a cache file cannot affect a
// program that is already loaded.
#include <memory>
#include <string>
#include <string_view>

#include "backend/cpu/abi.h"

namespace keel::cpu {

using RunFn = int (*)(const keel_kernels*, const void* const*, void* const*, void*);

class LoadedObject {
 public:
  // Throws keel::Error "[backend.cpu] cannot load program '<name>': ..." when the bytes are not
  // a shared object exporting keel_abi_version() == KEEL_ABI_VERSION and keel_run.
  LoadedObject(std::string_view so_bytes, const std::string& name);
  ~LoadedObject();
  LoadedObject(const LoadedObject&) = delete;
  LoadedObject& operator=(const LoadedObject&) = delete;

  RunFn run() const { return run_; }

 private:
  void close();
  int fd_ = -1;
  std::string path_;  // /proc/self/fd/N
  void* handle_ = nullptr;
  RunFn run_ = nullptr;
};

}  // namespace keel::cpu
