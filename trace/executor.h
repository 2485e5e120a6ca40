#pragma once
// What compile() needs from a backend, kept abstract so trace/ knows no backend: something
// that turns a verified graph into a runnable program.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"

namespace keel {

class Runnable {
 public:
  virtual ~Runnable() = default;
  virtual std::vector<Array> run(std::span<const Array> inputs) = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<Runnable> prepare(const Graph& graph) = 0;
};

// The executor compile() uses when its options name none; set by the runtime (or a test).
void set_default_executor(std::shared_ptr<Executor> executor);
// Throws "[compile] no backend ..." when none was set.
std::shared_ptr<Executor> default_executor();

}  // namespace keel
