#pragma once
// Internal to the C++ code generator: the pieces the codegen_*.cpp files share. A program is a
// list of units, one per fusion group (passes::FusionGroup), over buffers named v<node>.
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backend/c_source/c_source.h"
#include "backend/c_source/units.h"
#include "backend/cpu/codegen.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "passes/pipeline.h"

namespace keel::cpu::gen {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error("[backend.cpu] " + fmt::format(f, std::forward<Args>(args)...));
}

// Concatenation without operator+ chains, which trip g++ 12's -Wrestrict false positive.
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

using c_source::describe;
using c_source::Load;
using c_source::plan_units;
using c_source::Unit;
using c_source::UnitKind;

// Where each node's value lives: pointer variables v<id> declared at the top of keel_run.
struct Buffers {
  std::vector<int8_t> needed;     // per node: 1 when some unit or output reads its buffer
  std::vector<int64_t> scratch;   // per node: offset past the planned arena, or -1
  int64_t arena_bytes = 0;        // planned arena
  int64_t scratch_bytes = 0;      // codegen's own buffers after it (what the plan did not place)
  std::vector<int32_t> out_slot;  // per node: the graph output it is computed into, or -1
  // Donation: per node, the parameter whose buffer it is computed into (its output is aliased to
  // it and nothing reads the parameter afterwards), or -1.
  std::vector<NodeId> into_param;
  // Per output: 1 when its value is a donated parameter, copied before the first unit runs
  // (into its own buffer, or into early_temp when it is donated itself).
  std::vector<int8_t> early_copy;
  std::vector<int64_t> early_temp;  // per output: scratch offset past the arena, or -1
  const passes::MemoryPlan* memory = nullptr;
  const passes::FusionPlan* fusion = nullptr;  // for views
  std::string prefix;  // of the names of constants (a scan body's program is prefixed)
  // Codegen scratch shared by the column sums' row-block partials (one unit at a time uses it).
  int64_t partials_offset = -1, partials_bytes = 0;
  // The arena offset of at least `bytes` for row-block partials: the shared region, grown (a new
  // region past the arena) when this unit needs more than it holds.
  int64_t partials(int64_t bytes);
  // Byte range in the arena (planned or scratch), or {-1, -1} for other buffers; a view's is
  // its base's whole buffer.
  std::pair<int64_t, int64_t> arena_range(const Graph& g, NodeId id) const;
  // The folded layout op `id` is, or null.
  const passes::View* view(NodeId id) const {
    return fusion && fusion->is_view(id) ? &fusion->views[static_cast<size_t>(id)] : nullptr;
  }
  NodeId storage_of(NodeId id) const { return fusion ? fusion->storage_of(id) : id; }
};
Buffers assign_buffers(const Graph& g, const passes::MemoryPlan& memory,
                       const passes::FusionPlan& fusion, const std::vector<Unit>& units);
// Sets into_param and early_copy, and takes out_slot from donated outputs that cannot be
// computed in place (they get scratch and a copy at the end).
void place_donated_outputs(const Graph& g, const std::vector<Unit>& units, Buffers& b);
// The statements that copy outputs: `early` before the first unit (donated parameters returned
// as outputs), `late` after the last (parameters, constants, repeats, donated outputs computed
// in scratch). Donated outputs live in in[alias].
struct OutputCopies {
  std::string early, late;
};
OutputCopies output_copies(const Graph& g, const Buffers& b);
// Declarations of the v<id> pointers of `ids` (those with a buffer), one line each; a view's
// pointer is its base's plus its offset (ids must hold the base).
std::string declare_buffers(const Graph& g, const Buffers& b, const std::vector<NodeId>& ids);
// The nodes whose buffers a unit touches, with the bases of the views among them.
std::vector<NodeId> touched(const Graph& g, const Buffers& b, const Unit& u);

// C spellings and expressions, and loop nests, as the CUDA backend writes them too.
using c_source::Access;
using c_source::build_nest;
using c_source::compute_type;
using c_source::constant_array;
using c_source::literal;
using c_source::load_expr;
using c_source::Nest;
using c_source::offset_expr;
using c_source::split_index;
using c_source::storage_type;
using c_source::store_expr;
using c_source::value_expr;

// The helper functions every generated file starts with (after the ABI header).
extern const char* const kPrelude;

// Serial below this many elements: an OpenMP fork costs microseconds.
constexpr int64_t kParallelMin = 1 << 15;

// Writes the statements computing a unit's values at one position.
class Body {
 public:
  Body(const Graph& g, const Buffers& b, const Unit& u) : g_(g), b_(b), u_(u) {}
  // Accesses in this order: loads (a view with its strides), then stores (row-major).
  std::vector<Access> accesses() const;
  // Loads of one element (scalars), hoisted before the loop.
  std::string hoisted() const;
  // `offset[k]` is the offset expression of access k; scalars are skipped.
  std::string compute(const std::vector<std::string>& offset, const std::string& indent) const;
  std::string store(const std::vector<std::string>& offset, const std::string& indent) const;
  // __restrict copies of the pointers the loop touches when no written buffer overlaps a read one.
  std::string restrict_aliases(const std::string& indent) const;
  std::string ptr(NodeId storage) const;  // the pointer name used inside the loop
  // Where a stored value is written: a donated parameter this loop also reads is written
  // through that parameter's pointer (one restrict pointer per buffer).
  NodeId store_target(NodeId id) const;

 private:
  bool restrict_ok() const;
  bool loads(NodeId storage) const;
  const Graph& g_;
  const Buffers& b_;
  const Unit& u_;
};

// How a loop or reduction unit runs in its program's thread team. The driver opens one OpenMP
// parallel region around each run of team units; their loops share work with `omp for` (a
// barrier each) and small ones run on one thread (`omp single`). A unit with its own region
// (a whole-array sum's chunks) runs between the runs, as kernel calls do.
enum class TeamUse { single, team, own_region };
std::string emit_loop(const Graph& g, const Buffers& b, const Unit& u, TeamUse& team_use);
std::string emit_reduce(const Graph& g, Buffers& b, const Unit& u, TeamUse& team_use);
std::string emit_kernel(const Graph& g, const Buffers& b, const Unit& u,
                        const CodegenOptions& options);
// Temporary bytes the kernel call of node `id` allocates (GEMM permutations, bf16 widening,
// index tables), for the predicted peak; 0 for ops without.
int64_t kernel_scratch_bytes(const Graph& g, const Buffers& b, NodeId id,
                             const CodegenOptions& options);

// The loop of a scan unit; `body_fn` is the body's generated function, its arena follows the
// carries' spare buffers in the workspace at `workspace_offset` in A.
std::string emit_scan_loop(const Graph& g, const Buffers& b, const Unit& u,
                           const std::string& body_fn, int64_t workspace_offset);

// The functions that units of the same code share (codegen_share.cpp): the layers of a model
// repeat their loops on other buffers, and each distinct one is compiled once.
class SharedUnits {
 public:
  // The statements of a unit's function: its buffer `declarations`, then a call of the shared
  // function for `code` (its notes naming nodes stay), which is appended to `defs` on first use.
  std::string statements(const std::string& declarations, const std::string& code,
                         std::string& defs);
  size_t size() const { return index_.size(); }  // distinct functions so far

 private:
  std::map<std::string, int32_t> index_;  // parameters and renamed code -> function number
};

// `code` with each arena address "A + <offset>" (scratch a unit's code places itself) replaced by
// a_<rank of the offset's first appearance>; `offsets` gets the offsets in that order.
std::string arena_addresses_named(const std::string& code, std::vector<std::string>& offsets);

// Appends to `defs` the constants and unit functions of a lowered program, names prefixed with
// `prefix` (scan bodies first, each as a function <prefix>s<unit>_run); returns the statements
// of its run function (unit calls, then copies for outputs that need them). `memory` gets the
// arena the program needs (plan plus scratch), the part past the plan, and the largest kernel
// scratch any of its calls (or its scan bodies') allocates.
struct ProgramMemory {
  int64_t arena_bytes = 0, scratch_bytes = 0, kernel_scratch_bytes = 0;
};
std::string emit_program(const passes::Lowered& lowered, const std::string& prefix,
                         std::string& defs, ProgramMemory& memory, SharedUnits& shared,
                         const CodegenOptions& options = {});

// Short description for comments: "%5 = exp(%4) f32[2,3]".

}  // namespace keel::cpu::gen
