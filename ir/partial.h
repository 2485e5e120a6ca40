#pragma once
// Which mesh axes each value of a program is a partial sum over: a product whose contracted
// dimension is split over an axis (dot_general with attribute `partial` = the axis, as a
// row-parallel layer computes it) holds only this process's share of the sum until an
// all_reduce sum (or reduce_scatter) over that axis. Linear ops keep a partial sum partial
// (layout ops, sums, products and scaling by a whole value, adding two partial sums over the
// same axes); anything else would compute on a share as if it were the whole: a nonlinear op
// (tanh, max, a norm's square), adding a whole value to a share (it would be counted once per
// process), or returning it. Loops are followed to a fixed point.
#include <string>
#include <vector>

#include "ir/varying.h"

namespace keel {

// A use of a partial sum that needs the whole: `node` reads `input`, a partial sum over `axis`
// (both of `g` or of a scan body in it).
struct PartialMisuse {
  const Node* node = nullptr;
  const Node* input = nullptr;
  std::string axis;
  std::string why;  // what `node` does with it: "is not linear: ...", "divides by it", ...
};

// One set per node of `g`. The first misuse found (in node order, scan bodies included) goes to
// `misuse` when it is not null. Given what each parameter varies over (ir/varying.h), a share
// scaled, divided, selected or indexed by a value that differs across the processes of its axis
// is a misuse too: each process's share would be changed differently.
std::vector<AxisSet> partial_axes(const Graph& g, std::vector<PartialMisuse>* misuse = nullptr,
                                  const std::vector<AxisSet>* param_varies = nullptr);

// Where the partial sum over `axis` that reaches `id` was made: the first dot_general with
// attribute partial = axis on a path back from `id` through partial values; -1 if none.
NodeId partial_origin(const Graph& g, const std::vector<AxisSet>& partial, NodeId id,
                      const std::string& axis);

}  // namespace keel
