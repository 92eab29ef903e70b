#include "cc/core/cpu/conv_fast.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_winograd.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {

const KernelTable& Kernels() {
  static const KernelTable table = [] {
    const char* env = std::getenv("TF_OPS_CPU_ISA");
    const std::string cap = env != nullptr ? env : "";
    const bool allow_bf16 = cap.empty() || cap == "avx512_bf16";
    const bool allow_avx512 = allow_bf16 || cap == "avx512";
    const bool allow_avx2 = allow_avx512 || cap == "avx2";
    KernelTable t = *GenericKernels();
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (allow_avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
      t = *Avx512Kernels();
      if (allow_bf16 && __builtin_cpu_supports("avx512bf16")) {
        t.isa = "avx512_bf16";
        t.gemm_bf16_pairs = Avx512Bf16GemmKernels();
      }
    } else if (allow_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c")) {
      t = *Avx2Kernels();
    }
#else
    (void)allow_avx2;
#endif
    return t;
  }();
  return table;
}

const char* FastKernelIsa() { return Kernels().isa; }

namespace {
std::atomic<bool>& ExactFlag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("TF_OPS_EXACT");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }()};
  return flag;
}
}  // namespace

void SetExactMode(bool exact) { ExactFlag().store(exact); }
bool ExactMode() { return ExactFlag().load(std::memory_order_relaxed); }

namespace {

using namespace fast;  // fast_common.h

// Floats of packed filter one reduction chunk may span (768 KiB: within the L2 cache of
// server cores). Shorter chunks re-walk every tile's source pixels once per chunk: on 5x5
// layers of 256 channels, 192 KiB chunks ran 15% slower.
constexpr int64_t kPanelFloats = 192 * 1024;
// Output pixels per work unit of the grouped-GEMM indirect pass.
constexpr int64_t kGemmPixelsPerBlock = 96;
// Bytes of source (through every filter row) that one group of depthwise tiles reads.
constexpr int64_t kDepthwiseGroupBytes = 16 * 1024;

// NCHW passes run on NHWC copies of this many elements at most (and at least one image).
constexpr int64_t kNchwChunkElements = int64_t{1} << 21;

// Images per NHWC copy of an NCHW pass whose images have `elements` elements.
int64_t NchwChunk(int64_t batch, int64_t elements) {
  return std::max<int64_t>(1, std::min(batch, kNchwChunkElements / std::max<int64_t>(1, elements)));
}

// ---------------------------------------------------------------------------------------
// Indirect passes (forward and backprop input).

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
// `depth` is the reduction length per tap, taken in chunks of `chunk`.
template <typename T, typename ColumnFn>
void RunIndirect(int64_t batch, const DimMap& dh, const DimMap& dw, int64_t filter_cols,
                 int mr, int nb, const T* src, int64_t src_channels, T* dst,
                 int64_t dst_channels, int64_t column_blocks, int64_t depth, int64_t chunk,
                 const ColumnFn& column, const TileKernel& kernel,
                 const ParallelFor& parallel_for) {
  struct Class {
    int64_t h, w, pixels, first_block;
    std::vector<int64_t> taps_h, taps_w, base_h, base_w;
  };
  const int64_t block_target = kGemmPixelsPerBlock;
  const int64_t tiles_per_block = std::max<int64_t>(1, block_target / mr);
  std::vector<Class> classes;
  int64_t blocks = 0;
  for (int64_t ch = 0; ch < dh.classes(); ++ch) {
    for (int64_t cw = 0; cw < dw.classes(); ++cw) {
      Class c{ch, cw, batch * dh.count(ch) * dw.count(cw), blocks, {}, {}, {}, {}};
      dh.Candidates(ch, &c.taps_h, &c.base_h);
      dw.Candidates(cw, &c.taps_w, &c.base_w);
      blocks += CeilDiv(CeilDiv(c.pixels, mr), tiles_per_block);
      classes.push_back(std::move(c));
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
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t block = unit / column_blocks, cb = unit % column_blocks;
      const Class& cls = *(std::upper_bound(classes.begin(), classes.end(), block,
                                            [](int64_t b, const Class& c) { return b < c.first_block; }) - 1);
      const int64_t p0 = (block - cls.first_block) * block_pixels;
      const int64_t p1 = std::min(cls.pixels, p0 + block_pixels);
      const int64_t rows = dh.count(cls.h), cols = dw.count(cls.w);
      const int64_t taps_h = static_cast<int64_t>(cls.taps_h.size());
      const int64_t taps_w = static_cast<int64_t>(cls.taps_w.size());
      const ColumnBlock col = column(cb);
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
      for (int64_t q = 0; q < tiles * mr; ++q) {
        if (dst_pixel[q] < 0 || stored[q / mr]) continue;
        T* out = dst + dst_pixel[q] * dst_channels + col.dst_offset;
        WriteOut(cbuf + q * nb, col.width, out);
      }
    }
  });
}

// Computed pixels a band of a banded pass holds, at least (whole rows).
constexpr int64_t kBandPixels = 256;
// Stride-1 passes whose reduction depth per tap times column block width is at most this
// run banded.
constexpr int64_t kBandedTile = 32 * 32;

// Where an indirect pass packs the filter of tap t (row-major over filter_cols columns): at
// slot t, or, `reversed`, with the columns of each filter row in reverse order (so that
// slots run along the source columns a backprop-input pass's taps read).
int64_t FilterSlot(int64_t t, int64_t filter_cols, bool reversed) {
  const int64_t tw = t % filter_cols;
  return reversed ? t - tw + filter_cols - 1 - tw : t;
}

// Runs a pass of stride 1 (forward of a stride-1 convolution, or its backprop input)
// through zero-padded copies of bands of source rows. In the copy every computed pixel reads
// each tap at a fixed offset from its own position, so a whole band, row ends included, is
// one affine run of tiles with no per-pixel setup: the copy's rows are `span_w - 1` pixels
// longer than the computed rows, and the pixels computed there are dropped. Taps that read
// padding multiply zeros. A work unit is (image, band of computed rows, column block); its
// copy (all source channels) lives in per-thread scratch, and is kept for the thread's next
// unit of the same band. Arguments as RunIndirect's, but the packed filter of each tap is at
// FilterSlot(tap, filter_cols, reversed_cols): slots run along the source columns the taps
// read. With `merge_cols`, the
// column taps of a filter row read neighbouring pixels of the copy, whose channels (all of
// the reduction) then run on contiguously into the next pixel's, and the packed filter of
// neighbouring slots likewise: each filter row is then a single tap of filter_cols * depth.
template <typename T, typename ColumnFn>
void RunBanded(int64_t batch, const DimMap& dh, const DimMap& dw, int64_t filter_cols,
               bool reversed_cols, bool merge_cols, int mr, int nb, const T* src,
               int64_t src_channels, T* dst, int64_t dst_channels, int64_t column_blocks,
               int64_t depth, int64_t chunk, const ColumnFn& column, GemmAffineFn affine,
               const ParallelFor& parallel_for) {
  std::vector<int64_t> taps_h, base_h, taps_w, base_w;
  dh.Candidates(0, &taps_h, &base_h);
  dw.Candidates(0, &taps_w, &base_w);
  const int64_t low_h = *std::min_element(base_h.begin(), base_h.end());
  const int64_t low_w = *std::min_element(base_w.begin(), base_w.end());
  const int64_t span_h = *std::max_element(base_h.begin(), base_h.end()) - low_h + 1;
  const int64_t span_w = *std::max_element(base_w.begin(), base_w.end()) - low_w + 1;
  const int64_t pitch = dw.size + span_w - 1;  // pixels per row of a band's copy
  // Band height: about kBandPixels computed pixels, fewer rows while that leaves fewer than
  // kMinUnits units. Fixed by the shape, so the split does not depend on the thread count.
  int64_t band = std::min(dh.size, CeilDiv(kBandPixels, pitch));
  while (band > 1 && batch * CeilDiv(dh.size, band) * column_blocks < kMinUnits) {
    Note(Path::kBandedSplit);
    band = CeilDiv(band, 2);
  }
  const int64_t bands = CeilDiv(dh.size, band);
  // Tap t = (a, b): offset from the computed pixel's position in the copy, and filter slot;
  // merged, one tap per filter row, at its leftmost column.
  std::vector<int64_t> tap_offset, tap_slot;
  for (size_t a = 0; a < taps_h.size(); ++a) {
    for (size_t b = 0; b < (merge_cols ? 1 : taps_w.size()); ++b) {
      const int64_t tw = merge_cols ? (reversed_cols ? filter_cols - 1 : 0) : taps_w[b];
      const int64_t column = merge_cols ? low_w : base_w[b];
      tap_offset.push_back(((base_h[a] - low_h) * pitch + column - low_w) * src_channels);
      tap_slot.push_back(FilterSlot(taps_h[a] * filter_cols + tw, filter_cols, reversed_cols));
    }
  }
  const int64_t taps = static_cast<int64_t>(tap_offset.size());
  if (merge_cols) depth *= filter_cols, chunk = depth;
  const int64_t max_tiles = CeilDiv(band * pitch, mr);
  // The last tile reads up to this many pixels of the copy.
  const int64_t copy_pixels = max_tiles * mr + (span_h - 1) * pitch + span_w - 1;
  const int64_t chunks = CeilDiv(depth, chunk);
  if (chunks > 1) Note(Path::kBandedChunks);
  NoteKernel(affine);

  parallel_for(batch * bands * column_blocks,
               Cost(2.0 * band * pitch * nb * depth * taps), [&](int64_t begin, int64_t end) {
    T* const copy = Scratch<T, 22>(copy_pixels * src_channels);
    float* const cbuf = Scratch<float, 23>(max_tiles * mr * nb);
    const void** const a = Scratch<const void*, 24>(taps);
    const float** const b = Scratch<const float*, 25>(taps);
    int64_t copied = -1;  // the band whose copy is in `copy`
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t nb_index = unit / column_blocks, cb = unit % column_blocks;
      const int64_t n = nb_index / bands, i0 = nb_index % bands * band;
      const int64_t rows = std::min(band, dh.size - i0);
      if (nb_index != copied) {
        // Copy row r is source row i0 + low_h + r, columns from low_w; zeros outside.
        const int64_t copy_rows = rows + span_h - 1;
        const int64_t c0 = std::max<int64_t>(0, low_w), c1 = std::min(dw.src_size, low_w + pitch);
        for (int64_t r = 0; r < copy_rows; ++r) {
          T* out = copy + r * pitch * src_channels;
          const int64_t sr = i0 + low_h + r;
          if (sr < 0 || sr >= dh.src_size || c1 <= c0) {
            std::fill(out, out + pitch * src_channels, T(0.0f));
            continue;
          }
          const T* in = src + (n * dh.src_size + sr) * dw.src_size * src_channels;
          std::fill(out, out + (c0 - low_w) * src_channels, T(0.0f));
          std::copy(in + c0 * src_channels, in + c1 * src_channels, out + (c0 - low_w) * src_channels);
          std::fill(out + (c1 - low_w) * src_channels, out + pitch * src_channels, T(0.0f));
        }
        std::fill(copy + copy_rows * pitch * src_channels, copy + copy_pixels * src_channels, T(0.0f));
        copied = nb_index;
      }
      const ColumnBlock col = column(cb);
      const int64_t tiles = CeilDiv(rows * pitch, mr);
      for (int64_t k = 0; k < chunks; ++k) {
        const int64_t k0 = k * chunk, len = std::min(chunk, depth - k0);
        for (int64_t t = 0; t < taps; ++t) {
          a[t] = copy + tap_offset[t] + col.src_offset + k0;
          b[t] = col.panel + tap_slot[t] * col.tap_stride + k0 * col.row_floats;
        }
        affine(tiles, taps, a, src_channels, b, len, cbuf, nb, k > 0);
      }
      for (int64_t i = 0; i < rows; ++i) {
        T* out = dst + ((n * dh.size + i0 + i) * dw.size) * dst_channels + col.dst_offset;
        for (int64_t j = 0; j < dw.size; ++j) {
          WriteOut(cbuf + (i * pitch + j) * nb, col.width, out + j * dst_channels);
        }
      }
    }
  });
}

DimMap ForwardDim(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t dilation,
                  int64_t taps) {
  DimMap d;
  d.size = out, d.src_size = in, d.stride = stride, d.pad = pad, d.dilation = dilation;
  d.taps = taps;
  return d;
}

DimMap TransposedDim(int64_t in, int64_t out, int64_t stride, int64_t pad, int64_t dilation,
                     int64_t taps) {
  DimMap d = ForwardDim(in, out, stride, pad, dilation, taps);
  d.transposed = true;
  return d;
}

// Depthwise channels [begin, end) handled by one kernel shape.
struct ChannelSegment {
  int64_t begin, end;
  const DepthwiseKernel* kernel;
};

// The channels in blocks of the widest depthwise kernel that fits, then narrower ones; a
// remainder under 16 goes with the 16-wide kernel, which sums it in scalar code.
std::vector<ChannelSegment> DepthwiseSegments(int64_t channels) {
  const KernelTable& table = Kernels();
  std::vector<ChannelSegment> out;
  int64_t begin = 0;
  for (int i = 2; i >= 0; --i) {
    const int64_t nb = table.dw[i].nb;
    const int64_t end = i == 0 ? channels : begin + (channels - begin) / nb * nb;
    if (end > begin && (out.empty() || out.back().kernel != &table.dw[i])) {
      out.push_back({begin, end, &table.dw[i]});
      begin = end;
    }
  }
  return out;
}

// A depthwise channel block: [begin, begin + width) through a kernel of nb channels (the
// block is summed in scalar code where width < nb).
struct DepthwiseBlock {
  int64_t begin, width;
  const DepthwiseKernel* kernel;
};

std::vector<DepthwiseBlock> DepthwiseBlocks(int64_t channels) {
  std::vector<DepthwiseBlock> out;
  for (const ChannelSegment& seg : DepthwiseSegments(channels)) {
    for (int64_t c = seg.begin; c < seg.end; c += seg.kernel->nb) {
      out.push_back({c, std::min<int64_t>(seg.kernel->nb, seg.end - c), seg.kernel});
    }
  }
  return out;
}

bool IsDepthwiseOne(const ConvGeometry& g) {
  return g.filter_in_depth == 1 && g.groups == g.in_depth && g.out_depth == g.in_depth;
}

// Backprop input for few input channels (one group): per filter row, a GEMM of each output
// gradient row against the filter with (filter column, input channel) as its columns,
// scattered into the input row it reaches. With 3 input channels and a 7-wide filter the
// GEMM is 21 columns wide, where one column per input channel would leave most vector lanes
// empty. A unit owns one input-gradient row and adds its contributions in a fixed order.
template <typename T>
void BackpropInputColumnsMerged(const ConvGeometry& g, const T* w, const T* dy, T* dx,
                                const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const int64_t FI = g.filter_in_depth, K = g.out_depth, KW = g.filter_cols;
  const int64_t columns = KW * FI;
  const GemmKernel& gk = PickGemm(columns);
  const int64_t nb = gk.nb, mr = gk.mr, blocks = CeilDiv(columns, nb), width = blocks * nb;
  // A panel per (filter row, column block), its K rows nb floats apart as the micro-kernels
  // read them: panel[((kh * blocks + cb) * K + k) * nb + j] = w[kh][kw][ci][k] for the column
  // cb * nb + j = kw * FI + ci, zero past `columns`.
  std::vector<float> panel(g.filter_rows * blocks * K * nb, 0.0f);
  for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < columns; ++j) {
        panel[((kh * blocks + j / nb) * K + k) * nb + j % nb] =
            static_cast<float>(w[((kh * KW) + j / FI) * FI * K + j % FI * K + k]);
      }
    }
  }
  if (blocks > 1) Note(Path::kColumnsMergedBlocks);
  std::vector<T> zeros(K, T(0.0f));
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
          const float* b = panel.data() + (kh * blocks + cb) * K * nb;
          if (full_tiles > 0) {
            Note(Path::kColumnsMergedFullTiles);
            NoteKernel(gk.affine[kind]);
            const void* row_start = dy_row;
            gk.affine[kind](full_tiles, 1, &row_start, K, &b, K, contrib + cb * nb, width,
                            false);
          }
          const int64_t rest = g.out_cols - full_tiles * mr;
          if (rest > 0) {
            Note(Path::kColumnsMergedTail);
            NoteKernel(gk.indirect[kind]);
            for (int64_t m = 0; m < mr; ++m) {
              a[m] = m < rest ? static_cast<const void*>(dy_row + (full_tiles * mr + m) * K)
                              : static_cast<const void*>(zeros.data());
            }
            gk.indirect[kind](1, a, &b, K, tail, false);
            for (int64_t m = 0; m < rest; ++m) {
              std::copy(tail + m * nb, tail + (m + 1) * nb,
                        contrib + (full_tiles * mr + m) * width + cb * nb);
            }
          }
        }
        for (int64_t ow = 0; ow < g.out_cols; ++ow) {
          const float* c = contrib + ow * width;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t iw = ow * g.stride_cols - g.pad_left + kw * g.dilation_cols;
            if (iw < 0 || iw >= g.in_cols) continue;
            float* r = row + iw * FI;
            for (int64_t ci = 0; ci < FI; ++ci) r[ci] += c[kw * FI + ci];
          }
        }
      }
      WriteOut(row, g.in_cols * FI, dx + (n * g.in_rows + ih) * g.in_cols * FI);
    }
  });
}

// Depthwise (multiplier 1) forward or backprop input, NHWC: one filter value per (tap,
// channel), the same walk for both directions. A work unit is one computed row of one image.
// The row's pixels go by column class (one for forward; one per stride residue for backprop
// input, so no multiply touches an inserted zero). Inside a class, the pixels whose every tap
// reads inside the source go in groups of a few tiles, and each group runs through every
// channel block before the next group starts: the source pixels a group reads are fetched
// from memory once, whole, and stay in the L1 cache across its channel blocks. Where the
// column taps read neighbouring source columns (no dilation; spacing 1 or 2), the row
// kernels load each source vector once for every tap that reads it. The other
// pixels (the row's ends, and what is left over) take the indirect kernel, with taps that
// fall outside the source pointing at zeros. Channels past the last 16-wide block are summed
// in scalar code.
template <typename T>
void DepthwiseRowsNhwc(const ConvGeometry& g, const DimMap& dh, const DimMap& dw, const T* w,
                       const T* src, T* dst, const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const int64_t C = g.in_depth, KW = g.filter_cols, taps = g.filter_rows * KW;
  std::vector<float> panel(taps * C);
  for (int64_t i = 0; i < taps * C; ++i) panel[i] = static_cast<float>(w[i]);

  // Channel blocks; one narrower than its kernel (the remainder under 16) is summed in
  // scalar code.
  const std::vector<DepthwiseBlock> blocks = DepthwiseBlocks(C);
  const int64_t nblocks = static_cast<int64_t>(blocks.size());
  const auto is_vector = [](const DepthwiseBlock& blk) { return blk.width == blk.kernel->nb; };
  // Inside pixels go in groups of whole tiles of every kernel, of about kDepthwiseGroupBytes
  // of source.
  int64_t max_mr = 1, max_nb = 1, unit_mr = 1;
  for (const DepthwiseBlock& blk : blocks) {
    max_mr = std::max<int64_t>(max_mr, blk.kernel->mr);
    max_nb = std::max<int64_t>(max_nb, blk.kernel->nb);
    unit_mr = std::lcm<int64_t>(unit_mr, blk.kernel->mr);
  }
  const int64_t group = std::max<int64_t>(1, kDepthwiseGroupBytes / (dh.taps * C * sizeof(T)) /
                                                 unit_mr) * unit_mr;

  // Column class c: members j < count at column c + j * step; candidate tap a reads source
  // column bases[a] + j * mult; members [lo, hi) read inside the source through every tap.
  // Where the candidates read neighbouring columns (no dilation) and the row kernels cover
  // the class's spacing and tap count, `by_column` lists the candidates from the leftmost
  // column read (`first`) rightwards, and the inside members go through the row kernels.
  struct ColumnClass {
    int64_t count = 0, lo = 0, hi = 0, first = 0;
    std::vector<int64_t> taps, bases, by_column;
  };
  std::vector<ColumnClass> column_classes(dw.classes());
  for (int64_t c = 0; c < dw.classes(); ++c) {
    ColumnClass& cc = column_classes[c];
    cc.count = dw.count(c);
    dw.Candidates(c, &cc.taps, &cc.bases);
    cc.lo = 0, cc.hi = cc.count;
    for (int64_t base : cc.bases) {
      cc.lo = std::max(cc.lo, CeilDivSigned(-base, dw.mult()));
      cc.hi = std::min(cc.hi, FloorDivSigned(dw.src_size - 1 - base, dw.mult()) + 1);
    }
    cc.hi = std::max(cc.hi, cc.lo);
    const int64_t cols = static_cast<int64_t>(cc.bases.size());
    if (cols == 0 || cols > kDepthwiseRowCols || dw.mult() > kDepthwiseRowMults ||
        blocks.front().kernel->row[dw.mult() - 1][cols - 1][kind] == nullptr) {
      continue;
    }
    cc.first = *std::min_element(cc.bases.begin(), cc.bases.end());
    std::vector<int64_t> order(cols, -1);
    for (int64_t a = 0; a < cols; ++a) {
      const int64_t k = cc.bases[a] - cc.first;
      if (k < cols) order[k] = a;
    }
    if (std::find(order.begin(), order.end(), -1) == order.end()) cc.by_column = order;
  }
  std::vector<std::vector<int64_t>> row_taps(dh.classes()), row_bases(dh.classes());
  for (int64_t c = 0; c < dh.classes(); ++c) dh.Candidates(c, &row_taps[c], &row_bases[c]);
  const std::vector<T> zeros(max_nb, T(0.0f));
  const int64_t pixel_step = dw.mult() * C;

  parallel_for(g.batch * dh.size, Cost(2.0 * dw.size * C * taps / (dh.step() * dw.step())),
               [&](int64_t begin, int64_t end) {
    const void** const a = Scratch<const void*, 15>(taps * max_mr);
    const float** const b = Scratch<const float*, 16>(nblocks * taps);
    int64_t* const src_rows = Scratch<int64_t, 17>(g.filter_rows);
    int64_t* const tap_rows = Scratch<int64_t, 18>(g.filter_rows);
    float* const cbuf = Scratch<float, 19>(std::max(group, max_mr) * max_nb);
    // Element offset of member 0's source pixel through each tap (through each filter row at
    // the class's first column, for the row kernels), and the filters in the row kernels'
    // order.
    int64_t* const tap_offset = Scratch<int64_t, 20>(taps);
    const float** const b_rows = Scratch<const float*, 21>(nblocks * taps);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / dh.size, r = unit % dh.size;
      const int64_t rc = r % dh.step(), i = r / dh.step();
      // The source rows this row reads, and through which filter rows.
      int64_t rows = 0;
      for (size_t t = 0; t < row_taps[rc].size(); ++t) {
        const int64_t s = row_bases[rc][t] + i * dh.mult();
        if (s >= 0 && s < dh.src_size) src_rows[rows] = s, tap_rows[rows++] = row_taps[rc][t];
      }
      T* const out_row = dst + (n * dh.size + r) * dw.size * C;
      for (int64_t cw = 0; cw < dw.classes(); ++cw) {
        const ColumnClass& cc = column_classes[cw];
        const int64_t cols = static_cast<int64_t>(cc.taps.size()), count = rows * cols;
        const auto out_pixel = [&](int64_t j) { return out_row + (cw + j * dw.step()) * C; };
        if (count == 0) {
          Note(Path::kDepthwiseNoTap);
          for (int64_t j = 0; j < cc.count; ++j) std::fill(out_pixel(j), out_pixel(j) + C, T(0.0f));
          continue;
        }
        // The source pixel of member j through tap t = (row tap, column tap), or null.
        const auto source = [&](int64_t t, int64_t j) -> const T* {
          const int64_t col = cc.bases[t % cols] + j * dw.mult();
          if (col < 0 || col >= dw.src_size) return nullptr;
          return src + ((n * dh.src_size + src_rows[t / cols]) * dw.src_size + col) * C;
        };
        const bool by_rows = !cc.by_column.empty();
        for (int64_t t = 0; t < count; ++t) {
          const int64_t column = by_rows ? cc.first : cc.bases[t % cols];
          tap_offset[t] = ((n * dh.src_size + src_rows[t / cols]) * dw.src_size + column) * C;
        }
        for (int64_t k = 0; k < nblocks; ++k) {
          for (int64_t t = 0; t < count; ++t) {
            const float* tap_panel = panel.data() + tap_rows[t / cols] * KW * C + blocks[k].begin;
            b[k * count + t] = tap_panel + cc.taps[t % cols] * C;
            if (by_rows) b_rows[k * count + t] = tap_panel + cc.taps[cc.by_column[t % cols]] * C;
          }
        }
        // Inside pixels [lo, inside_end), group by group, each through every vector block.
        const int64_t inside_end = cc.lo + (cc.hi - cc.lo) / unit_mr * unit_mr;
        for (int64_t p0 = cc.lo; p0 < inside_end; p0 += group) {
          const int64_t pixels = std::min(group, inside_end - p0);
          if (p0 > cc.lo) Note(Path::kDepthwiseGroups);
          for (int64_t k = 0; k < nblocks && is_vector(blocks[k]); ++k) {
            const DepthwiseBlock& blk = blocks[k];
            const DepthwiseKernel& dk = *blk.kernel;
            // The row kernels take one source pointer per filter row.
            const int64_t pointers = by_rows ? rows : count, stride = by_rows ? cols : 1;
            for (int64_t t = 0; t < pointers; ++t) {
              a[t] = src + tap_offset[t * stride] + p0 * pixel_step + blk.begin;
            }
            float* c = cbuf;
            int64_t ldc = dk.nb;
            if constexpr (std::is_same_v<T, float>) c = out_pixel(p0) + blk.begin, ldc = dw.step() * C;
            if (by_rows) {
              Note(Path::kDepthwiseRowKernel);
              NoteKernel(dk.row[dw.mult() - 1][cols - 1][kind]);
              dk.row[dw.mult() - 1][cols - 1][kind](pixels / dk.mr, rows, a, C, b_rows + k * count,
                                                    c, ldc, false);
            } else {
              Note(Path::kDepthwiseAffine);
              NoteKernel(dk.affine[kind]);
              dk.affine[kind](pixels / dk.mr, count, a, pixel_step, b + k * count, c, ldc, false);
            }
            if constexpr (!std::is_same_v<T, float>) {
              for (int64_t m = 0; m < pixels; ++m) {
                WriteOut(cbuf + m * dk.nb, dk.nb, out_pixel(p0 + m) + blk.begin);
              }
            }
          }
        }
        // The other members, e < rest in order, in tiles of the indirect kernel: taps outside
        // the source, and lanes past the last member, read zeros.
        const int64_t rest = cc.count - (inside_end - cc.lo);
        const auto member = [&](int64_t e) { return e < cc.lo ? e : e - cc.lo + inside_end; };
        for (int64_t k = 0; k < nblocks; ++k) {
          const DepthwiseBlock& blk = blocks[k];
          if (!is_vector(blk)) {
            Note(Path::kDepthwiseScalar);
            for (int64_t j = 0; j < cc.count; ++j) {
              for (int64_t c = 0; c < blk.width; ++c) {
                float sum = 0.0f;
                for (int64_t t = 0; t < count; ++t) {
                  const T* p = source(t, j);
                  if (p != nullptr) sum += static_cast<float>(p[blk.begin + c]) * b[k * count + t][c];
                }
                out_pixel(j)[blk.begin + c] = static_cast<T>(sum);
              }
            }
            continue;
          }
          const DepthwiseKernel& dk = *blk.kernel;
          const int64_t mr = dk.mr;
          for (int64_t e0 = 0; e0 < rest; e0 += mr) {
            const int64_t valid = std::min(mr, rest - e0);
            for (int64_t t = 0; t < count; ++t) {
              for (int64_t m = 0; m < mr; ++m) {
                const T* p = m < valid ? source(t, member(e0 + m)) : nullptr;
                a[t * mr + m] = p != nullptr ? static_cast<const void*>(p + blk.begin)
                                             : static_cast<const void*>(zeros.data());
              }
            }
            Note(Path::kDepthwiseEdges);
            NoteKernel(dk.indirect[kind]);
            dk.indirect[kind](count, a, b + k * count, cbuf, false);
            for (int64_t m = 0; m < valid; ++m) {
              WriteOut(cbuf + m * dk.nb, dk.nb, out_pixel(member(e0 + m)) + blk.begin);
            }
          }
        }
      }
    }
  });
}

// Grouped GEMM over the indirection table, depthwise by rows, or (`winograd`, where
// WinogradApplies) Winograd, NHWC, any batch. `forward` picks the direction: forward reads x
// and writes y, otherwise reads dy and writes dx.
template <typename T>
void IndirectNhwc(const ConvGeometry& g, bool forward, bool winograd, const T* w, const T* src,
                  T* dst, const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const int64_t taps = g.filter_rows * g.filter_cols;
  const int64_t FI = g.filter_in_depth, K = g.out_depth, G = g.groups;
  const int64_t Kg = g.out_depth_per_group();
  if (winograd) return WinogradNhwc(g, forward, w, src, dst, parallel_for);
  if (!forward && G == 1 && FI <= 8 && g.filter_cols > 1) {
    Note(Path::kInputColumnsMerged);
    return BackpropInputColumnsMerged(g, w, src, dst, parallel_for);
  }
  DimMap dh, dw;
  if (forward) {
    dh = ForwardDim(g.out_rows, g.in_rows, g.stride_rows, g.pad_top, g.dilation_rows, g.filter_rows);
    dw = ForwardDim(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, g.filter_cols);
  } else {
    dh = TransposedDim(g.in_rows, g.out_rows, g.stride_rows, g.pad_top, g.dilation_rows, g.filter_rows);
    dw = TransposedDim(g.in_cols, g.out_cols, g.stride_cols, g.pad_left, g.dilation_cols, g.filter_cols);
  }
  const int64_t src_channels = forward ? g.in_depth : K, dst_channels = forward ? K : g.in_depth;

  if (IsDepthwiseOne(g)) {
    Note(forward ? Path::kForwardDepthwise : Path::kInputDepthwise);
    return DepthwiseRowsNhwc(g, dh, dw, w, src, dst, parallel_for);
  }

  // Grouped GEMM: per group, columns are the destination channels of the group (forward: Kg
  // output channels; backprop input: FI input channels), the reduction runs over the
  // source channels of the group (FI; Kg) for every tap.
  const int64_t dst_group = forward ? Kg : FI, src_group = forward ? FI : Kg;
  const KernelTable& table = Kernels();
  const GemmKernel& gk = PickGemm(dst_group);
  const int nb = gk.nb;
  const int64_t blocks = CeilDiv(dst_group, nb);
  // bfloat16 with AVX-512 BF16: dot products of bfloat16 pairs along the reduction, on a
  // panel that keeps the filter in bfloat16 pairs (half a float per value).
  const bool pairs = kind == kElemBF16 && table.gemm_bf16_pairs != nullptr;
  const GemmKernel& kernels = pairs ? table.gemm_bf16_pairs[&gk - table.gemm] : gk;
  const int64_t rows = pairs ? CeilDiv(src_group, 2) * 2 : src_group;  // panel rows per tap
  const int64_t row_floats = pairs ? nb / 2 : nb;
  // A 1x1 filter at stride 1 without padding reads each computed pixel's own source pixel:
  // the pass is a plain GEMM over all batch * rows * cols pixels, one affine run.
  const bool pointwise = g.filter_rows == 1 && g.filter_cols == 1 && g.stride_rows == 1 &&
                         g.stride_cols == 1 && g.pad_top == 0 && g.pad_bottom == 0 &&
                         g.pad_left == 0 && g.pad_right == 0;
  // Stride 1 with short tiles (few reduction channels times columns), where the indirect
  // pass would spend about as long setting up the pixels that are not affine as computing
  // them: banded (see RunBanded), its filter slots along the source columns (backprop
  // input's column taps read leftwards), and with few enough channels for a single reduction
  // chunk, one group and no column dilation, the taps of a filter row merged. Longer tiles
  // stay indirect, which writes float results in place.
  const bool banded = !pointwise && g.stride_rows == 1 && g.stride_cols == 1 &&
                      src_group * nb <= kBandedTile;
  const bool reversed = banded && !forward;
  const bool merge = banded && G == 1 && g.dilation_cols == 1 && rows == src_group &&
                     taps * rows * row_floats <= kPanelFloats;
  // panel[((grp * blocks + cb) * taps + FilterSlot(t)) * rows + r][j], as floats or
  // bfloat16 pairs; each unit below clears its part first, so the workspace needs no
  // clearing of its own.
  Workspace panel_space(G * blocks * taps * rows * row_floats * sizeof(float));
  float* const panel = panel_space.data<float>();
  // Packed in parallel, a unit per (group, tap, column block): a large filter takes as long
  // to pack as a small batch takes to convolve. Loops run along w's contiguous axis (k:
  // columns forward, rows backward), and a thread's consecutive units along its rows.
  parallel_for(G * blocks * taps, 2 * rows * nb, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t grp = unit / (blocks * taps), t = unit / blocks % taps, cb = unit % blocks;
      const int64_t slot = FilterSlot(t, g.filter_cols, reversed);
      float* const out = panel + ((grp * blocks + cb) * taps + slot) * rows * row_floats;
      const int64_t width = std::min<int64_t>(nb, dst_group - cb * nb);  // valid columns
      // Panel row r, column j is w[t][ci][k] with, forward, (ci, k) = (r, grp*Kg + cb*nb + j)
      // and, backprop input, (cb*nb + j, grp*Kg + r); zero past the group's rows and columns.
      // Floats: row r at out + r * nb. Pairs: the 32-bit slot (p, j) holds rows 2p (low
      // half) and 2p + 1.
      std::fill(out, out + rows * row_floats, 0.0f);
      uint32_t* const out32 = reinterpret_cast<uint32_t*>(out);
      const auto bits = [](const T& v) {
        uint16_t h;
        std::memcpy(&h, &v, 2);
        return uint32_t{h};
      };
      if (forward) {
        const T* const in = w + t * FI * K + grp * Kg + cb * nb;  // row r at in + r * K
        for (int64_t r = 0; r < src_group; ++r) {
          const T* row = in + r * K;
          if (pairs) {
            // The bits of a bfloat16 are its first (and only) member, a uint16_t.
            table.pack_halves(reinterpret_cast<const uint16_t*>(row), width, out32 + r / 2 * nb,
                              r % 2 == 1);
          } else {
            for (int64_t j = 0; j < width; ++j) out[r * nb + j] = static_cast<float>(row[j]);
          }
        }
      } else {
        for (int64_t j = 0; j < width; ++j) {
          const T* const in = w + (t * FI + cb * nb + j) * K + grp * Kg;  // row r at in[r]
          for (int64_t r = 0; r < src_group; ++r) {
            if (pairs) {
              out32[r / 2 * nb + j] |= bits(in[r]) << (r % 2 * 16);
            } else {
              out[r * nb + j] = static_cast<float>(in[r]);
            }
          }
        }
      }
    }
  });
  int64_t chunk = std::max<int64_t>(
      16, std::min<int64_t>(src_group, kPanelFloats / std::max<int64_t>(1, taps * row_floats)));
  if (pairs) chunk += chunk % 2;  // chunks start at even rows of a pair panel
  const auto column = [&](int64_t unit) {
    const int64_t grp = unit / blocks, cb = unit % blocks;
    ColumnBlock col;
    col.src_offset = grp * src_group;
    col.dst_offset = grp * dst_group + cb * nb;
    col.width = std::min<int64_t>(nb, dst_group - cb * nb);
    col.panel = panel + (grp * blocks + cb) * taps * rows * row_floats;
    col.tap_stride = rows * row_floats;
    col.row_floats = row_floats;
    return col;
  };
  const GemmIndirectFn indirect = kernels.indirect[kind];
  const GemmAffineFn affine = kernels.affine[kind];
  const TileKernel kernel = [indirect, affine](int64_t tiles, int64_t count, const void* const* a,
                                               int64_t pixel_step, const float* const* b,
                                               int64_t len, int64_t, float* c, int64_t ldc,
                                               bool accumulate) {
    if (pixel_step > 0) {
      NoteKernel(affine);
      return affine(tiles, count, a, pixel_step, b, len, c, ldc, accumulate);
    }
    NoteKernel(indirect);
    indirect(count, a, b, len, c, accumulate);
  };
  if (pairs) Note(Path::kGemmBf16Pairs);
  if (banded) {
    Note(forward ? (merge ? Path::kForwardBandedMerged : Path::kForwardBanded)
                 : (merge ? Path::kInputBandedMerged : Path::kInputBanded));
    return RunBanded(g.batch, dh, dw, g.filter_cols, reversed, merge, gk.mr, nb, src,
                     src_channels, dst, dst_channels, G * blocks, src_group,
                     std::min(chunk, src_group), column, affine, parallel_for);
  }
  if (pointwise) {
    Note(forward ? Path::kForwardPointwise : Path::kInputPointwise);
    const int64_t pixels = g.batch * g.in_rows * g.in_cols;
    return RunIndirect(1, ForwardDim(1, 1, 1, 0, 1, 1), ForwardDim(pixels, pixels, 1, 0, 1, 1),
                       1, gk.mr, nb, src, src_channels, dst, dst_channels, G * blocks, src_group,
                       std::min(chunk, src_group), column, kernel, parallel_for);
  }
  Note(forward ? Path::kForwardIndirect : Path::kInputIndirect);
  RunIndirect(g.batch, dh, dw, g.filter_cols, gk.mr, nb, src, src_channels, dst, dst_channels,
              G * blocks, src_group, std::min(chunk, src_group), column, kernel, parallel_for);
}

// Runs `nhwc(gc, src_images, dst_images)` on chunks of the images of an NCHW pass, through
// NHWC copies (gc is the geometry with the chunk's batch).
template <typename T, typename Fn>
void InNhwcChunks(const ConvGeometry& g, const T* src, int64_t src_c, int64_t src_hw, T* dst,
                  int64_t dst_c, int64_t dst_hw, const ParallelFor& parallel_for, const Fn& nhwc) {
  const int64_t chunk = NchwChunk(g.batch, std::max(src_c * src_hw, dst_c * dst_hw));
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

// ---------------------------------------------------------------------------------------
// Backprop filter.

// The columns [lo, hi) of output index o's row that read an input index in [0, in_size)
// through tap t: o * stride - pad + t * dilation in range.
void ReadRange(int64_t out_size, int64_t in_size, int64_t stride, int64_t pad, int64_t dilation,
               int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t offset = t * dilation - pad;  // input index of output 0
  *lo = std::min(out_size, std::max<int64_t>(0, CeilDivSigned(-offset, stride)));
  *hi = std::min<int64_t>(out_size, FloorDivSigned(in_size - 1 - offset, stride) + 1);
  if (*hi < *lo) *hi = *lo;
}

// How the filter gradient is split into work units: (slice, filter row, block of filter
// columns, group, row chunk, output-channel chunk); each unit sums its (batch, row) slice in
// order into its own float accumulators, and slices are added in order at the end. A
// unit's GEMM rows are (filter column in its block, input channel) pairs: with one group
// and no column dilation, the input values of neighbouring filter columns lie side by side,
// so small channel counts are merged across the whole filter row (`merged_cols` columns per
// block) instead of leaving most rows of a tile empty.
struct FilterPlan {
  int64_t slices = 1, merged_cols = 1, ci_chunk = 0, k_chunk = 0, ci_chunks = 0, k_chunks = 0;
  int64_t units = 0;
};

// A filter-gradient slice's rows of x and dy should fit in this much L2 cache: every unit of
// the slice reads all of them (each for its own tap, group and channel chunk).
constexpr double kFilterSliceBytes = 1 << 20;
// The slices' float accumulators together stay under this (or one slice's).
constexpr int64_t kFilterAccBytes = int64_t{8} << 20;

FilterPlan PlanFilter(const ConvGeometry& g, int mr, int nb, int64_t element_size) {
  FilterPlan p;
  const int64_t FI = g.filter_in_depth, columns = g.out_depth_per_group();
  if (g.groups == 1 && g.dilation_cols == 1 && FI < 2 * mr) p.merged_cols = g.filter_cols;
  const int64_t channels = p.merged_cols * FI;
  int64_t ci_tiles = std::max<int64_t>(1, CeilDiv(channels, mr));
  int64_t k_tiles = std::max<int64_t>(1, CeilDiv(columns, nb));
  // Bound the unit's accumulators to 64K floats (256 KiB).
  while (ci_tiles * mr * k_tiles * nb > 65536 && (ci_tiles > 1 || k_tiles > 1)) {
    if (ci_tiles >= k_tiles) ci_tiles = CeilDiv(ci_tiles, 2); else k_tiles = CeilDiv(k_tiles, 2);
  }
  p.ci_chunk = ci_tiles * mr;
  p.k_chunk = k_tiles * nb;
  p.ci_chunks = CeilDiv(channels, p.ci_chunk);
  p.k_chunks = CeilDiv(columns, p.k_chunk);
  // Parallelism beyond that comes from slices of the rows, never from narrower channel
  // chunks: a slice reads only its rows, while every channel chunk would read all of them.
  // Slices also keep the rows their units share in the cache: with one slice, each unit
  // would stream all of x and dy from memory.
  const int64_t base = g.filter_rows * (g.filter_cols / p.merged_cols) * g.groups *
                       p.ci_chunks * p.k_chunks;
  const double bytes = static_cast<double>(element_size) *
                       (g.input_elements() + static_cast<double>(g.output_elements()));
  const int64_t cached = std::min(static_cast<int64_t>(std::ceil(bytes / kFilterSliceBytes)),
                                  std::max<int64_t>(1, kFilterAccBytes / (4 * g.filter_elements())));
  p.slices = std::max<int64_t>(1, std::min(g.batch * g.out_rows,
                                           std::max(cached, CeilDiv(kMinUnits, base))));
  p.units = p.slices * base;
  return p;
}

// Output pixels whose operands a filter-gradient unit packs at a time.
constexpr int64_t kFilterBlockPixels = 256;
static_assert(kFilterBlockPixels % 2 == 0, "bfloat16 pairs of packed pixels fill whole blocks");
// Runs of at least this many output columns of float data are reduced in place, unpacked.
constexpr int64_t kFilterInPlaceRun = 24;

// Adds this pass's contribution to acc[slice][tap][ci][k] (float, the filter's layout per
// slice). NHWC, any batch. Float rows whose columns every GEMM row reads for a long run go
// through the micro-kernel in place. Everything else is packed, up to kFilterBlockPixels
// output pixels at a time (the input values of the GEMM rows, zero where a merged filter
// column falls outside the input, and the output gradient of the columns, as float), and
// the block is reduced at once, so short rows and borders cost little more than long ones.
template <typename T>
void FilterGemmNhwc(const ConvGeometry& g, const FilterPlan& plan, const GemmKernel& gk,
                    const T* x, const T* dy, float* acc, const ParallelFor& parallel_for) {
  const int64_t taps = g.filter_rows * g.filter_cols, FI = g.filter_in_depth, K = g.out_depth;
  const int64_t Kg = g.out_depth_per_group(), C = g.in_depth, mr = gk.mr, nb = gk.nb;
  const int64_t rows = g.batch * g.out_rows, filter_size = taps * FI * K;
  const int64_t per_slice = plan.units / plan.slices;
  // bfloat16 where the processor has AVX-512 BF16: the packed operands hold bfloat16 pairs of
  // consecutive packed pixels (the second zero past an odd count), reduced by dot products.
  const KernelTable& table = Kernels();
  const bool pairs = std::is_same_v<T, Eigen::bfloat16> && table.gemm_bf16_pairs != nullptr;
  const GemmStridedFn strided = pairs ? table.gemm_bf16_pairs[&gk - table.gemm].strided : gk.strided;
  const PackHalvesFn pack_halves = table.pack_halves;
  const int64_t col_blocks = g.filter_cols / plan.merged_cols;
  const int64_t Q = plan.merged_cols * FI;  // GEMM rows of a unit: (column in block, channel)
  Note(Path::kFilterGemm);
  if (plan.merged_cols > 1) Note(Path::kFilterMergedCols);
  if (plan.ci_chunks > 1 || plan.k_chunks > 1) Note(Path::kFilterSplitAccumulators);
  if (plan.slices > 1) Note(Path::kFilterSlices);
  if (pairs) Note(Path::kFilterPairs);
  NoteKernel(strided);
  std::vector<int64_t> lo(g.filter_cols), hi(g.filter_cols);
  for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
    ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo[kw], &hi[kw]);
  }
  parallel_for(plan.units, Cost(2.0 * rows / plan.slices * g.out_cols * plan.ci_chunk * plan.k_chunk),
               [&](int64_t begin, int64_t end) {
    float* const local = Scratch<float, 15>(plan.ci_chunk * plan.k_chunk);
    float* const a_pack = Scratch<float, 16>(kFilterBlockPixels * plan.ci_chunk);
    float* const b_pack = Scratch<float, 17>(kFilterBlockPixels * plan.k_chunk);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t slice = unit / per_slice;
      int64_t u = unit % per_slice;
      const int64_t kc = u % plan.k_chunks;
      u /= plan.k_chunks;
      const int64_t cc = u % plan.ci_chunks;
      u /= plan.ci_chunks;
      const int64_t grp = u % g.groups;
      u /= g.groups;
      const int64_t kh = u / col_blocks, kw0 = u % col_blocks * plan.merged_cols;
      const int64_t q0 = cc * plan.ci_chunk, q1 = std::min(Q, q0 + plan.ci_chunk);
      const int64_t k0 = kc * plan.k_chunk, k1 = std::min(Kg, k0 + plan.k_chunk);
      // Row q of the unit is filter tap (kh, kw0 + q / FI), input channel q % FI.
      const auto out_row = [&](int64_t q) {
        return acc + slice * filter_size + ((kh * g.filter_cols + kw0 + q / FI) * FI + q % FI) * K +
               grp * Kg;
      };
      for (int64_t q = q0; q < q0 + plan.ci_chunk; ++q) {
        float* l = local + (q - q0) * plan.k_chunk;
        for (int64_t k = k0; k < k0 + plan.k_chunk; ++k) {
          l[k - k0] = q < q1 && k < k1 ? out_row(q)[k] : 0.0f;
        }
      }
      // The output columns some row of the unit reads, and those every row reads.
      int64_t ow_lo = g.out_cols, ow_hi = 0, in_lo = 0, in_hi = g.out_cols;
      for (int64_t kw = kw0 + q0 / FI; kw <= kw0 + (q1 - 1) / FI; ++kw) {
        in_lo = std::max(in_lo, lo[kw]);
        in_hi = std::min(in_hi, hi[kw]);
        if (hi[kw] == lo[kw]) continue;  // a column no output reads through
        ow_lo = std::min(ow_lo, lo[kw]);
        ow_hi = std::max(ow_hi, hi[kw]);
      }
      // Long runs of float columns every row reads go to the micro-kernel in place; the
      // rest is packed.
      const bool in_place = std::is_same_v<T, float> && k1 - k0 == plan.k_chunk &&
                            in_hi - in_lo >= kFilterInPlaceRun;
      if (!in_place) in_lo = in_hi = ow_hi;
      int64_t count = 0;  // pixels packed
      // Pair slot r of a pair operand holds packed pixels 2r (low half) and 2r + 1 (high
      // half): an even pixel's bits are stored with zero high halves, an odd pixel's are
      // or-ed in above them. `n` values from `in`, or zeros where `in` is null.
      const auto put_pair = [&](uint32_t* out, const T* in, int64_t n) {
        const bool even = count % 2 == 0;
        if (in == nullptr) {
          if (even) std::fill(out, out + n, uint32_t{0});
          return;
        }
        // The bits of a bfloat16 are its first (and only) member, a uint16_t.
        NoteKernel(pack_halves);
        pack_halves(reinterpret_cast<const uint16_t*>(in), n, out, !even);
      };
      const auto flush = [&] {
        // An odd count's last slot already has its zero partner.
        const int64_t len = pairs ? CeilDiv(count, 2) : count;
        Note(Path::kFilterPacked);
        if (count == kFilterBlockPixels) Note(Path::kFilterFullBlock);
        for (int64_t q = q0; q < q1; q += mr) {
          for (int64_t k = k0; k < k1; k += nb) {
            strided(len, a_pack + (q - q0), plan.ci_chunk, std::min<int64_t>(mr, q1 - q),
                    b_pack + (k - k0), plan.k_chunk,
                    local + (q - q0) * plan.k_chunk + (k - k0), plan.k_chunk);
          }
        }
        count = 0;
      };
      const int64_t row0 = rows * slice / plan.slices, row1 = rows * (slice + 1) / plan.slices;
      for (int64_t row = row0; row < row1 && ow_hi > ow_lo; ++row) {
        const int64_t n = row / g.out_rows, oh = row % g.out_rows;
        const int64_t ih = oh * g.stride_rows - g.pad_top + kh * g.dilation_rows;
        if (ih < 0 || ih >= g.in_rows) continue;
        const T* x_row = x + (n * g.in_rows + ih) * g.in_cols * C + grp * FI;
        const T* dy_row = dy + (n * g.out_rows + oh) * g.out_cols * K + grp * Kg;
        if constexpr (std::is_same_v<T, float>) {
          if (in_place) {
            Note(Path::kFilterInPlace);
            // Row q's input at column ow is x_row[(ow * sw - pl + kw0 * dw) * C + q]: the
            // rows of merged columns are adjacent.
            const float* a = x_row + ((in_lo * g.stride_cols - g.pad_left + kw0 * g.dilation_cols) * C + q0);
            for (int64_t q = q0; q < q1; q += mr) {
              for (int64_t k = k0; k < k1; k += nb) {
                strided(in_hi - in_lo, a + (q - q0), g.stride_cols * C, std::min<int64_t>(mr, q1 - q),
                        dy_row + in_lo * K + k, K,
                        local + (q - q0) * plan.k_chunk + (k - k0), plan.k_chunk);
              }
            }
          }
        }
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
          if (ow == in_lo) ow = in_hi;
          if (ow >= ow_hi) break;
          const T* d = dy_row + ow * K;
          if (pairs) {
            uint32_t* const a32 = reinterpret_cast<uint32_t*>(a_pack) + count / 2 * plan.ci_chunk;
            uint32_t* const b32 = reinterpret_cast<uint32_t*>(b_pack) + count / 2 * plan.k_chunk;
            put_pair(b32, d + k0, k1 - k0);
            put_pair(b32 + (k1 - k0), nullptr, plan.k_chunk - (k1 - k0));
            for (int64_t q = q0; q < q1;) {
              const int64_t kw = kw0 + q / FI, q_end = std::min(q1, q - q % FI + FI);
              const int64_t iw = ow * g.stride_cols - g.pad_left + kw * g.dilation_cols;
              const bool inside = iw >= 0 && iw < g.in_cols;
              put_pair(a32 + (q - q0), inside ? x_row + iw * C + q % FI : nullptr, q_end - q);
              q = q_end;
            }
            if (++count == kFilterBlockPixels) flush();
            continue;
          }
          float* b = b_pack + count * plan.k_chunk;
          for (int64_t k = k0; k < k1; ++k) b[k - k0] = static_cast<float>(d[k]);
          std::fill(b + (k1 - k0), b + plan.k_chunk, 0.0f);
          float* a = a_pack + count * plan.ci_chunk;
          for (int64_t q = q0; q < q1;) {
            // The channels of one filter column: contiguous, or zero outside the input.
            const int64_t kw = kw0 + q / FI, q_end = std::min(q1, q - q % FI + FI);
            const int64_t iw = ow * g.stride_cols - g.pad_left + kw * g.dilation_cols;
            if (iw >= 0 && iw < g.in_cols) {
              const T* xs = x_row + iw * C + q % FI;
              for (int64_t i = 0; i < q_end - q; ++i) a[q - q0 + i] = static_cast<float>(xs[i]);
            } else {
              std::fill(a + (q - q0), a + (q_end - q0), 0.0f);
            }
            q = q_end;
          }
          if (++count == kFilterBlockPixels) flush();
        }
      }
      if (count > 0) flush();
      for (int64_t q = q0; q < q1; ++q) {
        const float* l = local + (q - q0) * plan.k_chunk;
        float* o = out_row(q);
        for (int64_t k = k0; k < k1; ++k) o[k] = l[k - k0];
      }
    }
  });
}

// Depthwise: a unit is (slice, channel block).
FilterPlan PlanDepthwiseFilter(const ConvGeometry& g) {
  FilterPlan p;
  const int64_t blocks = static_cast<int64_t>(DepthwiseBlocks(g.in_depth).size());
  p.slices = std::max<int64_t>(1, std::min(g.batch * g.out_rows, CeilDiv(kMinUnits, blocks)));
  p.units = p.slices * blocks;
  return p;
}

// Depthwise (multiplier 1) filter gradient into acc[slice][tap][c]; a unit is (slice,
// channel block) and walks every tap, so each row of x and dy is read once per unit.
template <typename T>
void FilterDepthwiseNhwc(const ConvGeometry& g, const FilterPlan& plan, const T* x, const T* dy,
                         float* acc, const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const int64_t C = g.in_depth, taps = g.filter_rows * g.filter_cols;
  const std::vector<DepthwiseBlock> blocks = DepthwiseBlocks(C);
  const int64_t rows = g.batch * g.out_rows, count = static_cast<int64_t>(blocks.size());
  const int64_t max_nb = Kernels().dw[2].nb;
  Note(Path::kFilterDepthwise);
  std::vector<int64_t> lo(g.filter_cols), hi(g.filter_cols);
  for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
    ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo[kw], &hi[kw]);
  }
  parallel_for(plan.units, Cost(2.0 * rows / plan.slices * g.out_cols * max_nb * taps),
               [&](int64_t begin, int64_t end) {
    float* const local = Scratch<float, 18>(taps * max_nb);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t slice = unit / count;
      const DepthwiseBlock& blk = blocks[unit % count];
      const int64_t c0 = blk.begin, width = blk.width, nb = blk.kernel->nb;
      const DepthwiseStridedFn vector_kernel = blk.kernel->strided[kind];
      float* out = acc + slice * taps * C;
      for (int64_t t = 0; t < taps; ++t) {
        for (int64_t j = 0; j < nb; ++j) local[t * nb + j] = j < width ? out[t * C + c0 + j] : 0.0f;
      }
      const int64_t row0 = rows * slice / plan.slices, row1 = rows * (slice + 1) / plan.slices;
      for (int64_t row = row0; row < row1; ++row) {
        const int64_t n = row / g.out_rows, oh = row % g.out_rows;
        const T* dy_row = dy + (n * g.out_rows + oh) * g.out_cols * C + c0;
        for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
          const int64_t ih = oh * g.stride_rows - g.pad_top + kh * g.dilation_rows;
          if (ih < 0 || ih >= g.in_rows) continue;
          const T* x_row = x + (n * g.in_rows + ih) * g.in_cols * C + c0;
          for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
            const int64_t len = hi[kw] - lo[kw];
            if (len <= 0) continue;
            const int64_t iw_lo = lo[kw] * g.stride_cols - g.pad_left + kw * g.dilation_cols;
            const T* a = x_row + iw_lo * C;
            const T* b = dy_row + lo[kw] * C;
            float* l = local + (kh * g.filter_cols + kw) * nb;
            if (width == nb) {
              NoteKernel(vector_kernel);
              vector_kernel(len, a, g.stride_cols * C, b, C, l);
            } else {
              Note(Path::kFilterDepthwiseScalar);
              // Fewer than 16 channels left: a whole vector could read past the tensor's end.
              for (int64_t j = 0; j < width; ++j) {
                float sum = l[j];
                for (int64_t o = 0; o < len; ++o) {
                  sum += static_cast<float>(a[o * g.stride_cols * C + j]) * static_cast<float>(b[o * C + j]);
                }
                l[j] = sum;
              }
            }
          }
        }
      }
      for (int64_t t = 0; t < taps; ++t) {
        for (int64_t j = 0; j < width; ++j) out[t * C + c0 + j] = local[t * nb + j];
      }
    }
  });
}

bool AnyEmpty(int64_t a, int64_t b, int64_t c) { return a <= 0 || b <= 0 || c <= 0; }

// Forward (reads x, writes y) or backprop input (reads dy, writes dx) in either layout.
template <typename T>
bool FastIndirect(const ConvGeometry& g, Layout layout, bool forward, const T* w, const T* src,
                  T* dst, const ParallelFor& parallel_for) {
  if constexpr (KindOf<T>() < 0) {
    return false;
  } else {
    if (AnyEmpty(g.input_elements(), g.filter_elements(), g.output_elements())) return false;
    // Exact mode is read once per call, here.
    const bool winograd = WinogradApplies<T>(g, forward);
    if (layout == Layout::kNHWC) {
      IndirectNhwc(g, forward, winograd, w, src, dst, parallel_for);
      return true;
    }
    int64_t src_c = g.in_depth, src_hw = g.in_rows * g.in_cols;
    int64_t dst_c = g.out_depth, dst_hw = g.out_rows * g.out_cols;
    if (!forward) std::swap(src_c, dst_c), std::swap(src_hw, dst_hw);
    InNhwcChunks(g, src, src_c, src_hw, dst, dst_c, dst_hw, parallel_for,
                 [&](const ConvGeometry& gc, const T* s, T* d) {
                   IndirectNhwc(gc, forward, winograd, w, s, d, parallel_for);
                 });
    return true;
  }
}

}  // namespace

template <typename T>
bool FastConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                     const ParallelFor& parallel_for) {
  return FastIndirect(g, layout, /*forward=*/true, w, x, y, parallel_for);
}

template <typename T>
bool FastConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy,
                           T* dx, const ParallelFor& parallel_for) {
  return FastIndirect(g, layout, /*forward=*/false, w, dy, dx, parallel_for);
}

template <typename T>
bool FastConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy,
                            T* dw, const ParallelFor& parallel_for) {
  if constexpr (KindOf<T>() < 0) {
    return false;
  } else {
    if (AnyEmpty(g.input_elements(), g.filter_elements(), g.output_elements())) return false;
    // NCHW runs on NHWC copies of chunks of images; the plan (and so every sum) is that of a
    // chunk, the same for every chunk.
    const int64_t in_hw = g.in_rows * g.in_cols, out_hw = g.out_rows * g.out_cols;
    ConvGeometry gc = g;
    if (layout == Layout::kNCHW) {
      gc.batch = NchwChunk(g.batch, std::max(in_hw * g.in_depth, out_hw * g.out_depth));
    }
    const int64_t size = g.filter_elements();
    const bool depthwise = IsDepthwiseOne(g);
    // Exact mode is read once per call, here.
    const bool winograd = !depthwise && WinogradFilterApplies<T>(g);
    const GemmKernel& gk = PickGemm(g.out_depth_per_group());
    FilterPlan plan;
    if (!winograd) plan = depthwise ? PlanDepthwiseFilter(gc) : PlanFilter(gc, gk.mr, gk.nb, sizeof(T));
    std::vector<float> acc(plan.slices * size, 0.0f);
    std::unique_ptr<WinogradFilter<T>> wino;
    if (winograd) wino = std::make_unique<WinogradFilter<T>>(gc, parallel_for);
    const auto pass = [&](const ConvGeometry& gp, const T* xp, const T* dyp) {
      if (winograd) {
        wino->Accumulate(gp, xp, dyp);
      } else if (depthwise) {
        FilterDepthwiseNhwc(gp, plan, xp, dyp, acc.data(), parallel_for);
      } else {
        FilterGemmNhwc(gp, plan, gk, xp, dyp, acc.data(), parallel_for);
      }
    };
    if (layout == Layout::kNHWC) {
      pass(g, x, dy);
    } else {
      Workspace x_space(gc.batch * in_hw * g.in_depth * sizeof(T));
      Workspace dy_space(gc.batch * out_hw * g.out_depth * sizeof(T));
      T* const x_nhwc = x_space.data<T>();
      T* const dy_nhwc = dy_space.data<T>();
      for (int64_t n = 0; n < g.batch; n += gc.batch) {
        ConvGeometry gp = gc;
        gp.batch = std::min(gc.batch, g.batch - n);
        Transpose(x + n * g.in_depth * in_hw, gp.batch, g.in_depth, in_hw, x_nhwc, parallel_for);
        Transpose(dy + n * g.out_depth * out_hw, gp.batch, g.out_depth, out_hw, dy_nhwc,
                  parallel_for);
        pass(gp, x_nhwc, dy_nhwc);
      }
    }
    if (winograd) wino->Finish(acc.data());
    for (int64_t i = 0; i < size; ++i) {
      float sum = acc[i];
      for (int64_t s = 1; s < plan.slices; ++s) sum += acc[s * size + i];
      dw[i] = static_cast<T>(sum);
    }
    return true;
  }
}

#define TF_OPS_INSTANTIATE(T)                                                                  \
  template bool FastConvForward<T>(const ConvGeometry&, Layout, const T*, const T*, T*,        \
                                   const ParallelFor&);                                        \
  template bool FastConvBackpropInput<T>(const ConvGeometry&, Layout, const T*, const T*, T*,  \
                                         const ParallelFor&);                                  \
  template bool FastConvBackpropFilter<T>(const ConvGeometry&, Layout, const T*, const T*, T*, \
                                          const ParallelFor&);
TF_OPS_INSTANTIATE(float)
TF_OPS_INSTANTIATE(double)
TF_OPS_INSTANTIATE(Eigen::half)
TF_OPS_INSTANTIATE(Eigen::bfloat16)
TF_OPS_INSTANTIATE(int32_t)
#undef TF_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_ops
