// Backprop input for few input channels, with filter columns merged into the GEMM columns.
// Internal to cc/core/cpu; included by conv_fast.cc.
#ifndef TF_OPS_CC_CORE_CPU_FAST_COLUMNS_MERGED_H_
#define TF_OPS_CC_CORE_CPU_FAST_COLUMNS_MERGED_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// r[i * step + ci] += c[i * width + ci] for i < n, ci < F.
template <int F>
void AddTapRuns(int64_t n, const float* c, int64_t width, float* r, int64_t step) {
  for (int64_t i = 0; i < n; ++i, r += step, c += width) {
#pragma GCC unroll 8
    for (int ci = 0; ci < F; ++ci) r[ci] += c[ci];
  }
}

// The same for any count of channels, unrolled for the few that the pass mostly meets.
inline void AddTap(int64_t channels, int64_t n, const float* c, int64_t width, float* r,
                   int64_t step) {
  switch (channels) {
    case 1: return AddTapRuns<1>(n, c, width, r, step);
    case 2: return AddTapRuns<2>(n, c, width, r, step);
    case 3: return AddTapRuns<3>(n, c, width, r, step);
    case 4: return AddTapRuns<4>(n, c, width, r, step);
    default:
      for (int64_t i = 0; i < n; ++i, r += step, c += width) {
        for (int64_t ci = 0; ci < channels; ++ci) r[ci] += c[ci];
      }
  }
}

// The blocking of BackpropInputColumnsMerged: GEMM columns are (filter column, input channel)
// pairs, KW * FI of them, on the micro-kernel that wastes the fewest lanes on them (bfloat16
// with AVX-512 BF16: the pair kernels, dot products of bfloat16 pairs along K, on a panel that
// keeps the filter in pairs, rows k and k + 1 in one 32-bit slot).
struct ColumnsMergedPlan {
  int gemm = 0;  // Kernels().gemm[gemm]
  bool pairs = false;
  int64_t nb = 0, mr = 0, blocks = 0, panel_rows = 0;
  int64_t panel_floats = 0;  // a panel per (filter row, column block)
};

inline ColumnsMergedPlan PlanColumnsMerged(const KernelTable& table, const ConvGeometry& g, int kind) {
  ColumnsMergedPlan p;
  const int64_t columns = g.filter_cols * g.filter_in_depth;
  const GemmKernel& gk = PickGemm(table, columns, kind);
  const GemmKernel& kernels = GemmFor(table, gk, kind);
  p.gemm = static_cast<int>(&gk - table.gemm);
  p.pairs = &kernels != &gk;
  p.nb = gk.nb, p.mr = kernels.mr, p.blocks = CeilDiv(columns, p.nb);
  p.panel_rows = p.pairs ? CeilDiv(g.out_depth, 2) : g.out_depth;
  p.panel_floats = g.filter_rows * p.blocks * p.panel_rows * p.nb;
  return p;
}

// Backprop input for few input channels (one group): per filter row, a GEMM of each output
// gradient row against the filter with (filter column, input channel) as its columns,
// scattered into the input row it reaches. With 3 input channels and a 7-wide filter the
// GEMM is 21 columns wide, where one column per input channel would leave most vector lanes
// empty. A unit owns one input-gradient row and adds its contributions in a fixed order.
template <typename T>
void BackpropInputColumnsMerged(const ColumnsMergedPlan& plan, const ConvGeometry& g, const T* w, const T* dy, T* dx,
                                const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const GemmKernel& kernels = GemmFor(Kernels(), Kernels().gemm[plan.gemm], kind);
  const int64_t FI = g.filter_in_depth, K = g.out_depth, KW = g.filter_cols;
  const int64_t columns = KW * FI;
  const int64_t nb = plan.nb, mr = plan.mr, blocks = plan.blocks, width = blocks * nb;
  const bool pairs = plan.pairs;
  const int64_t panel_rows = plan.panel_rows, panel_floats = plan.panel_floats;
  Workspace panel_space(panel_floats * sizeof(float));
  float* const panel = panel_space.data<float>();
  std::fill(panel, panel + panel_floats, 0.0f);
  uint32_t* const panel32 = reinterpret_cast<uint32_t*>(panel);
  for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < columns; ++j) {
        const T v = w[((kh * KW) + j / FI) * FI * K + j % FI * K + k];
        const int64_t slot_row = (kh * blocks + j / nb) * panel_rows + (pairs ? k / 2 : k);
        const int64_t at = slot_row * nb + j % nb;
        if (pairs) {
          uint16_t bits;
          std::memcpy(&bits, &v, 2);
          panel32[at] |= uint32_t{bits} << (k % 2 * 16);
        } else {
          panel[at] = static_cast<float>(v);
        }
      }
    }
  }
  if (pairs) Note(Path::kColumnsMergedPairs);
  if (blocks > 1) Note(Path::kColumnsMergedBlocks);
  std::vector<T> zeros(K, T(0.0f));
  std::vector<int64_t> lo(KW), hi(KW);  // the output columns whose tap kw lands in the row
  for (int64_t kw = 0; kw < KW; ++kw) {
    ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo[kw], &hi[kw]);
  }
  const int64_t full_tiles = g.out_cols / mr;
  parallel_for(g.batch * g.in_rows, Cost(2.0 * g.out_cols * K * width * g.filter_rows / g.stride_rows),
               [&](int64_t begin, int64_t end) {
    float* const contrib = Scratch<float, 11>(g.out_cols * width);
    float* const row = Scratch<float, 12>(g.in_cols * FI);
    float* const tail = Scratch<float, 13>(mr * nb);
    const void** const a = Scratch<const void*, 14>(mr);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / g.in_rows, ih = unit % g.in_rows;
      std::fill(row, row + g.in_cols * FI, 0.0f);
      for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
        const int64_t num = ih + g.pad_top - kh * g.dilation_rows;
        if (num < 0 || num % g.stride_rows != 0 || num / g.stride_rows >= g.out_rows) continue;
        const T* dy_row = dy + (n * g.out_rows + num / g.stride_rows) * g.out_cols * K;
        for (int64_t cb = 0; cb < blocks; ++cb) {
          const float* b = panel + (kh * blocks + cb) * panel_rows * nb;
          if (full_tiles > 0) {
            Note(Path::kColumnsMergedFullTiles);
            NoteKernel(kernels.affine[kind]);
            const void* row_start = dy_row;
            kernels.affine[kind](full_tiles, 1, &row_start, K, &b, K, contrib + cb * nb, width,
                            false);
          }
          const int64_t rest = g.out_cols - full_tiles * mr;
          if (rest > 0) {
            Note(Path::kColumnsMergedTail);
            NoteKernel(kernels.indirect[kind]);
            for (int64_t m = 0; m < mr; ++m) {
              a[m] = m < rest ? static_cast<const void*>(dy_row + (full_tiles * mr + m) * K)
                              : static_cast<const void*>(zeros.data());
            }
            kernels.indirect[kind](1, a, &b, K, tail, false);
            for (int64_t m = 0; m < rest; ++m) {
              std::copy(tail + m * nb, tail + (m + 1) * nb,
                        contrib + (full_tiles * mr + m) * width + cb * nb);
            }
          }
        }
        // Column tap by column tap, over the pixels whose tap lands inside the row: the
        // pixels of one tap add to disjoint parts of the row, so no addition waits on the
        // store of the one before (a pixel's taps overlap the next pixel's).
        for (int64_t kw = 0; kw < KW; ++kw) {
          if (hi[kw] == lo[kw]) continue;
          const int64_t step = g.stride_cols * FI;
          float* r = row + (lo[kw] * g.stride_cols - g.pad_left + kw * g.dilation_cols) * FI;
          const float* c = contrib + lo[kw] * width + kw * FI;
          AddTap(FI, hi[kw] - lo[kw], c, width, r, step);
        }
      }
      WriteOut(row, g.in_cols * FI, dx + (n * g.in_rows + ih) * g.in_cols * FI);
    }
  });
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_COLUMNS_MERGED_H_
