#pragma once
/// @file
/// value_and_grad(fn) / grad(fn) for use inside a compiled function: the backward nodes join
/// the same program as the forward. Gradients are taken with respect to fn's first argument.
#include <fmt/format.h>

#include <utility>
#include <vector>

#include "autodiff/grad.h"
#include "ir/error.h"
#include "trace/tree.h"

namespace keel {

namespace detail {
template <class P>
std::pair<Tensor, P> loss_and_grads(const Tensor& loss, const P& params, const SourceLoc& loc) {
  std::vector<Tensor> leaves;
  std::string ignored;
  Tree<P>::flatten(params, leaves, ignored);
  auto ctx = TraceContext::current();
  if (!ctx || !loss.defined() || !loss.is_symbolic() || loss.trace() != ctx) {
    throw Error(
        fmt::format("[autodiff] value_and_grad at {} must run inside keel::compile, on a "
                    "loss computed there",
                    loc.str()));
  }
  std::vector<NodeId> wrt;
  for (const Tensor& t : leaves) {
    if (!t.is_symbolic() || t.trace() != ctx) {
      throw Error(
          fmt::format("[autodiff] value_and_grad at {}: parameters must be arguments of "
                      "the compiled function",
                      loc.str()));
    }
    wrt.push_back(t.node());
  }
  std::vector<NodeId> ids = autodiff::append_gradients(ctx->graph, loss.node(), wrt);
  std::vector<Tensor> grads;
  for (NodeId id : ids) grads.push_back(Tensor::symbol(ctx, id));
  size_t i = 0;
  return {loss, Tree<P>::unflatten(params, grads, i)};
}
}  // namespace detail

/// Wraps `fn(params, rest...)`, which returns a float scalar loss, into a function returning
/// the pair (loss, gradients of the loss with respect to `params`, in the structure of `params`).
template <class Fn>
auto value_and_grad(Fn fn, SourceLoc loc = SourceLoc::current()) {
  return [fn, loc](const auto& params, const auto&... rest) {
    Tensor loss = fn(params, rest...);
    return detail::loss_and_grads(loss, params, loc);
  };
}

/// As value_and_grad, returning only the gradients.
template <class Fn>
auto grad(Fn fn, SourceLoc loc = SourceLoc::current()) {
  return [fn, loc](const auto& params, const auto&... rest) {
    return detail::loss_and_grads(fn(params, rest...), params, loc).second;
  };
}

}  // namespace keel
