#pragma once
// Appends one op to the active trace, checking that every input belongs to it.
#include <string_view>
#include <vector>

#include "ir/attrs.h"
#include "trace/tensor.h"

namespace keel::detail {

Tensor emit(Op op, const std::vector<Tensor>& inputs, Attrs attrs, const SourceLoc& loc);
// The active trace, or an error naming `what` and `loc` when there is none.
std::shared_ptr<TraceContext> active_trace(std::string_view what, const SourceLoc& loc);

}  // namespace keel::detail
