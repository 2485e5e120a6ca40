#include "backend/cuda/blas_product.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ir/error.h"

namespace keel::cuda {
namespace {

// The operand `l` (r x c, row-major view) as the column-major matrix whose op is l^T: a
// row-major l is stored as l^T (c x r) already; a column-major one is l, transposed by the op.
BlasMatrix transposed_operand(const MatrixLayout& l, const char* which) {
  BlasMatrix m;
  const bool row_major = l.col_stride == 1 && (l.rows == 1 || l.row_stride >= l.cols);
  const bool col_major = l.row_stride == 1 && (l.cols == 1 || l.col_stride >= l.rows);
  if (row_major || (!col_major && l.cols == 1)) {
    m = {l.cols, l.rows, l.rows == 1 ? std::max<int64_t>(l.cols, 1) : l.row_stride, false};
  } else if (col_major || l.rows == 1) {
    m = {l.rows, l.cols, l.cols == 1 ? std::max<int64_t>(l.rows, 1) : l.col_stride, true};
  } else {
    throw Error(fmt::format(
        "[backend.cuda] internal: operand {} ({} x {}, strides {} and {}) has no unit stride",
        which, l.rows, l.cols, l.row_stride, l.col_stride));
  }
  if (l.rows == 0 || l.cols == 0) m.ld = std::max<int64_t>(m.rows, 1);  // never read
  if (m.ld < std::max<int64_t>(m.rows, 1)) {
    throw Error(fmt::format(
        "[backend.cuda] internal: operand {} has leading dimension {} under its {} rows", which,
        m.ld, m.rows));
  }
  m.first = l.batch_offsets.empty() ? 0 : l.batch_offsets.front();
  m.batch_stride = l.batch_offsets.size() > 1 ? l.batch_offsets[1] - l.batch_offsets[0] : 0;
  return m;
}

float load(const char* base, DType t, int64_t i) {
  if (t == DType::bf16) {
    uint16_t bits = 0;
    std::memcpy(&bits, base + 2 * i, 2);
    return bf16_to_f32(bits);
  }
  float f = 0;
  std::memcpy(&f, base + 4 * i, 4);
  return f;
}

void store(char* base, DType t, int64_t i, float v) {
  if (t == DType::bf16) {
    const uint16_t bits = f32_to_bf16(v);
    std::memcpy(base + 2 * i, &bits, 2);
  } else {
    std::memcpy(base + 4 * i, &v, 4);
  }
}

// Element (i, j) of op(m) in batch entry `b`.
int64_t at(const BlasMatrix& m, int64_t b, int64_t i, int64_t j) {
  const int64_t base = m.first + b * m.batch_stride;
  return m.transposed ? base + j + i * m.ld : base + i + j * m.ld;
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

}  // namespace

float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + kGeluCube * x * x * x)));
}

float gelu_tanh_gradient(float x) {
  const float t = std::tanh(kGeluScale * (x + kGeluCube * x * x * x));
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
}

BlasProduct blas_product(const GemmCall& call) {
  BlasProduct p;
  p.m = call.n;
  p.n = call.m;
  p.k = call.k;
  p.batch = call.batch;
  p.x = transposed_operand(call.b, "b");
  p.y = transposed_operand(call.a, "a");
  p.ldc = std::max<int64_t>(call.n, 1);
  p.operand = call.operand;
  p.result = call.result;
  p.addend = call.addend;
  p.activation = call.activation;
  p.aux = call.aux;
  return p;
}

void run_blas_product(const BlasProduct& p, const char* a, const char* b, char* c,
                      const char* addend, char* aux) {
  if ((p.addend != GemmCall::Addend::none) != (addend != nullptr) || p.aux != (aux != nullptr)) {
    throw Error(
        "[backend.cuda] internal: a product's addend or aux matrix and its pointer disagree");
  }
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    for (int64_t j = 0; j < p.n; ++j) {
      for (int64_t i = 0; i < p.m; ++i) {
        float acc = 0.0f;
        for (int64_t q = 0; q < p.k; ++q) {
          acc += load(b, p.operand, at(p.x, bt, i, q)) * load(a, p.operand, at(p.y, bt, q, j));
        }
        const int64_t to = bt * p.m * p.n + i + j * p.ldc;
        if (p.addend == GemmCall::Addend::matrix) acc += load(addend, p.result, to);
        if (p.addend == GemmCall::Addend::row_vector) acc += load(addend, p.result, i);
        switch (p.activation) {
          case GemmCall::Activation::none:
            break;
          case GemmCall::Activation::gelu:
            if (aux) store(aux, p.result, to, acc);
            acc = gelu_tanh(acc);
            break;
          case GemmCall::Activation::gelu_gradient:
            acc *= gelu_tanh_gradient(load(aux, p.result, to));
            break;
        }
        store(c, p.result, to, acc);
      }
    }
  }
}

}  // namespace keel::cuda
