#pragma once
/// @file
/// What the machine-dependent passes (fold_layout, fuse, concat_in_place, plan_memory) know of
/// the backend they lower for. The target-independent passes (canonicalize, bf16_operands, cse,
/// dce, recompute_elementwise) read none of it. Not part of the cache key: the backend and
/// keel's version, both in it, decide the target.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace keel::passes {

struct View;

/// A backend's memory access and loop rules, as the lowering passes need them.
struct Target {
  /// Says whose rules these are in dumps and errors ("cpu"); the default target is "contiguous".
  std::string name = "contiguous";
  /// Whether input `index` of `reader` may be the strided (not row-major) view `v`. Unset: no
  /// reader takes one, so only contiguous layout ops fold and the rest are copies.
  std::function<bool(const Node& reader, size_t index, const View& v)> reads_view;
  /// Whether `writer` can store its result through the view `v` into another node's buffer (a
  /// block of a concat's, strided or not), so that the concat joins in place (concat_in_place).
  /// Unset: only fused elementwise loops can.
  std::function<bool(const Node& writer, const View& v)> writes_view;
  /// Byte alignment of every arena buffer and of a scan's spare carries.
  int64_t alignment = 64;
  /// Reductions run their elementwise producers inside their own loop (fuse); false: every
  /// reduction is a kernel of its own and its producers are stored.
  bool fuse_reductions = true;
  /// Whether kernel `next`, scheduled right after the kernels `call`, runs in their backend call:
  /// one pass over the data they all read (fuse makes them one group). Unset: a call per kernel.
  std::function<bool(const Graph& g, const std::vector<NodeId>& call, NodeId next)> shares_call;
  /// A scan loop ping-pongs each carry between its result buffer and a spare one, which its
  /// workspace holds before the body's arena; false: the carries need no spare.
  bool scan_spare_carries = true;
};

}  // namespace keel::passes
