#include "trace/compile.h"

#include <fmt/format.h>

#include <mutex>

#include "ir/error.h"
#include "ir/verify.h"

namespace keel {

static std::mutex g_executor_mutex;
static std::shared_ptr<Executor> g_executor;

void set_default_executor(std::shared_ptr<Executor> executor) {
  std::lock_guard lock(g_executor_mutex);
  g_executor = std::move(executor);
}

std::shared_ptr<Executor> default_executor() {
  std::lock_guard lock(g_executor_mutex);
  if (!g_executor) {
    throw Error(
        "[compile] no backend to run programs on; set one with "
        "keel::set_default_executor(keel::ref::make_executor()) or pass "
        "CompileOptions::executor");
  }
  return g_executor;
}

namespace detail {

CompiledCore::CompiledCore(std::string name, CompileOptions options, SourceLoc loc)
    : name_(std::move(name)), options_(std::move(options)), loc_(std::move(loc)) {}

static void require_values(const std::string& fn, std::span<const Tensor> leaves) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].defined()) {
      throw Error(fmt::format("[compile] '{}': argument leaf {} is an empty tensor", fn, i));
    }
    if (leaves[i].is_symbolic()) {
      throw Error(
          fmt::format("[compile] '{}': argument leaf {} is a symbol of the ended trace "
                      "'{}'; pass values",
                      fn, i, leaves[i].trace()->function));
    }
  }
}

const Program& CompiledCore::lookup(const std::string& structure, std::span<const Tensor> leaves,
                                    const TraceFn& trace) {
  require_values(name_, leaves);
  ++stats_.calls;
  std::string signature = structure + '|';
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (i) signature += ',';
    signature += leaves[i].type().str();
  }
  auto it = programs_.find(signature);
  if (it != programs_.end()) return *it->second;
  // Only a trace that fully succeeds is kept, so a throwing trace never poisons the table.
  std::unique_ptr<Program> program = trace_program(signature, leaves, trace);
  const Program& ref = *program;
  order_.push_back(&ref);
  programs_.emplace(signature, std::move(program));
  return ref;
}

std::unique_ptr<Program> CompiledCore::trace_program(const std::string& signature,
                                                     std::span<const Tensor> leaves,
                                                     const TraceFn& trace) {
  ++stats_.traces;
  auto ctx = std::make_shared<TraceContext>(name_);
  auto program = std::make_unique<Program>();
  std::vector<Tensor> outputs;
  {
    TraceContext::Scope scope(ctx);
    std::vector<Tensor> symbols;
    for (const Tensor& leaf : leaves) {
      symbols.push_back(Tensor::symbol(ctx, ctx->graph.add_param(leaf.type(), loc_)));
    }
    outputs = trace(symbols, program->result_like);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    if (!t.defined() || !t.is_symbolic() || t.trace() != ctx) {
      throw Error(
          fmt::format("[compile] '{}' result leaf {} is not computed by the traced "
                      "program (an empty tensor or a value captured from outside); "
                      "return tensors made by keel ops on the arguments",
                      name_, i));
    }
    ctx->graph.add_output(t.node());
  }
  verify(ctx->graph);
  program->signature = signature;
  program->graph = ctx->graph;
  program->key = graph_hash(program->graph);
  program->executor = options_.executor ? options_.executor : default_executor();
  program->runnable = program->executor->prepare(program->graph);
  return program;
}

std::vector<Tensor> CompiledCore::run(const Program& program, std::span<const Tensor> leaves) {
  std::vector<Array> inputs;
  inputs.reserve(leaves.size());
  for (const Tensor& t : leaves) inputs.push_back(t.array());
  std::vector<Array> results = program.runnable->run(inputs);
  std::vector<Tensor> out;
  out.reserve(results.size());
  for (Array& a : results) out.emplace_back(std::move(a));
  return out;
}

std::vector<const Program*> CompiledCore::programs() const {
  return order_;
}

}  // namespace detail
}  // namespace keel
