#pragma once
/// @file
/// Lowering as a visible list of named passes. Graph-to-graph passes (canonicalize, cse, dce,
/// recompute_elementwise, place_collectives) rewrite the program whatever the backend; fold_layout,
/// fuse, concat_in_place and plan_memory produce the plans a backend's code follows, by the rules
/// of its Target (target.h). Each pass can be switched off and its result dumped to a file.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/target.h"

/// Lowering: the graph-to-graph passes and the fusion and memory plans code generation follows.
namespace keel::passes {

/// Which passes lower() skips, and where it dumps what each produced.
struct PassOptions {
  std::set<std::string> disabled;  ///< pass names to skip
  /// matmul_precision = bf16: bf16_operands rounds each product operand once (the backend sets
  /// it from its own option, which the cache key holds).
  bool bf16_matmul = false;
  /// When set, each pass writes `<dump_dir>/<graph>.<n>.<pass>.txt`.
  std::string dump_dir;
  /// The backend's rules for the machine-dependent passes (the default: contiguous views only).
  Target target;
  /// Canonical, for cache keys: one `key=value` item, "passes.disabled=cse,dce" (dump_dir is
  /// left out: it does not change the generated code; so is the target, which the backend and
  /// keel's version in the key decide).
  std::string fingerprint() const;
};

/// The pass names in the order they run.
const std::vector<std::string>& pass_names();

/// What a fusion group computes in one pass over memory.
enum class GroupKind : uint8_t {
  Elementwise,  ///< elementwise ops over one output shape, each element computed once
  Reduction,    ///< a reduce_sum/max/mean whose elementwise producers are computed inline
  Single,       ///< one backend call: a kernel (with those sharing it) or a scan with its results
};

/// Nodes a backend runs as one unit of work: values inside it that no other group reads are
/// never stored. The CPU backend generates one unit per group: a loop nest, or a kernel call
/// that writes every node of its group (Target::shares_call), or a scan loop.
struct FusionGroup {
  GroupKind kind = GroupKind::Single;  ///< how the group runs
  std::vector<NodeId> nodes;           ///< in SSA order; a loop's last is its root
  std::vector<NodeId> outputs;         ///< nodes of the group whose values are used outside it
};

/// A layout op (reshape, transpose, slice, broadcast) folded into its readers: no kernel and no
/// buffer; readers index `base`'s buffer at offset + sum(i[d] * strides[d]) (elements).
struct View {
  NodeId base = -1;              ///< a node with a buffer (never itself a view); -1: not a view
  int64_t offset = 0;            ///< of the view's first element in `base`'s buffer, in elements
  std::vector<int64_t> strides;  ///< one per dim of the view's shape; 0 where broadcast
  bool contiguous = false;       ///< row-major over its shape: any reader may take the pointer
};

/// How the nodes group into loop nests, and which layout ops are views; what fuse returns.
struct FusionPlan {
  std::vector<int32_t> group_of;    ///< per node: its group, or -1 (parameters, constants, views)
  std::vector<FusionGroup> groups;  ///< in an order that respects dependencies
  std::vector<View> views;          ///< per node (empty when layout ops were not folded)
  /// Whether node `id` is a folded layout op (a view).
  bool is_view(NodeId id) const {
    return !views.empty() && views[static_cast<size_t>(id)].base >= 0;
  }
  /// The node whose buffer holds `id`'s elements: its view's base, else itself.
  NodeId storage_of(NodeId id) const {
    return is_view(id) ? views[static_cast<size_t>(id)].base : id;
  }
};

/// Where each buffer lives in the scratch arena, and the byte counts behind the prediction.
struct MemoryPlan {
  /// Per node: byte offset of its buffer in the scratch arena, or -1 when the node needs no
  /// arena buffer (parameter, constant, program output, or a value kept inside a fused loop).
  std::vector<int64_t> offset;
  int64_t arena_bytes = 0;           ///< size of the one scratch arena
  int64_t input_bytes = 0;           ///< all parameters
  int64_t output_bytes = 0;          ///< outputs not written into a donated parameter
  int64_t predicted_peak_bytes = 0;  ///< arena + inputs + outputs + constants
};

struct Lowered;
/// Each scan node's body, lowered: by node id of the graph that holds the scans.
using LoweredBodies = std::map<NodeId, std::shared_ptr<const Lowered>>;

/// What lower() returns: the rewritten graph and the plans the code generator follows.
struct Lowered {
  Graph graph;                   ///< after the graph-to-graph passes
  FusionPlan fusion;             ///< loop nests and views of `graph`
  MemoryPlan memory;             ///< arena offsets of `graph`'s buffers
  std::vector<std::string> log;  ///< one line per pass: name, nodes before -> after, or "skipped"
  PassOptions options;           ///< how `graph` was lowered
  /// Each scan body of `graph`, lowered once (body_pass_options): plan_memory sized the scan's
  /// workspace from it and the code generator emits it.
  LoweredBodies bodies;
};

/// The graph-to-graph passes alone, scan bodies included (as lower() runs them on each body):
/// the program whose collectives a lowering backend runs (place_collectives repeats gathers).
Graph rewritten(const Graph& graph, const PassOptions& options);

/// Runs the pipeline. The input graph must verify; so does every intermediate graph. Each scan's
/// body is lowered once, with the same options (without dumps), after the graph passes
/// (Lowered::bodies). A disabled graph pass is skipped; disabling fuse gives fuse(g, false),
/// disabling plan_memory gives plan_memory(g, fusion, false). With dump_dir set, every
/// graph pass that ran and both plans are written to `<dump_dir>/<graph>.<n>.<pass>.txt` (n =
/// 1-based position in pass_names()). Throws keel::Error "[passes] unknown pass 'x'; known: ..."
/// for a bad name in `disabled`.
Lowered lower(const Graph& graph, const PassOptions& options = {});

/// @name The individual passes, for tests and tools.
///@{
/// Removes ops that do nothing and folds chains of layout ops into one (float identities such
/// as x+0 stay: they are not exact).
Graph canonicalize(const Graph& g);
/// Every dot_general of f32 operands with an f32 result multiplies bf16 copies instead
/// (preferred_element_type f32), one cast per value however many products read it, placed
/// after the value (a parameter's, constant's or scan result's before its first product);
/// rounding moves across reshape, transpose and broadcast, which are replayed on the copy.
Graph bf16_operands(const Graph& g);
/// The part of bf16_operands that crosses scan bodies (bf16_operands runs it first on a graph
/// with scans; each body gets the rest when it is lowered): a scan's xs that its body
/// reads only as product operands enter as one bf16 cast of the stacked xs, and a y read only
/// through bf16 casts is rounded by the body that makes it, so the scan stores the bf16 copy.
Graph bf16_scan_operands(const Graph& g);
/// One node per distinct computation: equal nodes (same op, inputs and attributes) are merged.
Graph cse(const Graph& g);
/// Drops every node that no output depends on; parameters stay (the calling convention).
Graph dce(const Graph& g);
/// A cheap elementwise value (add, sub, mul, neg of values live anyway) that a node 64 or more
/// places later reads is recomputed next to that reader instead of stored until then.
Graph recompute_elementwise(const Graph& g);
/// A gather of a program input (with the layout ops and casts over it) is repeated next to each
/// node 64 or more places after it that reads it, so the whole tensor lives only where
/// it is read (a scan reads its operands as they are); a reduce_scatter, with the elementwise
/// and layout ops (not broadcasts) feeding only it, runs as soon as its operand exists.
Graph place_collectives(const Graph& g);
/// reshape, transpose, slice and broadcast: the ops fold_layout may turn into views.
bool is_layout(Op op);
/// Layout ops whose every reader can index the input's buffer directly: a contiguous view any
/// reader, a strided one where the target says so (Target::reads_view). Never a graph output.
/// Disabled (or `enabled` false): no views, every layout op is a copy kernel.
std::vector<View> fold_layout(const Graph& g, bool enabled = true, const Target& target = {});
/// Groups the nodes into loop nests (GroupKind): elementwise ops of one shape, and reductions
/// with their producers where the target fuses reductions; kernels that share a call
/// (Target::shares_call) are one group, enabled or not. Disabled: every other node its own group.
/// View nodes (views[id].base >= 0) join no group.
FusionPlan fuse(const Graph& g, bool enabled = true, std::vector<View> views = {},
                const Target& target = {});
/// A concat whose every operand (or a reshape of it read only by the concat) is the only use of
/// a result stored by a fused elementwise loop or by a kernel that can store through strides
/// (Target::writes_view) joins in place: each such result becomes a view into the concat's
/// buffer, a view that is written before the concat's own group, and the concat copies nothing.
/// Returns how many concats were placed. Needs views.
int concat_in_place(const Graph& g, FusionPlan& f, const Target& target = {});
/// The view the layout op `n` makes of its input, itself seen as `in` over `in_shape`; nullopt
/// when it is not one (a reshape of a strided view that no strides express).
std::optional<View> layout_view(const Node& n, const Shape& in_shape, const View& in);
/// Row-major strides of `s`.
std::vector<int64_t> row_major_strides(const Shape& s);
/// The strides of `to` over the same elements as `from` with strides `st` when no copy is
/// needed (NumPy's rule: each group of dims that reshapes into another must be contiguous in
/// itself); nullopt when a copy is needed.
std::optional<std::vector<int64_t>> reshape_strides(const Shape& from,
                                                    const std::vector<int64_t>& st,
                                                    const Shape& to);
/// Places every arena buffer (`reuse` false: each in its own bytes, one after another).
/// Offsets are aligned to target.alignment; a buffer lives from the group that writes it through
/// the last group that reads it, and buffers live at the same time never share bytes. `bodies`:
/// every scan's lowered body (lower_scan_bodies), which sizes its workspace.
MemoryPlan plan_memory(const Graph& g, const FusionPlan& fusion, bool reuse = true,
                       const LoweredBodies& bodies = {}, const Target& target = {});
///@}

/// Lowers the body of every scan node of `g` once, with body_pass_options(options).
LoweredBodies lower_scan_bodies(const Graph& g, const PassOptions& options);
/// The first part of a scan's working memory: its spare carry buffers, aligned, where the
/// target ping-pongs carries (Target::scan_spare_carries); else 0.
int64_t scan_carry_bytes(const Node& scan, const Target& target = {});
/// A scan's working memory: its spare carries, then the arena of its lowered body. plan_memory
/// reserves it as the scan node's buffer, live while the scan runs.
int64_t scan_workspace_bytes(const Node& scan, const Lowered& body);
/// The options a scan body inside a graph lowered with `options` is lowered with: the same,
/// without dumps (every body would write over the last one's files).
PassOptions body_pass_options(const PassOptions& options);

/// @name Readable forms of the plans, as lower() dumps them.
///@{
std::string_view group_kind_name(GroupKind kind);  ///< "elementwise" | "reduction" | "single"
/// One line per group: "g3 elementwise nodes=%4,%5,%7 outputs=%7".
std::string print_fusion(const FusionPlan& fusion);
/// One line per folded layout op: "%9 view of %4 offset=64 strides=[0,1,384]".
std::string print_views(const std::vector<View>& views);
/// One line per arena buffer: "%7 offset=0 bytes=4096", then the totals.
std::string print_memory(const Graph& g, const MemoryPlan& memory,
                         const LoweredBodies& bodies = {});
///@}

}  // namespace keel::passes
