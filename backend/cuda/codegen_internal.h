#pragma once
// Internal to the CUDA C generator: where values live, one kernel's parameters as it is written,
// and the emitters of each kind of unit (codegen_*.cpp).
#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/c_source/c_source.h"
#include "backend/c_source/units.h"
#include "backend/cuda/codegen.h"
#include "backend/cuda/program.h"
#include "ir/error.h"
#include "passes/pipeline.h"

namespace keel::cuda::gen {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error("[backend.cuda] " + fmt::format(f, std::forward<Args>(args)...));
}

// Blocks of a grid-stride loop: enough to fill any GPU many times over; more would only add
// blocks that find no work.
constexpr int64_t kMaxGrid = int64_t{1} << 20;

// Where each node's own buffer is (parameters, outputs computed in place, arena values); views
// and constants have none. A donated output is computed into its input's buffer where
// c_source::computable_in_place allows, else into a temp in the arena from `temps_at`.
struct Places {
  std::vector<std::optional<Slot>> slot;  // per node
  std::vector<int32_t> output_of;         // per node: the output it is computed into, or -1
  // Per output whose value is a donated argument the launches overwrite: where that value is
  // copied before them (the output itself, or a temp when it too is a donated argument's).
  std::vector<std::optional<Slot>> saved;
  int64_t temp_bytes = 0;  // arena from temps_at that the temps take
  std::string prefix;      // of the names of constants and kernels: a scan body's are its own
};
Places place_values(const Graph& g, const passes::Lowered& lowered,
                    const std::vector<c_source::Unit>& units, int64_t temps_at,
                    std::string prefix = "");

// The source as it grows: constant arrays, kernels, and the name of each kernel text.
struct Source {
  std::string defs, kernels;
  std::map<std::string, std::string> kernel_named;  // text under kKernelPlaceholder -> its name
};
constexpr const char* kKernelPlaceholder = "keel_kernel";

// One kernel as it is written: each buffer it touches becomes a pointer parameter a<k>.
class Kernel {
 public:
  Kernel(const Graph& g, const passes::FusionPlan& fusion, const Places& places, std::string name)
      : g_(g), fusion_(fusion), places_(places), name_(std::move(name)) {
    launch_.kernel = name_;
  }
  // The C name of `storage`'s elements in the kernel: a parameter (added on first use, pointing
  // at a view's first element), or a constant's array.
  std::string pointer(NodeId storage, bool written);
  // Where `storage`'s first element is; a view's is inside its base's buffer.
  std::optional<Slot> slot_of(NodeId storage) const;
  // Adds a parameter for a place no node names (an output filled from a constant).
  std::string pointer_to(const Slot& slot, DType dtype, bool written = true);
  // A pointer `elements` past the first element of stored node `storage` (a constant's array
  // included), as a parameter of its own, so the offset is not in the kernel's text.
  std::string pointer_at(NodeId storage, int64_t elements);
  std::string signature() const;  // the extern "C" __global__ line, parameters in order
  Launch& launch() { return launch_; }
  const std::string& name() const { return name_; }
  const Graph& graph() const { return g_; }
  const passes::FusionPlan& fusion() const { return fusion_; }

 private:
  const Graph& g_;
  const passes::FusionPlan& fusion_;
  const Places& places_;
  std::string name_;
  Launch launch_;
  std::map<NodeId, int> params_;
  std::vector<bool> written_;
};

// "for (int64_t <counter> = global thread index; < total; += grid stride) {"
std::string grid_stride(const std::string& counter, int64_t total);
// Blocks for `work` items at `per_block` each, at least 1, at most kMaxGrid.
int64_t grid_for(int64_t work, int64_t per_block);

// Index expressions of every access of `nest` at flat position `counter`; the per-dim indices
// are declared into `declarations`.
std::vector<std::string> offsets_at(const c_source::Nest& nest, const std::string& counter,
                                    std::string& declarations, const std::string& indent);
// A grid-stride kernel over `total` elements: `before` once per thread, `inside` per element
// (index i). Sets the launch's grid.
std::string loop_kernel(Kernel& k, int64_t total, const std::string& before,
                        const std::string& inside);

// What a unit of several launches adds to the program.
struct Emitted {
  std::string kernels;
  std::vector<Launch> launches;
  int64_t scratch_bytes = 0;  // arena bytes past the plan
};
// What a float product computes past its own value, in place of the units after it that would:
// cuBLASLt adds `addend` (as `kind` says), applies `activation` (reading or writing `aux`'s
// buffer, -1 for none) and stores into `into`'s buffer.
struct ProductEpilogue {
  NodeId into = -1, addend = -1;
  GemmCall::Addend kind = GemmCall::Addend::none;
  GemmCall::Activation activation = GemmCall::Activation::none;
  NodeId aux = -1;
};
// Bytes [begin, end) of one buffer (an input, an output, the arena).
struct Extent {
  Slot at;
  int64_t bytes = 0;
};
bool overlap(const Extent& x, const Extent& y);
// The whole buffer `x`'s bytes lie in; none for a constant (an operand copy in scratch).
std::optional<Extent> buffer_of(const Graph& g, const passes::FusionPlan& f, const Places& places,
                                NodeId x);
// Whether `e`, added to every element of product `dot`'s `shape`, can be cuBLASLt's bias: an f32
// packed row vector of one matrix's columns, 16-byte aligned, that stays put in a scan body.
bool bias_fits(const Graph& g, const passes::FusionPlan& f, const Places& places, NodeId dot,
               NodeId e, const Shape& shape);
// Whether `written` shares no byte with what product `dot` reads.
bool apart_from_operands(const Graph& g, const passes::FusionPlan& f, const Places& places,
                         NodeId dot, const Extent& written);
// The epilogue of units `product` and `next` when the add's other operand is a matrix as the
// product lies or a packed row vector, and the sum's bytes share none with what the product
// reads; `readers`: per node, its readers (program outputs counted).
std::optional<ProductEpilogue> product_sum(const Graph& g, const passes::FusionPlan& f,
                                           const Places& places, const c_source::Unit& product,
                                           const c_source::Unit& next,
                                           const std::vector<int32_t>& readers);
// A product that computes by its epilogue what loop unit `loop_unit` would: GELU of its sum with
// a bias (the next unit), or GELU's gradient (a later unit, where the product then runs). The
// loop's other values are dropped: only replaced loops read them.
struct GeluEpilogue {
  size_t product_unit = 0, loop_unit = 0;
  ProductEpilogue epilogue;
};
// Every such product of `units` (cuda.gelu_epilogues).
std::vector<GeluEpilogue> gelu_epilogues(const Graph& g, const passes::FusionPlan& f,
                                         const Places& places,
                                         const std::vector<c_source::Unit>& units);
// dot_general `id`: copies of operands cuBLASLt cannot take as they are (into arena scratch from
// `scratch_at`), then the product (with `epilogue`: into its buffer, plus its addend and
// activation); integer products as a kernel.
void emit_dot(const Graph& g, const passes::FusionPlan& f, const Places& places, NodeId id,
              int64_t scratch_at, const std::string& name, Emitted& out,
              const ProductEpilogue* epilogue = nullptr);

// Each returns the kernel's text and sets its launch (grid 0: nothing to run).
std::string emit_loop(Kernel& k, const c_source::Unit& u);
std::string emit_reduce(Kernel& k, const c_source::Unit& u);
// A layout op that did not fold: its elements copied through the view it makes of its input
// (`input_view`: the input's own view, null when the input is stored).
std::string emit_layout_copy(Kernel& k, NodeId id, const passes::View* input_view);
// iota, rng_uniform, one_hot, pad, concat, gather: a thread per output element.
bool has_index_kernel(Op op);
std::string emit_index_kernel(Kernel& k, NodeId id);
// argmax, cumsum, top_k_values, top_k_indices: a thread per line (or per element of a line).
bool has_axis_kernel(Op op);
std::string emit_axis_kernel(Kernel& k, NodeId id);
// The attention family: a warp per query (or key) row, or with `tensor_cores` (bf16 products)
// and a head_dim they take, a warp per 16-row tile on tensor cores.
std::string emit_attention(Kernel& k, NodeId id, bool tensor_cores);
// Attention over listed keys (ir/sparse_attention.h): a warp per query row, query position or
// key row (codegen_sparse_attention.cpp).
std::string emit_sparse_attention(Kernel& k, NodeId id);
// Constant `id`'s elements into `to`.
std::string emit_constant_copy(Kernel& k, NodeId id, const Slot& to);

// The outputs not computed in place, filled after the launches (a copy, or a kernel from a
// constant), and the donated arguments' values saved before them (codegen_outputs.cpp).
void fill_outputs(const passes::Lowered& lowered, const Places& places, Source& source,
                  CudaProgram& out);

// Kernel `k` of `text` (written with kKernelPlaceholder as its name) in `source`: units whose
// kernel is the same text but for its name share one kernel, as the layers of a model repeat
// theirs on other buffers (arguments). Returns its launch, named.
Launch add_kernel(Source& source, Kernel& k, std::string text);
// The program of `lowered`, its kernels and constants added to `source` under `prefix`: a scan
// body is generated once as a program of its own, then replayed per iteration (emit_scan).
CudaProgram generate_part(const passes::Lowered& lowered, const GenerateOptions& options,
                          const std::string& prefix, Source& source);
// Scan unit `u` of `lowered`: its carries copied in, then the launches of `body` (its lowered
// body's program) once per iteration, their places moved onto that iteration's slices, carries
// alternating between the result and a spare buffer in the scan's workspace. Body arena past
// `body_planned` (product scratch) moves to the scratch from `scratch_at`.
void emit_scan(const passes::Lowered& lowered, const Places& places, const c_source::Unit& u,
               const CudaProgram& body, int64_t body_planned, int64_t scratch_at, Source& source,
               Emitted& out);

}  // namespace keel::cuda::gen
