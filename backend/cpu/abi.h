/* keel CPU executable ABI, version 3. Shared by libkeel and every generated shared object
   (codegen embeds this file in the source it writes), so it is plain C. */
#ifndef KEEL_CPU_ABI_H
#define KEEL_CPU_ABI_H
#include <stdint.h>

#define KEEL_ABI_VERSION 7u
#define KEEL_MAX_RANK 8
/* dot_general's precision argument (cpu.matmul_precision): f32 multiplies f32 operands as
   they are; bf16 rounds f32 operands to bf16 (nearest even) and accumulates in f32. bf16
   operands with an f32 out (preferred_element_type f32) accumulate in f32 whatever it says. */
#define KEEL_MATMUL_F32 0
#define KEEL_MATMUL_BF16 1

/* dtype codes equal keel::DType: 0 f32, 1 bf16, 2 i32, 3 i64, 4 bool (1 byte).
   Row-major unless `strided`: then element i sits at data + sum(i[d] * stride[d]) elements
   (a layout op folded into its reader; only dot_general's operands and the inputs of copy,
   transpose, slice, broadcast and concat may be strided). */
typedef struct keel_view {
  void* data;
  int32_t dtype;
  int32_t rank;
  int64_t shape[KEEL_MAX_RANK];
  int64_t stride[KEEL_MAX_RANK];
  int32_t strided;
} keel_view;

/* Kernels libkeel provides to generated code: the ops that are not fused loops. Each follows
   docs/ops.md exactly; `out` is preallocated with the op's output type. */
typedef struct keel_kernels {
  uint32_t abi_version; /* KEEL_ABI_VERSION */
  uint32_t struct_size; /* sizeof(keel_kernels) */
  void (*dot_general)(const keel_view* lhs, const keel_view* rhs, keel_view* out,
                      const int64_t* lhs_batch, const int64_t* rhs_batch, int32_t n_batch,
                      const int64_t* lhs_contract, const int64_t* rhs_contract, int32_t n_contract,
                      int32_t precision);
  void (*transpose)(const keel_view* in, keel_view* out, const int64_t* perm);
  void (*broadcast)(const keel_view* in, keel_view* out);
  void (*slice)(const keel_view* in, keel_view* out, const int64_t* start, const int64_t* stride);
  void (*concat)(const keel_view* const* ins, int32_t n, keel_view* out, int32_t axis);
  void (*pad)(const keel_view* in, keel_view* out, const int64_t* low, double value);
  void (*gather)(const keel_view* operand, const keel_view* indices, keel_view* out, int32_t axis);
  void (*scatter_add)(const keel_view* operand, const keel_view* indices, const keel_view* updates,
                      keel_view* out, int32_t axis);
  void (*one_hot)(const keel_view* indices, keel_view* out);
  void (*iota)(keel_view* out, int32_t dim);
  void (*rng_uniform)(const keel_view* seed, const keel_view* counter, keel_view* out);
  /* op: 0 sum, 1 max, 2 mean; axes sorted, distinct */
  void (*reduce)(const keel_view* in, keel_view* out, int32_t op, const int64_t* axes,
                 int32_t n_axes);
  void (*argmax)(const keel_view* in, keel_view* out, int32_t axis);
  void (*cumsum)(const keel_view* in, keel_view* out, int32_t axis, int32_t reverse);
  /* values and/or indices may be null */
  void (*top_k)(const keel_view* in, keel_view* values, keel_view* indices, int64_t k);
  /* same dtype and element count: a byte copy (reshape, output copies) */
  void (*copy)(const keel_view* in, keel_view* out);
  /* any dtype to any dtype, elementwise (docs/ops.md cast rules) */
  void (*cast)(const keel_view* in, keel_view* out);
  /* fused causal attention (docs/ops.md): q [B,H,T,D], k and v [B,KV,T,D] f32, doc [B,T] i32/i64
     or null; out [B,H,T,D] and/or lse [B,H,T] (either may be null; v is unused without out).
     Every [B,H,T,D] view may be strided with each row of D contiguous; lse and doc row-major.
     precision as dot_general's: bf16 rounds the operands of its products (q, k, v, dout, and
     each tile's probabilities and score gradients) to bf16 and accumulates in f32 */
  void (*attention)(const keel_view* q, const keel_view* k, const keel_view* v,
                    const keel_view* doc, keel_view* out, keel_view* lse, double scale,
                    int32_t precision);
  /* its gradients: dq alone, or dk and/or dv (one pass over the tiles for both) */
  void (*attention_grad)(const keel_view* q, const keel_view* k, const keel_view* v,
                         const keel_view* out, const keel_view* dout, const keel_view* lse,
                         const keel_view* doc, keel_view* dq, keel_view* dk, keel_view* dv,
                         double scale, int32_t precision);
  /* collectives over mesh axis `axis` of `axis_size` processes (docs/ops.md): op 0 all_reduce
     (reduce: 0 sum, 1 max, 2 min), 1 all_gather, 2 reduce_scatter (along dim), 3 axis_index
     (in is null), 4 all_to_all (along dim); contiguous views; throws (C++) when the mesh does not
     match */
  void (*collective)(const keel_view* in, keel_view* out, int32_t op, const char* axis,
                     int64_t axis_size, int32_t reduce, int32_t dim);
  /* attention over listed keys (docs/ops.md): q [B,T,H,D], k and v [B,T,KV,D] f32, keys [B,T,S]
     i32 or i64, all row-major; op 0 out [B,T,H,D], 1 dq, 2 dk, 3 dv (from dout [B,T,H,D]),
     4 weights [B,T,S] (v unused); dout is null for 0 and 4 */
  void (*sparse_attention)(const keel_view* q, const keel_view* k, const keel_view* v,
                           const keel_view* dout, const keel_view* keys, keel_view* out, int32_t op,
                           double scale);
} keel_kernels;

/* A generated shared object exports exactly these:
     uint32_t keel_abi_version(void);            returns KEEL_ABI_VERSION
     int keel_run(const keel_kernels* k, const void* const* inputs, void* const* outputs,
                  void* arena);                   0 on success
   inputs: one pointer per graph parameter; outputs: one per graph output, preallocated;
   arena: MemoryPlan::arena_bytes bytes, 64-byte aligned. */
#endif
