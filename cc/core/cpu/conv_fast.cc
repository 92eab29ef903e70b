#include "cc/core/cpu/conv_fast.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_winograd.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_banded.h"
#include "cc/core/cpu/fast_columns_merged.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/fast_depthwise.h"
#include "cc/core/cpu/fast_filter.h"
#include "cc/core/cpu/fast_filter_tiles.h"
#include "cc/core/cpu/fast_indirect.h"
#include "cc/core/cpu/fast_space_to_depth.h"
#include "cc/core/cpu/microkernels.h"
#include "cc/core/cpu/plan.h"

namespace tf_ops {
namespace cpu {

namespace {

using namespace fast;  // fast_common.h

// Packs the filter into the GEMM pass's panel: panel[((grp * blocks + cb) * taps + slot) * rows
// + r][j], as floats or bfloat16 pairs (merged filter rows: row s * depth + r of filter row th
// is row r of the tap in slot th * filter_cols + s), a unit per (group, tap or merged filter
// row, column block). Each unit clears what its rows leave unwritten. Backprop input packs from
// the transposed filter w_t[t][k][ci], except floats, whose rows are transposed straight from
// w[t][ci][k] by 16 x 16 blocks.
template <typename T>
void PackPanel(const GemmPlan& p, const ConvGeometry& g, const T* w, float* packed,
               const ParallelFor& parallel_for) {
  const int64_t taps = g.filter_rows * g.filter_cols;
  const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group();
  const int64_t nb = p.nb, blocks = p.blocks, rows = p.rows, row_floats = p.row_floats;
  const int64_t unit_taps = p.unit_taps, depth = p.depth, src_group = p.src_group;
  const bool forward = p.forward;
  if (p.transpose_in_pack) Note(Path::kInputFilterTransposedInPack);
  const DirectedFilter<T> directed(w, forward || p.transpose_in_pack, taps, FI, K, parallel_for);
  const T* const filter = directed.data();
  const KernelTable& table = Kernels();
  const TransposeFn transpose32 = table.transpose32;
  if (p.transpose_in_pack && src_group >= 16 && p.dst_group >= 16) NoteKernel(transpose32);
  const int64_t pack_units = taps / unit_taps;
  const auto pack = [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t grp = unit / (blocks * pack_units), pu = unit / blocks % pack_units;
      const int64_t cb = unit % blocks;
      const int64_t first = p.merge ? pu * unit_taps : FilterSlot(pu, g.filter_cols, p.reversed);
      float* const out = packed + ((grp * blocks + cb) * taps + first) * rows * row_floats;
      const int64_t width = std::min<int64_t>(nb, p.dst_group - cb * nb);  // valid columns
      // Cleared only where the rows below leave values unwritten: columns past the group's, a
      // padded pixel's channel, the high half of an odd depth's last pair.
      if (width < nb || depth != src_group || rows != src_group) {
        std::fill(out, out + unit_taps * rows * row_floats, 0.0f);
      }
      uint32_t* const out32 = reinterpret_cast<uint32_t*>(out);
      // Slot by slot, so that a pair that straddles two taps gets its low half (pack_halves
      // stores it alone) before its high.
      for (int64_t slot = first; slot < first + unit_taps; ++slot) {
        const int64_t t = FilterSlot(slot, g.filter_cols, p.reversed);
        // Row m = s * depth + r of the unit's panel, column j, is w[t][ci][k] with, forward,
        // (ci, k) = (r, grp*Kg + cb*nb + j) and, backprop input, (cb*nb + j, grp*Kg + r).
        const int64_t m0 = (slot - first) * depth;
        if constexpr (std::is_same_v<T, float>) {
          if (p.transpose_in_pack) {
            TransposeTile(w + (t * FI + cb * nb) * K + grp * Kg, K, width, src_group, out + m0 * nb, nb,
                          transpose32);
            continue;
          }
        }
        const int64_t row_step = forward ? K : FI;  // from row r to row r + 1 of the tap
        const T* const in = forward ? filter + t * FI * K + grp * Kg + cb * nb
                                    : filter + (t * K + grp * Kg) * FI + cb * nb;
        for (int64_t r = 0; r < src_group; ++r) {
          const T* row = in + r * row_step;
          const int64_t m = m0 + r;
          if (p.pairs) {
            // The bits of a bfloat16 are its first (and only) member, a uint16_t.
            table.pack_halves(reinterpret_cast<const uint16_t*>(row), width, out32 + m / 2 * nb, m % 2 == 1);
          } else if constexpr (std::is_same_v<T, float>) {
            std::memcpy(out + m * nb, row, width * sizeof(float));
          } else {
            for (int64_t j = 0; j < width; ++j) out[m * nb + j] = static_cast<float>(row[j]);
          }
        }
      }
    }
  };
  parallel_for(g.groups * blocks * pack_units, 2 * unit_taps * rows * nb, pack);
}

// The indirect pass of strided backprop input over a copy of dy whose columns have the plan's
// zero border (kIndirectBordered), by chunks of images.
template <typename T, typename ColumnFn>
void RunBordered(const GemmPlan& p, const ConvGeometry& g, const T* src, T* dst, const ColumnFn& column,
                 const TileKernel& kernel, GemmAffineNarrowFn narrow, const ParallelFor& parallel_for) {
  Note(Path::kInputBorderedColumns);
  const int64_t channels = p.src_channels;
  const int64_t cols = g.out_cols + p.border.first + p.border.second, row = g.out_cols * channels;
  const int64_t image = g.out_rows * cols * channels;
  const int64_t images = p.bordered_images;
  if (images < g.batch) Note(Path::kInputBorderedChunks);
  Workspace copy_space(images * image * sizeof(T));
  T* const copy = copy_space.data<T>();
  const DimMap bordered = BorderedTransposed(p.dw, p.border);
  const int64_t left = p.border.first * channels;
  for (int64_t n = 0; n < g.batch; n += images) {
    const int64_t count = std::min(images, g.batch - n);
    const T* const from = src + n * g.out_rows * row;
    parallel_for(count * g.out_rows, Cost(2.0 * cols * channels), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        T* const out = copy + r * cols * channels;
        std::fill(out, out + left, T(0.0f));
        std::copy(from + r * row, from + (r + 1) * row, out + left);
        std::fill(out + left + row, out + cols * channels, T(0.0f));
      }
    });
    // A last chunk of fewer images has a layout of its own.
    const IndirectLayout& layout = count == images ? p.indirect : p.bordered_last;
    RunIndirect(layout, count, p.dh, bordered, g.filter_cols, static_cast<int>(p.mr), static_cast<int>(p.nb), copy,
                channels, dst + n * g.in_rows * g.in_cols * p.dst_channels, p.dst_channels, g.groups * p.blocks,
                p.src_group, std::min(p.chunk, p.src_group), column, kernel, narrow, parallel_for);
  }
}

// Runs the GEMM pass `p` plans over g (NHWC): forward reads x and writes y, backprop input
// reads dy and writes dx.
template <typename T>
void RunGemm(const GemmPlan& p, const ConvGeometry& g, const T* w, const T* src, T* dst,
             const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const bool forward = p.forward;
  const int64_t taps = g.filter_rows * g.filter_cols;
  const int64_t FI = g.filter_in_depth, K = g.out_depth, G = g.groups;
  const bool banded = p.algorithm == Algorithm::kBanded || p.algorithm == Algorithm::kBandedMerged;
  if (p.band_copy_too_large) Note(Path::kBandCopyTooLarge);
  if (banded && p.strided_rows) Note(Path::kForwardBandedStridedRows);
  if (p.merge && p.pad_pixels) Note(Path::kBandedPaddedPixels);
  if (p.merge && p.pairs && p.depth % 2 == 1) Note(Path::kBandedMergedStraddling);
  Workspace panel_space(p.panel_floats * sizeof(float));
  const float* panel = panel_space.data<float>();
  if constexpr (std::is_same_v<T, float>) {
    if (p.filter_in_place) {
      Note(banded ? Path::kForwardFilterIsPanel : Path::kForwardFilterInPlace);
      panel = w;
    }
  }
  if (!p.filter_in_place) PackPanel(p, g, w, panel_space.data<float>(), parallel_for);
  const int64_t blocks = p.blocks, nb = p.nb, ldb = p.ldb;
  const auto column = [&](int64_t unit) {
    const int64_t grp = unit / blocks, cb = unit % blocks;
    ColumnBlock col;
    col.src_offset = grp * p.src_group;
    col.dst_offset = grp * p.dst_group + cb * nb;
    col.width = std::min<int64_t>(nb, p.dst_group - cb * nb);
    if (p.filter_in_place) {
      col.panel = panel + col.dst_offset;
      col.tap_stride = FI * K;
    } else {
      col.panel = panel + (grp * blocks + cb) * taps * p.rows * p.row_floats;
      col.tap_stride = p.rows * p.row_floats;
    }
    col.row_floats = ldb;
    return col;
  };
  const GemmKernel& kernels = GemmFor(Kernels(), Kernels().gemm[p.gemm], kind);
  const GemmIndirectFn indirect = kernels.indirect[kind];
  const GemmAffineFn affine = kernels.affine[kind];
  const GemmAffineNarrowFn narrow = kernels.affine_narrow[kind];
  const GemmIndirectInPlaceFn indirect_in_place = kernels.indirect_in_place;
  const GemmAffineInPlaceFn affine_in_place = kernels.affine_in_place;
  const bool in_place = p.filter_in_place;
  const TileKernel kernel = [=](int64_t tiles, int64_t count, const void* const* a, int64_t pixel_step,
                                const float* const* b, int64_t len, int64_t, float* c, int64_t ldc,
                                bool accumulate) {
    if (in_place) {
      if (pixel_step > 0) {
        NoteKernel(affine_in_place);
        return affine_in_place(tiles, count, a, pixel_step, b, ldb, len, c, ldc, accumulate);
      }
      NoteKernel(indirect_in_place);
      return indirect_in_place(count, a, b, ldb, len, c, accumulate);
    }
    if (pixel_step > 0) {
      NoteKernel(affine);
      return affine(tiles, count, a, pixel_step, b, len, c, ldc, accumulate);
    }
    NoteKernel(indirect);
    indirect(count, a, b, len, c, accumulate);
  };
  if (p.pairs) Note(Path::kGemmBf16Pairs);
  const int mr = static_cast<int>(p.mr), nbi = static_cast<int>(nb);
  switch (p.algorithm) {
    case Algorithm::kBanded:
    case Algorithm::kBandedMerged:
      Note(forward ? (p.merge ? Path::kForwardBandedMerged : Path::kForwardBanded)
                   : (p.merge ? Path::kInputBandedMerged : Path::kInputBanded));
      return RunBanded(p.band, g.batch, p.dh, p.dw, g.filter_cols, p.reversed, p.merge, mr, nbi, src,
                       p.src_channels, p.merge && p.pad_pixels, dst, p.dst_channels, G * blocks, p.depth,
                       std::min(p.chunk, p.depth), column, affine, indirect, narrow, parallel_for);
    case Algorithm::kPointwise: {
      Note(forward ? Path::kForwardPointwise : Path::kInputPointwise);
      const int64_t pixels = g.batch * g.in_rows * g.in_cols;
      return RunIndirect(p.indirect, 1, ForwardDim(1, 1, 1, 0, 1, 1), ForwardDim(pixels, pixels, 1, 0, 1, 1), 1, mr, nbi,
                         src, p.src_channels, dst, p.dst_channels, G * blocks, p.src_group,
                         std::min(p.chunk, p.src_group), column, kernel, narrow, parallel_for);
    }
    case Algorithm::kIndirectBordered:
      Note(forward ? Path::kForwardIndirect : Path::kInputIndirect);
      return RunBordered(p, g, src, dst, column, kernel, narrow, parallel_for);
    default:
      Note(forward ? Path::kForwardIndirect : Path::kInputIndirect);
      return RunIndirect(p.indirect, g.batch, p.dh, p.dw, g.filter_cols, mr, nbi, src, p.src_channels, dst, p.dst_channels,
                         G * blocks, p.src_group, std::min(p.chunk, p.src_group), column, kernel, narrow,
                         parallel_for);
  }
}

// A strided forward or backprop-input pass as the stride-1 pass over a space-to-depth copy of
// x (forward) or into one of dx, by chunks of images (plan.copy_images), NHWC: Winograd
// (kWinogradSpaceToDepth) or the plan's GEMM pass (kSpaceToDepth) over the copy.
template <typename T>
void SpaceToDepthNhwc(const Plan& plan, const ConvGeometry& g, bool forward, const T* w, const T* src, T* dst,
                      const ParallelFor& parallel_for) {
  const bool winograd = plan.pass == Algorithm::kWinograd;
  Note(forward ? Path::kForwardSpaceToDepth : Path::kInputSpaceToDepth);
  if (winograd) Note(forward ? Path::kForwardWinogradPhases : Path::kInputWinogradPhases);
  ConvGeometry d = plan.stride1;  // its batch: the chunk's, set below
  const int64_t image = d.in_rows * d.in_cols * d.in_depth;
  const int64_t chunk = std::min(plan.copy_images, g.batch);  // (an NCHW pass's last chunk may be smaller)
  if (chunk < g.batch) Note(Path::kSpaceToDepthChunks);
  Workspace w_space(d.filter_elements() * sizeof(T)), copy_space(chunk * image * sizeof(T));
  T* const wd = w_space.data<T>();
  T* const copy = copy_space.data<T>();
  SpaceToDepthFilter(g, d, w, wd, parallel_for);
  const int64_t x_image = g.in_rows * g.in_cols * g.in_depth;
  const int64_t y_image = g.out_rows * g.out_cols * g.out_depth;
  for (int64_t n = 0; n < g.batch; n += chunk) {
    ConvGeometry gc = g;
    gc.batch = d.batch = std::min(chunk, g.batch - n);
    const auto pass = [&](const T* s, T* t) {
      if (winograd) {
        return WinogradNhwc(WinogradOfBatch(plan, d.batch), d, forward, wd, s, t, parallel_for);
      }
      RunGemm(GemmOfBatch(plan, d.batch), d, wd, s, t, parallel_for);
    };
    if (forward) {
      SpaceToDepthCopy(gc, d, src + n * x_image, copy, parallel_for);
      pass(copy, dst + n * y_image);
      ZeroUnreachedOutputs(gc, dst + n * y_image);
    } else {
      pass(src + n * y_image, copy);
      DepthToSpaceCopy(gc, d, copy, dst + n * x_image, parallel_for);
    }
  }
}

// Whether element v is a zero (of either sign; a NaN is not).
template <typename T>
bool IsZero(T v) {
  return static_cast<float>(v) == 0.0f;
}

// After a Winograd pass (NHWC, one chunk of images): every output whose window, in its group,
// reads only zeros of src is set to an exact zero. The direct sum of such an output is 0, but
// Winograd's transforms mix a tile's other pixels into it and leave rounding noise (about 1e-7 of
// the tile's magnitude), which a following ReLU would let through where a region of the input
// is dead (a ReLU'd zero block). Forward: y(n, oh, ow) reads x at (oh * sh - pad_top + kh * dh,
// ow * sw - pad_left + kw * dw); backprop input: dx(n, ih, iw) reads dy at the (oh, ow) with
// ih = oh * sh - pad_top + kh * dh (and the same for columns). A first pass on the calling thread
// reads the first value of each source pixel's group: where none is zero, nothing is dead and
// the pass ends there. Otherwise every window is read, on the pool, up to its first nonzero value
// (in full only where it is dead: at most 1 / (channels a group) of the convolution's multiplies).
template <typename T>
void ZeroDeadWindows(const ConvGeometry& g, bool forward, const T* src, T* dst, const ParallelFor& parallel_for) {
  const int64_t G = g.groups;
  const int64_t src_rows = forward ? g.in_rows : g.out_rows, src_cols = forward ? g.in_cols : g.out_cols;
  const int64_t dst_rows = forward ? g.out_rows : g.in_rows, dst_cols = forward ? g.out_cols : g.in_cols;
  const int64_t src_c = forward ? g.in_depth : g.out_depth, dst_c = forward ? g.out_depth : g.in_depth;
  const int64_t src_group = src_c / G, dst_group = dst_c / G;
  // The source index a tap reads from destination index `at` along one dimension, or -1.
  const auto source = [forward](int64_t at, int64_t tap, int64_t stride, int64_t dilation, int64_t pad,
                                int64_t size) -> int64_t {
    if (forward) {
      const int64_t i = at * stride - pad + tap * dilation;
      return i >= 0 && i < size ? i : -1;
    }
    const int64_t num = at + pad - tap * dilation;
    if (num < 0 || num % stride != 0 || num / stride >= size) return -1;
    return num / stride;
  };
  // Whether the window of output (n, r, c) in group grp reads only zeros (or only padding).
  const auto dead = [&](int64_t n, int64_t r, int64_t c, int64_t grp) {
    for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
      const int64_t i = source(r, kh, g.stride_rows, g.dilation_rows, g.pad_top, src_rows);
      if (i < 0) continue;
      for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
        const int64_t j = source(c, kw, g.stride_cols, g.dilation_cols, g.pad_left, src_cols);
        if (j < 0) continue;
        const T* pixel = src + ((n * src_rows + i) * src_cols + j) * src_c + grp * src_group;
        for (int64_t k = 0; k < src_group; ++k) {
          if (!IsZero(pixel[k])) return false;
        }
      }
    }
    return true;
  };
  // A window of zeros holds a pixel whose group starts with a zero: where no pixel's does, none
  // is dead (a window of padding alone gives exact zeros without this pass).
  bool suspect = false;
  const int64_t pixels = g.batch * src_rows * src_cols;
  for (int64_t p = 0; p < pixels && !suspect; ++p) {
    for (int64_t grp = 0; grp < G; ++grp) suspect = suspect || IsZero(src[p * src_c + grp * src_group]);
  }
  if (!suspect) return;
  parallel_for(g.batch * dst_rows, dst_cols * g.filter_rows * g.filter_cols * src_group * G + 1,
               [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t n = u / dst_rows, r = u % dst_rows;
      for (int64_t c = 0; c < dst_cols; ++c) {
        for (int64_t grp = 0; grp < G; ++grp) {
          if (!dead(n, r, c, grp)) continue;
          T* const out = dst + ((n * dst_rows + r) * dst_cols + c) * dst_c + grp * dst_group;
          std::fill(out, out + dst_group, T(0.0f));
        }
      }
    }
  });
}

// The plan's NHWC pass of forward (reads x, writes y) or backprop input (reads dy, writes dx)
// over g, one chunk of images.
template <typename T>
void RunPass(const Plan& plan, const ConvGeometry& g, bool forward, const T* w, const T* src, T* dst,
             const ParallelFor& parallel_for) {
  switch (plan.algorithm) {
    case Algorithm::kWinograd:
      WinogradNhwc(WinogradOfBatch(plan, g.batch), g, forward, w, src, dst, parallel_for);
      return ZeroDeadWindows(g, forward, src, dst, parallel_for);
    case Algorithm::kWinogradSpaceToDepth:
      SpaceToDepthNhwc(plan, g, forward, w, src, dst, parallel_for);
      return ZeroDeadWindows(g, forward, src, dst, parallel_for);
    case Algorithm::kSpaceToDepth:
      return SpaceToDepthNhwc(plan, g, forward, w, src, dst, parallel_for);
    case Algorithm::kColumnsMerged:
      Note(Path::kInputColumnsMerged);
      return BackpropInputColumnsMerged(plan.columns_merged, g, w, src, dst, parallel_for);
    case Algorithm::kDepthwiseRows:
      Note(forward ? Path::kForwardDepthwise : Path::kInputDepthwise);
      return DepthwiseRowsNhwc(plan.depthwise_rows, g, w, src, dst, parallel_for);
    default:
      return RunGemm(GemmOfBatch(plan, g.batch), g, w, src, dst, parallel_for);
  }
}

// Runs `nhwc(gc, src_images, dst_images)` on chunks of `images` images of an NCHW pass, through
// NHWC copies (gc is the geometry with the chunk's batch).
template <typename T, typename Fn>
void InNhwcChunks(const ConvGeometry& g, int64_t images, const T* src, int64_t src_c, int64_t src_hw, T* dst,
                  int64_t dst_c, int64_t dst_hw, const ParallelFor& parallel_for, const Fn& nhwc) {
  const int64_t chunk = std::min(images, g.batch);
  Note(Path::kNchwCopies);
  if (chunk < g.batch) Note(Path::kNchwChunks);
  Workspace src_space(chunk * src_c * src_hw * sizeof(T)), dst_space(chunk * dst_c * dst_hw * sizeof(T));
  T* const src_nhwc = src_space.data<T>();
  T* const dst_nhwc = dst_space.data<T>();
  for (int64_t n = 0; n < g.batch; n += chunk) {
    ConvGeometry gc = g;
    gc.batch = std::min(chunk, g.batch - n);
    Transpose(src + n * src_c * src_hw, gc.batch, src_c, src_hw, src_nhwc, parallel_for);
    nhwc(gc, src_nhwc, dst_nhwc);
    Transpose(dst_nhwc, gc.batch, dst_hw, dst_c, dst + n * dst_c * dst_hw, parallel_for);
  }
}

// Forward (reads x, writes y) or backprop input (reads dy, writes dx) in either layout.
template <typename T>
void RunForwardOrInput(const Plan& plan, const ConvGeometry& g, bool forward, const T* w, const T* src,
                       T* dst, const ParallelFor& parallel_for) {
  if (plan.layout == Layout::kNHWC) return RunPass(plan, g, forward, w, src, dst, parallel_for);
  int64_t src_c = g.in_depth, src_hw = g.in_rows * g.in_cols;
  int64_t dst_c = g.out_depth, dst_hw = g.out_rows * g.out_cols;
  if (!forward) std::swap(src_c, dst_c), std::swap(src_hw, dst_hw);
  InNhwcChunks(g, plan.nchw_images, src, src_c, src_hw, dst, dst_c, dst_hw, parallel_for,
               [&](const ConvGeometry& gc, const T* s, T* d) { RunPass(plan, gc, forward, w, s, d, parallel_for); });
}

// Backprop filter: one pass of the plan's algorithm over a chunk of images (NHWC), adding to
// acc (or writing it, `first`).
template <typename T, typename Wino>
void FilterPass(const Plan& plan, const ConvGeometry& gp, const T* x, const T* dy, float* acc, bool first,
                Wino* wino, const ParallelFor& parallel_for) {
  switch (plan.algorithm) {
    case Algorithm::kFilterWinograd:
      return wino->Accumulate(gp, x, dy);
    case Algorithm::kFilterDepthwise:
      return FilterDepthwiseNhwc(gp, plan.depthwise_filter, x, dy, acc, parallel_for);
    case Algorithm::kFilterTiles:
      return FilterTilesNhwc(gp, plan.tiles, x, dy, acc, first, parallel_for);
    default:
      return FilterGemmNhwc(gp, plan.filter, Kernels().gemm[plan.filter_gemm], x, dy, acc, first, parallel_for);
  }
}

// The chunks of images of a filter gradient through NHWC copies (NCHW) and float copies
// (plan.widen), each chunk one FilterPass.
template <typename T, typename Wino>
void FilterChunks(const Plan& plan, const ConvGeometry& g, const T* x, const T* dy, float* acc, Wino* wino,
                  const ParallelFor& parallel_for) {
  const bool nchw = plan.layout == Layout::kNCHW;
  const int64_t in_hw = g.in_rows * g.in_cols, out_hw = g.out_rows * g.out_cols;
  const int64_t x_chunk = plan.chunk_images * in_hw * g.in_depth;
  const int64_t dy_chunk = plan.chunk_images * out_hw * g.out_depth;
  std::optional<Workspace> x_space, dy_space, xf_space, dyf_space;
  if (nchw) {
    x_space.emplace(x_chunk * sizeof(T));
    dy_space.emplace(dy_chunk * sizeof(T));
  }
  if (plan.widen) {
    Note(Path::kFilterWidened);
    if (plan.chunk_images < g.batch) Note(Path::kFilterWidenedChunks);
    xf_space.emplace(x_chunk * sizeof(float));
    dyf_space.emplace(dy_chunk * sizeof(float));
  }
  for (int64_t n = 0; n < g.batch; n += plan.chunk_images) {
    ConvGeometry gp = g;
    gp.batch = std::min(plan.chunk_images, g.batch - n);
    const T* xp = x + n * in_hw * g.in_depth;
    const T* dyp = dy + n * out_hw * g.out_depth;
    if (nchw) {
      Transpose(xp, gp.batch, g.in_depth, in_hw, x_space->data<T>(), parallel_for);
      Transpose(dyp, gp.batch, g.out_depth, out_hw, dy_space->data<T>(), parallel_for);
      xp = x_space->data<T>(), dyp = dy_space->data<T>();
    }
    if constexpr (sizeof(T) == 2) {
      if (plan.widen) {
        float* const xf = xf_space->data<float>();
        float* const dyf = dyf_space->data<float>();
        Widen(xp, gp.batch * in_hw * g.in_depth, xf, parallel_for);
        Widen(dyp, gp.batch * out_hw * g.out_depth, dyf, parallel_for);
        FilterGemmNhwc(gp, plan.filter, Kernels().gemm[plan.filter_gemm], xf, dyf, acc, /*first=*/n == 0,
                       parallel_for);
        continue;
      }
    }
    FilterPass(plan, gp, xp, dyp, acc, /*first=*/n == 0, wino, parallel_for);
  }
}

// Writes exact zeros into the sums acc[tap][FI][K] of the filter taps through which no output
// pixel reads inside the input (every product padding), as the direct sums give them:
// Winograd's transforms leave rounding noise there.
void ZeroUnreachedTaps(const ConvGeometry& g, float* acc) {
  const int64_t tap = g.filter_in_depth * g.out_depth;
  for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
    int64_t lo_h, hi_h;
    ReadRange(g.out_rows, g.in_rows, g.stride_rows, g.pad_top, g.dilation_rows, kh, &lo_h, &hi_h);
    for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
      int64_t lo_w, hi_w;
      ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo_w, &hi_w);
      if (hi_h > lo_h && hi_w > lo_w) continue;
      Note(Path::kFilterWinogradUnreachedTaps);
      float* const sums = acc + (kh * g.filter_cols + kw) * tap;
      std::fill(sums, sums + tap, 0.0f);
    }
  }
}

// Backprop filter in either layout: the plan's passes into float sums (per slice), then the
// slices added in order into dw.
template <typename T>
void RunFilter(const Plan& plan, const ConvGeometry& g, Layout layout, const T* x, const T* dy, T* dw,
               const ParallelFor& parallel_for) {
  const int64_t size = g.filter_elements(), slices = plan.slices;
  const bool winograd = plan.algorithm == Algorithm::kFilterWinograd;
  std::optional<Workspace> acc_space;
  float* acc = nullptr;
  if constexpr (std::is_same_v<T, float>) acc = dw;
  if (!plan.sums_in_output) acc = acc_space.emplace(slices * size * sizeof(float)).template data<float>();
  // Winograd (WinogradFilter) and the tiles pass on AMX write all of it.
  if (!winograd && (plan.algorithm != Algorithm::kFilterTiles || !plan.tiles.amx) &&
      !test_switches.planted_unwritten_workspace.load(std::memory_order_relaxed)) {
    std::fill(acc, acc + slices * size, 0.0f);
  }
  ConvGeometry gc = g;
  gc.batch = plan.chunk_images;
  std::unique_ptr<WinogradFilter<T>> wino;
  if (winograd) wino = std::make_unique<WinogradFilter<T>>(plan.winograd_filter, gc, acc, parallel_for);
  if (layout == Layout::kNHWC && !plan.widen) {
    FilterPass(plan, g, x, dy, acc, /*first=*/true, wino.get(), parallel_for);
  } else {
    FilterChunks(plan, g, x, dy, acc, wino.get(), parallel_for);
  }
  if (winograd) {
    wino->Finish();
    ZeroUnreachedTaps(g, acc);
  }
  if (plan.sums_in_output) return;
  // The slices in order, each element's sum the same however the elements are shared out.
  constexpr int64_t kBlock = 256;
  parallel_for(CeilDiv(size, kBlock), Cost(2.0 * slices * kBlock), [&](int64_t begin, int64_t end) {
    float sums[kBlock];
    for (int64_t i0 = begin * kBlock; i0 < std::min(size, end * kBlock); i0 += kBlock) {
      const int64_t n = std::min(kBlock, size - i0);
      std::copy(acc + i0, acc + i0 + n, sums);
      for (int64_t s = 1; s < slices; ++s) {
        for (int64_t i = 0; i < n; ++i) sums[i] += acc[s * size + i0 + i];
      }
      WriteOut(sums, n, dw + i0);
    }
  });
}

}  // namespace

template <typename T>
RunResult RunPlan(const Plan& plan, const ConvGeometry& g, const T* a, const T* b, T* out,
                  const ParallelFor& parallel_for, const WorkspaceFn& workspace) {
  if constexpr (KindOf<T>() < 0) {
    return RunResult::kDirect;
  } else {
    if (plan.algorithm == Algorithm::kDirect) return RunResult::kDirect;
    // The passes run the process's micro-kernels, which the plan's tile indices must name.
    if (plan.table != &Kernels()) throw std::logic_error("tf_ops: a plan made for another kernel table");
    const int64_t bytes = ArenaBytes(plan.workspace_bytes);
    std::unique_ptr<char[]> heap;
    void* base = nullptr;
    if (bytes > 0) {
      if (workspace) {
        base = workspace(bytes);
      } else {
        heap.reset(new (std::nothrow) char[bytes]);
        base = heap.get();
      }
      if (base == nullptr) return RunResult::kNoWorkspace;
    }
    WorkspaceArena arena(base, bytes);  // the Workspaces take from it
    NoteAlgorithm(static_cast<int>(plan.algorithm));
    if (plan.pass != plan.algorithm) NoteAlgorithm(static_cast<int>(plan.pass));
    if (plan.direction == Direction::kBackpropFilter) {
      RunFilter(plan, g, plan.layout, a, b, out, parallel_for);
    } else {
      RunForwardOrInput(plan, g, plan.direction == Direction::kForward, b, a, out, parallel_for);
    }
    return RunResult::kRan;
  }
}

#define TF_OPS_INSTANTIATE(T)                                                                  \
  template RunResult RunPlan<T>(const Plan&, const ConvGeometry&, const T*, const T*, T*,      \
                                const ParallelFor&, const WorkspaceFn&);
TF_OPS_ELEMENT_TYPES(TF_OPS_INSTANTIATE)
#undef TF_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_ops
