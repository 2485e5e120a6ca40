#pragma once
// An n-gram memory block (Engram-style): each position's last n tokens, for every order n and
// hash head, pick a row of a static table by a hash computed on the device; the rows, joined,
// are gated by their agreement with the residual stream and added to it. The tables are
// embeddings: their gradient is a scatter-add of the rows used, and AdamW leaves them undecayed.
// Internal to nn/.
#include <string>
#include <utility>
#include <vector>

#include "nn/engram_config.h"
#include "nn/gpt.h"

namespace keel::nn {

// Parameter names (under `prefix`) and shapes for width C, with G = c.tables():
//   table [G * rows, dim] (table g owns rows g*rows ..), key.weight and value.weight [G * dim, C],
//   ln_q.weight and ln_k.weight [C] (RMSNorm of the stream and of the key).
std::vector<std::pair<std::string, Shape>> engram_param_shapes(const EngramConfig& c,
                                                               const std::string& prefix,
                                                               int64_t width);

// tokens, positions [B, T] i64 (positions restart at each document) -> [B, T, G] i64: the row of
// each table for each position. A place before the document's start (or the row's) counts as
// the token `vocab`, which no real token is, so no n-gram reaches into another document.
Tensor engram_rows(const EngramConfig& c, int64_t vocab, const Tensor& tokens,
                   const Tensor& positions);

// The row engram_rows gives table g (0-based) for one n-gram, on the host: `last` holds the
// tokens from the oldest to the current one, `vocab` standing for a place outside the document.
int64_t engram_row(const EngramConfig& c, int64_t vocab, int64_t g,
                   const std::vector<int64_t>& last);

// x [B, T, C] plus the memory read at `rows` (engram_rows), gated per position:
// engram_mix(x, engram_read(rows)). `model_processes` as engram_read's.
Tensor engram(const EngramConfig& c, const NamedTensors& p, const std::string& prefix,
              const Tensor& x, const Tensor& rows, int64_t model_processes = 1);
// The tables' rows at `rows` [B, T, G], joined: e [B, T, G * dim] (a gather; its gradient a
// scatter-add into the table). With `model_processes` > 1 the table is this process's block of
// rows over "model": the rows it holds are read, the others are zeros, and the reads are
// all-reduced (each element is one process's value plus zeros: the whole table's, exactly).
Tensor engram_read(const EngramConfig& c, const NamedTensors& p, const std::string& prefix,
                   const Tensor& rows, int64_t model_processes = 1);
// x + gate * (e Wv), gate = sigmoid(rmsnorm(x) . rmsnorm(e Wk) / sqrt(C)) per position.
Tensor engram_mix(const NamedTensors& p, const std::string& prefix, const Tensor& x,
                  const Tensor& e);

}  // namespace keel::nn
