#include "backend/cuda/backend_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "backend/cuda/device_client.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/emulated_gpu.h"
#include "backend/cuda/gpu.h"
#include "backend/cuda/libraries.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/settings.h"
#include "ir/error.h"

namespace keel::cuda {
namespace {

using backend::Check;
using backend::CheckStatus;

constexpr const char* kUseCpu = "train on launch.backend = cpu meanwhile";

std::string devices_text(const DriverReport& d) {
  std::string s;
  for (const DeviceInfo& dev : d.devices) {
    s += fmt::format("{}cuda:{} {}, {:.1f} GiB, {}, {} SMs", s.empty() ? "" : "; ", dev.ordinal,
                     dev.name, static_cast<double>(dev.memory_bytes) / (1 << 30), dev.arch(),
                     dev.multiprocessors);
  }
  return s;
}

Check check_driver(const policy::LaunchPolicy& p) {
  const DriverReport& d = driver_report();
  if (!d.alive && p.boolean("cuda.emulate")) {
    return {
        "driver", CheckStatus::pass,
        "not used: cuda.emulate = true runs the programs on keel's emulated GPU (" + d.error + ")",
        ""};
  }
  if (!d.alive) {
    return {"driver", CheckStatus::fail, d.error,
            d.installed
                ? "check the GPU with nvidia-smi; " + std::string(kUseCpu)
                : "run on a machine with an NVIDIA GPU and its driver; " + std::string(kUseCpu)};
  }
  return {"driver", CheckStatus::pass,
          fmt::format("CUDA driver {}; {}", d.version_text(), devices_text(d)), ""};
}

Check check_nvrtc(const policy::LaunchPolicy& p) {
  const std::string& dir = p.string("cuda.toolkit");
  try {
    const Nvrtc& nvrtc = Nvrtc::load(dir);
    const std::vector<std::string> archs = nvrtc.architectures();
    const std::string range =
        archs.empty() ? std::string("none") : archs.front() + " to " + archs.back();
    if (p.string("cuda.arch") == "native" && !driver_report().alive) {
      return {"nvrtc", CheckStatus::pass,
              fmt::format("NVRTC {}; compiles for {} (cuda.arch = native: the device's, once "
                          "there is one)",
                          nvrtc.version(), range),
              ""};
    }
    std::string arch;
    try {
      arch = target_arch(p);
    } catch (const Error& e) {
      return {"nvrtc", CheckStatus::fail, e.what(), "set cuda.arch to sm_NN (sm_90 for Hopper)"};
    }
    if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
      return {"nvrtc", CheckStatus::fail,
              fmt::format("NVRTC {} cannot compile for {} (cuda.arch); it compiles for {}",
                          nvrtc.version(), arch, range),
              "set cuda.arch to an architecture NVRTC lists, or install a newer toolkit"};
    }
    return {"nvrtc", CheckStatus::pass,
            fmt::format("NVRTC {}; kernels compile for {}", nvrtc.version(), arch), ""};
  } catch (const Error& e) {
    return {"nvrtc", CheckStatus::fail, e.what(),
            "install the CUDA 13 toolkit or set cuda.toolkit to its folder"};
  }
}

Check check_library(const std::string& name, const LibraryVersion& v) {
  if (!v.found) {
    return {name, CheckStatus::fail, v.error,
            "install the CUDA 13 toolkit (cuBLAS, cuDNN 9) or set cuda.toolkit to its folder"};
  }
  return {name, CheckStatus::pass, fmt::format("{} {}", name, v.version), ""};
}

// The emulated GPU is a Hopper unless cuda.arch says otherwise (native: the device's, if any).
std::string emulated_arch(const policy::LaunchPolicy& p) {
  return p.string("cuda.arch") == "native" && !driver_report().alive ? std::string("sm_90")
                                                                     : target_arch(p);
}

std::shared_ptr<backend::Client> client_for(const policy::LaunchPolicy& p) {
  const std::string& toolkit = p.string("cuda.toolkit");
  if (p.boolean("cuda.emulate")) {
    HostShimOptions emulated;
    emulated.toolkit_dir = toolkit;
    emulated.arch = emulated_arch(p);
    emulated.compiler = p.string("cpu.compiler");  // builds the kernels for the host
    return make_host_shim_client(emulated);
  }
  const DriverReport& d = driver_report();
  if (!d.alive) {
    throw Error(fmt::format(
        "[backend.cuda] no CUDA device here: {}; 'keel probe' says what is installed; {}", d.error,
        kUseCpu));
  }
  return make_device_client(open_driver_gpu(0, toolkit), {toolkit, target_arch(p)});
}

}  // namespace

std::string target_arch(const policy::LaunchPolicy& p) {
  const std::string& arch = p.string("cuda.arch");
  if (arch == "native") {
    const DriverReport& d = driver_report();
    if (!d.alive) {
      throw InputError(fmt::format(
          "[backend.cuda] cuda.arch = native (from {}) needs a device, and there is none: {}; "
          "set cuda.arch = sm_90 to compile for Hopper without one",
          p.setting("cuda.arch").origin.text(), d.error));
    }
    return d.devices.front().arch();
  }
  static const std::regex sm(R"(sm_\d{2,3}a?)");
  if (!std::regex_match(arch, sm)) {
    throw InputError(fmt::format(
        "[backend.cuda] cuda.arch = '{}' (from {}) is not native or sm_NN; set it to sm_90 for "
        "Hopper",
        arch, p.setting("cuda.arch").origin.text()));
  }
  return arch;
}

backend::BackendSpec backend_spec() {
  backend::BackendSpec s;
  s.name = "cuda";
  s.summary =
      "NVIDIA GPUs: CUDA C per fusion group compiled by NVRTC, products on cuBLASLt, each "
      "program one CUDA graph";
  s.configure_compile = [](const policy::LaunchPolicy& p, backend::CompileOptions& o) {
    o.matmul_precision = p.string("cuda.matmul_precision");
    o.backend_settings = settings_from(p);
  };
  s.make_client = client_for;
  s.bundle_part = [](const policy::LaunchPolicy& p, const backend::CompileOptions&) {
    const std::string& dir = p.string("cuda.toolkit");
    backend::BundlePart part;
    std::string arch = "native (no device)";
    try {
      arch = p.boolean("cuda.emulate") ? emulated_arch(p) : target_arch(p);
    } catch (const Error&) {
    }
    part.fields = bundle_fields(dir, arch);
    const LibraryVersion nvrtc = nvrtc_version(dir);
    part.toolchain = {"nvrtc", nvrtc.version, Nvrtc::options()};
    return part;
  };
  s.installation_checks = [](const policy::LaunchPolicy& p) {
    const std::string& dir = p.string("cuda.toolkit");
    return std::vector<Check>{check_driver(p), check_nvrtc(p),
                              check_library("cublaslt", cublaslt_version(dir)),
                              check_library("cudnn", cudnn_version(dir))};
  };
  // A malformed cuda.arch is refused at launch, naming where it came from (native waits for the
  // device, which make_client needs anyway).
  s.check_launch = [](const policy::LaunchPolicy& p, const policy::Bundle&) {
    if (p.string("launch.backend") == "cuda" && p.string("cuda.arch") != "native") target_arch(p);
  };
  // Collectives have no kernel of their own: on one process the passes fold them to copies,
  // which an unfused program does not.
  s.ops_without_kernels = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                           "axis_index"};
  s.unavailable_here = [](const policy::LaunchPolicy& p) {
    const DriverReport& d = driver_report();
    return d.alive || p.boolean("cuda.emulate") ? std::string() : "no CUDA device: " + d.error;
  };
  return s;
}

}  // namespace keel::cuda
