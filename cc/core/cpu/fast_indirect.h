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

// Runs an indirect pass: dst[n, oh, ow, dst_offset + j] for every computed pixel and column,
// from source pixels src[n, sh, sw, src_offset + k0 + r] and the packed filter, through
// `kernel`. Source and destination are NHWC with `src_channels` / `dst_channels` per pixel.
// `depth` is the reduction length per tap, taken in chunks of `chunk`. `narrow` (16-bit T,
// or null) is `kernel`'s affine form rounding to T: affine runs of whole column blocks in one
// chunk go through it, straight to dst.
template <typename T, typename ColumnFn>
void RunIndirect(int64_t batch, const DimMap& dh, const DimMap& dw, int64_t filter_cols,
                 int mr, int nb, const T* src, int64_t src_channels, T* dst,
                 int64_t dst_channels, int64_t column_blocks, int64_t depth, int64_t chunk,
                 const ColumnFn& column, const TileKernel& kernel, GemmAffineNarrowFn narrow,
                 const ParallelFor& parallel_for) {
  static_assert(sizeof(T) == 2 || std::is_same_v<T, float>, "float or a 16-bit kind");
  // A class: pixels of equal row part and column part (DimPart), in (image, row, column)
  // order.
  struct Class {
    int64_t h, w, rows, cols, pixels, first_block;
    std::vector<int64_t> taps_h, taps_w, base_h, base_w;
  };
  const int64_t block_target = kGemmPixelsPerBlock;
  const int64_t tiles_per_block = std::max<int64_t>(1, block_target / mr);
  const IndirectLayout layout = PlanIndirect(batch, dh, dw, mr);
  if (layout.split) Note(Path::kIndirectEdgesSplit);
  std::vector<Class> classes;
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
  std::vector<T> zeros(std::max<int64_t>({depth, static_cast<int64_t>(nb), 1}), T(0.0f));
  const int64_t max_taps = dh.taps * dw.taps;
  const double unit_cost = 2.0 * block_target * nb * depth * max_taps /
                           (1.0 * dh.step() * dw.step());

  parallel_for(blocks * column_blocks, Cost(unit_cost), [&](int64_t begin, int64_t end) {
    const int64_t block_pixels = tiles_per_block * mr;
    float* const cbuf = Scratch<float, 0>(block_pixels * nb);
    int64_t* const dst_pixel = Scratch<int64_t, 1>(block_pixels);
    int64_t* const src_pixel = Scratch<int64_t, 2>(tiles_per_block * max_taps * mr);
    int64_t* const tap_of = Scratch<int64_t, 3>(tiles_per_block * max_taps);
    int64_t* const tap_count = Scratch<int64_t, 4>(tiles_per_block);
    // run[tile]: for the first tile of a run of affine tiles along one row, the run's
    // length; 0 for the run's other tiles and for tiles that are not affine.
    int64_t* const run = Scratch<int64_t, 5>(tiles_per_block);
    char* const stored = Scratch<char, 6>(tiles_per_block);  // results already written to dst
    const void** const a = Scratch<const void*, 7>(max_taps * mr);
    const float** const b = Scratch<const float*, 8>(max_taps);
    // Per pixel of a tile: the source row index (n * src_rows + row, or -1) of each
    // candidate row tap, and the source column of each candidate column tap (or -1).
    int64_t* const src_row = Scratch<int64_t, 9>(mr * dh.taps);
    int64_t* const src_col = Scratch<int64_t, 10>(mr * dw.taps);
    // Fills the tables of the tiles of pixels p0 to p1 of class cls (src_pixel, tap_of,
    // tap_count, run, dst_pixel).
    const auto build_tables = [&](const Class& cls, int64_t p0, int64_t p1) {
      const int64_t rows = cls.rows, cols = cls.cols;
      const int64_t taps_h = static_cast<int64_t>(cls.taps_h.size());
      const int64_t taps_w = static_cast<int64_t>(cls.taps_w.size());
      // Position of pixel p0 in its class: image n, class row i, class column j.
      int64_t n = p0 / (rows * cols), i = p0 / cols % rows, j = p0 % cols;
      // Which source pixel each (tile, tap, pixel) reads; taps no pixel of a tile reads are
      // dropped from that tile.
      const int64_t tiles = CeilDiv(p1 - p0, mr);
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const int64_t valid = std::min<int64_t>(mr, p1 - p0 - tile * mr);
        int64_t* tile_src = src_pixel + tile * max_taps * mr;
        int64_t* tile_taps = tap_of + tile * max_taps;
        // A tile of whole pixels in one row that every candidate tap reads inside the source
        // is affine: pixel m of tap t is pixel 0's source + m * mult columns.
        bool interior = valid == mr && j + mr <= cols && taps_h > 0 && taps_w > 0;
        for (int64_t a = 0; a < taps_h && interior; ++a) {
          const int64_t r = cls.base_h[a] + i * dh.mult();
          interior = r >= 0 && r < dh.src_size;
        }
        for (int64_t a = 0; a < taps_w && interior; ++a) {
          const int64_t c0 = cls.base_w[a] + j * dw.mult(), c1 = c0 + (mr - 1) * dw.mult();
          interior = c0 >= 0 && c1 < dw.src_size;
        }
        run[tile] = 0;
        if (interior) {
          // This tile and the next ones of the row that stay inside the source form a run.
          int64_t last_j = cols - mr;  // the last tile start in the row
          for (int64_t a = 0; a < taps_w; ++a) {
            last_j = std::min(last_j, (dw.src_size - 1 - cls.base_w[a]) / dw.mult() - (mr - 1));
          }
          const int64_t length = std::min(1 + (last_j - j) / mr, (p1 - p0) / mr - tile);
          int64_t count = 0;
          for (int64_t ah = 0; ah < taps_h; ++ah) {
            const int64_t row = n * dh.src_size + cls.base_h[ah] + i * dh.mult();
            for (int64_t aw = 0; aw < taps_w; ++aw) {
              tile_src[count * mr] = row * dw.src_size + cls.base_w[aw] + j * dw.mult();
              tile_taps[count++] = cls.taps_h[ah] * filter_cols + cls.taps_w[aw];
            }
          }
          tap_count[tile] = count;
          run[tile] = length;
          for (int64_t q = 1; q < length; ++q) run[tile + q] = 0, tap_count[tile + q] = -1;
          const int64_t first = (n * dh.size + cls.h + i * dh.step()) * dw.size + cls.w + j * dw.step();
          for (int64_t m = 0; m < length * mr; ++m) dst_pixel[tile * mr + m] = first + m * dw.step();
          if ((j += length * mr) == cols) {
            j = 0;
            if (++i == rows) i = 0, ++n;
          }
          tile += length - 1;
          continue;
        }
        for (int64_t m = 0; m < mr; ++m) {
          if (m >= valid) {
            dst_pixel[tile * mr + m] = -1;
            for (int64_t a = 0; a < taps_h; ++a) src_row[m * dh.taps + a] = -1;
            continue;
          }
          dst_pixel[tile * mr + m] =
              (n * dh.size + cls.h + i * dh.step()) * dw.size + cls.w + j * dw.step();
          for (int64_t a = 0; a < taps_h; ++a) {
            const int64_t r = cls.base_h[a] + i * dh.mult();
            src_row[m * dh.taps + a] = r >= 0 && r < dh.src_size ? n * dh.src_size + r : -1;
          }
          for (int64_t a = 0; a < taps_w; ++a) {
            const int64_t c = cls.base_w[a] + j * dw.mult();
            src_col[m * dw.taps + a] = c >= 0 && c < dw.src_size ? c : -1;
          }
          if (++j == cols) {
            j = 0;
            if (++i == rows) i = 0, ++n;
          }
        }
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
        tap_count[tile] = count;
      }
    };
    int64_t built = -1;  // the block whose tables src_pixel to dst_pixel hold
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t block = unit / column_blocks, cb = unit % column_blocks;
      const Class& cls = *(std::upper_bound(classes.begin(), classes.end(), block,
                                            [](int64_t b, const Class& c) { return b < c.first_block; }) - 1);
      const int64_t p0 = (block - cls.first_block) * block_pixels;
      const int64_t p1 = std::min(cls.pixels, p0 + block_pixels);
      const ColumnBlock col = column(cb);
      const int64_t tiles = CeilDiv(p1 - p0, mr);
      // The tables depend on the block alone: a thread's next unit of the same block (the
      // next column block) reuses them.
      if (block != built) {
        build_tables(cls, p0, p1);
        built = block;
      }
      // Reduction chunks outermost, so that one chunk of the packed filter serves every tile.
      const int64_t chunks = CeilDiv(depth, chunk);
      if (chunks > 1) Note(Path::kIndirectChunks);
      std::fill(stored, stored + tiles_per_block, 0);
      for (int64_t k = 0; k < chunks; ++k) {
        const int64_t k0 = k * chunk, len = std::min(chunk, depth - k0);
        for (int64_t tile = 0; tile < tiles; ++tile) {
          float* c = cbuf + tile * mr * nb;
          const bool affine = run[tile] > 0;
          if (!affine && tap_count[tile] < 0) continue;  // inside an affine run
          const int64_t count = tap_count[tile];
          if (count == 0) {
            Note(Path::kIndirectNoTap);
            if (k == 0) std::fill(c, c + mr * nb, 0.0f);
            continue;
          }
          const int64_t* tile_src = src_pixel + tile * max_taps * mr;
          const int64_t offset = col.src_offset + k0;
          for (int64_t t = 0; t < count; ++t) {
            b[t] = col.panel + tap_of[tile * max_taps + t] * col.tap_stride + k0 * col.row_floats;
          }
          if (affine) {
            for (int64_t t = 0; t < count; ++t) a[t] = src + tile_src[t * mr] * src_channels + offset;
            int64_t ldc = nb;
            if (narrow != nullptr && chunks == 1 && col.width == nb && count <= kMaxNarrowTaps) {
              // 16-bit results of whole column blocks, rounded by the micro-kernel in place.
              Note(Path::kIndirectNarrowed);
              NoteKernel(narrow);
              const int64_t pixel_step = dw.mult() * src_channels;
              narrow(run[tile], count, a, pixel_step, mr * pixel_step, b, len,
                     dst + dst_pixel[tile * mr] * dst_channels + col.dst_offset,
                     dw.step() * dst_channels);
              std::fill(stored + tile, stored + tile + run[tile], 1);
              continue;
            }
            if constexpr (std::is_same_v<T, float>) {
              // Float results of whole column blocks go straight to their place in dst.
              if (col.width == nb) {
                Note(Path::kIndirectInPlace);
                c = dst + dst_pixel[tile * mr] * dst_channels + col.dst_offset;
                ldc = dw.step() * dst_channels;
                std::fill(stored + tile, stored + tile + run[tile], 1);
              }
            }
            Note(Path::kIndirectAffineRun);
            kernel(run[tile], count, a, dw.mult() * src_channels, b, len, col.width,
                   c, ldc, k > 0);
            continue;
          }
          for (int64_t t = 0; t < count; ++t) {
            for (int64_t m = 0; m < mr; ++m) {
              const int64_t s = tile_src[t * mr + m];
              a[t * mr + m] = s < 0 ? static_cast<const void*>(zeros.data())
                                    : static_cast<const void*>(src + s * src_channels + offset);
            }
          }
          Note(Path::kIndirectTile);
          kernel(1, count, a, 0, b, len, col.width, c, nb, k > 0);
        }
      }
      // Tiles written in place are skipped whole (no division per pixel).
      for (int64_t tile = 0; tile < tiles; ++tile) {
        if (stored[tile]) continue;
        for (int64_t q = tile * mr; q < (tile + 1) * mr; ++q) {
          if (dst_pixel[q] < 0) continue;
          WriteOut(cbuf + q * nb, col.width, dst + dst_pixel[q] * dst_channels + col.dst_offset);
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
