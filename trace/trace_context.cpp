#include "trace/trace_context.h"

#include <vector>

namespace keel {

static thread_local std::vector<std::shared_ptr<TraceContext>> g_stack;

std::shared_ptr<TraceContext> TraceContext::current() {
  return g_stack.empty() ? nullptr : g_stack.back();
}

TraceContext::Scope::Scope(std::shared_ptr<TraceContext> ctx) : ctx_(std::move(ctx)) {
  g_stack.push_back(ctx_);
}

TraceContext::Scope::~Scope() {
  ctx_->active = false;
  g_stack.pop_back();
}

}  // namespace keel
