// The banded pass of the fast CPU kernels: forward and stride-1 backprop input through
// zero-padded copies of bands of source rows. Internal to cc/core/cpu; included by
// conv_fast.cc.
#ifndef TF_OPS_CC_CORE_CPU_FAST_BANDED_H_
#define TF_OPS_CC_CORE_CPU_FAST_BANDED_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"
#include "cc/core/cpu/fast_indirect.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// Computed pixels a band of a banded pass holds, at least (whole rows).
inline constexpr int64_t kBandPixels = 256;
// Forward passes, and stride-1 backprop-input passes, whose reduction depth per tap times
// column block width is at most this run banded. Strided forward passes of longer tiles run
// slower banded than indirect, but on AMX tiles (plan.cc's strided_rows).
inline constexpr int64_t kBandedTile = 32 * 32;

// Where an indirect pass packs the filter of tap t (row-major over filter_cols columns): at
// slot t, or, `reversed`, with the columns of each filter row in reverse order (so that
// slots run along the source columns a backprop-input pass's taps read). Its own inverse: the
// tap packed at slot s is FilterSlot(s, filter_cols, reversed).
inline int64_t FilterSlot(int64_t t, int64_t filter_cols, bool reversed) {
  const int64_t tw = t % filter_cols;
  return reversed ? t - tw + filter_cols - 1 - tw : t;
}

// Source elements a banded pass's per-thread copy may hold at most (4 MiB of floats). Past
// it (dilations or strides that spread the taps far apart over long rows), the pass runs
// indirect, which reads only the pixels the taps reach.
inline constexpr int64_t kMaxBandCopy = int64_t{1} << 20;

// The bands of a banded pass (see RunBanded) and the copy each needs.
struct BandPlan {
  std::vector<int64_t> taps_h, base_h, taps_w, base_w;  // candidate taps of class 0
  int64_t low_h = 0, low_w = 0;    // the lowest source row and column offsets a tap reads
  int64_t span_h = 0, span_w = 0;  // source rows and columns the taps of one pixel span
  int64_t step_h = 1, step_w = 1;  // source pixels per computed pixel
  int64_t pitch = 0;               // pixels per row of a band's copy
  int64_t band = 0, bands = 0;
  bool split = false;  // bands narrowed for enough work units
  // Each band as one affine run over its copy's whole width (see RunBanded), and the pixels
  // past a band's copy that run's last tile may read.
  bool whole_runs = false;
  int64_t copy_slack = 0;
  // Whole tiles per computed row, and pixels left over per row.
  int64_t row_tiles = 0, row_rest = 0;
  int64_t max_tiles = 0;  // tiles of a band, left-over ones included
  // Pixels of a band's copy: in double, as spread-out taps can make the product overflow;
  // exact for every plan BandCopyFits admits.
  double copy_pixels = 0;
};

inline BandPlan PlanBands(int64_t batch, const DimMap& dh, const DimMap& dw,
                          int64_t column_blocks, int mr, bool whole_runs) {
  BandPlan p;
  dh.Candidates(0, &p.taps_h, &p.base_h);
  dw.Candidates(0, &p.taps_w, &p.base_w);
  p.low_h = *std::min_element(p.base_h.begin(), p.base_h.end());
  p.low_w = *std::min_element(p.base_w.begin(), p.base_w.end());
  p.span_h = *std::max_element(p.base_h.begin(), p.base_h.end()) - p.low_h + 1;
  p.span_w = *std::max_element(p.base_w.begin(), p.base_w.end()) - p.low_w + 1;
  p.step_h = dh.mult(), p.step_w = dw.mult();
  p.pitch = (dw.size - 1) * p.step_w + p.span_w;
  // Band height: about kBandPixels computed pixels, fewer rows while that leaves fewer than
  // kMinUnits units. Fixed by the shape, so the split does not depend on the thread count.
  p.band = std::min(dh.size, CeilDiv(kBandPixels, dw.size));
  while (p.band > 1 && batch * CeilDiv(dh.size, p.band) * column_blocks < kMinUnits) {
    p.split = true;
    p.band = CeilDiv(p.band, 2);
  }
  p.bands = CeilDiv(dh.size, p.band);
  p.whole_runs = whole_runs && p.step_h == 1 && p.step_w == 1;
  if (p.whole_runs) {
    // Its last tile reads at most mr pixels past the band's last computed one, each tap at
    // most span_w - 1 pixels right of the copy's last row.
    p.max_tiles = CeilDiv((p.band - 1) * p.pitch + dw.size, mr);
    p.copy_slack = mr + p.span_w;
  } else {
    p.row_tiles = dw.size / mr, p.row_rest = dw.size - p.row_tiles * mr;
    p.max_tiles = p.band * p.row_tiles + CeilDiv(p.band * p.row_rest, mr);
  }
  p.copy_pixels = ((p.band - 1.0) * p.step_h + p.span_h) * p.pitch;
  return p;
}

// Whether the copy of a banded pass over `channels` source channels stays within
// kMaxBandCopy elements.
inline bool BandCopyFits(const BandPlan& p, int64_t channels) {
  return p.copy_pixels * channels <= kMaxBandCopy;
}

// Copies n pixels of `channels` elements each (Channels of them, where not 0) into pixels
// of one element more, that one zero.
template <int Channels, typename T>
void PadPixelsOf(const T* in, int64_t n, int64_t channels, T* out) {
  const int64_t c = Channels > 0 ? Channels : channels;
  if constexpr (Channels == 3 && sizeof(T) == 2) {
    // Three 16-bit channels (an RGB image's): each pixel as one 64-bit word read from its
    // first channel, the word's last element (the next pixel's first channel, read in place)
    // cleared; the last pixel below, as it has no next one to read.
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "first element in the low bits");
    for (; n > 1; --n, in += 3, out += 4) {
      uint64_t word;
      std::memcpy(&word, in, 8);
      word &= 0xFFFFFFFFFFFFull;
      std::memcpy(static_cast<void*>(out), &word, 8);
    }
  }
  for (int64_t i = 0; i < n; ++i, in += c, out += c + 1) {
#pragma GCC unroll 16
    for (int64_t e = 0; e < c; ++e) out[e] = in[e];
    out[c] = T(0.0f);
  }
}

// The same, unrolled for the channel counts a padded pixel mostly has: with a count known
// only at run time, the compiler makes each pixel's copy a call to memcpy.
template <typename T>
void PadPixels(const T* in, int64_t n, int64_t channels, T* out) {
  switch (channels) {
    case 1: return PadPixelsOf<1>(in, n, channels, out);
    case 3: return PadPixelsOf<3>(in, n, channels, out);
    case 5: return PadPixelsOf<5>(in, n, channels, out);
    case 7: return PadPixelsOf<7>(in, n, channels, out);
    default: return PadPixelsOf<0>(in, n, channels, out);
  }
}

// The constants of a banded pass (RunBanded's arguments, and what it derives from them).
template <typename T>
struct BandedPass {
  const BandPlan& plan;
  const DimMap& dh;
  const DimMap& dw;
  int mr, nb;
  const T* src;
  int64_t src_channels;
  bool pad_pixels;
  T* dst;
  int64_t dst_channels;
  int64_t depth, chunk;
  GemmAffineFn affine;
  GemmIndirectFn indirect;
  GemmAffineNarrowFn narrow;
  int64_t copy_channels = 0;  // per pixel of the copy: src_channels and the padding zero
  // Tap t = (a, b): offset from the computed pixel's position in the copy, and filter slot;
  // merged, one tap per filter row, at its leftmost column.
  std::vector<int64_t> tap_offset{}, tap_slot{};
  int64_t taps = 0, chunks = 0;

  // Where computed pixel (i, j) of a band reads tap 0, in elements of the copy.
  int64_t At(int64_t i, int64_t j) const { return (i * plan.step_h * plan.pitch + j * plan.step_w) * copy_channels; }
};

// Copies the source rows of band i0 (rows computed rows) of image n into `copy`: copy row r is
// source row i0 * step_h + low_h + r, columns from low_w; zeros outside the source and in the
// slack past the copy.
template <typename T>
void CopyBand(const BandedPass<T>& p, int64_t n, int64_t i0, int64_t rows, T* copy) {
  const BandPlan& plan = p.plan;
  const int64_t pitch = plan.pitch, low_w = plan.low_w, copy_channels = p.copy_channels;
  const int64_t src_channels = p.src_channels;
  const int64_t copy_rows = (rows - 1) * plan.step_h + plan.span_h;
  const int64_t c0 = std::max<int64_t>(0, low_w), c1 = std::min(p.dw.src_size, low_w + pitch);
  for (int64_t r = 0; r < copy_rows; ++r) {
    T* out = copy + r * pitch * copy_channels;
    const int64_t sr = i0 * plan.step_h + plan.low_h + r;
    if (sr < 0 || sr >= p.dh.src_size || c1 <= c0) {
      std::fill(out, out + pitch * copy_channels, T(0.0f));
      continue;
    }
    const T* in = p.src + (n * p.dh.src_size + sr) * p.dw.src_size * src_channels;
    std::fill(out, out + (c0 - low_w) * copy_channels, T(0.0f));
    T* const inside = out + (c0 - low_w) * copy_channels;
    if (!p.pad_pixels) {
      std::copy(in + c0 * src_channels, in + c1 * src_channels, inside);
    } else {
      PadPixels(in + c0 * src_channels, c1 - c0, src_channels, inside);
    }
    std::fill(out + (c1 - low_w) * copy_channels, out + pitch * copy_channels, T(0.0f));
  }
  T* const slack = copy + copy_rows * pitch * copy_channels;
  std::fill(slack, slack + plan.copy_slack * copy_channels, T(0.0f));
}

// A band of one column block: its rows, where its results go in dst (out0: its first row), and
// how (`narrowed`: 16-bit rounded by `narrow`; `in_place`: whole rows' tiles straight to dst).
struct BandBlock {
  int64_t rows = 0;
  bool narrowed = false, in_place = false;
};

// Computes column block `col` of a band (copied into `copy`) by reduction chunks: its rows'
// whole tiles (into dst or cbuf), its left-over pixels (into cbuf past the rows' tiles), or
// with whole runs the band as one run into cbuf.
template <typename T>
void BandChunks(const BandedPass<T>& p, const BandBlock& bb, const ColumnBlock& col, const T* copy, T* out0,
                float* cbuf, const void** a, const float** b) {
  const BandPlan& plan = p.plan;
  const int64_t mr = p.mr, nb = p.nb, taps = p.taps, copy_channels = p.copy_channels, rows = bb.rows;
  const int64_t row_tiles = plan.row_tiles, row_rest = plan.row_rest, step_w = plan.step_w;
  const int64_t rest = rows * row_rest;  // left-over pixels of the band
  float* const rest_c = cbuf + rows * row_tiles * mr * nb;
  const bool one_tile_rows = row_tiles == 1 && row_rest == 0;
  for (int64_t k = 0; k < p.chunks; ++k) {
    const int64_t k0 = k * p.chunk, len = std::min(p.chunk, p.depth - k0);
    for (int64_t t = 0; t < taps; ++t) b[t] = col.panel + p.tap_slot[t] * col.tap_stride + k0 * col.row_floats;
    const T* const base = copy + col.src_offset + k0;
    if (plan.whole_runs) {
      for (int64_t t = 0; t < taps; ++t) a[t] = base + p.tap_offset[t];
      p.affine(CeilDiv((rows - 1) * plan.pitch + p.dw.size, mr), taps, a, copy_channels, b, len, cbuf, nb, k > 0);
      continue;
    }
    if (bb.narrowed && one_tile_rows) {
      // Rows of one tile each, their results one after another in dst: the band in one
      // call, which pairs the tiles of two rows.
      for (int64_t t = 0; t < taps; ++t) a[t] = base + p.tap_offset[t];
      p.narrow(rows, taps, a, step_w * copy_channels, p.At(1, 0), b, len, out0, p.dst_channels);
      continue;
    }
    for (int64_t i = 0; i < rows && row_tiles > 0; ++i) {
      for (int64_t t = 0; t < taps; ++t) a[t] = base + p.At(i, 0) + p.tap_offset[t];
      T* const out = out0 + i * p.dw.size * p.dst_channels;
      if (bb.narrowed) {
        p.narrow(row_tiles, taps, a, step_w * copy_channels, mr * step_w * copy_channels, b, len, out,
                 p.dst_channels);
        continue;
      }
      float* c = cbuf + i * row_tiles * mr * nb;
      int64_t ldc = nb;
      if constexpr (std::is_same_v<T, float>) {
        if (bb.in_place) c = out, ldc = p.dst_channels;
      }
      p.affine(row_tiles, taps, a, step_w * copy_channels, b, len, c, ldc, k > 0);
    }
    // Left-over pixel q is (q / row_rest, row_tiles * mr + q % row_rest); a tile's pixels
    // past the last repeat the first.
    for (int64_t q0 = 0; q0 < rest; q0 += mr) {
      for (int64_t m = 0; m < mr; ++m) {
        const int64_t q = q0 + m < rest ? q0 + m : q0;
        const T* const src = base + p.At(q / row_rest, row_tiles * mr + q % row_rest);
        for (int64_t t = 0; t < taps; ++t) a[t * mr + m] = src + p.tap_offset[t];
      }
      p.indirect(taps, a, b, len, rest_c + q0 * nb, k > 0);
    }
  }
}

// Writes the results of a band's column block that BandChunks left in cbuf to dst.
template <typename T>
void WriteBand(const BandedPass<T>& p, const BandBlock& bb, const ColumnBlock& col, const float* cbuf, T* out0) {
  const BandPlan& plan = p.plan;
  const int64_t mr = p.mr, nb = p.nb, row_tiles = plan.row_tiles, row_rest = plan.row_rest;
  const float* const rest_c = cbuf + bb.rows * row_tiles * mr * nb;
  // Whole runs over every channel in one column block: a computed row's results lie in cbuf
  // as its pixels in dst, and go out in one call.
  const bool whole_rows = plan.whole_runs && col.width == nb && p.dst_channels == nb;
  if (whole_rows) Note(Path::kBandedWholeRowsOut);
  for (int64_t i = 0; i < bb.rows; ++i) {
    T* const out = out0 + i * p.dw.size * p.dst_channels;
    if (whole_rows) {
      WriteOut(cbuf + i * plan.pitch * nb, p.dw.size * nb, out);
      continue;
    }
    for (int64_t j = bb.in_place ? row_tiles * mr : 0; j < p.dw.size; ++j) {
      const float* c = plan.whole_runs     ? cbuf + (i * plan.pitch + j) * nb
                       : j < row_tiles * mr ? cbuf + (i * row_tiles * mr + j) * nb
                                            : rest_c + (i * row_rest + j - row_tiles * mr) * nb;
      WriteOut(c, col.width, out + j * p.dst_channels);
    }
  }
}

// Runs a forward pass, or a stride-1 backprop-input pass, through zero-padded copies of
// bands of source rows, as `plan` (PlanBands of the same batch, maps, column blocks, mr and
// whole_runs, within BandCopyFits) lays them out. In the copy every computed pixel reads
// each tap at a fixed offset from its own position, with no bounds to check; taps that
// read padding multiply zeros. A work unit is (image, band of computed rows, column block);
// its copy (all source channels) lives in per-thread scratch, and is kept for the thread's
// next unit of the same band.
//
// Each computed row is an affine run of its whole tiles, written in place where whole column
// blocks allow (floats, or through `narrow` as RunIndirect's), and the pixels left over at
// the rows' ends go through the indirect kernel, `mr` of them per tile, pointers straight
// into the copy. Stride 1 too: a whole band, row ends included, as one run through a result
// buffer spares the left-over tiles, but copying its results out costs more.
//
// With plan.whole_runs (asked for on AMX tiles, where an indirect tile costs a copy of its
// pixels; taken at stride 1), a band is instead one affine run through a result buffer, its
// computed rows a copy row apart: the copy's columns past the computed ones (span_w - 1 per
// row) are computed too and dropped, and no pixel goes through the indirect kernel, even
// in rows narrower than a tile.
//
// Arguments as RunIndirect's, but the packed filter of each tap is at
// FilterSlot(tap, filter_cols, reversed_cols): slots run along the source columns the taps
// read. With `merge_cols`, the column taps of a filter row read neighbouring pixels of the
// copy, whose channels (all of the reduction) then run on contiguously into the next pixel's,
// and the packed filter of neighbouring slots likewise: each filter row is then a single tap
// of filter_cols * depth. With `pad_pixels`, each pixel of the copy holds a zero after the
// src_channels of the source (depth counts it too, and the packed filter has a zero row
// there).
template <typename T, typename ColumnFn>
void RunBanded(const BandPlan& plan, int64_t batch, const DimMap& dh, const DimMap& dw,
               int64_t filter_cols,
               bool reversed_cols, bool merge_cols, int mr, int nb, const T* src,
               int64_t src_channels, bool pad_pixels, T* dst, int64_t dst_channels,
               int64_t column_blocks,
               int64_t depth, int64_t chunk, const ColumnFn& column, GemmAffineFn affine,
               GemmIndirectFn indirect, GemmAffineNarrowFn narrow,
               const ParallelFor& parallel_for) {
  if (merge_cols) depth *= filter_cols, chunk = depth;
  BandedPass<T> p{plan, dh, dw, mr, nb, src, src_channels, pad_pixels, dst, dst_channels, depth, chunk,
                  affine, indirect, narrow};
  p.copy_channels = src_channels + (pad_pixels ? 1 : 0);
  for (size_t a = 0; a < plan.taps_h.size(); ++a) {
    for (size_t b = 0; b < (merge_cols ? 1 : plan.taps_w.size()); ++b) {
      const int64_t tw = merge_cols ? (reversed_cols ? filter_cols - 1 : 0) : plan.taps_w[b];
      const int64_t col = merge_cols ? plan.low_w : plan.base_w[b];
      p.tap_offset.push_back(((plan.base_h[a] - plan.low_h) * plan.pitch + col - plan.low_w) * p.copy_channels);
      p.tap_slot.push_back(FilterSlot(plan.taps_h[a] * filter_cols + tw, filter_cols, reversed_cols));
    }
  }
  p.taps = static_cast<int64_t>(p.tap_offset.size());
  p.chunks = CeilDiv(depth, chunk);
  if (plan.split) Note(Path::kBandedSplit);
  if (plan.whole_runs) Note(Path::kBandedWholeRuns);
  if (plan.row_tiles > 0) Note(Path::kBandedRowRuns);
  if (plan.row_rest > 0) Note(Path::kBandedRowRests);
  if (p.chunks > 1) Note(Path::kBandedChunks);
  NoteKernel(affine);
  if (plan.row_rest > 0) NoteKernel(indirect);
  const bool narrow_rows = narrow != nullptr && p.chunks == 1 && p.taps <= kMaxNarrowTaps;
  if (plan.row_tiles > 0 && narrow_rows) NoteKernel(narrow);
  const int64_t copy_pixels = static_cast<int64_t>(plan.copy_pixels);
  parallel_for(batch * plan.bands * column_blocks, Cost(2.0 * plan.band * dw.size * nb * depth * p.taps),
               [&](int64_t begin, int64_t end) {
    T* const copy = Scratch<T, 22>((copy_pixels + plan.copy_slack) * p.copy_channels);
    // Results not written in place: rows of whole tiles at cbuf + row * row_tiles * mr * nb,
    // then the left-over tiles; with whole runs, computed row i at cbuf + i * pitch * nb.
    float* const cbuf = Scratch<float, 23>(plan.max_tiles * mr * nb);
    const void** const a = Scratch<const void*, 24>(p.taps * mr);
    const float** const b = Scratch<const float*, 25>(p.taps);
    int64_t copied = -1;  // the band whose copy is in `copy`
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t nb_index = unit / column_blocks, cb = unit % column_blocks;
      const int64_t n = nb_index / plan.bands, i0 = nb_index % plan.bands * plan.band;
      BandBlock bb;
      bb.rows = std::min(plan.band, dh.size - i0);
      if (nb_index != copied) CopyBand(p, n, i0, bb.rows, copy), copied = nb_index;
      const ColumnBlock col = column(cb);
      T* const out0 = dst + (n * dh.size + i0) * dw.size * dst_channels + col.dst_offset;
      // Rows of whole column blocks go straight to dst: 16-bit rounded by `narrow` (the
      // whole reduction in one call), floats accumulated there.
      const bool whole = col.width == nb;
      bb.narrowed = whole && narrow_rows;
      bb.in_place = whole && (bb.narrowed || std::is_same_v<T, float>);
      if (bb.in_place && plan.row_tiles > 0) Note(bb.narrowed ? Path::kBandedRowsNarrowed : Path::kBandedRowsInPlace);
      if (bb.narrowed && plan.row_tiles == 1 && plan.row_rest == 0) Note(Path::kBandedNarrowedBand);
      BandChunks(p, bb, col, copy, out0, cbuf, a, b);
      WriteBand(p, bb, col, cbuf, out0);
    }
  });
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_BANDED_H_
