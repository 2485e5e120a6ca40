#pragma once
// The CPU backend as the registry knows it: its client from the cpu.* keys, its bundle
// fields when BLAS cannot be loaded, BLAS threads, and its installation checks (compiler, BLAS).
#include "backend/registry.h"

namespace keel::cpu {

backend::BackendSpec backend_spec();

}  // namespace keel::cpu
