// The filter gradient of bfloat16 convolutions on AMX tiles (GemmShiftedFn): every filter
// tap's sums are one GEMM over the same pixels, shifted. Internal to cc/core/cpu; included by
// conv_fast.cc.
//
// Tap (kh, kw) reads the input at row i * sh + kh * dh - pad_top for output row i: in phase
// a = kh * dh % sh of the rows (the input rows a - pad_top, a + sh - pad_top, ...), at phase
// row i + kh * dh / sh; columns likewise. Each phase of the input is seen on a grid of
// Hg = out_rows + (KH - 1) * dh / sh rows by Wg = out_cols + (KW - 1) * dw / sw columns per
// image (zero past the input), and the output gradient on the same grid (zero past its rows
// and columns). Numbering the grid's pixels q image after image, row after row, output pixel
// q reads its tap's phase at pixel q + (kh * dh / sh) * Wg + kw * dw / sw. So with the output
// gradient transposed (one row of pixels per channel, in bfloat16) and each phase of the
// input in pairs of consecutive pixels (twice: pairs from even pixels and from odd ones), a
// tap's sums are tiles of the transposed rows times tiles of its phase's pairs at its shift:
// no copy per tap, every tile load 64-byte aligned, and pixels of the grid that no output
// reads add zeros. At stride 1 there is one phase. With few input channels the filter columns
// merge into the pixels' slots instead (FilterTilesMergeColumns), and the shifts are the
// filter rows'. With AVX-512 BF16 but no AMX, layers whose columns merge run the same pass on
// vectors of rows (GemmShiftedRowsFn): the output gradient's pair rows untransposed, the sums
// added to the filter's accumulators in place.
#ifndef TF_OPS_CC_CORE_CPU_FAST_FILTER_TILES_H_
#define TF_OPS_CC_CORE_CPU_FAST_FILTER_TILES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/fast_filter.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// A unit transposes and packs its pair rows (two grid pixels each) a piece at a time: at most
// kTilesPiecePairs, and the piece's input pairs (every copy, with the taps' reach past it)
// within kTilesPieceBytes, so that they stay in the L2 cache while every tap's tiles read
// them.
inline constexpr int64_t kTilesPiecePairs = 512;
// On vectors of rows (merged filter columns: few slots a pair row), longer pieces re-pack
// less of the taps' reach.
inline constexpr int64_t kTilesRowsPiecePairs = 2048;
inline constexpr int64_t kTilesPieceBytes = int64_t{1} << 20;
// Fewest pair rows per slice: each piece also packs the input of the taps' reach past its end.
inline constexpr int64_t kTilesSlicePairs = 256;

// Work units: (slice of the grid's pairs, chunk of output channels); a unit sums every tap,
// group and input channel of its slice and chunk. Slices add in order at the end (as
// FilterPlan's).
struct TilesPlan {
  int64_t grid_rows = 0, grid_cols = 0, steps = 0;  // steps: 16 pair rows each, all images
  int64_t slices = 1, k_chunk = 0, k_chunks = 1, units = 0;
  // Merged filter columns (FilterTilesMergeColumns): a pixel's slots hold the input channels
  // of every filter column, and the taps are the filter rows.
  bool merged = false;
  // On AMX tiles (GemmShiftedFn: a unit's sums in tiles of its own, transposed into acc at
  // the end), else on vectors of rows (GemmShiftedRowsFn: added to acc in place).
  bool amx = false;
  int64_t rows16 = 0;    // a group's input channels (the tiles' columns), whole tiles of 16
  int64_t channels = 0;  // pair slots per input pair row: every group's, whole tiles of 16
  // The GEMMs of shifted input: one per tap, or with merged columns one per filter row. Shift
  // t reads input phase phase_of[t] (of `phases`, each a (row, column) phase) at grid offset
  // offsets[t].
  int64_t shifts = 0;
  std::vector<int64_t> offsets, phase_of;
  std::vector<std::pair<int64_t, int64_t>> phases;
  // Some shift is odd: each phase is packed twice, in pairs from even and from odd pixels.
  bool odd = false;
  int64_t copies = 0;  // packed copies of the input: (phase, parity)
  int64_t reach = 0;   // pair rows past a piece's that the shifts read
  int64_t piece = 0;   // pair rows a unit packs at a time
};

// Output channels per group from which the filter gradient runs as tiles: a tile of 16
// rows holds a group's channels with little padding.
inline constexpr int64_t kTilesMinChannels = 16;
// Most slots of a pixel with merged filter columns (four column tiles).
inline constexpr int64_t kTilesMergedSlots = 64;

// With fewer input channels than a tile's 16 columns (one group), a pixel's pair slots take
// the channels of every filter column (slot kw * C + c), the tiles' columns fill up, and the
// taps' sums come from one GEMM per filter row, over copies of the input without the
// columns' phases and shifts (the grid is out_cols wide): far faster than widening such
// layers' operands to float copies.
inline bool FilterTilesMergeColumns(const ConvGeometry& g) {
  return g.groups == 1 && g.filter_cols > 1 && g.filter_in_depth < kTilesMinChannels &&
         g.filter_cols * g.filter_in_depth <= kTilesMergedSlots;
}

// Where the filter gradient of bfloat16 runs as tiles: on AMX with 16 output channels a group
// or more, and on vectors of rows (AVX-512 BF16) where also the filter columns merge
// (FilterTilesMergeColumns): there the other passes would widen the operands to float.
inline bool FilterTilesApply(const KernelTable& table, const ConvGeometry& g) {
  if (g.out_depth_per_group() < kTilesMinChannels) return false;
  const GemmKernel& k = GemmFor(table, table.gemm[0], kElemBF16);
  return k.shifted != nullptr || (k.shifted_rows != nullptr && FilterTilesMergeColumns(g));
}

// The shifts of a tiles plan (TilesPlan's shifts to piece).
inline void PlanTilesShifts(const ConvGeometry& g, TilesPlan* p) {
  const int64_t KW = g.filter_cols;
  p->shifts = p->merged ? g.filter_rows : g.filter_rows * KW;
  p->offsets.resize(p->shifts), p->phase_of.resize(p->shifts);
  for (int64_t t = 0; t < p->shifts; ++t) {
    const int64_t rows = (p->merged ? t : t / KW) * g.dilation_rows;
    const int64_t cols = p->merged ? 0 : t % KW * g.dilation_cols;
    const std::pair<int64_t, int64_t> phase(rows % g.stride_rows, cols % g.stride_cols);
    const auto found = std::find(p->phases.begin(), p->phases.end(), phase);
    p->phase_of[t] = found - p->phases.begin();
    if (found == p->phases.end()) p->phases.push_back(phase);
    p->offsets[t] = rows / g.stride_rows * p->grid_cols + cols / g.stride_cols;
    p->odd = p->odd || p->offsets[t] % 2 != 0;
  }
  p->copies = static_cast<int64_t>(p->phases.size()) * (p->odd ? 2 : 1);
  p->reach = *std::max_element(p->offsets.begin(), p->offsets.end()) / 2;
  // A piece's input pairs (every copy, with the reach past it) within kTilesPieceBytes.
  const int64_t row_bytes = p->copies * p->channels * static_cast<int64_t>(sizeof(uint32_t));
  p->piece = std::clamp<int64_t>((kTilesPieceBytes / row_bytes - p->reach) / 16 * 16, 16,
                                 p->amx ? kTilesPiecePairs : kTilesRowsPiecePairs);
}

inline TilesPlan PlanFilterTiles(const KernelTable& table, const ConvGeometry& g) {
  TilesPlan p;
  p.amx = GemmFor(table, table.gemm[0], kElemBF16).shifted != nullptr;
  const int64_t FI = g.filter_in_depth, Kg = g.out_depth_per_group();
  p.merged = FilterTilesMergeColumns(g);
  p.grid_rows = g.out_rows + (g.filter_rows - 1) * g.dilation_rows / g.stride_rows;
  p.grid_cols = g.out_cols + (p.merged ? 0 : (g.filter_cols - 1) * g.dilation_cols / g.stride_cols);
  const int64_t pixels = g.batch * p.grid_rows * p.grid_cols;
  p.steps = CeilDiv(CeilDiv(pixels, 2), 16);
  p.rows16 = CeilDiv((p.merged ? g.filter_cols : 1) * FI, 16) * 16;
  // AMX tiles read whole tiles of 16 slots; vectors of rows read the slots there are.
  const int64_t slots = (p.merged ? g.filter_cols : 1) * FI;
  p.channels = p.amx ? CeilDiv((g.groups - 1) * FI + p.rows16, 16) * 16 : (g.groups - 1) * FI + slots;
  PlanTilesShifts(g, &p);
  // Slices: enough units for the threads, each slice's float sums within kFilterAccBytes
  // together, and each slice long enough to pay for the taps' reach past its pieces.
  const int64_t by_memory = std::max<int64_t>(1, kFilterAccBytes / (4 * g.filter_elements()));
  const int64_t by_length = std::max<int64_t>(1, p.steps * 16 / kTilesSlicePairs);
  p.slices = std::min({kMinUnits, by_memory, by_length});
  // With one group, fewer slices than units split the output channels (whole tiles of 32).
  p.k_chunk = Kg;
  if (g.groups == 1 && p.slices < kMinUnits) {
    const int64_t want = std::min(CeilDiv(kMinUnits, p.slices), CeilDiv(Kg, 32));
    p.k_chunk = CeilDiv(CeilDiv(Kg, want), 32) * 32;
  }
  p.k_chunks = CeilDiv(Kg, p.k_chunk);
  p.units = p.slices * p.k_chunks;
  return p;
}

// The grid of a tiles pass (TilesPlan) over x and dy: pointers to the values of its pixels.
// (The loops read locals: their stores of pointers could alias what members point to.)
struct TilesGrid {
  const ConvGeometry& g;
  const TilesPlan& plan;
  const uint16_t* x;
  const uint16_t* dy;

  // Calls fn(k, len, n, i, j) for the runs of grid pixels q0 + k to q0 + k + len - 1, k <
  // count, that lie in one grid row: image n (batch or past it), row i, columns j to j + len
  // - 1.
  template <typename Fn>
  void Walk(int64_t q0, int64_t count, const Fn& fn) const {
    const int64_t wg = plan.grid_cols, image = plan.grid_rows * wg;
    int64_t n = q0 / image, i = q0 % image / wg, j = q0 % wg;
    for (int64_t k = 0; k < count;) {
      const int64_t len = std::min(count - k, wg - j);
      fn(k, len, n, i, j);
      k += len, j = 0;
      if (++i == plan.grid_rows) i = 0, ++n;
    }
  }

  // Grid pixels (n, i, j + m), m < len, of dy (channels [first, ...), null past its rows and
  // columns).
  void DyPixels(int64_t len, int64_t n, int64_t i, int64_t j, int64_t first, const uint16_t** out) const {
    const int64_t inside = n < g.batch && i < g.out_rows ? std::clamp<int64_t>(g.out_cols - j, 0, len) : 0;
    if (inside > 0) {  // (no pointer formed past the batch)
      const int64_t step = g.out_depth;
      const uint16_t* const start = dy + ((n * g.out_rows + i) * g.out_cols + j) * step + first;
      for (int64_t m = 0; m < inside; ++m) out[m] = start + m * step;
    }
    std::fill(out + inside, out + len, nullptr);
  }

  // The input row of grid row i (n: its image) of row phase `phase`, or null (in the padding
  // or past the batch).
  const uint16_t* XLine(int64_t n, int64_t i, int64_t phase) const {
    const int64_t row = i * g.stride_rows + phase - g.pad_top;
    const bool inside = n < g.batch && row >= 0 && row < g.in_rows;
    return inside ? x + (n * g.in_rows + row) * g.in_cols * g.in_depth : nullptr;
  }

  // Grid pixels (n, i, j + m), m < len, of x's phase `phase` (a row phase and a column
  // phase; null in the padding or past the batch).
  void XPixels(int64_t len, int64_t n, int64_t i, int64_t j, std::pair<int64_t, int64_t> phase,
               const uint16_t** out) const {
    const uint16_t* const line = XLine(n, i, phase.first);
    const int64_t stride = g.stride_cols, first = j * stride + phase.second - g.pad_left, cols = g.in_cols;
    for (int64_t m = 0, c = g.in_depth; m < len; ++m) {
      const int64_t col = first + m * stride;
      out[m] = line != nullptr && col >= 0 && col < cols ? line + col * c : nullptr;
    }
  }

  // Merged columns: the input's channels of every filter column (KW * C values) at grid
  // pixels (n, i, j + m) of a row phase, in x where they lie whole in it, else gathered into
  // `gathered` + m * KW * C with zeros for the padding; null where the row lies in the padding
  // or past the batch.
  void XColumns(int64_t len, int64_t n, int64_t i, int64_t j, int64_t phase, uint16_t* gathered,
                const uint16_t** out) const {
    const uint16_t* const line = XLine(n, i, phase);
    if (line == nullptr) return (void)std::fill(out, out + len, nullptr);
    const int64_t KW = g.filter_cols, C = g.in_depth, dilation = g.dilation_cols;
    const int64_t stride = g.stride_cols, first = j * stride - g.pad_left, cols = g.in_cols;
    // Pixels [lo, hi) read KW whole columns of x in a row (undilated): in place.
    int64_t lo = len, hi = len;
    if (dilation == 1) {
      lo = std::min(len, first >= 0 ? 0 : CeilDiv(-first, stride));
      const int64_t last = cols - KW - first;  // the last in-place pixel's first column, less first
      hi = last < 0 ? lo : std::clamp(last / stride + 1, lo, len);
    }
    for (int64_t m = lo, step = stride * C; m < hi; ++m) out[m] = line + first * C + m * step;
    const auto gather = [&](int64_t m) {
      uint16_t* const buffer = gathered + m * KW * C;
      const int64_t col0 = first + m * stride;
      for (int64_t kw = 0; kw < KW; ++kw) {
        const int64_t col = col0 + kw * dilation;
        for (int64_t c = 0; c < C; ++c) buffer[kw * C + c] = col >= 0 && col < cols ? line[col * C + c] : 0;
      }
      out[m] = buffer;
    };
    for (int64_t m = 0; m < lo; ++m) gather(m);
    for (int64_t m = hi; m < len; ++m) gather(m);
  }
};

// A unit of a tiles pass: its slice of acc and its output channels [k0, k1) of each group.
// On AMX its sums are local[tap][group][k][ci] (whole tiles: `kr` rows a group, ldc columns,
// c_tap floats a shift).
struct TilesUnit {
  float* acc;  // the slice's sums: acc[tap][ci][k]
  int64_t k0, k1, kr;
  float* local;
  int64_t ldc, c_tap;
};

// Copies between a unit's local sums and acc (to_acc), or from acc to local; local's tile
// padding is zero. local's rows are k and its columns ci (or with merged columns, kw * FI + ci:
// one group, copied element by element), acc's rows ci and its columns k (transposed by
// blocks of 16 x 16).
inline void ExchangeTiles(const ConvGeometry& g, const TilesPlan& plan, const TilesUnit& u, bool to_acc) {
  const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group(), KW = g.filter_cols;
  const int64_t ldc = u.ldc, c_tap = u.c_tap, k0 = u.k0, nk_all = u.k1 - u.k0;
  const auto acc_at = [&](int64_t t, int64_t grp, int64_t k) { return u.acc + t * FI * K + grp * Kg + k0 + k; };
  if (plan.merged) {
    if (!to_acc) std::fill(u.local, u.local + plan.shifts * c_tap, 0.0f);
    for (int64_t t = 0; t < plan.shifts; ++t) {
      for (int64_t k = 0; k < nk_all; ++k) {
        for (int64_t m = 0; m < KW * FI; ++m) {
          float* const l = u.local + t * c_tap + k * ldc + m;
          float* const f = acc_at(t * KW + m / FI, 0, k) + m % FI * K;
          if (to_acc) *f = *l; else *l = *f;
        }
      }
    }
    return;
  }
  const TransposeFn transpose32 = Kernels().transpose32;
  for (int64_t t = 0; t < plan.shifts; ++t) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t k = 0; k < u.kr; k += 16) {
        for (int64_t ci = 0; ci < ldc; ci += 16) {
          float* const l = u.local + t * c_tap + (grp * u.kr + k) * ldc + ci;
          float* const f = acc_at(t, grp, k) + ci * K;
          const int64_t nk = std::min<int64_t>(16, nk_all - k);
          const int64_t nc = std::min<int64_t>(16, FI - ci);
          if (nk == 16 && nc == 16) {
            if (to_acc) transpose32(l, ldc, f, K); else transpose32(f, K, l, ldc);
            continue;
          }
          for (int64_t i = 0; i < 16; ++i) {
            for (int64_t j = 0; j < 16; ++j) {
              if (to_acc) {
                if (i < nk && j < nc) f[j * K + i] = l[i * ldc + j];
              } else {
                l[i * ldc + j] = i < nk && j < nc ? f[j * K + i] : 0.0f;
              }
            }
          }
        }
      }
    }
  }
}

// Packs the output gradient of pairs [p0, p0 + pairs) of a unit's channels into `a`: on AMX
// transposed, in panels of 16 pairs of a_rows rows of 32 values each; on vectors of rows, pair
// rows of a_rows slots in order. `pixels` is scratch for 2 * pairs pointers.
inline void PackTilesDy(const TilesGrid& grid, int64_t p0, int64_t pairs, int64_t dy_first, int64_t dy_count,
                        int64_t a_rows, const uint16_t** pixels, uint16_t* a) {
  const KernelTable& table = Kernels();
  grid.Walk(2 * p0, 2 * pairs, [&](int64_t k, int64_t len, int64_t n, int64_t i, int64_t j) {
    grid.DyPixels(len, n, i, j, dy_first, pixels + k);
  });
  if (!grid.plan.amx) return table.pack_pairs(pixels, pairs, dy_count, a_rows, reinterpret_cast<uint32_t*>(a));
  uint32_t* const transposing = Scratch<uint32_t, 43>(16 * a_rows);
  for (int64_t r = 0; r < pairs; r += 16) {
    table.pack_pairs(pixels + 2 * r, 16, dy_count, a_rows, transposing);
    uint32_t* const panel = reinterpret_cast<uint32_t*>(a + r / 16 * a_rows * 32);
    for (int64_t c = 0; c < a_rows; c += 16) table.transpose32(transposing + c, a_rows, panel + c * 16, 16);
  }
}

// Packs the input of `b_rows` pair rows from pair p0 into `b`, every copy: each phase from
// even grid pixels, and where a shift is odd, from odd ones (copy = (phase, parity)).
// `pixels` is scratch for 2 * b_rows pointers.
inline void PackTilesX(const TilesGrid& grid, int64_t p0, int64_t b_rows, const uint16_t** pixels, uint32_t* b) {
  const TilesPlan& plan = grid.plan;
  const int64_t pixel_values = (plan.merged ? grid.g.filter_cols : 1) * grid.g.in_depth, width = plan.channels;
  // Merged columns: the pixels gathered where they lie partly in the padding.
  uint16_t* const gathered = plan.merged ? Scratch<uint16_t, 45>(2 * b_rows * pixel_values) : nullptr;
  for (int64_t copy = 0; copy < plan.copies; ++copy) {
    const std::pair<int64_t, int64_t> phase = plan.phases[plan.odd ? copy / 2 : copy];
    grid.Walk(2 * p0 + (plan.odd ? copy % 2 : 0), 2 * b_rows,
              [&](int64_t k, int64_t len, int64_t n, int64_t i, int64_t j) {
      if (plan.merged) {
        grid.XColumns(len, n, i, j, phase.first, gathered + k * pixel_values, pixels + k);
      } else {
        grid.XPixels(len, n, i, j, phase, pixels + k);
      }
    });
    Kernels().pack_pairs(pixels, b_rows, pixel_values, width, b + copy * b_rows * width);
  }
}

// Sums the pairs of slice rows [s0, s1) into unit u, a piece at a time.
inline void TilesSlice(const TilesGrid& grid, const TilesUnit& u, int64_t s0, int64_t s1) {
  const ConvGeometry& g = grid.g;
  const TilesPlan& plan = grid.plan;
  const GemmKernel& kernel = GemmFor(Kernels(), Kernels().gemm[0], kElemBF16);
  const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group();
  const int64_t shifts = plan.shifts, width = plan.channels;
  // With several groups (one chunk) the transposed rows of every group, group after group.
  const int64_t dy_first = g.groups > 1 ? 0 : u.k0, dy_count = g.groups > 1 ? K : u.k1 - u.k0;
  const int64_t a_rows = CeilDiv((g.groups - 1) * Kg + u.kr, 16) * 16, a_step = a_rows * 32;
  // A shift's slots of one group (and filter elements per output channel).
  const int64_t slots = (plan.merged ? g.filter_cols : 1) * FI;
  std::vector<const uint32_t*> b_taps(shifts);
  for (int64_t p0 = s0; p0 < s1; p0 += plan.piece) {
    const int64_t pairs = std::min(plan.piece, s1 - p0), b_rows = pairs + plan.reach;
    if (p0 > s0) Note(Path::kFilterTilesPieces);
    uint16_t* const a = Scratch<uint16_t, 41>(pairs / 16 * a_step);
    // Each pixel's values (null: zeros), two a pair row, dy's and then each copy's.
    const uint16_t** const pixels = Scratch<const uint16_t*, 44>(2 * b_rows);
    PackTilesDy(grid, p0, pairs, dy_first, dy_count, a_rows, pixels, a);
    uint32_t* const b = Scratch<uint32_t, 42>(plan.copies * b_rows * width);
    PackTilesX(grid, p0, b_rows, pixels, b);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t t = 0; t < shifts; ++t) {
        const int64_t o = plan.offsets[t];
        const int64_t copy = plan.odd ? 2 * plan.phase_of[t] + o % 2 : plan.phase_of[t];
        b_taps[t] = b + (copy * b_rows + o / 2) * width + grp * FI;
      }
      const int64_t a_first = g.groups > 1 ? grp * Kg : 0;
      if (plan.amx) {
        kernel.shifted(shifts, a + a_first * 32, a_step, u.kr, b_taps.data(), width, plan.rows16, pairs,
                       u.local + grp * u.kr * u.ldc, u.ldc, u.c_tap);
      } else {
        // Slot j of shift t sums at the slice's (tap 0, group grp, channel k0) + (t * slots +
        // j) * K: tap t's input channel j, or with merged columns tap t * KW + j / FI's
        // channel j % FI.
        kernel.shifted_rows(shifts, reinterpret_cast<const uint32_t*>(a) + a_first, a_rows, u.k1 - u.k0,
                            b_taps.data(), width, slots, pairs, u.acc + grp * Kg + u.k0, K, slots * K);
      }
    }
  }
}

// Adds this pass's contribution to acc[slice][tap][ci][k] (float, the filter's layout per
// slice), or on AMX with `first`, writes it there (acc's earlier contents are not read; on
// vectors of rows acc starts zero). NHWC, bfloat16 on AMX tiles (GemmFor's pair table has
// `shifted`) or on vectors of rows (`shifted_rows`).
template <typename T>
void FilterTilesNhwc(const ConvGeometry& g, const TilesPlan& plan, const T* x, const T* dy,
                     float* acc, bool first, const ParallelFor& parallel_for) {
  if constexpr (KindOf<T>() != kElemBF16) {
    return;
  } else {
    const KernelTable& table = Kernels();
    Note(Path::kFilterTiles);
    if (g.groups > 1) Note(Path::kFilterTilesGroups);
    if (plan.k_chunks > 1) Note(Path::kFilterTilesChannelChunks);
    if (plan.slices > 1) Note(Path::kFilterTilesSlices);
    if (plan.merged) Note(Path::kFilterTilesMerged);
    if (plan.phases.size() > 1) Note(Path::kFilterTilesPhases);
    if (plan.amx) {
      NoteKernel(GemmFor(table, table.gemm[0], kElemBF16).shifted), NoteKernel(table.transpose32);
    } else {
      Note(Path::kFilterTilesRows);
      NoteKernel(GemmFor(table, table.gemm[0], kElemBF16).shifted_rows);
    }
    NoteKernel(table.pack_pairs);
    if (!first) Note(Path::kFilterTilesAdded);
    const TilesGrid grid{g, plan, reinterpret_cast<const uint16_t*>(x), reinterpret_cast<const uint16_t*>(dy)};
    const int64_t Kg = g.out_depth_per_group(), filter_size = g.filter_elements();
    const int64_t total = g.batch * plan.grid_rows * plan.grid_cols, taps = g.filter_rows * g.filter_cols;
    parallel_for(plan.units, Cost(2.0 * total / plan.slices * taps * g.filter_in_depth * plan.k_chunk),
                 [&](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t slice = unit / plan.k_chunks, kc = unit % plan.k_chunks;
        TilesUnit u;
        u.acc = acc + slice * filter_size;
        u.k0 = kc * plan.k_chunk, u.k1 = std::min(Kg, u.k0 + plan.k_chunk);
        u.kr = CeilDiv(u.k1 - u.k0, 16) * 16;
        u.ldc = plan.rows16, u.c_tap = g.groups * u.kr * u.ldc;
        u.local = plan.amx ? Scratch<float, 40>(plan.shifts * u.c_tap) : nullptr;
        if (plan.amx && first) std::fill(u.local, u.local + plan.shifts * u.c_tap, 0.0f);
        if (plan.amx && !first) ExchangeTiles(g, plan, u, /*to_acc=*/false);
        TilesSlice(grid, u, plan.steps * slice / plan.slices * 16, plan.steps * (slice + 1) / plan.slices * 16);
        if (plan.amx) ExchangeTiles(g, plan, u, /*to_acc=*/true);
      }
    });
  }
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_FILTER_TILES_H_
