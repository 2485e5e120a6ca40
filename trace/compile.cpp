#include "trace/compile.h"

#include <fmt/format.h>

#include <chrono>

#include <mutex>
#include <set>
#include <unordered_map>

#include "ir/error.h"
#include "ir/verify.h"
#include "trace/varying_check.h"

namespace keel {

static std::mutex g_jit_mutex;
static std::shared_ptr<Jit> g_jit;

void set_current_jit(std::shared_ptr<Jit> jit) {
  std::lock_guard lock(g_jit_mutex);
  g_jit = std::move(jit);
}

std::shared_ptr<Jit> current_jit() {
  std::lock_guard lock(g_jit_mutex);
  if (!g_jit) {
    throw Error(
        "[compile] no JIT to prepare programs with: create a keel::Runtime first (it owns the "
        "JIT), or pass CompileOptions::jit");
  }
  return g_jit;
}

JitScope::JitScope(std::shared_ptr<Jit> jit) {
  std::lock_guard lock(g_jit_mutex);
  previous_ = std::exchange(g_jit, std::move(jit));
}

JitScope::~JitScope() {
  std::lock_guard lock(g_jit_mutex);
  g_jit = std::move(previous_);
}

namespace detail {

CompiledCore::CompiledCore(std::string name, CompileOptions options, SourceLoc loc)
    : name_(std::move(name)), options_(std::move(options)), loc_(std::move(loc)) {
  std::set<int> args, results;
  for (const Donation& d : options_.donate) {
    if (d.argument < 0 || d.result < 0 || !args.insert(d.argument).second ||
        !results.insert(d.result).second) {
      throw Error(fmt::format(
          "[compile] '{}' at {}: donation argument {} -> result {} is negative or repeats an "
          "argument or result; donate each argument at most once, into one result",
          name_, loc_.str(), d.argument, d.result));
    }
  }
}

static void require_values(const std::string& fn, std::span<const Tensor> leaves) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].defined()) {
      throw Error(fmt::format("[compile] '{}': argument leaf {} is an empty tensor", fn, i));
    }
    if (leaves[i].donated()) {
      throw Error(fmt::format("[compile] '{}': argument leaf {} was {}; pass that call's result",
                              fn, i, leaves[i].donated_by()));
    }
    if (leaves[i].is_symbolic()) {
      throw Error(
          fmt::format("[compile] '{}': argument leaf {} is a symbol of the ended trace "
                      "'{}'; pass values",
                      fn, i, leaves[i].trace()->function));
    }
  }
}

// Paths under list element `e` ("[e]", "[e].x", "[e][0]") start with `name` instead.
static void rename_element(std::vector<std::string>& paths, size_t e, const std::string& name) {
  const std::string prefix = fmt::format("[{}]", e);
  for (std::string& path : paths) {
    if (path.compare(0, prefix.size(), prefix) == 0) path = name + path.substr(prefix.size());
  }
}

// Each leaf as the caller wrote it: "argument 1" (a tensor), "argument 0 leaf 'wte'", or with
// the argument named, "params leaf 'wte'" and "batch leaf 'tokens'".
static std::vector<std::string> input_names(const std::vector<LeafRange>& arguments, size_t leaves,
                                            const CompileOptions& o) {
  std::vector<std::string> names(leaves);
  for (size_t a = 0; a < arguments.size(); ++a) {
    std::vector<std::string> paths = detail::leaf_paths(arguments[a].structure);
    const std::string argument = a < o.argument_names.size() && !o.argument_names[a].empty()
                                     ? o.argument_names[a]
                                     : fmt::format("argument {}", a);
    if (auto it = o.element_names.find(static_cast<int>(a)); it != o.element_names.end()) {
      for (size_t e = 0; e < it->second.size(); ++e) {
        rename_element(paths, e, it->second[e]);
      }
    }
    for (size_t k = arguments[a].begin; k < arguments[a].end && k < leaves; ++k) {
      const size_t leaf = k - arguments[a].begin;
      names[k] = leaf < paths.size() && paths[leaf] != "."
                     ? fmt::format("{} leaf '{}'", argument, paths[leaf])
                     : argument;
    }
  }
  return names;
}

const Program& CompiledCore::lookup(const std::string& structure, std::span<const Tensor> leaves,
                                    const std::vector<LeafRange>& arguments, const TraceFn& trace) {
  require_values(name_, leaves);
  std::lock_guard lock(mu_);
  const int64_t call = stats_.calls;
  std::string signature = structure + '|';
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (i) signature += ',';
    signature += leaves[i].type().str();
  }
  auto it = programs_.find(signature);
  if (it != programs_.end()) return *it->second;
  // Only a trace that fully succeeds is kept, so a throwing trace never poisons the table.
  ProgramRequest request{call, static_cast<int64_t>(order_.size()), loc_};
  request.planned = options_.planned_shapes;
  request.input_names = input_names(arguments, leaves.size(), options_);
  const auto traced_from = std::chrono::steady_clock::now();
  std::unique_ptr<Program> program = trace_program(signature, leaves, arguments, trace);
  request.trace_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - traced_from).count();
  program->jit = options_.jit ? options_.jit : current_jit();
  program->runnable = program->jit->prepare(program->graph, request);
  const Program& ref = *program;
  order_.push_back(&ref);
  programs_.emplace(signature, std::move(program));
  return ref;
}

std::unique_ptr<Program> CompiledCore::trace_program(const std::string& signature,
                                                     std::span<const Tensor> leaves,
                                                     const std::vector<LeafRange>& arguments,
                                                     const TraceFn& trace) {
  ++stats_.traces;
  auto ctx = std::make_shared<TraceContext>(name_);
  auto program = std::make_unique<Program>();
  std::vector<Tensor> outputs;
  std::vector<LeafRange> results;
  {
    TraceContext::Scope scope(ctx);
    std::vector<Tensor> symbols;
    for (const Tensor& leaf : leaves) {
      symbols.push_back(Tensor::symbol(ctx, ctx->graph.add_param(leaf.type(), loc_)));
    }
    outputs = trace(symbols, program->result_like, results);
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
  set_aliases(ctx->graph, leaves, arguments, results);
  verify(ctx->graph);
  // A partial sum also varies: its own error says more.
  detail::check_partial(ctx->graph, name_, arguments, options_);
  program->output_varies = detail::check_varying(ctx->graph, name_, arguments, results, options_);
  program->signature = signature;
  program->graph = ctx->graph;
  program->graph_hash = graph_hash(program->graph);
  return program;
}

void CompiledCore::set_aliases(Graph& g, std::span<const Tensor> leaves,
                               const std::vector<LeafRange>& arguments,
                               const std::vector<LeafRange>& results) const {
  for (const Donation& d : options_.donate) {
    const auto argument = static_cast<size_t>(d.argument), result = static_cast<size_t>(d.result);
    if (argument >= arguments.size() || result >= results.size()) {
      throw Error(
          fmt::format("[compile] '{}' at {}: donation argument {} -> result {}, but it "
                      "takes {} arguments and returns {} results",
                      name_, loc_.str(), d.argument, d.result, arguments.size(), results.size()));
    }
    const LeafRange &a = arguments[argument], &r = results[result];
    if (a.structure != r.structure) {
      throw Error(
          fmt::format("[compile] '{}' at {}: argument {} is donated to result {} but "
                      "their structures differ ({} vs {}); return the same structure",
                      name_, loc_.str(), d.argument, d.result, a.structure, r.structure));
    }
    for (size_t k = 0; k < a.end - a.begin; ++k) {
      const TensorType& in = leaves[a.begin + k].type();
      const TensorType& out = g.node(g.outputs()[r.begin + k]).type;
      if (in != out) {
        throw Error(
            fmt::format("[compile] '{}' at {}: argument {} is donated to result {} but "
                        "its leaf {} is {} and the result's is {}; return values of the "
                        "argument's types, or donate it to another result",
                        name_, loc_.str(), d.argument, d.result, k, in.str(), out.str()));
      }
      g.set_output_alias(r.begin + k, static_cast<int32_t>(a.begin + k));
    }
  }
}

std::vector<Tensor> CompiledCore::run(const Program& program, std::span<const Tensor> leaves,
                                      const std::vector<LeafRange>& arguments) {
  // A device's value goes in as its buffer; a host-made one is placed on the JIT's device.
  std::vector<Buffer> inputs;
  inputs.reserve(leaves.size());
  for (const Tensor& t : leaves) {
    inputs.push_back(t.is_held_by_device() ? t.buffer() : program.jit->to_device(t.array()));
  }
  // A donated leaf's storage is overwritten, so it must be the only leaf of this call viewing
  // it (m and v passed as one zero array, say): otherwise it is copied first.
  std::vector<char> donated(leaves.size(), 0);
  for (const Donation& d : options_.donate) {
    const LeafRange& a = arguments.at(static_cast<size_t>(d.argument));
    for (size_t i = a.begin; i < a.end; ++i) donated[i] = 1;
  }
  if (!options_.donate.empty()) {
    std::unordered_map<const void*, int> viewers;
    for (const Buffer& in : inputs) {
      if (in.nbytes() > 0) ++viewers[in.address()];
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!donated[i] || inputs[i].nbytes() == 0 || viewers[inputs[i].address()] < 2) continue;
      --viewers[inputs[i].address()];
      inputs[i] = inputs[i].copy();
      std::lock_guard lock(mu_);
      ++stats_.donation_copies;
    }
  }
  // A call that fails once the program runs may have written some donated buffers already:
  // its donated arguments are consumed either way.
  auto consume = [&](const char* how) {
    if (options_.donate.empty()) return;
    const std::string by =
        fmt::format("donated to {}'{}' (compiled at {})", how, name_, loc_.str());
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (donated[i]) leaves[i].mark_donated(by);
    }
  };
  std::vector<Buffer> results;
  try {
    results = program.runnable->run(inputs);
  } catch (...) {
    consume("a failed call of ");
    throw;
  }
  consume("");
  {
    std::lock_guard lock(mu_);
    ++stats_.calls;
  }
  if (program.jit) program.jit->count_call(name_);
  std::vector<Tensor> out;
  out.reserve(results.size());
  for (Buffer& b : results) out.push_back(Tensor::held_by_device(std::move(b), loc_));
  return out;
}

std::vector<const Program*> CompiledCore::programs() const {
  std::lock_guard lock(mu_);
  return order_;
}

CompileStats CompiledCore::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace detail
}  // namespace keel
