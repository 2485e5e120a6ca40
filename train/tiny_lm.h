#pragma once
// The smallest honest end-to-end run: a byte-level MLP language model whose whole training
// step (forward, backward, SGD update) is one traced program. `keel demo` runs it.
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/hash.h"

namespace keel {

struct TinyLmConfig {
  int64_t context = 3;  // bytes of history per prediction
  int64_t embed = 16;
  int64_t hidden = 64;
  int64_t batch = 64;
  int64_t steps = 40;
  double lr = 1.0;
  int64_t seed = 1;
};

struct TinyLmRun {
  std::vector<double> losses;  // one per step
  int64_t traces = 0;          // programs traced for the train step
  Hash128 step_graph_hash;
  Graph step_graph;
};

// Trains on `text` with the current JIT; calls `on_step(step, loss)` after each step.
TinyLmRun run_tiny_lm(const TinyLmConfig& config, std::string_view text,
                      const std::function<void(int64_t, double)>& on_step = {});

// A few hundred bytes of C++ to train on when no text is given.
std::string_view tiny_lm_default_text();

}  // namespace keel
