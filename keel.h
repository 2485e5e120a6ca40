#pragma once
/// @file
/// The public API in one include: `#include <keel/keel.h>` in a project built on the installed
/// package. What it reaches is installed; every other header of the tree is internal.
#include "autodiff/value_and_grad.h"
#include "files/publish.h"
#include "ir/version.h"
#include "nn/gpt.h"
#include "optim/adamw.h"
#include "policy/resolve.h"
#include "runtime/runtime.h"
#include "trace/bucketed.h"
#include "trace/compile.h"
#include "trace/ops.h"
#include "trace/scan.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
