#pragma once
// A program for the CUDA backend as code generation leaves it: one CUDA C source (every kernel
// of the program), the launches in order with their arguments' places, the arena the memory plan
// sized, the outputs written into donated inputs, and the copies that fill outputs not computed
// in place. The device executable replays
// the launches (one CUDA graph); the host shim runs the same source on the CPU.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace keel::cuda {

// Where a kernel argument's bytes are: an input, an output, or an offset into the arena.
struct Slot {
  enum class Kind : uint8_t { input, output, arena };
  Kind kind = Kind::arena;
  int32_t index = 0;        // input or output number
  int64_t byte_offset = 0;  // into that buffer (a view's first element) or the arena
  bool operator==(const Slot&) const = default;
};

// A matrix of each batch entry: element (b, r, c) of a rows x cols matrix sits at
// batch_offsets[b] + r * row_stride + c * col_stride elements from its first element.
struct MatrixLayout {
  int64_t rows = 1, cols = 1;
  int64_t row_stride = 1, col_stride = 1;
  std::vector<int64_t> batch_offsets{0};
  bool operator==(const MatrixLayout&) const = default;
};

// One product on cuBLASLt: for every batch entry, c (m x n, row-major, entries one after
// another) = a (m x k) times b (k x n), f32 accumulation. Operands are f32 or bf16 (the bf16
// matmul precision made them bf16 in the graph: passes' bf16_operands); c is f32 or bf16.
struct GemmCall {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  MatrixLayout a, b;
  DType operand = DType::f32, result = DType::f32;
  // What the product adds to a b before it stores c, where that removes the pass an elementwise
  // add would make: a matrix laid out as c (cuBLASLt's C with beta = 1: a residual, a gradient
  // sum), or a vector of n entries added to every row (its bias epilogue). The launch's fourth
  // argument is where it lies.
  enum class Addend : uint8_t { none, matrix, row_vector };
  Addend addend = Addend::none;
  // What it applies to that sum before it stores c, where that removes the elementwise passes
  // around a GELU (cuBLASLt's GELU epilogues, tanh form): gelu stores gelu(sum), and with `aux`
  // also the sum itself, the backward's input; gelu_gradient stores (a b) * gelu'(aux), aux read.
  // One matrix, f32 results; the aux matrix lies as c, after the addend in the launch's
  // arguments.
  enum class Activation : uint8_t { none, gelu, gelu_gradient };
  // cuBLASLt's plan is chosen for an aux matrix at this alignment (its placeholder's), so the
  // aux matrix lies at it.
  static constexpr int64_t kAuxAlignment = 256;
  Activation activation = Activation::none;
  bool aux = false;
  // The launch's arguments: a, b, c, then the addend and the aux matrix where there are.
  size_t buffers() const { return 3 + (addend == Addend::none ? 0 : 1) + (aux ? 1 : 0); }
  // Whether cuBLASLt takes the layout as it is: one unit stride, the other its leading dimension
  // (at least the extent of the unit-stride dim), and evenly spaced batch entries.
  static bool blas_layout(const MatrixLayout& l);
};

// One launch: a generated kernel, extern "C" __global__ void <kernel>(<param_types[i]> a<i>...)
// with one pointer argument per slot, or (gemm set) a cuBLASLt product whose args are a, b, c
// and, with an addend or an aux matrix, those (GemmCall::buffers).
struct Launch {
  std::string kernel;
  int64_t grid = 1;   // blocks (x)
  int32_t block = 1;  // threads per block (x)
  std::vector<Slot> args;
  std::vector<std::string> param_types;  // C types, "const float*"
  std::string what;                      // the unit it computes, for errors and dumps
  bool synchronizes = false;             // its threads meet (__syncthreads, warp shuffles)
  std::optional<GemmCall> gemm;          // a product: no kernel
};

// `bytes` from `from` to `to`: an output not computed in place filled after the launches, or a
// donated argument's value saved before they overwrite it.
struct Copy {
  Slot from, to;
  int64_t bytes = 0;
};

struct CudaProgram;
// Bytes from `slot` to the end of the buffer it is in (an input, an output, the arena).
int64_t bytes_after(const CudaProgram& p, const Slot& slot);
// Whether product launch `l` (its three arguments a, b, c) stays inside its buffers and its
// layouts agree with its sizes.
bool gemm_fits(const CudaProgram& p, const Launch& l);

struct CudaProgram {
  std::string graph_name;
  std::string source;  // CUDA C: the prelude, constants, one kernel per launch
  std::vector<TensorType> inputs, outputs;
  int64_t arena_bytes = 0;  // the plan's, then the scratch of operands copied for products
  // Donation: per output, the input whose memory it is written into and returned as, or -1.
  std::vector<int32_t> aliases;
  std::vector<Copy> copies_before;  // before the launches
  std::vector<Launch> launches;
  std::vector<Copy> copies_after;    // after them
  int64_t predicted_peak_bytes = 0;  // the memory plan's
};

}  // namespace keel::cuda
