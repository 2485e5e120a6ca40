#pragma once
// dot_general layouts the CPU kernel tests run on every GEMM library: plain, either operand
// transposed, batch leading or in the middle, two contracting dims (in order, swapped, and
// scattered so a permute is needed), matrix-vector both ways, outer and inner products, K = 0,
// empty dims, size-1 dims, many small batches, and products wide enough for oneDNN's panels.
#include <vector>

#include "ir/shape.h"

namespace keel::test {

struct DotCase {
  Shape l, r;
  std::vector<int64_t> lb, rb, lc, rc;
};

inline const std::vector<DotCase>& dot_cases() {
  static const std::vector<DotCase> cases = {
      {{5, 7}, {7, 6}, {}, {}, {1}, {0}},
      {{7, 5}, {7, 6}, {}, {}, {0}, {0}},
      {{5, 7}, {6, 7}, {}, {}, {1}, {1}},
      {{7, 5}, {6, 7}, {}, {}, {0}, {1}},
      {{3, 5, 7}, {3, 7, 6}, {0}, {0}, {2}, {1}},
      {{5, 3, 7}, {7, 3, 6}, {1}, {1}, {2}, {0}},
      {{3, 7, 5}, {3, 6, 7}, {0}, {0}, {1}, {2}},
      {{5, 4, 3}, {4, 3, 6}, {}, {}, {1, 2}, {0, 1}},
      {{5, 4, 3}, {4, 3, 6}, {}, {}, {2, 1}, {1, 0}},
      {{4, 5, 3}, {3, 6, 4}, {}, {}, {0, 2}, {2, 0}},
      {{4, 5, 3}, {6, 3, 4}, {}, {}, {2, 0}, {1, 2}},
      {{2, 5, 3, 7}, {3, 7, 2, 6}, {0, 2}, {2, 0}, {3}, {1}},
      {{5}, {6}, {}, {}, {}, {}},
      {{9}, {9}, {}, {}, {0}, {0}},
      {{5, 9}, {9}, {}, {}, {1}, {0}},
      {{9, 5}, {9}, {}, {}, {0}, {0}},
      {{9}, {9, 6}, {}, {}, {0}, {0}},
      {{9}, {6, 9}, {}, {}, {0}, {1}},
      {{3, 0}, {0, 4}, {}, {}, {1}, {0}},
      {{0, 3}, {3, 4}, {}, {}, {1}, {0}},
      {{1, 5, 1, 7}, {7, 1, 6}, {}, {}, {3}, {0}},
      {{2, 1, 5}, {2, 5, 1}, {0}, {0}, {2}, {1}},
      {{64, 16, 12}, {64, 12, 16}, {0}, {0}, {2}, {1}},
      {{4, 40, 33}, {33, 50}, {}, {}, {2}, {0}},
      {{130, 70}, {90, 70}, {}, {}, {1}, {1}},
      {{9, 5}, {5, 2500}, {}, {}, {1}, {0}},
      {{5, 9}, {2500, 5}, {}, {}, {0}, {1}},
      {{2, 6, 5}, {2, 5, 2100}, {0}, {0}, {2}, {1}},
      {{6, 2, 5}, {2, 2100, 5}, {1}, {0}, {2}, {2}},
      {{2, 4, 3, 5}, {3, 5, 2, 2100}, {0, 2}, {2, 0}, {3}, {1}}};
  return cases;
}

}  // namespace keel::test
