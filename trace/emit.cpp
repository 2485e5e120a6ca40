#include "trace/emit.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace keel::detail {

std::shared_ptr<TraceContext> active_trace(std::string_view what, const SourceLoc& loc) {
  auto ctx = TraceContext::current();
  if (!ctx) {
    throw Error(
        fmt::format("[trace] {} at {} runs outside keel::compile; keel ops build a "
                    "program, so call them inside a compiled function",
                    what, loc.str()));
  }
  return ctx;
}

Tensor emit(Op op, const std::vector<Tensor>& inputs, Attrs attrs, const SourceLoc& loc) {
  auto ctx = active_trace(op_name(op), loc);
  std::vector<NodeId> ids;
  ids.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) {
      throw Error(
          fmt::format("[trace] {} at {}: input {} is an empty tensor", op_name(op), loc.str(), i));
    }
    if (!t.is_symbolic()) {
      throw Error(fmt::format(
          "[trace] {} at {}: input {} ({}) is a value captured from outside '{}'; pass it as an "
          "argument so its contents stay out of the program, or wrap it in keel::constant() to "
          "bake it in on purpose",
          op_name(op), loc.str(), i, t.type().str(), ctx->function));
    }
    if (t.trace() != ctx) {
      const auto& other = t.trace();
      for (auto p = ctx->parent; p; p = p->parent) {
        if (p != other) continue;
        throw Error(fmt::format(
            "[trace] {} at {}: input {} ({}, made at {}) belongs to the trace enclosing the "
            "scan body '{}'; a scan body sees only its arguments: pass it to keel::scan as a "
            "const",
            op_name(op), loc.str(), i, t.type().str(), other->graph.node(t.node()).loc.str(),
            ctx->function));
      }
      throw Error(fmt::format(
          "[trace] {} at {}: input {} was traced in '{}'{} (made at {}); a tensor cannot leave "
          "the trace that made it: return it from that function instead",
          op_name(op), loc.str(), i, other->function, other->active ? "" : ", which has ended",
          other->graph.node(t.node()).loc.str()));
    }
    ids.push_back(t.node());
  }
  NodeId id = ctx->graph.emit(op, std::move(ids), std::move(attrs), loc, "trace");
  return Tensor::symbol(ctx, id);
}

}  // namespace keel::detail
