// Strided forward and backprop-input passes run as stride-1 passes over a space-to-depth copy
// of the input (forward) or into one of the input gradient: direct where the filter covers
// whole strides (SpaceToDepthApplies), Winograd where, padded to whole strides, it spans three
// (conv_fast.cc's WinogradPhasesApply). Internal to cc/core/cpu; included by conv_fast.cc.
#ifndef TF_OPS_CC_CORE_CPU_FAST_SPACE_TO_DEPTH_H_
#define TF_OPS_CC_CORE_CPU_FAST_SPACE_TO_DEPTH_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/fast_common.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// Source channels of the stride-1 pass (stride_rows * stride_cols * in_depth) at least: with
// fewer, the reduction holds less than two whole AMX tiles a tap, and the copy costs more
// than the stride-1 pass saves.
inline constexpr int64_t kSpaceToDepthMinDepth = 64;
// Input channels below which a forward (kSpaceToDepthForwardChannels) or backprop-input pass
// runs through the copy: with few input channels the copy gains most (patch embeddings both
// ways); with more, its stride-1 pass is no faster than the strided one. Forward's bound is
// the lower, since its strided pass already runs banded.
inline constexpr int64_t kSpaceToDepthForwardChannels = 16;
inline constexpr int64_t kSpaceToDepthInputChannels = 32;

// Whether a forward or backprop-input pass runs over a space-to-depth copy: a stride above
// 1, filter rows and columns multiples of the strides (16x16 patches at stride 16, 4x4 at
// stride 2), no dilation, one group, at least kSpaceToDepthMinDepth channels in the copy, and
// few input channels (above).
inline bool SpaceToDepthApplies(const ConvGeometry& g, bool forward) {
  const int64_t sr = g.stride_rows, sc = g.stride_cols;
  return (sr > 1 || sc > 1) && g.filter_rows % sr == 0 && g.filter_cols % sc == 0 &&
         g.dilation_rows == 1 && g.dilation_cols == 1 && g.groups == 1 &&
         sr * sc * g.in_depth >= kSpaceToDepthMinDepth &&
         g.in_depth < (forward ? kSpaceToDepthForwardChannels : kSpaceToDepthInputChannels);
}

// The stride-1 pass: source pixel (i, j) of the copy holds, as channel (a * sc + b) * C + c,
// channel c of input pixel (i * sr + a - pad_top, j * sc + b - pad_left) (zero outside the
// input), and filter tap (p, q) holds tap (p * sr + a, q * sc + b) at the same channels, zero
// past the filter's last row or column (a filter that does not cover whole strides is padded
// with zero taps up to whole strides). Output pixel (oy, ox) reads copy pixels (oy + p, ox + q):
// the products of the strided pass and those of the zero taps, each input pixel once per tap
// that reaches it, without padding (VALID).
inline ConvGeometry SpaceToDepthGeometry(const ConvGeometry& g) {
  ConvGeometry d = g;
  d.filter_rows = CeilDiv(g.filter_rows, g.stride_rows);
  d.filter_cols = CeilDiv(g.filter_cols, g.stride_cols);
  d.in_rows = g.out_rows + d.filter_rows - 1;
  d.in_cols = g.out_cols + d.filter_cols - 1;
  d.in_depth = d.filter_in_depth = g.stride_rows * g.stride_cols * g.in_depth;
  d.stride_rows = d.stride_cols = 1;
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 0;
  return d;
}

// The input columns c0 + b (b < sc) of a copy pixel's block whose first column is c0: those
// with b in [*lo, *hi) lie inside the input's `cols` columns.
inline void BlockColumns(int64_t c0, int64_t sc, int64_t cols, int64_t* lo, int64_t* hi) {
  *lo = std::clamp<int64_t>(-c0, 0, sc);
  *hi = std::clamp<int64_t>(cols - c0, *lo, sc);
}

// The copy of images [0, d.batch) of x (NHWC, geometry g) for the pass d, into xd.
template <typename T>
void SpaceToDepthCopy(const ConvGeometry& g, const ConvGeometry& d, const T* x, T* xd,
                      const ParallelFor& parallel_for) {
  const int64_t sr = g.stride_rows, sc = g.stride_cols, C = g.in_depth, run = sc * C;
  parallel_for(d.batch * d.in_rows, Cost(d.in_cols * d.in_depth), [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / d.in_rows, i = unit % d.in_rows;
      T* const out_row = xd + unit * d.in_cols * d.in_depth;
      for (int64_t a = 0; a < sr; ++a) {
        const int64_t r = i * sr + a - g.pad_top;
        const bool inside = r >= 0 && r < g.in_rows;
        for (int64_t j = 0; j < d.in_cols; ++j) {
          // Channels (a * sc + b) * C + c for b < sc: input columns c0 + b.
          T* const out = out_row + j * d.in_depth + a * run;
          const int64_t c0 = j * sc - g.pad_left;
          int64_t lo, hi;
          BlockColumns(c0, sc, g.in_cols, &lo, &hi);
          if (!inside) hi = lo;
          std::fill(out, out + lo * C, T(0.0f));
          if (hi > lo) {
            const T* const in = x + ((n * g.in_rows + r) * g.in_cols + c0 + lo) * C;
            std::copy(in, in + (hi - lo) * C, out + lo * C);
          }
          std::fill(out + hi * C, out + run, T(0.0f));
        }
      }
    }
  });
}

// Input indices [0, Reached(...)) of one dimension are reached by a tap of some output index;
// past them, none is. (The passes over copies have filters of at least one stride, no
// dilation: no index below is skipped.)
inline int64_t Reached(int64_t in, int64_t out, int64_t stride, int64_t filter, int64_t pad) {
  return std::clamp<int64_t>((out - 1) * stride + filter - pad, 0, in);
}

// Writes exact zeros into the output pixels of images [0, g.batch) of y (NHWC) that read only
// padding through every tap (no product reaches them), as the direct sums give them: the pass
// over the copy reads the padding as zero pixels, and Winograd's sums there are rounding noise.
template <typename T>
void ZeroUnreachedOutputs(const ConvGeometry& g, T* y) {
  const auto reached = [](int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t dilation, int64_t taps) {
    std::vector<char> r(out, 0);
    for (int64_t t = 0; t < taps; ++t) {
      int64_t lo, hi;
      ReadRange(out, in, stride, pad, dilation, t, &lo, &hi);
      std::fill(r.begin() + lo, r.begin() + hi, 1);
    }
    return r;
  };
  const std::vector<char> rows = reached(g.out_rows, g.in_rows, g.stride_rows, g.pad_top, g.dilation_rows, g.filter_rows);
  const std::vector<char> cols = reached(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, g.filter_cols);
  if (std::find(rows.begin(), rows.end(), 0) == rows.end() && std::find(cols.begin(), cols.end(), 0) == cols.end()) {
    return;
  }
  Note(Path::kSpaceToDepthUnreachedZeros);
  const int64_t K = g.out_depth;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t i = 0; i < g.out_rows; ++i) {
      for (int64_t j = 0; j < g.out_cols; ++j) {
        if (rows[i] && cols[j]) continue;
        T* const pixel = y + ((n * g.out_rows + i) * g.out_cols + j) * K;
        std::fill(pixel, pixel + K, T(0.0f));
      }
    }
  }
}

// Images [0, d.batch) of the input gradient dx (NHWC, geometry g) from dxd, the input gradient
// of the pass d: the inverse of SpaceToDepthCopy, exact zeros at input pixels no filter tap
// reaches (Reached): the copy holds the sums of the zero taps there, rounding noise where
// Winograd formed them.
template <typename T>
void DepthToSpaceCopy(const ConvGeometry& g, const ConvGeometry& d, const T* dxd, T* dx,
                      const ParallelFor& parallel_for) {
  const int64_t sr = g.stride_rows, sc = g.stride_cols, C = g.in_depth;
  // Input columns [0, held) are in the copy and reached, rows [0, rows) reached.
  const int64_t held = std::min(Reached(g.in_cols, g.out_cols, sc, g.filter_cols, g.pad_left),
                                d.in_cols * sc - g.pad_left);
  const int64_t rows = Reached(g.in_rows, g.out_rows, sr, g.filter_rows, g.pad_top);
  parallel_for(d.batch * g.in_rows, Cost(g.in_cols * C), [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / g.in_rows, r = unit % g.in_rows;
      const int64_t i = (r + g.pad_top) / sr, a = (r + g.pad_top) % sr;
      T* const out = dx + unit * g.in_cols * C;
      if (i >= d.in_rows || r >= rows) {
        std::fill(out, out + g.in_cols * C, T(0.0f));
        continue;
      }
      const T* const in_row = dxd + (n * d.in_rows + i) * d.in_cols * d.in_depth + a * sc * C;
      for (int64_t j = 0; j < d.in_cols; ++j) {
        // Input columns c0 + b for b in [lo, hi), channels (a * sc + b) * C + c of pixel j.
        const int64_t c0 = j * sc - g.pad_left;
        int64_t lo, hi;
        BlockColumns(c0, sc, g.in_cols, &lo, &hi);
        hi = std::min(hi, held - c0);
        if (hi > lo) {
          const T* const in = in_row + j * d.in_depth;
          std::copy(in + lo * C, in + hi * C, out + (c0 + lo) * C);
        }
      }
      std::fill(out + std::max<int64_t>(held, 0) * C, out + g.in_cols * C, T(0.0f));
    }
  });
}

// The filter of the pass d: tap (p, q), channel (a * sc + b) * C + c, output k is w's tap
// (p * sr + a, q * sc + b), channel c, output k, or zero where that tap is past w's last row or
// column; both [KH, KW, FI, K]. A unit per tap of w (or of its zero padding).
template <typename T>
void SpaceToDepthFilter(const ConvGeometry& g, const ConvGeometry& d, const T* w, T* wd,
                        const ParallelFor& parallel_for) {
  const int64_t sr = g.stride_rows, sc = g.stride_cols, block = g.in_depth * g.out_depth;
  const int64_t rows = d.filter_rows * sr, cols = d.filter_cols * sc;
  parallel_for(rows * cols, Cost(block), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / cols, c = t % cols, p = r / sr, a = r % sr, q = c / sc, b = c % sc;
      T* const out = wd + ((p * d.filter_cols + q) * sr * sc + a * sc + b) * block;
      if (r < g.filter_rows && c < g.filter_cols) {
        const T* const in = w + (r * g.filter_cols + c) * block;
        std::copy(in, in + block, out);
      } else {
        std::fill(out, out + block, T(0.0f));
      }
    }
  });
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_SPACE_TO_DEPTH_H_
