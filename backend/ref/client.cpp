// RefClient. Serialized form: the line "keel-ref-executable 1", then print_graph's text.
#include "backend/ref/client.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/host_memory.h"
#include "backend/ref/interpreter.h"
#include "ir/error.h"
#include "ir/text.h"
#include "ir/verify.h"

namespace keel::ref {
namespace {

constexpr std::string_view kMagicLine = "keel-ref-executable 1\n";

// The interpreter keeps every value alive until the end, so its peak is the sum of all values.
int64_t interpreter_peak_bytes(const Graph& g) {
  int64_t total = 0;
  for (const Node& n : g.nodes()) {
    total += numel(n.type.shape) * static_cast<int64_t>(dtype_size(n.type.dtype));
  }
  return total;
}

class RefExecutable : public backend::Executable {
 public:
  explicit RefExecutable(Graph g) : graph_(std::move(g)), peak_(interpreter_peak_bytes(graph_)) {}

  std::vector<backend::Buffer> execute(std::span<const backend::Buffer> args) override {
    std::vector<Array> inputs;
    for (const backend::Buffer& b : args) inputs.push_back(backend::host_array(b, "ref"));
    std::vector<Array> results = interpret(graph_, inputs);
    // A result that is a donated input's storage (the interpreter returns parameters as they
    // are) must keep its value when that storage is overwritten below.
    for (size_t k = 0; k < results.size(); ++k) {
      for (size_t j = 0; j < results.size(); ++j) {
        const int32_t a = graph_.output_alias(j);
        if (a < 0 || (j == k && inputs[static_cast<size_t>(a)].data() == results[k].data()))
          continue;
        if (results[k].nbytes() > 0 && inputs[static_cast<size_t>(a)].data() == results[k].data())
          results[k] = results[k].clone();
      }
    }
    std::vector<backend::Buffer> out;
    for (size_t k = 0; k < results.size(); ++k) {
      // Donation: every result is computed before any is written into an input's storage.
      const int32_t a = graph_.output_alias(k);
      if (a >= 0) {
        Array into = inputs[static_cast<size_t>(a)];
        if (into.nbytes() > 0 && into.data() != results[k].data()) {
          std::memcpy(into.data(), results[k].data(), into.nbytes());
        }
        out.push_back(args[static_cast<size_t>(a)]);
        continue;
      }
      out.push_back(backend::adopt_host_array(std::move(results[k]), backend::host_device()));
    }
    return out;
  }
  std::string serialize() const override {
    return fmt::format("{}{}", kMagicLine, print_graph(graph_));
  }
  int64_t predicted_peak_bytes() const override { return peak_; }
  std::string platform() const override { return "ref"; }

 private:
  Graph graph_;
  int64_t peak_;
};

class RefClient : public backend::Client {
 public:
  std::string platform() const override { return "ref"; }
  backend::Toolchain toolchain(const backend::CompileOptions&) const override {
    return {"none", "none (interpreted)", {}};
  }
  std::vector<backend::Device> devices() const override { return {backend::host_device()}; }

  std::unique_ptr<backend::Executable> compile(const Graph& graph,
                                               const backend::CompileOptions&) override {
    verify(graph);
    return std::make_unique<RefExecutable>(graph);
  }

  std::unique_ptr<backend::Executable> load(std::string_view bytes) override {
    if (bytes.substr(0, kMagicLine.size()) != kMagicLine) {
      throw InputError(
          "[backend.ref] load: the bytes do not start with \"keel-ref-executable 1\"; they are "
          "not a reference executable (recompile the program)");
    }
    Graph g;
    try {
      g = parse_graph(bytes.substr(kMagicLine.size()), "<ref executable>");
      verify(g);
    } catch (const Error& e) {
      throw InputError(fmt::format("[backend.ref] load: {}; recompile the program", e.what()));
    }
    return std::make_unique<RefExecutable>(std::move(g));
  }

  backend::Buffer to_device(const Array& host, const backend::Device& device) override {
    require_device(device);
    return backend::adopt_host_array(host, device);
  }

  backend::MemoryStats memory_stats(const backend::Device& device) const override {
    require_device(device);
    return backend::host_memory_stats();
  }

 private:
  static void require_device(const backend::Device& device) {
    backend::require_host_device(device, "ref", "the reference client");
  }
};

}  // namespace

std::shared_ptr<backend::Client> make_ref_client() {
  return std::make_shared<RefClient>();
}

}  // namespace keel::ref
