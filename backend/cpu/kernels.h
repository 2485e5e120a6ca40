#pragma once
// The kernel table libkeel hands to generated code (see abi.h): typed, OpenMP-parallel loops and
// OpenBLAS GEMM, one implementation per op that codegen does not emit as a fused loop.
#include "backend/cpu/abi.h"

namespace keel::cpu {

const keel_kernels& kernels();

}  // namespace keel::cpu
