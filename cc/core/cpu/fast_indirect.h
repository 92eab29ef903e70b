// The indirect pass of the fast CPU kernels (forward and backprop input over an indirection
// table of source pixels), and the per-dimension maps every forward and backprop-input pass
// reads. Internal to cc/core/cpu; included by conv_fast.cc.
#ifndef TF_OPS_CC_CORE_CPU_FAST_INDIRECT_H_
#define TF_OPS_CC_CORE_CPU_FAST_INDIRECT_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// Output pixels per work unit of the grouped-GEMM indirect pass.
inline constexpr int64_t kGemmPixelsPerBlock = 96;

// One spatial dimension of an indirect pass: which source index each computed index reads
// through each filter tap. Forward: computed = output, source = input,
// s = o * stride - pad + t * dilation. Backprop input (`transposed`): computed = input,
// source = output gradient, s = (i + pad - t * dilation) / stride where that divides.
// Computed indices are grouped in classes of equal residue modulo the stride (one class
// for forward); all members of a class read through the same candidate taps, and the
// source index is affine in the member's position j within its class:
// s = base[tap] + j * mult.
struct DimMap {
  int64_t size = 0, src_size = 0, stride = 1, pad = 0, dilation = 1, taps = 0;
  bool transposed = false;
  // Class c has members c, c + step, c + 2 * step, ... below size.
  int64_t classes() const { return transposed ? std::min(stride, size) : (size > 0 ? 1 : 0); }
  int64_t step() const { return transposed ? stride : 1; }
  int64_t count(int64_t c) const { return CeilDiv(size - c, step()); }
  int64_t mult() const { return transposed ? 1 : stride; }
  // The candidate taps of class c and the base of each.
  // Transposed: the taps that reach the class (TapsOfClass, conv_geometry.h).
  void Candidates(int64_t c, std::vector<int64_t>* taps_out, std::vector<int64_t>* bases) const {
    if (!transposed) {
      for (int64_t t = 0; t < taps; ++t) taps_out->push_back(t), bases->push_back(t * dilation - pad);
      return;
    }
    const ClassTaps reach = TapsOfClass(c, taps, stride, dilation, pad);
    for (int64_t a = 0; a < reach.count; ++a) {
      taps_out->push_back(reach.first + a * reach.step), bases->push_back(reach.base - a * reach.delta);
    }
  }
};

// Part of a class of a DimMap: `count` consecutive members of the class; the j-th (j < count)
// computes index first + j * step() and reads through taps[a] the source index
// bases[a] + j * mult().
struct DimPart {
  int64_t first = 0, count = 0;
  std::vector<int64_t> taps, bases;
};

// The classes of `d` as parts: whole (split false), or each class split into the members
// that read the source through every candidate tap (one part) and, one part each, the members
// before and after them, with only the taps they read inside the source.
inline std::vector<DimPart> Parts(const DimMap& d, bool split) {
  std::vector<DimPart> parts;
  for (int64_t c = 0; c < d.classes(); ++c) {
    DimPart whole;
    whole.first = c, whole.count = d.count(c);
    d.Candidates(c, &whole.taps, &whole.bases);
    int64_t lo = 0, hi = whole.count;  // members reading inside the source through every tap
    for (const int64_t base : whole.bases) {
      lo = std::max(lo, CeilDivSigned(-base, d.mult()));
      hi = std::min(hi, FloorDivSigned(d.src_size - 1 - base, d.mult()) + 1);
    }
    if (!split || (lo == 0 && hi == whole.count)) {
      parts.push_back(std::move(whole));
      continue;
    }
    if (hi <= lo) lo = hi = whole.count;  // no member reads through every tap
    for (int64_t j = 0; j < whole.count; j = j == lo ? hi : j + 1) {
      DimPart part;
      part.first = c + j * d.step(), part.count = j == lo ? hi - lo : 1;
      for (size_t a = 0; a < whole.taps.size(); ++a) {
        const int64_t s = whole.bases[a] + j * d.mult();
        if (j == lo || (s >= 0 && s < d.src_size)) {
          part.taps.push_back(whole.taps[a]), part.bases.push_back(s);
        }
      }
      if (part.count > 0) parts.push_back(std::move(part));
    }
  }
  return parts;
}

// The parts of an indirect pass's rows and columns: each dimension's classes whole, or split
// into edges and interior where that computes fewer products (tiles then skip the taps that
// read padding instead of multiplying zeros); and the pass's blocks of tiles (its work units
// per column block).
struct IndirectLayout {
  std::vector<DimPart> parts_h, parts_w;
  bool split = false;
  int64_t blocks = 0;
};

inline IndirectLayout PlanIndirect(int64_t batch, const DimMap& dh, const DimMap& dw, int64_t mr) {
  const std::vector<DimPart> choices_h[2] = {Parts(dh, false), Parts(dh, true)};
  const std::vector<DimPart> choices_w[2] = {Parts(dw, false), Parts(dw, true)};
  int best = 0;
  int64_t fewest = -1;
  for (int split = 0; split < 4; ++split) {
    int64_t products = 0;
    for (const DimPart& a : choices_h[split & 1]) {
      for (const DimPart& b : choices_w[split >> 1]) {
        const int64_t tiles = CeilDiv(batch * a.count * b.count, mr);
        products += tiles * mr * static_cast<int64_t>(a.taps.size() * b.taps.size());
      }
    }
    if (fewest < 0 || products < fewest) fewest = products, best = split;
  }
  IndirectLayout layout;
  layout.parts_h = choices_h[best & 1];
  layout.parts_w = choices_w[best >> 1];
  layout.split = layout.parts_h.size() > static_cast<size_t>(dh.classes()) ||
                 layout.parts_w.size() > static_cast<size_t>(dw.classes());
  const int64_t tiles_per_block = std::max<int64_t>(1, kGemmPixelsPerBlock / mr);
  for (const DimPart& ph : layout.parts_h) {
    for (const DimPart& pw : layout.parts_w) {
      layout.blocks += CeilDiv(CeilDiv(batch * ph.count * pw.count, mr), tiles_per_block);
    }
  }
  return layout;
}

// Where one column block of an indirect pass reads and writes.
struct ColumnBlock {
  int64_t src_offset = 0;  // channel offset in each source pixel
  int64_t dst_offset = 0;  // channel offset in each computed pixel
  int64_t width = 0;       // valid columns (<= nb)
  const float* panel = nullptr;  // packed filter of tap 0; tap t at panel + t * tap_stride
  int64_t tap_stride = 0;
  // Floats of the panel per reduction row: nb, or nb / 2 for panels of bfloat16 pairs.
  int64_t row_floats = 0;
};

// The tile kernel of an indirect pass: (tiles, taps, a, pixel_step, b, depth, width, c, ldc,
// accumulate). With pixel_step 0, a holds one pointer per (tap, pixel) of one tile; else one
// per tap for a run of `tiles` tiles, pixel p of the run being p * pixel_step elements on.
// Pixel p's results go to c + p * ldc.
using TileKernel = std::function<void(int64_t, int64_t, const void* const*, int64_t,
                                      const float* const*, int64_t, int64_t, float*, int64_t,
                                      bool)>;

// A class of an indirect pass: the pixels of one row part and one column part (DimPart), in
// (image, row, column) order, and the first of its blocks of tiles.
struct IndirectClass {
  int64_t h, w, rows, cols, pixels, first_block;
  std::vector<int64_t> taps_h, taps_w, base_h, base_w;
};

inline std::vector<IndirectClass> IndirectClasses(int64_t batch, const IndirectLayout& layout,
                                                  int64_t tiles_per_block, int64_t mr) {
  std::vector<IndirectClass> classes;
  int64_t blocks = 0;
  for (const DimPart& ph : layout.parts_h) {
    for (const DimPart& pw : layout.parts_w) {
      const int64_t pixels = batch * ph.count * pw.count;
      if (pixels == 0) continue;
      classes.push_back({ph.first, pw.first, ph.count, pw.count, pixels, blocks,
                         ph.taps, pw.taps, ph.bases, pw.bases});
      blocks += CeilDiv(CeilDiv(pixels, mr), tiles_per_block);
    }
  }
  return classes;
}

// The tables of one block of tiles of an indirect pass, in a thread's scratch. Per tile: the
// source pixel each (tap, pixel) reads (-1: zeros) and the filter tap of each tap, the taps'
// count (-1 for the tiles of an affine run after its first), and at the first tile of a run
// of affine tiles along one row, the run's length (else 0); per pixel, its place in the
// computed image (-1 past the class).
struct IndirectTables {
  int64_t mr = 0, max_taps = 0;
  int64_t* src_pixel = nullptr;  // [tile][tap][pixel]
  int64_t* tap_of = nullptr;     // [tile][tap]
  int64_t* tap_count = nullptr;  // [tile]
  int64_t* run = nullptr;        // [tile]
  int64_t* dst_pixel = nullptr;  // [tile][pixel]
  // Per pixel of a tile: the source row index (n * src_rows + row, or -1) of each candidate
  // row tap, and the source column of each candidate column tap (or -1).
  int64_t* src_row = nullptr;
  int64_t* src_col = nullptr;
};

// A pixel's position in its class: image n, class row i, class column j.
struct ClassCursor {
  int64_t n = 0, i = 0, j = 0;
  void Advance(const IndirectClass& cls, int64_t pixels) {  // within one row, or to its end
    if ((j += pixels) == cls.cols) {
      j = 0;
      if (++i == cls.rows) i = 0, ++n;
    }
  }
};

// The tiles from `at` that form a run of affine tiles (whole pixels in one row that every
// candidate tap reads inside the source: pixel m of tap t is pixel 0's source + m * mult
// columns), at most `most`; 0 where the tile at `at` (`valid` pixels) is not affine.
inline int64_t AffineRun(const IndirectClass& cls, const DimMap& dh, const DimMap& dw, int64_t mr,
                         int64_t valid, const ClassCursor& at, int64_t most) {
  const int64_t taps_h = static_cast<int64_t>(cls.taps_h.size());
  const int64_t taps_w = static_cast<int64_t>(cls.taps_w.size());
  bool interior = valid == mr && at.j + mr <= cls.cols && taps_h > 0 && taps_w > 0;
  for (int64_t a = 0; a < taps_h && interior; ++a) {
    const int64_t r = cls.base_h[a] + at.i * dh.mult();
    interior = r >= 0 && r < dh.src_size;
  }
  for (int64_t a = 0; a < taps_w && interior; ++a) {
    const int64_t c0 = cls.base_w[a] + at.j * dw.mult(), c1 = c0 + (mr - 1) * dw.mult();
    interior = c0 >= 0 && c1 < dw.src_size;
  }
  if (!interior) return 0;
  int64_t last_j = cls.cols - mr;  // the last tile start in the row
  for (int64_t a = 0; a < taps_w; ++a) {
    last_j = std::min(last_j, (dw.src_size - 1 - cls.base_w[a]) / dw.mult() - (mr - 1));
  }
  return std::min(1 + (last_j - at.j) / mr, most);
}

// Fills the tables of a run of `length` affine tiles from tile `tile` at `at`.
inline void AffineRunTables(const IndirectClass& cls, const DimMap& dh, const DimMap& dw, int64_t filter_cols,
                            const ClassCursor& at, int64_t tile, int64_t length, const IndirectTables& t) {
  const int64_t mr = t.mr;
  int64_t* const tile_src = t.src_pixel + tile * t.max_taps * mr;
  int64_t* const tile_taps = t.tap_of + tile * t.max_taps;
  int64_t count = 0;
  for (size_t ah = 0; ah < cls.taps_h.size(); ++ah) {
    const int64_t row = at.n * dh.src_size + cls.base_h[ah] + at.i * dh.mult();
    for (size_t aw = 0; aw < cls.taps_w.size(); ++aw) {
      tile_src[count * mr] = row * dw.src_size + cls.base_w[aw] + at.j * dw.mult();
      tile_taps[count++] = cls.taps_h[ah] * filter_cols + cls.taps_w[aw];
    }
  }
  t.tap_count[tile] = count;
  t.run[tile] = length;
  for (int64_t q = 1; q < length; ++q) t.run[tile + q] = 0, t.tap_count[tile + q] = -1;
  const int64_t first = (at.n * dh.size + cls.h + at.i * dh.step()) * dw.size + cls.w + at.j * dw.step();
  for (int64_t m = 0; m < length * mr; ++m) t.dst_pixel[tile * mr + m] = first + m * dw.step();
}

// Fills the tables of tile `tile` (`valid` pixels from `at`, which moves past them) pixel by
// pixel; taps that no pixel of the tile reads are dropped from it.
inline void GatheredTileTables(const IndirectClass& cls, const DimMap& dh, const DimMap& dw, int64_t filter_cols,
                               int64_t valid, ClassCursor* at, int64_t tile, const IndirectTables& t) {
  const int64_t mr = t.mr;
  const int64_t taps_h = static_cast<int64_t>(cls.taps_h.size());
  const int64_t taps_w = static_cast<int64_t>(cls.taps_w.size());
  int64_t* const src_row = t.src_row;
  int64_t* const src_col = t.src_col;
  t.run[tile] = 0;
  for (int64_t m = 0; m < mr; ++m) {
    if (m >= valid) {
      t.dst_pixel[tile * mr + m] = -1;
      for (int64_t a = 0; a < taps_h; ++a) src_row[m * dh.taps + a] = -1;
      continue;
    }
    const int64_t n = at->n, i = at->i, j = at->j;
    t.dst_pixel[tile * mr + m] = (n * dh.size + cls.h + i * dh.step()) * dw.size + cls.w + j * dw.step();
    for (int64_t a = 0; a < taps_h; ++a) {
      const int64_t r = cls.base_h[a] + i * dh.mult();
      src_row[m * dh.taps + a] = r >= 0 && r < dh.src_size ? n * dh.src_size + r : -1;
    }
    for (int64_t a = 0; a < taps_w; ++a) {
      const int64_t c = cls.base_w[a] + j * dw.mult();
      src_col[m * dw.taps + a] = c >= 0 && c < dw.src_size ? c : -1;
    }
    at->Advance(cls, 1);
  }
  int64_t* const tile_src = t.src_pixel + tile * t.max_taps * mr;
  int64_t* const tile_taps = t.tap_of + tile * t.max_taps;
  int64_t count = 0;
  for (int64_t ah = 0; ah < taps_h; ++ah) {
    for (int64_t aw = 0; aw < taps_w; ++aw) {
      bool any = false;
      int64_t* s = tile_src + count * mr;
      for (int64_t m = 0; m < mr; ++m) {
        const int64_t r = src_row[m * dh.taps + ah];
        const int64_t c = m < valid ? src_col[m * dw.taps + aw] : -1;
        s[m] = r >= 0 && c >= 0 ? r * dw.src_size + c : -1;
        any |= s[m] >= 0;
      }
      if (any) tile_taps[count++] = cls.taps_h[ah] * filter_cols + cls.taps_w[aw];
    }
  }
  t.tap_count[tile] = count;
}

// Fills the tables of the tiles of pixels p0 to p1 of class cls.
inline void BuildIndirectTables(const IndirectClass& cls, int64_t p0, int64_t p1, const DimMap& dh,
                                const DimMap& dw, int64_t filter_cols, const IndirectTables& t) {
  const int64_t mr = t.mr;
  ClassCursor at;
  at.n = p0 / (cls.rows * cls.cols), at.i = p0 / cls.cols % cls.rows, at.j = p0 % cls.cols;
  const int64_t tiles = CeilDiv(p1 - p0, mr);
  for (int64_t tile = 0; tile < tiles;) {
    const int64_t valid = std::min<int64_t>(mr, p1 - p0 - tile * mr);
    const int64_t length = AffineRun(cls, dh, dw, mr, valid, at, (p1 - p0) / mr - tile);
    if (length > 0) {
      AffineRunTables(cls, dh, dw, filter_cols, at, tile, length, t);
      at.Advance(cls, length * mr);
      tile += length;
    } else {
      GatheredTileTables(cls, dh, dw, filter_cols, valid, &at, tile, t);
      ++tile;
    }
  }
}

// Where an indirect pass reads and writes, and how it multiplies (RunIndirect's arguments).
template <typename T>
struct IndirectIo {
  const T* src;
  int64_t src_channels;
  T* dst;
  int64_t dst_channels;
  const DimMap& dw;
  int mr, nb;
  int64_t depth, chunk;
  const TileKernel& kernel;
  GemmAffineNarrowFn narrow;
  const T* zeros;
};

// Computes column block `col` of a block of `tiles` tiles whose tables `t` hold, into cbuf
// (tile after tile, nb columns a pixel) or, where stored[tile] gets set, straight into dst.
// Reduction chunks outermost, so that one chunk of the packed filter serves every tile.
template <typename T>
void IndirectTiles(const IndirectIo<T>& io, const IndirectTables& t, int64_t tiles, const ColumnBlock& col,
                   float* cbuf, char* stored, const void** a, const float** b) {
  const int64_t mr = io.mr, nb = io.nb, depth = io.depth, chunk = io.chunk, max_taps = t.max_taps;
  const int64_t chunks = CeilDiv(depth, chunk);
  if (chunks > 1) Note(Path::kIndirectChunks);
  std::fill(stored, stored + tiles, 0);
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t k0 = k * chunk, len = std::min(chunk, depth - k0);
    for (int64_t tile = 0; tile < tiles; ++tile) {
      float* c = cbuf + tile * mr * nb;
      const int64_t run = t.run[tile];
      const bool affine = run > 0;
      if (!affine && t.tap_count[tile] < 0) continue;  // inside an affine run
      const int64_t count = t.tap_count[tile];
      if (count == 0) {
        Note(Path::kIndirectNoTap);
        if (k == 0) std::fill(c, c + mr * nb, 0.0f);
        continue;
      }
      const int64_t* tile_src = t.src_pixel + tile * max_taps * mr;
      const int64_t offset = col.src_offset + k0;
      for (int64_t q = 0; q < count; ++q) {
        b[q] = col.panel + t.tap_of[tile * max_taps + q] * col.tap_stride + k0 * col.row_floats;
      }
      if (!affine) {
        for (int64_t q = 0; q < count; ++q) {
          for (int64_t m = 0; m < mr; ++m) {
            const int64_t s = tile_src[q * mr + m];
            a[q * mr + m] = s < 0 ? static_cast<const void*>(io.zeros)
                                  : static_cast<const void*>(io.src + s * io.src_channels + offset);
          }
        }
        Note(Path::kIndirectTile);
        io.kernel(1, count, a, 0, b, len, col.width, c, nb, k > 0);
        continue;
      }
      for (int64_t q = 0; q < count; ++q) a[q] = io.src + tile_src[q * mr] * io.src_channels + offset;
      T* const out = io.dst + t.dst_pixel[tile * mr] * io.dst_channels + col.dst_offset;
      const int64_t out_step = io.dw.step() * io.dst_channels;
      if (io.narrow != nullptr && chunks == 1 && col.width == nb && count <= kMaxNarrowTaps) {
        // 16-bit results of whole column blocks, rounded by the micro-kernel in place.
        Note(Path::kIndirectNarrowed);
        NoteKernel(io.narrow);
        const int64_t pixel_step = io.dw.mult() * io.src_channels;
        io.narrow(run, count, a, pixel_step, mr * pixel_step, b, len, out, out_step);
        std::fill(stored + tile, stored + tile + run, 1);
        continue;
      }
      int64_t ldc = nb;
      if constexpr (std::is_same_v<T, float>) {
        // Float results of whole column blocks go straight to their place in dst.
        if (col.width == nb) {
          Note(Path::kIndirectInPlace);
          c = out, ldc = out_step;
          std::fill(stored + tile, stored + tile + run, 1);
        }
      }
      Note(Path::kIndirectAffineRun);
      io.kernel(run, count, a, io.dw.mult() * io.src_channels, b, len, col.width, c, ldc, k > 0);
    }
  }
}

// Runs an indirect pass laid out as `layout` (PlanIndirect of the same batch, maps and mr):
// dst[n, oh, ow, dst_offset + j] for every computed pixel and column, from source pixels
// src[n, sh, sw, src_offset + k0 + r] and the packed filter, through `kernel`. Source and destination are NHWC with `src_channels` / `dst_channels` per pixel.
// `depth` is the reduction length per tap, taken in chunks of `chunk`. `narrow` (16-bit T,
// or null) is `kernel`'s affine form rounding to T: affine runs of whole column blocks in one
// chunk go through it, straight to dst.
template <typename T, typename ColumnFn>
void RunIndirect(const IndirectLayout& layout, int64_t batch, const DimMap& dh, const DimMap& dw, int64_t filter_cols,
                 int mr, int nb, const T* src, int64_t src_channels, T* dst,
                 int64_t dst_channels, int64_t column_blocks, int64_t depth, int64_t chunk,
                 const ColumnFn& column, const TileKernel& kernel, GemmAffineNarrowFn narrow,
                 const ParallelFor& parallel_for) {
  static_assert(sizeof(T) == 2 || std::is_same_v<T, float>, "float or a 16-bit kind");
  const int64_t tiles_per_block = std::max<int64_t>(1, kGemmPixelsPerBlock / mr);
  if (layout.split) Note(Path::kIndirectEdgesSplit);
  const std::vector<IndirectClass> classes = IndirectClasses(batch, layout, tiles_per_block, mr);
  const std::vector<T> zeros(std::max<int64_t>({depth, static_cast<int64_t>(nb), 1}), T(0.0f));
  const IndirectIo<T> io{src, src_channels, dst, dst_channels, dw, mr, nb, depth, chunk, kernel, narrow,
                         zeros.data()};
  const int64_t max_taps = dh.taps * dw.taps;
  const double unit_cost = 2.0 * kGemmPixelsPerBlock * nb * depth * max_taps / (1.0 * dh.step() * dw.step());
  parallel_for(layout.blocks * column_blocks, Cost(unit_cost), [&](int64_t begin, int64_t end) {
    const int64_t block_pixels = tiles_per_block * mr;
    IndirectTables tables;
    tables.mr = mr, tables.max_taps = max_taps;
    float* const cbuf = Scratch<float, 0>(block_pixels * nb);
    tables.dst_pixel = Scratch<int64_t, 1>(block_pixels);
    tables.src_pixel = Scratch<int64_t, 2>(tiles_per_block * max_taps * mr);
    tables.tap_of = Scratch<int64_t, 3>(tiles_per_block * max_taps);
    tables.tap_count = Scratch<int64_t, 4>(tiles_per_block);
    tables.run = Scratch<int64_t, 5>(tiles_per_block);
    char* const stored = Scratch<char, 6>(tiles_per_block);  // results already written to dst
    const void** const a = Scratch<const void*, 7>(max_taps * mr);
    const float** const b = Scratch<const float*, 8>(max_taps);
    tables.src_row = Scratch<int64_t, 9>(mr * dh.taps);
    tables.src_col = Scratch<int64_t, 10>(mr * dw.taps);
    int64_t built = -1;  // the block whose tables `tables` hold
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t block = unit / column_blocks, cb = unit % column_blocks;
      const IndirectClass& cls = *(std::upper_bound(classes.begin(), classes.end(), block,
                                                    [](int64_t b, const IndirectClass& c) { return b < c.first_block; }) - 1);
      const int64_t p0 = (block - cls.first_block) * block_pixels;
      const int64_t p1 = std::min(cls.pixels, p0 + block_pixels);
      const ColumnBlock col = column(cb);
      const int64_t tiles = CeilDiv(p1 - p0, mr);
      // The tables depend on the block alone: a thread's next unit of the same block (the
      // next column block) reuses them.
      if (block != built) {
        BuildIndirectTables(cls, p0, p1, dh, dw, filter_cols, tables);
        built = block;
      }
      IndirectTiles(io, tables, tiles, col, cbuf, stored, a, b);
      // Tiles written in place are skipped whole (no division per pixel).
      for (int64_t tile = 0; tile < tiles; ++tile) {
        if (stored[tile]) continue;
        for (int64_t q = tile * mr; q < (tile + 1) * mr; ++q) {
          if (tables.dst_pixel[q] < 0) continue;
          WriteOut(cbuf + q * nb, col.width, dst + tables.dst_pixel[q] * dst_channels + col.dst_offset);
        }
      }
    }
  });
}


inline DimMap ForwardDim(int64_t out, int64_t in, int64_t stride, int64_t pad,
                         int64_t dilation, int64_t taps) {
  DimMap d;
  d.size = out, d.src_size = in, d.stride = stride, d.pad = pad, d.dilation = dilation;
  d.taps = taps;
  return d;
}

inline DimMap TransposedDim(int64_t in, int64_t out, int64_t stride, int64_t pad,
                            int64_t dilation, int64_t taps) {
  DimMap d = ForwardDim(in, out, stride, pad, dilation, taps);
  d.transposed = true;
  return d;
}

// The zero indices a transposed dimension's source lacks before and after it, so that every
// member of every class reads inside it through every candidate tap.
inline std::pair<int64_t, int64_t> TransposedBorder(const DimMap& d) {
  int64_t lo = 0, hi = d.src_size - 1;
  for (const DimPart& part : Parts(d, /*split=*/false)) {
    for (const int64_t base : part.bases) {
      lo = std::min(lo, base);
      hi = std::max(hi, base + (part.count - 1) * d.mult());
    }
  }
  return {-lo, hi - (d.src_size - 1)};
}

// Transposed dimension d read from a copy of its source with `border` zero indices before
// and after it: s' = s + border.first = (i + pad + border.first * stride - t * dilation) / stride.
inline DimMap BorderedTransposed(DimMap d, std::pair<int64_t, int64_t> border) {
  d.src_size += border.first + border.second;
  d.pad += border.first * d.stride;
  return d;
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_INDIRECT_H_
