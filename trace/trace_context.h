#pragma once
/// @file
/// The program being traced. Ops append to the innermost active context on this thread.
#include <memory>
#include <string>

#include "ir/graph.h"

namespace keel {

/// One trace in progress: the graph ops append to while tracing `function`.
class TraceContext {
 public:
  /// An empty graph named after `function`.
  explicit TraceContext(std::string function) : graph(function), function(std::move(function)) {}

  Graph graph;           ///< the program traced so far
  std::string function;  ///< the traced function's name
  bool active = true;    ///< false once the trace ended; its tensors can no longer be used
  /// The enclosing trace when this one traces a scan body (its tensors may not be captured).
  std::shared_ptr<TraceContext> parent;

  /// The innermost active trace on this thread, or null outside any trace.
  static std::shared_ptr<TraceContext> current();

  /// Makes `ctx` current for the lifetime of the scope; ends the trace on exit.
  class Scope {
   public:
    /// Pushes `ctx` as the innermost trace of this thread.
    explicit Scope(std::shared_ptr<TraceContext> ctx);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::shared_ptr<TraceContext> ctx_;
  };
};

}  // namespace keel
