#pragma once
// The CUDA libraries keel's GPU programs use, found without a device: NVRTC (kernels), cuBLASLt
// (products), cuDNN (attention). Their versions go into the compatibility bundle and keel probe.
#include <map>
#include <string>

namespace keel::cuda {

// One library: its version ("13.1.0"), or why it could not be loaded.
struct LibraryVersion {
  bool found = false;
  std::string version;  // empty when not found
  std::string error;    // why not, one line
  std::string text() const { return found ? version : "not loaded"; }
};

LibraryVersion nvrtc_version(const std::string& toolkit_dir);
LibraryVersion cublaslt_version(const std::string& toolkit_dir);
LibraryVersion cudnn_version(const std::string& toolkit_dir);

// The bundle's CUDA fields: cuda.nvrtc, cuda.cublaslt, cuda.cudnn (each version or "not
// loaded") and cuda.arch, so cached executables are keyed with what built them.
std::map<std::string, std::string> bundle_fields(const std::string& toolkit_dir,
                                                 const std::string& arch);

}  // namespace keel::cuda
