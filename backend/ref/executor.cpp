#include "backend/ref/executor.h"

#include "backend/ref/interpreter.h"

namespace keel::ref {
namespace {

class RefRunnable : public Runnable {
 public:
  explicit RefRunnable(Graph graph) : graph_(std::move(graph)) {}
  std::vector<Array> run(std::span<const Array> inputs) override {
    return interpret(graph_, inputs);
  }

 private:
  Graph graph_;
};

class RefExecutor : public Executor {
 public:
  std::string name() const override { return "ref"; }
  std::shared_ptr<Runnable> prepare(const Graph& graph) override {
    return std::make_shared<RefRunnable>(graph);
  }
};

}  // namespace

std::shared_ptr<Executor> make_executor() {
  return std::make_shared<RefExecutor>();
}

}  // namespace keel::ref
