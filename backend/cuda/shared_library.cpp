#include "backend/cuda/shared_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include "ir/error.h"

namespace keel::cuda {

SharedLibrary::SharedLibrary(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    handle_ = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_) {
      name_ = n;
      error_.clear();
      return;
    }
    const char* e = ::dlerror();
    error_ += fmt::format("{}{}", error_.empty() ? "" : "; ", e ? e : n + ": not loadable");
  }
}

void* SharedLibrary::find(const char* symbol) const {
  return handle_ ? ::dlsym(handle_, symbol) : nullptr;
}

void* SharedLibrary::require(const char* symbol) const {
  if (void* p = find(symbol)) return p;
  throw Error(
      fmt::format("[backend.cuda] {} has no symbol {}; the CUDA toolkit there is not the "
                  "13.x keel was built for (keel probe names each library's version)",
                  name_.empty() ? "an unloaded library" : name_, symbol));
}

}  // namespace keel::cuda
