#pragma once
/// @file
/// The backend boundary, shaped like PJRT: a Client compiles graphs into Executables, which
/// serialize to bytes and load back without compiling; Buffers live on a Device.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/array.h"
#include "ir/buffer.h"
#include "ir/graph.h"
#include "passes/pipeline.h"

/// The backend boundary: clients that compile graphs into executables, buffers on devices, and
/// the collectives programs call at run time.
namespace keel::backend {

/// A device of a backend client, named "kind:id".
struct Device {
  int id = 0;        ///< index among the client's devices of this kind
  std::string kind;  ///< "cpu"
  /// Whether its memory is the host's (cpu): then the host's limits bound its programs, else its
  /// own capacity (MemoryStats::bytes_limit) does.
  bool host_memory = true;
  std::string str() const { return kind + ":" + std::to_string(id); }  ///< "cpu:0"
};

/// A device's memory use in bytes, as Client::memory_stats reports it.
struct MemoryStats {
  int64_t bytes_in_use = 0;       ///< live buffers and arenas
  int64_t peak_bytes_in_use = 0;  ///< since the process started (or reset_peak)
  int64_t bytes_limit = 0;        ///< 0 when unknown
};

/// A value on a device: an opaque, reference-counted handle to a backend's memory (ir/buffer.h),
/// as PJRT's PjRtBuffer. Its backend made it (Client::to_device, Executable::execute).
using keel::Buffer;
/// When a transfer or a program run has finished (ir/buffer.h).
using keel::Event;

/// A backend's own compile settings (the CPU's: cpu::Settings), from its policy group; opaque to
/// the rooms above, which only carry them to its client.
class BackendSettings {
 public:
  virtual ~BackendSettings() = default;
  /// What of them changes generated code, canonically, for the cache key.
  virtual std::string fingerprint() const = 0;
};

/// How a Client compiles a graph: the lowering's options (passes.*) and the backend's own.
struct CompileOptions {
  passes::PassOptions passes;  ///< options of the graph passes that lower the graph
  /// "f32", or "bf16" (f32 matmul operands rounded to bf16, f32 accumulation and results); the
  /// CPU backend sets it from cpu.matmul_precision.
  std::string matmul_precision = "f32";
  std::string work_dir;  ///< generated sources and objects; empty: a fresh temporary directory
  /// Called with the program's predicted peak once its memory plan exists and before the
  /// backend's toolchain runs; it may throw to refuse the program, so a program too large for the
  /// host costs no compile. Not part of the fingerprint.
  std::function<void(int64_t predicted_peak_bytes)> before_build;
  /// The backend's own settings; null: its defaults (runtime::CachedJit asks the client for them).
  std::shared_ptr<const BackendSettings> backend_settings;
  /// Everything that changes the generated code, canonically, for the cache key.
  std::string fingerprint() const;
};

/// The toolchain that builds a client's programs, for the compatibility bundle.
struct Toolchain {
  std::string name;     ///< the CPU's: its C++ compiler (cpu.compiler); the interpreter's: "none"
  std::string version;  ///< the CPU's: the compiler's first --version line, "" when it fails
  std::vector<std::string> flags;  ///< what it runs with
};

/// A compiled program: runs on buffers and serializes to bytes for the executable cache.
class Executable {
 public:
  virtual ~Executable() = default;
  /// Runs the program: one input per graph parameter (types must match, each on this backend's
  /// device); returns one buffer per graph output, each ready() when the run has finished, which
  /// may be after execute returns (the CPU backend queues runs; programs on a device run in the
  /// order they were dispatched, and a failed run fails its outputs with its error). An
  /// output the graph aliases to a parameter (donation) is written into that argument's memory
  /// and returned as it: the caller must hold no other handle of a donated argument it still
  /// needs.
  virtual std::vector<Buffer> execute(std::span<const Buffer> args) = 0;
  /// Bytes that Client::load turns back into a runnable executable without compiling.
  virtual std::string serialize() const = 0;
  /// Planner's prediction: arena + inputs + outputs, in bytes.
  virtual int64_t predicted_peak_bytes() const = 0;
  virtual std::string platform() const = 0;  ///< the Client::platform it was compiled for
};

/// A backend: its devices, compiling graphs into executables and loading serialized ones.
class Client {
 public:
  virtual ~Client() = default;
  virtual std::string platform() const = 0;  ///< "cpu" | "ref"
  /// The devices buffers can live on (the CPU client: cpu:0).
  virtual std::vector<Device> devices() const = 0;
  /// What this backend adds to the compatibility bundle (the CPU client: its BLAS).
  virtual std::map<std::string, std::string> bundle_fields() const { return {}; }
  /// The toolchain that builds this client's programs with `options`, for the bundle (the CPU
  /// client: the C++ compiler, its first --version line and flags).
  virtual Toolchain toolchain(const CompileOptions& options) const {
    (void)options;
    return {};
  }
  /// The settings a compile without any uses, so its cache key names them (the CPU's defaults);
  /// null when the backend has none.
  virtual std::shared_ptr<const BackendSettings> default_settings() const { return nullptr; }
  /// Compiles `graph`. Throws keel::Error "[backend.cpu] ..." with the compiler's own message on
  /// failure.
  virtual std::unique_ptr<Executable> compile(const Graph& graph,
                                              const CompileOptions& options) = 0;
  /// An executable from serialize()'s bytes, without compiling. Throws keel::Error when the
  /// bytes are not an executable of this platform and ABI.
  virtual std::unique_ptr<Executable> load(std::string_view bytes) = 0;
  /// `host` placed on `device`; the buffer's ready() says when the transfer has finished, after
  /// which `host` may change. A device whose memory is the host's adopts the Array's bytes
  /// instead of copying them (PJRT's zero-copy): write neither while the buffer lives.
  virtual Buffer to_device(const Array& host, const Device& device) = 0;
  /// New memory on `device` for a value of `dtype` and `shape`, zeros when `zeroed` (PJRT's
  /// CreateUninitializedBuffer). By default a host array placed with to_device.
  virtual Buffer allocate(DType dtype, const Shape& shape, const Device& device, bool zeroed) {
    return to_device(zeroed ? Array(dtype, shape) : Array::uninitialized(dtype, shape), device);
  }
  /// Current memory use of `device`.
  virtual MemoryStats memory_stats(const Device& device) const = 0;
  /// Returns what the client keeps of freed buffers for reuse on `device` to the system: after a
  /// one-off program (the init of split parameters) whose sizes no later program asks for.
  virtual void release_cached_memory(const Device& device) { (void)device; }
  /// What the backend counted since it was made, by name (the CUDA client: host_reads,
  /// graph_captures, graph_replays, driver_allocations); empty when it counts nothing.
  virtual std::map<std::string, int64_t> counters() const { return {}; }
  /// When every program dispatched so far to `device` has run (CUDA's event recorded on a
  /// stream). A backend that runs programs before execute returns: an event that has happened.
  virtual Event after_dispatched(const Device& device) const {
    (void)device;
    return Event();
  }
};

}  // namespace keel::backend
