#pragma once
/// @file
/// keel::compile(name, fn): the first call for an input signature traces fn with symbolic
/// tensors into one program; later calls with that signature run the same program. A signature
/// is argument structure + shapes + dtypes, never values.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ir/hash.h"
#include "trace/jit.h"
#include "trace/tree.h"

/// Tracing, compiling and running programs (compile, ops, scan, bucketed), the graph IR
/// they are made of, and the Runtime that owns their compilation.
namespace keel {

/// Argument `argument` is donated to result `result` (an element of a tuple result; 0 for any
/// other result): the result's values are written into the argument's buffers (PJRT's
/// input/output aliasing, jax.jit's donate_argnums with the pairing explicit). Both must have the
/// same structure and leaf types. The call consumes the argument's tensors: reading one after the
/// call is an error; use the result, which holds the same storage.
struct Donation {
  int argument = 0;  ///< index of the donated argument
  int result = 0;    ///< index of the tuple element that is written into it
};

/// How keel::compile prepares and runs a function's programs.
struct CompileOptions {
  CompileOptions() = default;
  /// Options with JIT `j` and donations `d`.
  CompileOptions(std::shared_ptr<Jit> j, std::vector<Donation> d = {})
      : jit(std::move(j)), donate(std::move(d)) {}
  std::shared_ptr<Jit> jit;      ///< null: current_jit() at the first call
  std::vector<Donation> donate;  ///< arguments whose buffers results are written into
  /// Mesh axes each argument varies over, by argument index (shard_map's in_specs: a batch
  /// varies over "data"); unlisted arguments are the same on every process. Every result must
  /// be the same on every process unless listed in varying_results; tracing checks it
  /// (trace/varying_check.h).
  std::map<int, std::vector<std::string>> varying_arguments;
  /// Mesh axes each result varies over, by result index.
  std::map<int, std::vector<std::string>> varying_results;
  /// More axes single leaves vary over, by argument index and leaf path ("h.0.mlp.c_fc.weight"):
  /// tensor parallelism's shards among whole parameters.
  std::map<int, std::map<std::string, std::vector<std::string>>> varying_argument_leaves;
  /// More axes single leaves of results vary over, by result index and leaf path.
  std::map<int, std::map<std::string, std::vector<std::string>>> varying_result_leaves;
  /// New signatures are planned (keel::bucketed chooses them): the shape guard applies only its
  /// budget, without warning about each new program.
  bool planned_shapes = false;
  /// The arguments' names in messages, by position ("batch": "input 78 (batch leaf '[0]')");
  /// unnamed ones are "argument N". Not part of the program.
  std::vector<std::string> argument_names;
  /// Names of a list argument's elements, by argument index ("batch leaf 'tokens'" rather than
  /// "batch leaf '[0]'"); elements past the end of the names keep their positions.
  std::map<int, std::vector<std::string>> element_names;
};

/// Counters of one compiled function.
struct CompileStats {
  int64_t calls = 0;            ///< calls that ran their program to the end (prepare() is not one)
  int64_t traces = 0;           ///< programs traced (one per new signature)
  int64_t donation_copies = 0;  ///< donated leaves copied first: they shared storage with another
};

/// One traced program of a compiled function, for one input signature.
struct Program {
  std::string signature;  ///< argument structure, then leaf types: "TT|f32[8,256],i64[]"
  Graph graph;            ///< the traced graph
  Hash128 graph_hash;     ///< structural hash of the graph
  std::shared_ptr<Runnable> runnable;  ///< what the JIT prepared from the graph
  std::shared_ptr<Jit> jit;            ///< the one that prepared it
  std::shared_ptr<void> result_like;   ///< the traced result, giving the result's structure
  std::vector<std::set<std::string>> output_varies;  ///< mesh axes each output leaf varies over
};

namespace detail {

/// Leaves [begin, end) of one argument or one result element, and its structure string.
struct LeafRange {
  size_t begin = 0, end = 0;
  std::string structure;
};

using TraceFn = std::function<std::vector<Tensor>(std::span<const Tensor> symbols,
                                                  std::shared_ptr<void>& result_like,
                                                  std::vector<LeafRange>& result_parts)>;

/// One argument, or one element of a tuple result, flattened onto `leaves`.
template <class T>
void flatten_part(const T& x, std::vector<Tensor>& leaves, std::vector<LeafRange>& parts) {
  LeafRange p{leaves.size(), 0, {}};
  Tree<T>::flatten(x, leaves, p.structure);
  p.end = leaves.size();
  parts.push_back(std::move(p));
}

/// The result's leaves flattened per tuple element (one part for any other result), in the
/// order Tree<R> flattens them.
template <class R>
struct ResultParts {
  static void flatten(const R& r, std::vector<Tensor>& leaves, std::vector<LeafRange>& parts) {
    flatten_part(r, leaves, parts);
  }
};
template <class... Ts>
struct ResultParts<std::tuple<Ts...>> {
  static void flatten(const std::tuple<Ts...>& r, std::vector<Tensor>& leaves,
                      std::vector<LeafRange>& parts) {
    std::apply([&](const auto&... x) { (flatten_part(x, leaves, parts), ...); }, r);
  }
};

/// The type-erased part of a compiled function: programs by signature, the donation pairing.
class CompiledCore {
 public:
  CompiledCore(std::string name, CompileOptions options, SourceLoc loc);
  /// The program for these leaves, traced and prepared on a new signature; the JIT is told the
  /// function's completed calls so far (its step: prepare() and failed calls do not count).
  const Program& lookup(const std::string& structure, std::span<const Tensor> leaves,
                        const std::vector<LeafRange>& arguments, const TraceFn& trace);
  /// Runs `program`; donated leaves are consumed and their results share their storage.
  std::vector<Tensor> run(const Program& program, std::span<const Tensor> leaves,
                          const std::vector<LeafRange>& arguments);
  const std::string& name() const { return name_; }
  CompileStats stats() const;
  std::vector<const Program*> programs() const;

 private:
  std::unique_ptr<Program> trace_program(const std::string& signature,
                                         std::span<const Tensor> leaves,
                                         const std::vector<LeafRange>& arguments,
                                         const TraceFn& trace);
  void set_aliases(Graph& g, std::span<const Tensor> leaves,
                   const std::vector<LeafRange>& arguments,
                   const std::vector<LeafRange>& results) const;
  std::string name_;
  CompileOptions options_;
  SourceLoc loc_;
  /// Guards the tables and stats: one function may be called from several threads. Programs
  /// are never removed, so a reference handed out stays valid.
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Program>> programs_;
  std::vector<const Program*> order_;
  CompileStats stats_;
};

/// @cond
// The signature of a callable, for compile(); hidden from the reference, where Doxygen would
// take the specialisation for a recursive base class.
template <class F>
struct FnTraits : FnTraits<decltype(&F::operator())> {};
template <class R, class... A>
struct FnTraits<R (*)(A...)> {
  using Sig = std::decay_t<R>(std::decay_t<A>...);
};
template <class C, class R, class... A>
struct FnTraits<R (C::*)(A...) const> : FnTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FnTraits<R (C::*)(A...)> : FnTraits<R (*)(A...)> {};
/// @endcond

}  // namespace detail

template <class Sig>
class CompiledFn;

/// A function compiled by keel::compile; calling it runs (tracing on a new signature) a program.
template <class R, class... Args>
class CompiledFn<R(Args...)> {
 public:
  /// Made by keel::compile; `loc` is where it was compiled.
  CompiledFn(std::string name, std::function<R(const Args&...)> fn, CompileOptions options,
             SourceLoc loc)
      : core_(std::make_shared<detail::CompiledCore>(std::move(name), std::move(options),
                                                     std::move(loc))),
        fn_(std::move(fn)) {}

  /// Runs the program of these arguments' signature, tracing and preparing it first when the
  /// signature is new. Called inside another trace, runs `fn` inline instead.
  R operator()(const Args&... args) const {
    // Called while another function is being traced: inline, so one program holds both.
    if (TraceContext::current()) return fn_(args...);
    std::vector<Tensor> leaves;
    std::vector<detail::LeafRange> arguments;
    const Program& program = lookup(leaves, arguments, args...);
    std::vector<Tensor> outputs = core_->run(program, leaves, arguments);
    size_t i = 0;
    return Tree<R>::unflatten(*std::static_pointer_cast<R>(program.result_like), outputs, i);
  }

  /// Traces and prepares (compiles or loads) the program for these arguments without running it.
  const Program& prepare(const Args&... args) const {
    std::vector<Tensor> leaves;
    std::vector<detail::LeafRange> arguments;
    return lookup(leaves, arguments, args...);
  }

  const std::string& name() const { return core_->name(); }  ///< the name given to compile()
  /// Calls, traces and donation copies so far.
  CompileStats stats() const { return core_->stats(); }
  /// Programs in the order they were traced.
  std::vector<const Program*> programs() const { return core_->programs(); }

 private:
  const Program& lookup(std::vector<Tensor>& leaves, std::vector<detail::LeafRange>& arguments,
                        const Args&... args) const {
    (detail::flatten_part(args, leaves, arguments), ...);
    std::string structure;
    for (const detail::LeafRange& a : arguments) structure += a.structure;
    detail::TraceFn trace = [&](std::span<const Tensor> symbols, std::shared_ptr<void>& like,
                                std::vector<detail::LeafRange>& parts) {
      size_t i = 0;
      std::tuple<Args...> symbolic_args{Tree<Args>::unflatten(args, symbols, i)...};
      R result = std::apply(fn_, symbolic_args);
      std::vector<Tensor> outputs;
      detail::ResultParts<R>::flatten(result, outputs, parts);
      like = std::make_shared<R>(std::move(result));
      return outputs;
    };
    return core_->lookup(structure, leaves, arguments, trace);
  }

  std::shared_ptr<detail::CompiledCore> core_;
  std::function<R(const Args&...)> fn_;
};

/// Compiles `fn`, a callable taking and returning Tree types (tensors, scalars and containers of
/// them): see the file comment. `name` names its programs in keys, logs and messages.
template <class Fn>
auto compile(std::string name, Fn fn, CompileOptions options = {},
             SourceLoc loc = SourceLoc::current()) {
  using Sig = typename detail::FnTraits<Fn>::Sig;
  return CompiledFn<Sig>(std::move(name), std::move(fn), std::move(options), std::move(loc));
}

}  // namespace keel
