#pragma once
/// @file
/// A Tensor is either a value (an Array held by the host) or a symbol in the program being
/// traced. Reading a symbol's value is an error: a traced program never syncs to the host.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"
#include "ir/source_loc.h"
#include "trace/trace_context.h"

namespace keel {

/// A value, or a symbol in the program being traced. A value a program returned or a Variable holds
/// is the device's: reading it on the host is a host read (host_read_count), as ToHostBuffer is.
class Tensor {
 public:
  Tensor() = default;
  /// A value the host made; an error before keel::Runtime::init (naming `loc`).
  explicit Tensor(Array value, SourceLoc loc = SourceLoc::current());
  /// A value a device holds: a program's result or a Variable's state.
  static Tensor held_by_device(Array value, SourceLoc loc = SourceLoc::current());
  /// The symbol of node `node` of `ctx`'s graph.
  static Tensor symbol(std::shared_ptr<TraceContext> ctx, NodeId node);

  bool defined() const { return impl_ != nullptr; }       ///< false when default-constructed
  bool is_symbolic() const;                               ///< a symbol of a trace, not a value
  const TensorType& type() const;                         ///< dtype and shape
  DType dtype() const { return type().dtype; }            ///< element type
  const Shape& shape() const { return type().shape; }     ///< dimensions
  size_t rank() const { return shape().size(); }          ///< number of dimensions
  int64_t numel() const { return keel::numel(shape()); }  ///< number of elements

  /// The value, read by the host (a host read when a device holds it). Inside a trace this is an
  /// error naming `loc`.
  const Array& array(SourceLoc loc = SourceLoc::current()) const;
  /// The one element's value, read by the host; an error unless numel() is 1.
  double item(SourceLoc loc = SourceLoc::current()) const;
  /// The value's elements as floats, read by the host.
  std::vector<float> to_f32(SourceLoc loc = SourceLoc::current()) const;
  /// The value where it is held, to hand to a program or a Variable: not a host read.
  const Array& storage(SourceLoc loc = SourceLoc::current()) const;
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
  Tensor(Array value, bool held_by_device, SourceLoc loc);
  const Array& value(SourceLoc loc) const;  // array() and storage(): the checks, no count

  struct Impl {
    TensorType type;
    Array value;
    bool held_by_device = false;
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

/// Host reads so far in this process: Tensor::array, item and to_f32 of values a device holds.
/// The trainer reads none between its log points (record.json's "host_reads").
int64_t host_read_count();

}  // namespace keel
