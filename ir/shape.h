#pragma once
/// @file
/// Static shapes: every dimension is known when a program is traced.
#include <cstdint>
#include <string>
#include <vector>

namespace keel {

/// Dimension sizes, outermost first; {} is a scalar.
using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);          ///< product of the dims (1 for a scalar)
std::string shape_str(const Shape& s);  ///< "[2,3]"
/// Row-major strides in elements.
std::vector<int64_t> strides_of(const Shape& s);
/// Numpy broadcasting: align right, size-1 dims stretch. Throws keel::Error naming both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// Whether `from` broadcasts to exactly `to` under the rule of broadcast_shapes.
bool broadcastable_to(const Shape& from, const Shape& to);
/// Maps a possibly negative axis into [0, rank); throws naming the axis and rank.
int64_t normalize_axis(int64_t axis, size_t rank);

}  // namespace keel
