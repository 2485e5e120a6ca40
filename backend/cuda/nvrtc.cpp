#include "backend/cuda/nvrtc.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <map>
#include <memory>
#include <mutex>

#include "backend/cuda/shared_library.h"
#include "ir/error.h"

namespace keel::cuda {

struct Nvrtc::Api {
  explicit Api(const std::string& toolkit_dir)
      : lib({toolkit_dir + "/lib64/libnvrtc.so.13", "libnvrtc.so.13"}) {
    if (lib.empty()) {
      throw Error(fmt::format(
          "[backend.cuda] NVRTC could not be loaded: {}; install the CUDA 13 toolkit or set "
          "cuda.toolkit to its folder",
          lib.error()));
    }
    version = lib.function<decltype(&nvrtcVersion)>("nvrtcVersion");
    error_string = lib.function<decltype(&nvrtcGetErrorString)>("nvrtcGetErrorString");
    create = lib.function<decltype(&nvrtcCreateProgram)>("nvrtcCreateProgram");
    destroy = lib.function<decltype(&nvrtcDestroyProgram)>("nvrtcDestroyProgram");
    compile = lib.function<decltype(&nvrtcCompileProgram)>("nvrtcCompileProgram");
    log_size = lib.function<decltype(&nvrtcGetProgramLogSize)>("nvrtcGetProgramLogSize");
    log = lib.function<decltype(&nvrtcGetProgramLog)>("nvrtcGetProgramLog");
    cubin_size = lib.function<decltype(&nvrtcGetCUBINSize)>("nvrtcGetCUBINSize");
    cubin = lib.function<decltype(&nvrtcGetCUBIN)>("nvrtcGetCUBIN");
    arch_count = lib.function<decltype(&nvrtcGetNumSupportedArchs)>("nvrtcGetNumSupportedArchs");
    archs = lib.function<decltype(&nvrtcGetSupportedArchs)>("nvrtcGetSupportedArchs");
  }
  SharedLibrary lib;
  decltype(&nvrtcVersion) version;
  decltype(&nvrtcGetErrorString) error_string;
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcDestroyProgram) destroy;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetProgramLogSize) log_size;
  decltype(&nvrtcGetProgramLog) log;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcGetNumSupportedArchs) arch_count;
  decltype(&nvrtcGetSupportedArchs) archs;
};

namespace {

std::string first_lines(const std::string& text, int lines) {
  size_t end = 0;
  for (int i = 0; i < lines && end != std::string::npos; ++i) {
    end = text.find('\n', end == 0 ? 0 : end + 1);
  }
  return end == std::string::npos ? text : text.substr(0, end) + "\n...";
}

}  // namespace

const Nvrtc& Nvrtc::load(const std::string& toolkit_dir) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Api>> apis;  // the libraries stay loaded
  static std::map<std::string, std::unique_ptr<Nvrtc>> loaded;
  std::lock_guard lock(mu);
  auto& n = loaded[toolkit_dir];
  if (!n) {
    auto& api = apis[toolkit_dir];
    api = std::make_unique<Api>(toolkit_dir);
    n.reset(new Nvrtc());
    n->api_ = api.get();
  }
  return *n;
}

std::string Nvrtc::version() const {
  int major = 0, minor = 0;
  api_->version(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> Nvrtc::architectures() const {
  int n = 0;
  api_->arch_count(&n);
  std::vector<int> archs(static_cast<size_t>(n));
  if (n > 0) api_->archs(archs.data());
  std::vector<std::string> out;
  for (int a : archs) out.push_back(fmt::format("sm_{}", a));
  return out;
}

// -default-device: the prelude's helpers are device functions without an annotation, so the
// same text compiles on the host through the execution shim.
std::vector<std::string> Nvrtc::options() {
  return {"--ptxas-options=-v", "-default-device", "--std=c++17"};
}

Cubin Nvrtc::compile(const std::string& source, const std::string& name,
                     const std::string& arch) const {
  nvrtcProgram program = nullptr;
  const std::string file = name + ".cu";
  if (nvrtcResult r = api_->create(&program, source.c_str(), file.c_str(), 0, nullptr, nullptr);
      r != NVRTC_SUCCESS) {
    throw Error(fmt::format("[backend.cuda] NVRTC could not create program {}: {}", name,
                            api_->error_string(r)));
  }
  struct Destroy {
    const Api* api;
    nvrtcProgram* p;
    ~Destroy() { api->destroy(p); }
  } destroy{api_, &program};
  const std::string arch_option = "--gpu-architecture=" + arch;
  const std::vector<std::string> rest = options();
  std::vector<const char*> argv{arch_option.c_str()};
  for (const std::string& o : rest) argv.push_back(o.c_str());
  const nvrtcResult r = api_->compile(program, static_cast<int>(argv.size()), argv.data());
  Cubin out;
  size_t size = 0;
  api_->log_size(program, &size);
  out.log.assign(size, '\0');
  if (size > 0) api_->log(program, out.log.data());
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  if (r != NVRTC_SUCCESS) {
    throw Error(fmt::format("[backend.cuda] NVRTC could not compile {} for {}: {}\n{}", name, arch,
                            api_->error_string(r), first_lines(out.log, 20)));
  }
  api_->cubin_size(program, &size);
  out.bytes.assign(size, '\0');
  api_->cubin(program, out.bytes.data());
  out.kernels = parse_ptxas_report(out.log);
  return out;
}

}  // namespace keel::cuda
