#pragma once
/// @file
/// Reverse-mode differentiation as a graph transform: the backward nodes are appended to the
/// same graph as the forward, so one program holds both.
#include <span>
#include <vector>

#include "ir/graph.h"

/// Reverse-mode differentiation as a graph transform.
namespace keel::autodiff {

/// Appends to `g` the nodes computing d(loss)/d(wrt[i]) and returns their ids, one per entry of
/// `wrt`, each with the type of its wrt node. `loss` must be a float scalar. A wrt node the loss
/// does not depend on gets zeros. Backward nodes carry the source line of the forward node they
/// differentiate.
std::vector<NodeId> append_gradients(Graph& g, NodeId loss, std::span<const NodeId> wrt);

/// Graph to graph: outputs are the gradients of output `output` (a float scalar) with respect
/// to the parameters listed in `wrt` (all parameters when empty).
Graph grad(const Graph& g, size_t output = 0, std::vector<size_t> wrt = {});
/// As grad, with the value of output `output` first.
Graph value_and_grad(const Graph& g, size_t output = 0, std::vector<size_t> wrt = {});

}  // namespace keel::autodiff
