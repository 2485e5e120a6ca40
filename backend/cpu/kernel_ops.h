#pragma once
// Internal: the kernel entry points kernels.cpp puts in the keel_kernels table (see abi.h for the
// argument conventions and docs/ops.md for the semantics).
#include "backend/cpu/abi.h"

namespace keel::cpu::detail {

void dot_general(const keel_view* lhs, const keel_view* rhs, keel_view* out,
                 const int64_t* lhs_batch, const int64_t* rhs_batch, int32_t n_batch,
                 const int64_t* lhs_contract, const int64_t* rhs_contract, int32_t n_contract,
                 int32_t precision);
void transpose(const keel_view* in, keel_view* out, const int64_t* perm);
void broadcast(const keel_view* in, keel_view* out);
void slice(const keel_view* in, keel_view* out, const int64_t* start, const int64_t* stride);
void concat(const keel_view* const* ins, int32_t n, keel_view* out, int32_t axis);
void pad(const keel_view* in, keel_view* out, const int64_t* low, double value);
void gather(const keel_view* operand, const keel_view* indices, keel_view* out, int32_t axis);
void scatter_add(const keel_view* operand, const keel_view* indices, const keel_view* updates,
                 keel_view* out, int32_t axis);
void one_hot(const keel_view* indices, keel_view* out);
void iota(keel_view* out, int32_t dim);
void rng_uniform(const keel_view* seed, const keel_view* counter, keel_view* out);
void reduce(const keel_view* in, keel_view* out, int32_t op, const int64_t* axes, int32_t n_axes);
void argmax(const keel_view* in, keel_view* out, int32_t axis);
void cumsum(const keel_view* in, keel_view* out, int32_t axis, int32_t reverse);
void top_k(const keel_view* in, keel_view* values, keel_view* indices, int64_t k);
void copy(const keel_view* in, keel_view* out);
void cast(const keel_view* in, keel_view* out);
void attention(const keel_view* q, const keel_view* k, const keel_view* v, const keel_view* doc,
               keel_view* out, keel_view* lse, double scale, int32_t precision);
void attention_grad(const keel_view* q, const keel_view* k, const keel_view* v,
                    const keel_view* out, const keel_view* dout, const keel_view* lse,
                    const keel_view* doc, keel_view* dq, keel_view* dk, keel_view* dv, double scale,
                    int32_t precision);
void sparse_attention(const keel_view* q, const keel_view* k, const keel_view* v,
                      const keel_view* dout, const keel_view* keys, keel_view* out, int32_t op,
                      double scale);
void collective(const keel_view* in, keel_view* out, int32_t op, const char* axis,
                int64_t axis_size, int32_t reduce, int32_t dim);

// Temporary bytes a call allocates beyond its operands (views need shapes only), for the
// memory prediction; per-thread parts count every processor, so the figure does not depend on
// launch.threads. dot_general: operand permutations, bf16 widening or rounding, integer row
// sums (oneDNN's own scratchpad, under 1 MB on the GPT shapes, is not counted).
int64_t dot_general_scratch(const keel_view* lhs, const keel_view* rhs, const keel_view* out,
                            const int64_t* lhs_batch, const int64_t* rhs_batch, int32_t n_batch,
                            const int64_t* lhs_contract, const int64_t* rhs_contract,
                            int32_t n_contract, int32_t precision);
// gather and scatter_add: the clamped indices (scatter_add: and its row order) as int64.
int64_t gather_scratch(const keel_view* indices);
int64_t scatter_add_scratch(const keel_view* operand, const keel_view* indices, int32_t axis);
// top_k: a key and an order per thread, one row long.
int64_t top_k_scratch(const keel_view* in);
// attention and its gradients: a few tiles per thread, k and v transposed, and with bf16
// precision the rounded operands.
int64_t attention_scratch(const keel_view* q, int32_t precision);
// sparse_attention: each thread's positions, entries, probabilities and dp, one query's keys long.
int64_t sparse_attention_scratch(const keel_view* keys);

}  // namespace keel::cpu::detail
