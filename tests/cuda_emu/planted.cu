// Kernels with one planted bug each, and correct ones beside them, for the emulator's own
// tests (tests/test_cuda_emu.py): every bug must be reported, the correct kernels must run
// without a report. Compiled by the host compiler with -DTF_OPS_CUDA_EMU (planted_driver.cc).
#include "cc/core/gpu/cuda_compat.cuh"

namespace planted {

constexpr int kThreads = 64;

// Correct: a block-wide rotation through shared memory, with the barrier.
__global__ void RotateWithBarrier(const float* in, float* out) {
  TF_OPS_SHARED(float, tile, kThreads);
  const int t = threadIdx.x;
  tile[t] = in[blockIdx.x * kThreads + t];
  __syncthreads();
  out[blockIdx.x * kThreads + t] = tile[(t + 1) % kThreads];
}

// Bug: the barrier between the writes and the reads is missing.
__global__ void RotateWithoutBarrier(const float* in, float* out) {
  TF_OPS_SHARED(float, tile, kThreads);
  const int t = threadIdx.x;
  tile[t] = in[blockIdx.x * kThreads + t];
  out[blockIdx.x * kThreads + t] = tile[(t + 1) % kThreads];
}

// Bug: every thread writes the same location.
__global__ void RacingWrites(float* out) {
  TF_OPS_SHARED(float, slot, 1);
  slot[0] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = slot[0];
}

// Bug: a tiled loop that reloads the tile without a second barrier: the next tile's writes
// race with the reads of the current one.
__global__ void TiledSumMissingSecondBarrier(const float* in, int tiles, float* out) {
  TF_OPS_SHARED(float, tile, kThreads);
  const int t = threadIdx.x;
  float sum = 0.0f;
  for (int k = 0; k < tiles; ++k) {
    tile[t] = in[k * kThreads + t];
    __syncthreads();
    for (int j = 0; j < kThreads; ++j) sum += tile[j];
  }
  out[t] = sum;
}

// Correct: the same loop with both barriers.
__global__ void TiledSum(const float* in, int tiles, float* out) {
  TF_OPS_SHARED(float, tile, kThreads);
  const int t = threadIdx.x;
  float sum = 0.0f;
  for (int k = 0; k < tiles; ++k) {
    tile[t] = in[k * kThreads + t];
    __syncthreads();
    for (int j = 0; j < kThreads; ++j) sum += tile[j];
    __syncthreads();
  }
  out[t] = sum;
}

// Bug: reads shared memory that only half the threads wrote.
__global__ void UninitialisedRead(float* out) {
  TF_OPS_SHARED(float, tile, kThreads);
  const int t = threadIdx.x;
  if (t < kThreads / 2) tile[t] = 1.0f;
  __syncthreads();
  out[t] = tile[t];
}

// Bug: the last thread writes one element past the output (n elements).
__global__ void OutOfBoundsWrite(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;
}

// Bug: odd and even threads wait at different barriers.
__global__ void DivergentBarrier(float* out) {
  TF_OPS_SHARED(float, tile, kThreads);
  const int t = threadIdx.x;
  tile[t] = 1.0f;
  if (t % 2 == 1) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[t] = tile[(t + 1) % kThreads];
}

// Bug: thread 0 returns early, the others then wait at a barrier.
__global__ void ExitBeforeBarrier(float* out) {
  TF_OPS_SHARED(float, tile, kThreads);
  const int t = threadIdx.x;
  if (t == 0) return;
  tile[t] = 1.0f;
  __syncthreads();
  out[t] = tile[t];
}

// Bug: a float sum by atomics, whose order (and so value) depends on scheduling.
__global__ void AtomicSum(const float* in, float* out) {
  atomicAdd(out, in[blockIdx.x * blockDim.x + threadIdx.x]);
}

// Correct: a warp sum by shuffles, lane 0 writing each warp's total.
__global__ void WarpShuffleSum(const float* in, float* out) {
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
}

// Correct: lanes exchange through shared memory with __syncwarp between.
__global__ void WarpExchangeSynced(float* out) {
  TF_OPS_SHARED(float, tile, 32);
  const int lane = threadIdx.x;
  tile[lane] = static_cast<float>(lane);
  __syncwarp();
  out[lane] = tile[lane ^ 1];
}

// Bug: the same without __syncwarp.
__global__ void WarpExchangeUnsynced(float* out) {
  TF_OPS_SHARED(float, tile, 32);
  const int lane = threadIdx.x;
  tile[lane] = static_cast<float>(lane);
  out[lane] = tile[lane ^ 1];
}

// Correct: a ballot of the odd lanes, and dynamic shared memory.
__global__ void BallotAndDynamicShared(unsigned* out) {
  TF_OPS_DYNAMIC_SHARED(unsigned, words);
  const int lane = threadIdx.x;
  words[lane] = __ballot_sync(0xffffffffu, lane % 2 == 1);
  __syncwarp();
  out[lane] = words[(lane + 1) % 32];
}

// Correct: one warp's tensor-core product D = A B (A 16 x 16, B 16 x 8, half; exact small
// integers, A[r][k] = (16 r + k) % 7 - 3, B[k][c] = (8 k + c) % 5 - 2), each lane placing its
// fragment elements where PTX's mma.m16n8k16 puts them (element i of A: row g + 8 (i / 2 % 2),
// column 2 q + i % 2 + 8 (i / 4); of B: row 2 q + i % 2 + 8 (i / 2), column g; of D: row
// g + 8 (i / 2), column 2 q + i % 2; lane = 4 g + q, element 2 j in word j's low half), writing
// D row-major. `swap` exchanges A's words 1 and 2: the bug of a misplaced fragment.
__global__ void MmaProduct(float* out, bool swap) {
  const int lane = threadIdx.x, g = lane / 4, q = lane % 4;
  const auto a_at = [](int r, int k) { return __float2half_rn(static_cast<float>((16 * r + k) % 7 - 3)); };
  const auto b_at = [](int k, int c) { return __float2half_rn(static_cast<float>((8 * k + c) % 5 - 2)); };
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  for (int i = 0; i < 8; ++i) {
    const uint32_t bits = tf_ops::gpu::Bits16(a_at(g + 8 * (i / 2 % 2), 2 * q + i % 2 + 8 * (i / 4)));
    a[i / 2] |= bits << (16 * (i % 2));
  }
  for (int i = 0; i < 4; ++i) {
    b[i / 2] |= tf_ops::gpu::Bits16(b_at(2 * q + i % 2 + 8 * (i / 2), g)) << (16 * (i % 2));
  }
  if (swap) {
    const uint32_t t = a[1];
    a[1] = a[2], a[2] = t;
  }
  float d[4] = {0.5f, 0.5f, 0.5f, 0.5f};  // D += A B: each sum starts at 0.5
  tf_ops::gpu::Mma16816(d, a, b, __half());
  for (int i = 0; i < 4; ++i) out[(g + 8 * (i / 2)) * 8 + 2 * q + i % 2] = d[i];
}

// Correct: every thread stores its own output once, through Output (the store the emulator
// checks).
__global__ void StoreOnce(float* out) {
  const tf_ops::gpu::Output<float> o{out};
  o.Store(blockIdx.x * blockDim.x + threadIdx.x, 1.0f);
}

// Bug: neighbouring threads' outputs overlap (thread t stores elements t / 2 and t / 2 + 1...):
// an element stored twice in one launch.
__global__ void OverlappingStores(float* out) {
  const tf_ops::gpu::Output<float> o{out};
  o.Store(threadIdx.x / 2, static_cast<float>(threadIdx.x));
}

// Bug: blocks add their part into one output without an atomic: a lost update on a GPU, which
// one-block-at-a-time scheduling would hide.
__global__ void LostUpdate(const float* in, float* out) {
  const tf_ops::gpu::Output<float> o{out};
  if (threadIdx.x == 0) o.Store(0, out[0] + in[blockIdx.x]);
}

// Correct for its own launch bounds (64 threads), launched by the driver with more.
__global__ void __launch_bounds__(kThreads) Bounded(float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}

}  // namespace planted
