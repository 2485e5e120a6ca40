// The header the host shim puts before a generated CUDA source: CUDA's execution model in plain
// C++. The threads of a kernel that synchronizes are fibers run in turn on one OS thread;
// __syncthreads and warp shuffles are barriers at which a fiber yields until its block (or warp)
// has arrived, so such kernels run as they would on a GPU, in a fixed order. The threads of the
// other kernels run one after another.
#include "backend/cuda/host_shim.h"

namespace keel::cuda {

const char* const kHostShimHeader = R"KEEL(
#define KEEL_HOST_SHIM 1
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#define __global__
#define __device__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
// Blocks run one after another, so a block's shared memory can be one static per kernel. All of
// it sits in one section, which each launch fills with NaN bytes: a kernel reading shared memory
// it never wrote reads what a GPU leaves there, garbage, not zeros.
#define __shared__ static __attribute__((section("keel_shared")))
extern "C" char __start_keel_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_keel_shared[] __attribute__((weak, visibility("hidden")));

struct keel_dim3 {
  unsigned x = 0, y = 1, z = 1;
};
static keel_dim3 threadIdx, blockIdx, blockDim, gridDim;

static inline float __uint_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

namespace keel_shim {

constexpr size_t kStackBytes = 64 * 1024;
struct Fiber {
  ucontext_t start;  // entered once (setcontext); later switches are _setjmp/_longjmp, which
  jmp_buf at;        // leave the signal mask alone (swapcontext makes two syscalls each)
  bool started = false, done = false;
};
struct Barrier {
  int count = 0;
  long generation = 0;
};
static jmp_buf scheduler;
static std::vector<Fiber> fibers;
static std::vector<char*> stacks;
static struct StackRelease {  // defined after stacks, so released before them
  ~StackRelease() {
    for (char* s : stacks) free(s);
  }
} stack_release;
static int current = 0;
static long progress = 0;  // barriers passed and threads finished: a round without any is a deadlock
static bool in_fibers = false, misuse = false;
static Barrier block_barrier;
static std::vector<Barrier> warp_barriers;
static std::vector<uint64_t> lanes;  // the values a shuffle exchanges, one per thread
static const std::function<void()>* body = nullptr;

static void yield() {
  if (_setjmp(fibers[current].at) == 0) _longjmp(scheduler, 1);
}

static void arrive(Barrier& b, int expected) {
  if (!in_fibers) {  // a kernel whose launch said it never synchronizes
    misuse = true;
    return;
  }
  const long generation = b.generation;
  if (++b.count == expected) {
    b.count = 0;
    ++b.generation;
    ++progress;
    return;
  }
  while (b.generation == generation) yield();
}

static void entry() {
  (*body)();
  fibers[current].done = true;
  ++progress;
  _longjmp(scheduler, 1);  // its stack is abandoned, and reused by the next block
}

// false: the block's threads wait at barriers that can never complete.
static bool run_block(int threads) {
  fibers.assign(threads, Fiber());
  while (stacks.size() < static_cast<size_t>(threads)) {
    stacks.push_back(static_cast<char*>(malloc(kStackBytes)));
  }
  for (int t = 0; t < threads; ++t) {
    Fiber& f = fibers[t];
    getcontext(&f.start);
    f.start.uc_stack.ss_sp = stacks[t];
    f.start.uc_stack.ss_size = kStackBytes;
    f.start.uc_link = nullptr;
    makecontext(&f.start, entry, 0);
  }
  block_barrier = Barrier();
  warp_barriers.assign((threads + 31) / 32, Barrier());
  lanes.assign(threads, 0);
  int remaining = threads;
  while (remaining > 0) {
    const long before = progress;
    for (int t = 0; t < threads; ++t) {
      Fiber& f = fibers[t];
      if (f.done) continue;
      current = t;
      threadIdx.x = t;
      if (_setjmp(scheduler) == 0) {
        if (!f.started) {
          f.started = true;
          setcontext(&f.start);
        }
        _longjmp(f.at, 1);
      }
      if (f.done) --remaining;
    }
    if (remaining > 0 && progress == before) return false;
  }
  return true;
}

// 0; 1: a block deadlocked at a barrier; 3: a kernel launched as not synchronizing did.
static int run(long long grid, int block, bool synchronizes, const std::function<void()>& fn) {
  if (__start_keel_shared != nullptr && __stop_keel_shared > __start_keel_shared) {
    memset(__start_keel_shared, 0xff, static_cast<size_t>(__stop_keel_shared - __start_keel_shared));
  }
  body = &fn;
  blockDim.x = block;
  gridDim.x = static_cast<unsigned>(grid);
  in_fibers = synchronizes;
  misuse = false;
  for (long long b = 0; b < grid; ++b) {
    blockIdx.x = static_cast<unsigned>(b);
    if (synchronizes) {
      if (!run_block(block)) return 1;
      continue;
    }
    for (int t = 0; t < block; ++t) {  // threads that never meet run one after another
      threadIdx.x = t;
      fn();
    }
    if (misuse) return 3;
  }
  return 0;
}

}  // namespace keel_shim

static inline void __syncthreads() { keel_shim::arrive(keel_shim::block_barrier, blockDim.x); }

namespace keel_shim {
static inline int warp_width() {
  const int first = static_cast<int>(threadIdx.x) & ~31;
  return static_cast<int>(blockDim.x) - first < 32 ? static_cast<int>(blockDim.x) - first : 32;
}
}  // namespace keel_shim

// The lanes of a warp meet: what each wrote before is seen by all after.
static inline void __syncwarp(unsigned = 0xffffffffu) {
  keel_shim::arrive(keel_shim::warp_barriers[threadIdx.x / 32], keel_shim::warp_width());
}

// The prelude's tensor-core tiles: every lane holds the whole 16 x 16 tile (the hardware's
// fragments are opaque, so kernels cannot tell), each operation a barrier of the warp, as wmma's
// are; operands are bf16 (rounded on the way in), accumulation f32.
static inline float keel_shim_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
struct keel_mma_a { float v[256]; };
struct keel_mma_b_col { float v[256]; };  // held as (k, n) at v[k * 16 + n]
struct keel_mma_b_row { float v[256]; };
struct keel_mma_acc { float v[256]; };
static inline void keel_mma_zero(keel_mma_acc& c) {
  for (int i = 0; i < 256; ++i) c.v[i] = 0.0f;
}
static inline void keel_mma_load(keel_mma_a& f, const uint16_t* p, int ldm) {
  __syncwarp();
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) f.v[r * 16 + k] = keel_shim_bf16(p[r * ldm + k]);
  __syncwarp();
}
static inline void keel_mma_load(keel_mma_b_col& f, const uint16_t* p, int ldm) {
  __syncwarp();
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) f.v[k * 16 + n] = keel_shim_bf16(p[n * ldm + k]);
  __syncwarp();
}
static inline void keel_mma_load(keel_mma_b_row& f, const uint16_t* p, int ldm) {
  __syncwarp();
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) f.v[k * 16 + n] = keel_shim_bf16(p[k * ldm + n]);
  __syncwarp();
}
template <class B>
static inline void keel_mma(keel_mma_acc& d, const keel_mma_a& a, const B& b) {
  __syncwarp();
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float s = d.v[m * 16 + n];
      for (int k = 0; k < 16; ++k) s += a.v[m * 16 + k] * b.v[k * 16 + n];
      d.v[m * 16 + n] = s;
    }
  __syncwarp();
}
static inline void keel_mma_store(float* p, const keel_mma_acc& c, int ldm) {
  __syncwarp();
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) p[m * ldm + n] = c.v[m * 16 + n];
  __syncwarp();
}

// Lanes outside a partial last warp read their own value.
template <class T>
static T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  if (!keel_shim::in_fibers) {  // a kernel whose launch said it never synchronizes
    keel_shim::misuse = true;
    return v;
  }
  const int t = static_cast<int>(threadIdx.x), first = t & ~31;
  const int width = static_cast<int>(blockDim.x) - first < 32 ? static_cast<int>(blockDim.x) - first : 32;
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  keel_shim::lanes[t] = bits;
  keel_shim::arrive(keel_shim::warp_barriers[t / 32], width);
  const int partner = t ^ lane_mask;
  T r = v;
  if (partner < first + width) memcpy(&r, &keel_shim::lanes[partner], sizeof(T));
  keel_shim::arrive(keel_shim::warp_barriers[t / 32], width);
  return r;
}
)KEEL";

}  // namespace keel::cuda
