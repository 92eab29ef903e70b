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
  void Candidates(int64_t c, std::vector<int64_t>* taps_out, std::vector<int64_t>* bases) const {
    for (int64_t t = 0; t < taps; ++t) {
      if (!transposed) {
        taps_out->push_back(t);
        bases->push_back(t * dilation - pad);
      } else if ((c + pad - t * dilation) % stride == 0) {
        taps_out->push_back(t);
        bases->push_back((c + pad - t * dilation) / stride);
      }
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

// Blocks of tiles of an indirect pass over `batch` images (PlanIndirect).
inline int64_t IndirectBlocks(int64_t batch, const DimMap& dh, const DimMap& dw, int64_t mr) {
  return PlanIndirect(batch, dh, dw, mr).blocks;
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

// An indirect pass: dst[n, oh, ow, dst_offset + j] for every computed pixel and column, from
// source pixels src[n, sh, sw, src_offset + k0 + r] and the packed filter, through `kernel`.
// Source and destination are NHWC with `src_channels` / `dst_channels` per pixel. `depth` is
// the reduction length per tap, taken in chunks of `chunk`. `narrow` (16-bit T, or null) is
// `kernel`'s affine form rounding to T: affine runs of whole column blocks in one chunk go
// through it, straight to dst. Work units are (block of tiles, column block); a block's tables
// (which source pixel each tile's taps read) are built once per thread and block.
template <typename T, typename ColumnFn>
class IndirectPass {
 public:
  IndirectPass(int64_t batch, const DimMap& dh, const DimMap& dw, int64_t filter_cols, int mr, int nb,
               const T* src, int64_t src_channels, T* dst, int64_t dst_channels, int64_t column_blocks,
               int64_t depth, int64_t chunk, const ColumnFn& column, const TileKernel& kernel,
               GemmAffineNarrowFn narrow)
      : dh_(dh), dw_(dw), filter_cols_(filter_cols), mr_(mr), nb_(nb), src_(src), src_channels_(src_channels),
        dst_(dst), dst_channels_(dst_channels), column_blocks_(column_blocks), depth_(depth), chunk_(chunk),
        column_(column), kernel_(kernel), narrow_(narrow),
        tiles_per_block_(std::max<int64_t>(1, kGemmPixelsPerBlock / mr)), max_taps_(dh.taps * dw.taps),
        zeros_(std::max<int64_t>({depth, static_cast<int64_t>(nb), 1}), T(0.0f)) {
    const IndirectLayout layout = PlanIndirect(batch, dh, dw, mr);
    if (layout.split) Note(Path::kIndirectEdgesSplit);
    for (const DimPart& ph : layout.parts_h) {
      for (const DimPart& pw : layout.parts_w) {
        const int64_t pixels = batch * ph.count * pw.count;
        if (pixels == 0) continue;
        classes_.push_back({ph.first, pw.first, ph.count, pw.count, pixels, blocks_, ph.taps, pw.taps, ph.bases,
                            pw.bases});
        blocks_ += CeilDiv(CeilDiv(pixels, mr), tiles_per_block_);
      }
    }
  }

  void Run(const ParallelFor& parallel_for) const {
    const double unit_cost = 2.0 * kGemmPixelsPerBlock * nb_ * depth_ * max_taps_ / (1.0 * dh_.step() * dw_.step());
    parallel_for(blocks_ * column_blocks_, Cost(unit_cost), [&](int64_t begin, int64_t end) {
      const Tables tables = ThreadTables();
      int64_t built = -1;  // the block whose tables src_pixel to dst_pixel hold
      for (int64_t unit = begin; unit < end; ++unit) RunUnit(tables, unit, &built);
    });
  }

 private:
  // A class: pixels of equal row part and column part (DimPart), in (image, row, column) order.
  struct Class {
    int64_t h, w, rows, cols, pixels, first_block;
    std::vector<int64_t> taps_h, taps_w, base_h, base_w;
  };
  // A thread's tables for one block of tiles, and its results not written in place.
  struct Tables {
    float* cbuf;
    int64_t* dst_pixel;  // per pixel of the block: its index in dst, or -1
    int64_t* src_pixel;  // per (tile, tap, pixel): the source pixel, or -1 (zeros)
    int64_t* tap_of;     // per (tile, tap): the filter tap
    int64_t* tap_count;  // per tile: its taps; -1 inside an affine run
    // run[tile]: for the first tile of a run of affine tiles along one row, the run's length;
    // 0 for the run's other tiles and for tiles that are not affine.
    int64_t* run;
    char* stored;  // per tile: results already written to dst
    const void** a;
    const float** b;
    // Per pixel of a tile: the source row index (n * src_rows + row, or -1) of each candidate
    // row tap, and the source column of each candidate column tap (or -1).
    int64_t* src_row;
    int64_t* src_col;
  };
  // A pixel's place in its class: image n, class row i, class column j.
  struct Position {
    int64_t n, i, j;
  };

  Tables ThreadTables() const {
    const int64_t block_pixels = tiles_per_block_ * mr_;
    return {Scratch<float, 0>(block_pixels * nb_),          Scratch<int64_t, 1>(block_pixels),
            Scratch<int64_t, 2>(tiles_per_block_ * max_taps_ * mr_), Scratch<int64_t, 3>(tiles_per_block_ * max_taps_),
            Scratch<int64_t, 4>(tiles_per_block_),          Scratch<int64_t, 5>(tiles_per_block_),
            Scratch<char, 6>(tiles_per_block_),             Scratch<const void*, 7>(max_taps_ * mr_),
            Scratch<const float*, 8>(max_taps_),            Scratch<int64_t, 9>(mr_ * dh_.taps),
            Scratch<int64_t, 10>(mr_ * dw_.taps)};
  }

  // Moves `pos` on by `pixels` pixels of class cls, along its rows.
  static void Advance(const Class& cls, int64_t pixels, Position* pos) {
    if ((pos->j += pixels) == cls.cols) {
      pos->j = 0;
      if (++pos->i == cls.rows) pos->i = 0, ++pos->n;
    }
  }

  // The tiles from `tile` on whose pixels are whole tiles in one row that every candidate tap
  // reads inside the source (affine: pixel m of tap t is pixel 0's source + m * mult columns):
  // their count (0 where tile is not affine). `remaining`: tiles of the block from tile on.
  int64_t AffineRun(const Class& cls, const Position& pos, int64_t valid, int64_t remaining) const {
    const int64_t taps_h = static_cast<int64_t>(cls.taps_h.size());
    const int64_t taps_w = static_cast<int64_t>(cls.taps_w.size());
    bool interior = valid == mr_ && pos.j + mr_ <= cls.cols && taps_h > 0 && taps_w > 0;
    for (int64_t a = 0; a < taps_h && interior; ++a) {
      const int64_t r = cls.base_h[a] + pos.i * dh_.mult();
      interior = r >= 0 && r < dh_.src_size;
    }
    for (int64_t a = 0; a < taps_w && interior; ++a) {
      const int64_t c0 = cls.base_w[a] + pos.j * dw_.mult(), c1 = c0 + (mr_ - 1) * dw_.mult();
      interior = c0 >= 0 && c1 < dw_.src_size;
    }
    if (!interior) return 0;
    int64_t last_j = cls.cols - mr_;  // the last tile start in the row that stays inside
    for (int64_t a = 0; a < taps_w; ++a) {
      last_j = std::min(last_j, (dw_.src_size - 1 - cls.base_w[a]) / dw_.mult() - (mr_ - 1));
    }
    return std::min(1 + (last_j - pos.j) / mr_, remaining);
  }

  // The tables of an affine run of `length` tiles from `tile`: every tap of the class, pixel 0's
  // source of each.
  void BuildRun(const Tables& t, const Class& cls, const Position& pos, int64_t tile, int64_t length) const {
    int64_t* const tile_src = t.src_pixel + tile * max_taps_ * mr_;
    int64_t* const tile_taps = t.tap_of + tile * max_taps_;
    int64_t count = 0;
    for (size_t ah = 0; ah < cls.taps_h.size(); ++ah) {
      const int64_t row = pos.n * dh_.src_size + cls.base_h[ah] + pos.i * dh_.mult();
      for (size_t aw = 0; aw < cls.taps_w.size(); ++aw) {
        tile_src[count * mr_] = row * dw_.src_size + cls.base_w[aw] + pos.j * dw_.mult();
        tile_taps[count++] = cls.taps_h[ah] * filter_cols_ + cls.taps_w[aw];
      }
    }
    t.tap_count[tile] = count;
    t.run[tile] = length;
    for (int64_t q = 1; q < length; ++q) t.run[tile + q] = 0, t.tap_count[tile + q] = -1;
    const int64_t first = (pos.n * dh_.size + cls.h + pos.i * dh_.step()) * dw_.size + cls.w + pos.j * dw_.step();
    for (int64_t m = 0; m < length * mr_; ++m) t.dst_pixel[tile * mr_ + m] = first + m * dw_.step();
  }

  // The tables of one tile of `valid` pixels from `pos` on (which it moves past them): each
  // pixel's source through each tap, -1 outside the source; taps no pixel reads are dropped.
  void BuildTile(const Tables& t, const Class& cls, Position* pos, int64_t tile, int64_t valid) const {
    const int64_t taps_h = static_cast<int64_t>(cls.taps_h.size());
    const int64_t taps_w = static_cast<int64_t>(cls.taps_w.size());
    for (int64_t m = 0; m < mr_; ++m) {
      if (m >= valid) {
        t.dst_pixel[tile * mr_ + m] = -1;
        for (int64_t a = 0; a < taps_h; ++a) t.src_row[m * dh_.taps + a] = -1;
        continue;
      }
      t.dst_pixel[tile * mr_ + m] =
          (pos->n * dh_.size + cls.h + pos->i * dh_.step()) * dw_.size + cls.w + pos->j * dw_.step();
      for (int64_t a = 0; a < taps_h; ++a) {
        const int64_t r = cls.base_h[a] + pos->i * dh_.mult();
        t.src_row[m * dh_.taps + a] = r >= 0 && r < dh_.src_size ? pos->n * dh_.src_size + r : -1;
      }
      for (int64_t a = 0; a < taps_w; ++a) {
        const int64_t c = cls.base_w[a] + pos->j * dw_.mult();
        t.src_col[m * dw_.taps + a] = c >= 0 && c < dw_.src_size ? c : -1;
      }
      Advance(cls, 1, pos);
    }
    int64_t* const tile_src = t.src_pixel + tile * max_taps_ * mr_;
    int64_t count = 0;
    for (int64_t ah = 0; ah < taps_h; ++ah) {
      for (int64_t aw = 0; aw < taps_w; ++aw) {
        bool any = false;
        int64_t* s = tile_src + count * mr_;
        for (int64_t m = 0; m < mr_; ++m) {
          const int64_t r = t.src_row[m * dh_.taps + ah];
          const int64_t c = m < valid ? t.src_col[m * dw_.taps + aw] : -1;
          s[m] = r >= 0 && c >= 0 ? r * dw_.src_size + c : -1;
          any |= s[m] >= 0;
        }
        if (any) t.tap_of[tile * max_taps_ + count++] = cls.taps_h[ah] * filter_cols_ + cls.taps_w[aw];
      }
    }
    t.tap_count[tile] = count;
  }

  // The tables of the tiles of pixels p0 to p1 of class cls.
  void BuildTables(const Tables& t, const Class& cls, int64_t p0, int64_t p1) const {
    Position pos{p0 / (cls.rows * cls.cols), p0 / cls.cols % cls.rows, p0 % cls.cols};
    const int64_t tiles = CeilDiv(p1 - p0, mr_);
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t valid = std::min<int64_t>(mr_, p1 - p0 - tile * mr_);
      t.run[tile] = 0;
      const int64_t length = AffineRun(cls, pos, valid, (p1 - p0) / mr_ - tile);
      if (length > 0) {
        BuildRun(t, cls, pos, tile, length);
        Advance(cls, length * mr_, &pos);
        tile += length - 1;
        continue;
      }
      BuildTile(t, cls, &pos, tile, valid);
    }
  }

  // One chunk of the reduction over an affine run of tiles from `tile`: written in place where
  // its results are whole column blocks (16-bit through `narrow` when the reduction is one
  // chunk), else into cbuf.
  void AffineTiles(const Tables& t, const ColumnBlock& col, int64_t tile, int64_t count, int64_t k, int64_t chunks,
                   int64_t len) const {
    const int64_t* const tile_src = t.src_pixel + tile * max_taps_ * mr_;
    const int64_t offset = col.src_offset + k * chunk_;
    for (int64_t q = 0; q < count; ++q) t.a[q] = src_ + tile_src[q * mr_] * src_channels_ + offset;
    float* c = t.cbuf + tile * mr_ * nb_;
    int64_t ldc = nb_;
    if (narrow_ != nullptr && chunks == 1 && col.width == nb_ && count <= kMaxNarrowTaps) {
      Note(Path::kIndirectNarrowed);
      NoteKernel(narrow_);
      const int64_t pixel_step = dw_.mult() * src_channels_;
      narrow_(t.run[tile], count, t.a, pixel_step, mr_ * pixel_step, t.b, len,
              dst_ + t.dst_pixel[tile * mr_] * dst_channels_ + col.dst_offset, dw_.step() * dst_channels_);
      std::fill(t.stored + tile, t.stored + tile + t.run[tile], 1);
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      if (col.width == nb_) {
        Note(Path::kIndirectInPlace);
        c = dst_ + t.dst_pixel[tile * mr_] * dst_channels_ + col.dst_offset;
        ldc = dw_.step() * dst_channels_;
        std::fill(t.stored + tile, t.stored + tile + t.run[tile], 1);
      }
    }
    Note(Path::kIndirectAffineRun);
    kernel_(t.run[tile], count, t.a, dw_.mult() * src_channels_, t.b, len, col.width, c, ldc, k > 0);
  }

  // One chunk of the reduction over one tile through its table of source pixels.
  void IndirectTile(const Tables& t, const ColumnBlock& col, int64_t tile, int64_t count, int64_t k,
                    int64_t len) const {
    const int64_t* const tile_src = t.src_pixel + tile * max_taps_ * mr_;
    const int64_t offset = col.src_offset + k * chunk_;
    for (int64_t q = 0; q < count; ++q) {
      for (int64_t m = 0; m < mr_; ++m) {
        const int64_t s = tile_src[q * mr_ + m];
        t.a[q * mr_ + m] = s < 0 ? static_cast<const void*>(zeros_.data())
                                 : static_cast<const void*>(src_ + s * src_channels_ + offset);
      }
    }
    Note(Path::kIndirectTile);
    kernel_(1, count, t.a, 0, t.b, len, col.width, t.cbuf + tile * mr_ * nb_, nb_, k > 0);
  }

  // Work unit `unit`: one column block of one block of tiles, its reduction chunks outermost (so
  // that one chunk of the packed filter serves every tile), then the results not yet in place.
  void RunUnit(const Tables& t, int64_t unit, int64_t* built) const {
    const int64_t block = unit / column_blocks_, cb = unit % column_blocks_;
    const Class& cls = *(std::upper_bound(classes_.begin(), classes_.end(), block,
                                          [](int64_t b, const Class& c) { return b < c.first_block; }) - 1);
    const int64_t block_pixels = tiles_per_block_ * mr_;
    const int64_t p0 = (block - cls.first_block) * block_pixels;
    const int64_t p1 = std::min(cls.pixels, p0 + block_pixels);
    const ColumnBlock col = column_(cb);
    const int64_t tiles = CeilDiv(p1 - p0, mr_);
    // The tables depend on the block alone: a thread's next unit of the same block (the next
    // column block) reuses them.
    if (block != *built) {
      BuildTables(t, cls, p0, p1);
      *built = block;
    }
    const int64_t chunks = CeilDiv(depth_, chunk_);
    if (chunks > 1) Note(Path::kIndirectChunks);
    std::fill(t.stored, t.stored + tiles_per_block_, 0);
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t k0 = k * chunk_, len = std::min(chunk_, depth_ - k0);
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const bool affine = t.run[tile] > 0;
        if (!affine && t.tap_count[tile] < 0) continue;  // inside an affine run
        const int64_t count = t.tap_count[tile];
        if (count == 0) {
          Note(Path::kIndirectNoTap);
          if (k == 0) std::fill(t.cbuf + tile * mr_ * nb_, t.cbuf + (tile + 1) * mr_ * nb_, 0.0f);
          continue;
        }
        for (int64_t q = 0; q < count; ++q) {
          t.b[q] = col.panel + t.tap_of[tile * max_taps_ + q] * col.tap_stride + k0 * col.row_floats;
        }
        if (affine) {
          AffineTiles(t, col, tile, count, k, chunks, len);
        } else {
          IndirectTile(t, col, tile, count, k, len);
        }
      }
    }
    // Tiles written in place are skipped whole (no division per pixel).
    for (int64_t tile = 0; tile < tiles; ++tile) {
      if (t.stored[tile]) continue;
      for (int64_t q = tile * mr_; q < (tile + 1) * mr_; ++q) {
        if (t.dst_pixel[q] < 0) continue;
        WriteOut(t.cbuf + q * nb_, col.width, dst_ + t.dst_pixel[q] * dst_channels_ + col.dst_offset);
      }
    }
  }

  const DimMap& dh_;
  const DimMap& dw_;
  const int64_t filter_cols_;
  const int64_t mr_, nb_;
  const T* const src_;
  const int64_t src_channels_;
  T* const dst_;
  const int64_t dst_channels_, column_blocks_, depth_, chunk_;
  const ColumnFn& column_;
  const TileKernel& kernel_;
  const GemmAffineNarrowFn narrow_;
  const int64_t tiles_per_block_, max_taps_;
  std::vector<Class> classes_;
  int64_t blocks_ = 0;
  const std::vector<T> zeros_;
};

// Runs an indirect pass (IndirectPass).
template <typename T, typename ColumnFn>
void RunIndirect(int64_t batch, const DimMap& dh, const DimMap& dw, int64_t filter_cols, int mr, int nb,
                 const T* src, int64_t src_channels, T* dst, int64_t dst_channels, int64_t column_blocks,
                 int64_t depth, int64_t chunk, const ColumnFn& column, const TileKernel& kernel,
                 GemmAffineNarrowFn narrow, const ParallelFor& parallel_for) {
  static_assert(sizeof(T) == 2 || std::is_same_v<T, float>, "float or a 16-bit kind");
  IndirectPass<T, ColumnFn>(batch, dh, dw, filter_cols, mr, nb, src, src_channels, dst, dst_channels, column_blocks,
                            depth, chunk, column, kernel, narrow)
      .Run(parallel_for);
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
