#pragma once
/// @file
/// What compile() needs from the layer that owns compilation (contract 11: one JIT owner), kept
/// abstract so trace/ knows no backend. The Runtime's JIT (runtime/jit.h) is the only real one:
/// it turns a traced program into an executable through the cache and runs it.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/buffer.h"
#include "ir/graph.h"
#include "ir/source_loc.h"

namespace keel {

/// A prepared program. Outputs the graph aliases to a parameter (donation) are written into that
/// input's memory and returned as it.
class Runnable {
 public:
  virtual ~Runnable() = default;
  /// Runs the program: one buffer on its JIT's device per graph parameter; returns one buffer
  /// per output.
  virtual std::vector<Buffer> run(std::span<const Buffer> inputs) = 0;
};

/// Why a function needs a program, for the shape guard and the compile log.
struct ProgramRequest {
  int64_t call = 0;          ///< the function's call count before this call: its own step
  int64_t programs = 0;      ///< programs the function already has
  SourceLoc defined_at;      ///< where keel::compile made the function
  double trace_seconds = 0;  ///< how long tracing the program took, just before prepare()
  bool planned = false;      ///< a shape the function planned (keel::bucketed), not drift
  /// Each graph input in the caller's terms ("argument 1 leaf 'tokens'"), for explanations.
  std::vector<std::string> input_names = {};
};

/// The layer that turns traced graphs into runnable programs; compile() asks it once per new
/// program.
class Jit {
 public:
  virtual ~Jit() = default;
  /// The JIT's name in messages (the runtime's JIT: its backend's platform).
  virtual std::string name() const = 0;
  /// A runnable program for `graph`, compiled or found in a cache; `request` says why it is needed.
  virtual std::shared_ptr<Runnable> prepare(const Graph& graph, const ProgramRequest& request) = 0;
  /// `host` placed on the device this JIT's programs run on: a host-made value a program takes,
  /// or a Variable's first value.
  virtual Buffer to_device(const Array& host) = 0;
  /// New memory for a value of `dtype` and `shape` on that device, zeros when `zeroed`, else
  /// unspecified (a Variable a resume overwrites, a step's zero gradients). The device's own
  /// allocator serves it where it has one; otherwise a host array is placed.
  virtual Buffer allocate(DType dtype, const Shape& shape, bool zeroed) {
    return to_device(zeroed ? Array(dtype, shape) : Array::uninitialized(dtype, shape));
  }
  /// Programs one function may have before the shape guard objects; 0: no cap.
  virtual int64_t program_budget() const { return 0; }
  /// Told after each call of a function named `name` that ran one of this JIT's programs, so
  /// the shape guard counts a name's calls across function objects (one re-created in a loop).
  virtual void count_call(const std::string& name) { (void)name; }
};

/// The JIT compile() uses when a function names none: the live Runtime's (keel::Runtime sets it).
void set_current_jit(std::shared_ptr<Jit> jit);
/// The current JIT. Throws "[compile] no JIT to prepare programs with ..." when there is none.
std::shared_ptr<Jit> current_jit();

/// Makes `jit` current for a scope and restores the previous one (tests that check one program
/// on two backends).
class JitScope {
 public:
  explicit JitScope(std::shared_ptr<Jit> jit);  ///< makes `jit` current until the scope ends
  ~JitScope();
  JitScope(const JitScope&) = delete;
  JitScope& operator=(const JitScope&) = delete;

 private:
  std::shared_ptr<Jit> previous_;
};

}  // namespace keel
