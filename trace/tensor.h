#pragma once
/// @file
/// A Tensor is either a value (an Array held by the host) or a symbol in the program being
/// traced. Reading a symbol's value is an error: a traced program never syncs to the host.
#include <atomic>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/buffer.h"
#include "ir/graph.h"
#include "ir/source_loc.h"
#include "trace/trace_context.h"

namespace keel {

/// A value, or a symbol in the program being traced. A value is either the host's (an Array the
/// user made) or a device's (a Buffer a program returned or a Variable holds): reading a device's
/// value on the host copies it there and counts one host read (host_read_count), as PJRT's
/// ToHostBuffer does.
class Tensor {
 public:
  Tensor() = default;
  /// A value the host made; an error before keel::Runtime::init (naming `loc`).
  explicit Tensor(Array value, SourceLoc loc = SourceLoc::current());
  /// A value a device holds: a program's result or a Variable's state.
  static Tensor held_by_device(Buffer value, SourceLoc loc = SourceLoc::current());
  /// The symbol of node `node` of `ctx`'s graph.
  static Tensor symbol(std::shared_ptr<TraceContext> ctx, NodeId node);

  bool defined() const { return impl_ != nullptr; }       ///< false when default-constructed
  bool is_symbolic() const;                               ///< a symbol of a trace, not a value
  const TensorType& type() const;                         ///< dtype and shape
  DType dtype() const { return type().dtype; }            ///< element type
  const Shape& shape() const { return type().shape; }     ///< dimensions
  size_t rank() const { return shape().size(); }          ///< number of dimensions
  int64_t numel() const { return keel::numel(shape()); }  ///< number of elements

  /// The value, read by the host: a device's value is copied to the host at the first read and
  /// kept, and each call counts one host read. A later write to its memory through another handle
  /// (Variables::update) need not show: read the new tensor. A copy that failed is kept too, and
  /// every read rethrows its error. Inside a trace, an error naming `loc`.
  const Array& array(SourceLoc loc = SourceLoc::current()) const;
  /// The one element's value, read by the host; an error unless numel() is 1.
  double item(SourceLoc loc = SourceLoc::current()) const;
  /// The value's elements as floats, read by the host.
  std::vector<float> to_f32(SourceLoc loc = SourceLoc::current()) const;
  /// Starts the host copy a later array(), item() or to_f32() reads, without waiting for the copy
  /// (only for the value's last write, a program still running): start several, then read them,
  /// and their copies overlap. Not a host read; nothing to do for a host-made value. Inside a
  /// trace, an error naming `loc`.
  void start_host_copy(SourceLoc loc = SourceLoc::current()) const;
  /// The buffer of a value a device holds, to hand to a program or a Variable: not a host read.
  /// An error naming `loc` for a host-made value (place it with Jit::to_device) or a symbol.
  const Buffer& buffer(SourceLoc loc = SourceLoc::current()) const;
  /// Whether a device holds the value (held_by_device); false for host-made values and symbols.
  bool is_held_by_device() const;

  /// Donation: a compiled call consumed this tensor's storage (`by` names the call). Reading its
  /// value afterwards is an error naming the call; its type stays readable.
  void mark_donated(std::string by) const;
  bool donated() const;            ///< whether a compiled call consumed its storage
  std::string donated_by() const;  ///< "donated to 'f' (compiled at F:L)"; empty when not donated

  /// The node this symbol names in its trace's graph. Symbolic tensors only.
  NodeId node() const;
  /// The trace this symbol belongs to. Symbolic tensors only.
  const std::shared_ptr<TraceContext>& trace() const;

 private:
  struct Impl;
  const Impl& readable(SourceLoc loc) const;  // the checks of every read and hand-out, no count

  struct Impl {
    TensorType type;
    Array value;                                ///< a host-made value
    Buffer buffer;                              ///< a device's value (defined only then)
    mutable std::mutex copying;                 ///< guards starting `host_copy`
    mutable std::optional<HostCopy> host_copy;  ///< started once, by a read or start_host_copy
    /// host_copy, started if it was not; `started_here` says whether this call started it
    const HostCopy& started_copy(bool* started_here = nullptr) const;
    std::shared_ptr<TraceContext> trace;  ///< null for values
    NodeId node = -1;
    mutable std::once_flag donating;  ///< the first marking writes donated_by, then the flag
    mutable std::atomic<bool> donated{false};
    mutable std::string donated_by;
  };
  std::shared_ptr<const Impl> impl_;
};

/// Tensors by name: a model's parameters, their gradients or an optimizer's state.
using NamedTensors = std::map<std::string, Tensor>;

/// Starts the host copy of each tensor's value (Tensor::start_host_copy), so reading them all
/// waits about as long as the slowest copy, not the sum of all (a checkpoint, a log point).
void start_host_copies(const NamedTensors& tensors, SourceLoc loc = SourceLoc::current());
/// Starts the host copy of each tensor's value (Tensor::start_host_copy): a few named at the call,
/// start_host_copies({loss, grad_norm}).
void start_host_copies(std::initializer_list<Tensor> tensors, SourceLoc loc = SourceLoc::current());

/// Host reads so far in this process: Tensor::array, item and to_f32 of values a device holds.
/// The trainer reads none between its log points (record.json's "host_reads").
int64_t host_read_count();
/// Of those, the lone reads: reads whose copy the read itself started, so nothing overlapped its
/// wait. A log point, an evaluation and a checkpoint start their copies first and make none.
int64_t lone_host_read_count();

}  // namespace keel
