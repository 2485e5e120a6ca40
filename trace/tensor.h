#pragma once
// A Tensor is either a value (an Array held by the host) or a symbol in the program being
// traced. Reading a symbol's value is an error: a traced program never syncs to the host.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"
#include "ir/source_loc.h"
#include "trace/trace_context.h"

namespace keel {

class Tensor {
 public:
  Tensor() = default;
  // A value tensor; an error before keel::Runtime::init (naming `loc`).
  explicit Tensor(Array value, SourceLoc loc = SourceLoc::current());
  static Tensor symbol(std::shared_ptr<TraceContext> ctx, NodeId node);

  bool defined() const { return impl_ != nullptr; }
  bool is_symbolic() const;
  const TensorType& type() const;
  DType dtype() const { return type().dtype; }
  const Shape& shape() const { return type().shape; }
  size_t rank() const { return shape().size(); }
  int64_t numel() const { return keel::numel(shape()); }

  // The host value. Inside a trace this is an error naming `loc`.
  const Array& array(SourceLoc loc = SourceLoc::current()) const;
  double item(SourceLoc loc = SourceLoc::current()) const;
  std::vector<float> to_f32(SourceLoc loc = SourceLoc::current()) const;

  // Donation: a compiled call consumed this tensor's storage (`by` names the call). Reading its
  // value afterwards is an error naming the call; its type stays readable.
  void mark_donated(std::string by) const;
  bool donated() const;
  std::string donated_by() const;  // "donated to 'f' (compiled at F:L)"; empty when not donated

  // Symbolic tensors only.
  NodeId node() const;
  const std::shared_ptr<TraceContext>& trace() const;

 private:
  struct Impl {
    TensorType type;
    Array value;
    std::shared_ptr<TraceContext> trace;  // null for values
    NodeId node = -1;
    mutable std::once_flag donating;  // the first marking writes donated_by, then the flag
    mutable std::atomic<bool> donated{false};
    mutable std::string donated_by;
  };
  std::shared_ptr<const Impl> impl_;
};

}  // namespace keel
