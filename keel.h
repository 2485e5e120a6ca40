#pragma once
// The public API in one include.
#include "autodiff/value_and_grad.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "trace/bucketed.h"
#include "trace/compile.h"
#include "trace/ops.h"
#include "trace/scan.h"
