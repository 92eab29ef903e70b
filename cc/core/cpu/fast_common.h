// What the passes of the fast CPU kernels share (conv_fast.cc, conv_winograd.cc): element
// kinds, per-thread scratch, the call's workspace, the NHWC/NCHW transpose, the unit count every
// pass aims for and the choice of GEMM micro-kernel. Internal to cc/core/cpu.
#ifndef TF_OPS_CC_CORE_CPU_FAST_COMMON_H_
#define TF_OPS_CC_CORE_CPU_FAST_COMMON_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// The micro-kernel tables' index of T (microkernels.h), or -1 where they take no T.
template <typename T>
constexpr int KindOf() {
  constexpr int e = static_cast<int>(ElementOf<T>());
  return e < kElemKinds ? e : -1;
}

// A step of a pass that runs every few rows or pixels of a unit, written as a function of its
// own and compiled as if written in its caller's loop (a call there costs measurably).
#define TF_OPS_INLINE_STEP __attribute__((always_inline)) inline

// The columns [lo, hi) of output index o's row that read an input index in [0, in_size)
// through tap t: o * stride - pad + t * dilation in range.
inline void ReadRange(int64_t out_size, int64_t in_size, int64_t stride, int64_t pad,
                      int64_t dilation, int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t offset = t * dilation - pad;  // input index of output 0
  *lo = std::min(out_size, std::max<int64_t>(0, CeilDivSigned(-offset, stride)));
  *hi = std::min<int64_t>(out_size, FloorDivSigned(in_size - 1 - offset, stride) + 1);
  if (*hi < *lo) *hi = *lo;
}

// The thread pool's cost estimate for one work unit, from a floating-point operation count.
inline int64_t Cost(double ops) {
  return ops < 1 ? 1 : ops > 1e15 ? static_cast<int64_t>(1e15) : static_cast<int64_t>(ops);
}

// out[i] = T(c[i]) for i < n: floats copied; half and bfloat16 rounded by the instruction
// set's vector conversion where it has one, element by element otherwise.
template <typename T>
void WriteOut(const float* c, int64_t n, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    std::copy(c, c + n, out);
  } else {
    if constexpr (KindOf<T>() >= 0) {
      const NarrowFn narrow = Kernels().narrow[KindOf<T>()];
      NoteKernel(narrow);
      if (narrow != nullptr) return narrow(c, n, out);
    }
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(c[i]);
  }
}

// out[i] = c[i] for i < n through non-temporal stores, which write whole cache lines without
// reading them first: for outputs far larger than the caches, written once and not read back
// by the pass. out 16-byte aligned and n a multiple of 4 (a plain copy without SSE2). Stores
// issued this way are ordered only by StreamFence(), which a work range calls before it ends.
inline void StreamOut(const float* c, int64_t n, float* out) {
#if defined(__SSE2__)
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(out + i, _mm_loadu_ps(c + i));
#else
  std::copy(c, c + n, out);
#endif
}

inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Rows that a thread's next unit of work reads from memory, fetched into the L2 cache a
// share at a time while the current unit runs, so that the next one finds them there rather
// than waiting on each line. Rows past the first kMax are left to the hardware.
class AheadRows {
 public:
  void Clear() { count_ = 0; }
  void Add(const void* row, int64_t bytes) {
    if (count_ == kMax) return;
    row_[count_] = static_cast<const char*>(row), bytes_[count_] = bytes, fetched_[count_++] = 0;
  }
  // Fetches each row up to its share done / total (whole at done == total).
  void FetchTo(int64_t done, int64_t total) {
    for (int i = 0; i < count_; ++i) {
      const int64_t upto = done >= total ? bytes_[i] : bytes_[i] * done / total;
      for (; fetched_[i] < upto; fetched_[i] += 64) __builtin_prefetch(row_[i] + fetched_[i], 0, 2);
    }
  }

 private:
  static constexpr int kMax = 8;
  const char* row_[kMax];
  int64_t bytes_[kMax], fetched_[kMax];
  int count_ = 0;
};

// Buffers the passes hand to the micro-kernels start on a cache line: a 64-byte vector or
// tile row loaded from anywhere else spans two lines, and loads more slowly.
inline constexpr size_t kBufferAlign = 64;

inline char* AlignUp(char* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<char*>((a + kBufferAlign - 1) & ~uintptr_t{kBufferAlign - 1});
}

// Per-thread scratch that outlives a call, so that work ranges do not allocate: it grows to
// the largest size asked for on its thread and is reused (contents are not kept when it
// grows). `Slot` tells buffers apart.
template <typename V, int Slot>
V* Scratch(int64_t size) {
  static_assert(kBufferAlign % sizeof(V) == 0, "whole elements per cache line");
  thread_local std::vector<V> buffer;
  constexpr int64_t kPad = kBufferAlign / sizeof(V);
  if (static_cast<int64_t>(buffer.size()) < size + kPad) buffer.resize(size + kPad);
  return reinterpret_cast<V*>(AlignUp(reinterpret_cast<char*>(buffer.data())));
}

// Workspace for a call's packed filters, accumulators and the NCHW passes' NHWC copies. The
// caller holds one block for the whole call, the plan's workspace_bytes (plus alignment:
// ArenaBytes), from its allocator (TensorFlow's, in the op), and makes it this thread's
// WorkspaceArena; each Workspace takes the next kBufferAlign-aligned bytes of it and gives
// them back when it goes, last taken first given back, as the scopes of the executors'
// Workspaces nest (they are all made on the calling thread, outside parallel_for). So a call
// allocates once, every byte it uses is counted by its plan, and a failed allocation is an
// error returned before any pass runs. Contents are not initialised.
//
// A Workspace made where no arena is current (a test that runs a pass alone) has a heap
// buffer of its own.

// The workspace bytes the calling thread's live Workspaces asked for, and the most at once
// since `peak` was last set; the requests that did not fit their call's arena, and the ones
// given back out of order: what the kernel sweep holds a call's plan to.
struct WorkspaceTally {
  int64_t live = 0, peak = 0;
  int64_t overflows = 0, misorders = 0;
};
inline WorkspaceTally& ThreadWorkspace() {
  thread_local WorkspaceTally tally;
  return tally;
}

// Live Workspaces a call may hold at once, each of which may waste up to kBufferAlign bytes to
// alignment: the slack ArenaBytes adds to a plan's workspace.
constexpr int64_t kMaxLiveWorkspaces = 16;

// The bytes of the block a call whose plan holds `workspace_bytes` at most asks its allocator
// for: none where it holds none.
constexpr int64_t ArenaBytes(int64_t workspace_bytes) {
  return workspace_bytes == 0 ? 0 : workspace_bytes + (kMaxLiveWorkspaces + 1) * static_cast<int64_t>(kBufferAlign);
}

class WorkspaceArena {
 public:
  // `base` holds `bytes` bytes (any alignment) for as long as the arena lives; the arena is
  // this thread's current one until then.
  WorkspaceArena(void* base, int64_t bytes)
      : top_(AlignUp(static_cast<char*>(base))), end_(base == nullptr ? nullptr : static_cast<char*>(base) + bytes),
        outer_(Current()) {
    Current() = this;
  }
  ~WorkspaceArena() { Current() = outer_; }
  WorkspaceArena(const WorkspaceArena&) = delete;
  WorkspaceArena& operator=(const WorkspaceArena&) = delete;

  static WorkspaceArena*& Current() {
    thread_local WorkspaceArena* current = nullptr;
    return current;
  }

  // The next `bytes` of the block, aligned, or null where they do not fit (a plan that
  // counted too few bytes).
  char* Take(int64_t bytes) {
    if (bytes > end_ - top_) {
      ++ThreadWorkspace().overflows;
      return nullptr;
    }
    char* const taken = top_;
    top_ = bytes >= end_ - top_ ? end_ : AlignUp(top_ + bytes);  // never past the block
    return taken;
  }
  // Where the last Take left off: what its taker gives back with it.
  char* top() const { return top_; }
  // Gives back [taken, end), which Take returned last of what is still held. Out of order,
  // the bytes stay taken until the arena goes (never handed out twice).
  void GiveBack(char* taken, char* end) {
    if (end == top_) {
      top_ = taken;
    } else {
      ++ThreadWorkspace().misorders;
    }
  }

 private:
  char* top_;
  char* const end_;
  WorkspaceArena* const outer_;
};

class Workspace {
 public:
  explicit Workspace(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) Hold();
    WorkspaceTally& tally = ThreadWorkspace();
    tally.live += static_cast<int64_t>(bytes);
    tally.peak = std::max(tally.peak, tally.live);
  }
  ~Workspace() {
    ThreadWorkspace().live -= static_cast<int64_t>(bytes_);
    if (arena_ != nullptr) arena_->GiveBack(start_, end_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  template <typename T>
  T* data() {
    if (bytes_ == 0) {  // nothing to hold: an address no pass reads or writes through
      alignas(kBufferAlign) static char none[kBufferAlign];
      return reinterpret_cast<T*>(none);
    }
    if (!poisoned_ && test_switches.poison_workspace.load(std::memory_order_relaxed)) std::memset(start_, 0xFF, bytes_);
    poisoned_ = true;
    return reinterpret_cast<T*>(start_);
  }

 private:
  // The bytes from the thread's arena, or else from the heap (throws std::bad_alloc where they
  // cannot be had).
  void Hold() {
    WorkspaceArena* const arena = WorkspaceArena::Current();
    if (arena != nullptr) {
      start_ = arena->Take(static_cast<int64_t>(bytes_));
      if (start_ != nullptr) {
        arena_ = arena;
        end_ = arena->top();
        return;
      }
    }
    own_.reset(new char[bytes_ + kBufferAlign]);
    start_ = AlignUp(own_.get());
  }

  size_t bytes_;  // asked for
  WorkspaceArena* arena_ = nullptr;  // where the bytes were taken from, or null
  char* start_ = nullptr;
  char* end_ = nullptr;  // the arena's top after the bytes were taken
  std::unique_ptr<char[]> own_;
  bool poisoned_ = false;
};

// Work units a pass is split into, at least, where its shape allows: enough for any thread
// count a CPU pool is likely to have. Fixed, so that the split, and with it every sum, does
// not depend on the number of threads.
constexpr int64_t kMinUnits = 16;

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols: whole 16 x 16
// blocks through `block` (the instruction set's in-register transpose), the edges element by
// element.
template <typename T>
void TransposeTile(const T* src, int64_t src_stride, int64_t rows, int64_t cols, T* dst, int64_t dst_stride,
                   TransposeFn block) {
  const int64_t r16 = rows / 16 * 16, c16 = cols / 16 * 16;
  for (int64_t r = 0; r < r16; r += 16) {
    for (int64_t c = 0; c < c16; c += 16) {
      block(src + r * src_stride + c, src_stride, dst + c * dst_stride + r, dst_stride);
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = c < c16 ? r16 : 0; r < rows; ++r) dst[c * dst_stride + r] = src[r * src_stride + c];
  }
}

// dst[i][c][r] = src[i][r][c] for `images` images of rows x cols: between NHWC ([rows =
// pixels][cols = channels]) and NCHW, by tiles of up to 64 x 64 (TransposeTile).
template <typename T>
void Transpose(const T* src, int64_t images, int64_t rows, int64_t cols, T* dst,
               const ParallelFor& parallel_for) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2, "4- or 2-byte elements");
  const TransposeFn block = sizeof(T) == 4 ? Kernels().transpose32 : Kernels().transpose16;
  if (rows >= 16 && cols >= 16) NoteKernel(block);
  constexpr int64_t kBlock = 64;  // a work unit: up to 64 x 64 elements
  const int64_t row_blocks = CeilDiv(rows, kBlock), col_blocks = CeilDiv(cols, kBlock);
  const int64_t per_image = row_blocks * col_blocks;
  parallel_for(images * per_image, kBlock * kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t image = unit / per_image, b = unit % per_image;
      const T* s = src + image * rows * cols;
      T* d = dst + image * rows * cols;
      const int64_t r0 = b / col_blocks * kBlock, c0 = b % col_blocks * kBlock;
      const int64_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
      TransposeTile(s + r0 * cols + c0, cols, r1 - r0, c1 - c0, d + c0 * rows + r0, rows, block);
    }
  });
}

// The filter w[t][ci][k] (`taps` taps) along the axis a direction packs it by: forward, w
// itself; backprop input, which reads it along its in-depth axis, a transposed copy
// w_t[t][k][ci], so that both directions pack rows that lie along contiguous memory
// (transposing first and packing the copy costs far less than packing element by element
// from w).
template <typename T>
class DirectedFilter {
 public:
  DirectedFilter(const T* w, bool forward, int64_t taps, int64_t in_depth, int64_t out_depth,
                 const ParallelFor& parallel_for)
      : space_(forward ? 0 : taps * in_depth * out_depth * sizeof(T)), data_(w) {
    if (!forward) {
      T* const w_t = space_.data<T>();
      Transpose(w, taps, in_depth, out_depth, w_t, parallel_for);
      data_ = w_t;
    }
  }
  const T* data() const { return data_; }

 private:
  Workspace space_;
  const T* data_;
};

// dst[i] = src[i] widened to float, for i < n (src half or bfloat16).
template <typename T>
void Widen(const T* src, int64_t n, float* dst, const ParallelFor& parallel_for) {
  static_assert(sizeof(T) == 2, "half or bfloat16");
  const WidenFn widen = Kernels().widen[KindOf<T>()];
  NoteKernel(widen);
  constexpr int64_t kBlock = 16384;
  parallel_for(CeilDiv(n, kBlock), kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * kBlock; i < std::min(n, end * kBlock); i += kBlock) {
      widen(src + i, std::min(kBlock, n - i), dst + i);
    }
  });
}

// The kernels a GEMM over activations of element kind `kind` runs on, given the float
// table's tile `gk` (of `table`): for bfloat16 where the processor has AVX-512 BF16, the pair table's
// entry of the same tile (its operands hold bfloat16 pairs along the reduction), else gk.
inline const GemmKernel& GemmFor(const KernelTable& table, const GemmKernel& gk, int kind) {
  if (kind != kElemBF16 || table.gemm_bf16_pairs == nullptr) return gk;
  return table.gemm_bf16_pairs[&gk - table.gemm];
}

// The gemm micro-kernel of `table` whose column width wastes the fewest lanes on `columns`, for
// operands of element kind `kind`; ties go to the wider one (more columns per loaded pixel),
// and between equal widths to the first. bfloat16 on the pair kernels (GemmFor) has no
// 48-column tile (kPairTiles).
inline const GemmKernel& PickGemm(const KernelTable& table, int64_t columns, int kind) {
  const int tiles = kind == kElemBF16 && table.gemm_bf16_pairs != nullptr ? kPairTiles : kGemmTiles;
  const GemmKernel* best = &table.gemm[0];
  for (int i = 1; i < tiles; ++i) {
    const GemmKernel& k = table.gemm[i];
    const int64_t padded = CeilDiv(columns, k.nb) * k.nb, best_padded = CeilDiv(columns, best->nb) * best->nb;
    if (padded < best_padded || (padded == best_padded && k.nb > best->nb)) best = &k;
  }
  return *best;
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_COMMON_H_
