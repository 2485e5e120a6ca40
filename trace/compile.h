#pragma once
// keel::compile(name, fn): the first call for an input signature traces fn with symbolic
// tensors into one program; later calls with that signature run the same program. A signature
// is argument structure + shapes + dtypes, never values.
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ir/hash.h"
#include "trace/executor.h"
#include "trace/tree.h"

namespace keel {

struct CompileOptions {
  std::shared_ptr<Executor> executor;  // null: default_executor()
};

struct CompileStats {
  int64_t calls = 0;
  int64_t traces = 0;
};

struct Program {
  std::string signature;
  Graph graph;
  Hash128 key;  // structural hash of the graph
  std::shared_ptr<Runnable> runnable;
  std::shared_ptr<Executor> executor;  // the one that prepared it
  std::shared_ptr<void> result_like;   // the traced result, giving the result's structure
};

namespace detail {

using TraceFn = std::function<std::vector<Tensor>(std::span<const Tensor> symbols,
                                                  std::shared_ptr<void>& result_like)>;

// The type-erased part of a compiled function: programs by signature.
class CompiledCore {
 public:
  CompiledCore(std::string name, CompileOptions options, SourceLoc loc);
  const Program& lookup(const std::string& structure, std::span<const Tensor> leaves,
                        const TraceFn& trace);
  std::vector<Tensor> run(const Program& program, std::span<const Tensor> leaves);
  const std::string& name() const { return name_; }
  const CompileStats& stats() const { return stats_; }
  std::vector<const Program*> programs() const;

 private:
  std::unique_ptr<Program> trace_program(const std::string& signature,
                                         std::span<const Tensor> leaves, const TraceFn& trace);
  std::string name_;
  CompileOptions options_;
  SourceLoc loc_;
  std::map<std::string, std::unique_ptr<Program>> programs_;
  std::vector<const Program*> order_;
  CompileStats stats_;
};

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

}  // namespace detail

template <class Sig>
class CompiledFn;

template <class R, class... Args>
class CompiledFn<R(Args...)> {
 public:
  CompiledFn(std::string name, std::function<R(const Args&...)> fn, CompileOptions options,
             SourceLoc loc)
      : core_(std::make_shared<detail::CompiledCore>(std::move(name), std::move(options),
                                                     std::move(loc))),
        fn_(std::move(fn)) {}

  R operator()(const Args&... args) const {
    // Called while another function is being traced: inline, so one program holds both.
    if (TraceContext::current()) return fn_(args...);
    std::vector<Tensor> leaves;
    const Program& program = lookup(leaves, args...);
    std::vector<Tensor> outputs = core_->run(program, leaves);
    size_t i = 0;
    return Tree<R>::unflatten(*std::static_pointer_cast<R>(program.result_like), outputs, i);
  }

  // Traces and prepares (compiles or loads) the program for these arguments without running it.
  const Program& prepare(const Args&... args) const {
    std::vector<Tensor> leaves;
    return lookup(leaves, args...);
  }

  const std::string& name() const { return core_->name(); }
  const CompileStats& stats() const { return core_->stats(); }
  // Programs in the order they were traced.
  std::vector<const Program*> programs() const { return core_->programs(); }

 private:
  const Program& lookup(std::vector<Tensor>& leaves, const Args&... args) const {
    std::string structure;
    (Tree<Args>::flatten(args, leaves, structure), ...);
    detail::TraceFn trace = [&](std::span<const Tensor> symbols, std::shared_ptr<void>& like) {
      size_t i = 0;
      std::tuple<Args...> symbolic_args{Tree<Args>::unflatten(args, symbols, i)...};
      R result = std::apply(fn_, symbolic_args);
      std::vector<Tensor> outputs;
      std::string ignored;
      Tree<R>::flatten(result, outputs, ignored);
      like = std::make_shared<R>(std::move(result));
      return outputs;
    };
    return core_->lookup(structure, leaves, trace);
  }

  std::shared_ptr<detail::CompiledCore> core_;
  std::function<R(const Args&...)> fn_;
};

template <class Fn>
auto compile(std::string name, Fn fn, CompileOptions options = {},
             SourceLoc loc = SourceLoc::current()) {
  using Sig = typename detail::FnTraits<Fn>::Sig;
  return CompiledFn<Sig>(std::move(name), std::move(fn), std::move(options), std::move(loc));
}

}  // namespace keel
