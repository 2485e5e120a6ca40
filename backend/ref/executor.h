#pragma once
// The reference interpreter behind the Executor interface that compile() uses.
#include <memory>

#include "trace/executor.h"

namespace keel::ref {

std::shared_ptr<Executor> make_executor();

}  // namespace keel::ref
