// The host shim's build: the generated source after kHostShimHeader, then one extern "C" entry
// per kernel (keel_shim_<kernel>) that runs a launch's grid of blocks, built by the system
// compiler into a shared object and opened with dlopen.
#include "backend/cuda/host_shim.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>

#include "files/process.h"
#include "files/publish.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

namespace fs = std::filesystem;

std::string entry_name(const std::string& kernel) {
  return "keel_shim_" + kernel;
}

// One entry per kernel, its arguments cast to the kernel's parameter types.
std::string kernel_entries(const CudaProgram& p) {
  std::map<std::string, const Launch*> kernels;
  for (const Launch& l : p.launches) {
    if (!l.gemm) kernels.emplace(l.kernel, &l);
  }
  std::string s;
  for (const auto& [name, l] : kernels) {
    std::string call = name + "(";
    for (size_t a = 0; a < l->param_types.size(); ++a) {
      call += fmt::format("{}static_cast<{}>(args[{}])", a ? ", " : "", l->param_types[a], a);
    }
    s += fmt::format(
        "extern \"C\" int {}(long long grid, int block, int synchronizes, void* const* args) "
        "{{\n  return keel_shim::run(grid, block, synchronizes != 0, [&] {{ {}); }});\n}}\n",
        entry_name(name), call);
  }
  return s;
}

}  // namespace

std::unique_ptr<ShimModule> ShimModule::build(const CudaProgram& program,
                                              const HostShimOptions& options) {
  static std::atomic<uint64_t> counter{0};
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("keel-cuda-shim-{}-{}", ::getpid(), counter++);
  fs::create_directories(dir);
  struct Remove {
    fs::path dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{dir};
  const std::string source = (dir / "program.cpp").string();
  const std::string object = (dir / "program.so").string();
  files::publish_file(source,
                      std::string(kHostShimHeader) + program.source + kernel_entries(program));
  // -U_FORTIFY_SOURCE: fibers switch stacks with _longjmp, which fortify's check refuses.
  const files::ProcessResult r =
      files::run_process({options.compiler, "-std=c++17", "-O1", "-fPIC", "-shared", "-w",
                          "-U_FORTIFY_SOURCE", source, "-o", object},
                         options.compile_timeout_s);
  if (r.exit_code != 0 || r.timed_out) {
    throw Error(fmt::format("[backend.cuda] the host shim's build of {} failed{}:\n{}",
                            program.graph_name, r.timed_out ? " (timed out)" : "",
                            r.output.substr(0, 4000)));
  }
  void* handle = ::dlopen(object.c_str(), RTLD_NOW | RTLD_LOCAL);  // mapped: the file may go
  if (!handle) {
    const char* e = ::dlerror();
    throw Error(fmt::format("[backend.cuda] the host shim's {} does not load: {}", object,
                            e ? e : "unknown dlopen error"));
  }
  return std::unique_ptr<ShimModule>(new ShimModule(handle));
}

ShimModule::~ShimModule() {
  ::dlclose(handle_);
}

ShimEntry ShimModule::entry(const std::string& name) const {
  void* f = ::dlsym(handle_, entry_name(name).c_str());
  if (!f) {
    throw Error(fmt::format("[backend.cuda] internal: the host shim has no kernel {}", name));
  }
  return reinterpret_cast<ShimEntry>(f);
}

}  // namespace keel::cuda
