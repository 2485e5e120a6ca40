#include <algorithm>

#include "backend/cuda/program.h"

namespace keel::cuda {

bool GemmCall::blas_layout(const MatrixLayout& l) {
  if (l.batch_offsets.size() > 2) {
    const int64_t step = l.batch_offsets[1] - l.batch_offsets[0];
    for (size_t b = 2; b < l.batch_offsets.size(); ++b) {
      if (l.batch_offsets[b] - l.batch_offsets[b - 1] != step) return false;
    }
  }
  if (l.rows == 1 || l.cols == 1) return true;
  return (l.col_stride == 1 && l.row_stride >= l.cols) ||
         (l.row_stride == 1 && l.col_stride >= l.rows);
}

}  // namespace keel::cuda
