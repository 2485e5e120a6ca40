#pragma once
// Before a program's first run every process of the launch agrees on its cache key (a small
// all-gather). A rank that traced another program would otherwise block the rest in a
// collective that never matches (JAX calls this assumption "mostly unchecked"); here every
// rank stops at once, with keel's own explanation of the difference.
#include <string>

#include "diag/explain.h"
#include "dist/communicator.h"
#include "ir/hash.h"

namespace keel::runtime {

// For a program that exchanges data with other processes (collectives over an axis of more
// than one): returns when every process holds `key` for `mine`; otherwise throws
// dist::LaunchFailure on every process, naming the ranks (and hosts) that differ from rank 0
// and why (input shapes, constants and their lines, bundle fields, codegen options, the mesh).
// Every process of the launch must then be preparing it. Other programs and one process: no-op.
// True when every process of a launch of more than one agreed on it.
bool agree_on_program(dist::Communicator& world, const Hash128& key,
                      const diag::ProgramFacts& mine);

}  // namespace keel::runtime
