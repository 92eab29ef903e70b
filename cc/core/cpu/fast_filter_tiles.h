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
inline bool FilterTilesApply(const ConvGeometry& g) {
  if (g.out_depth_per_group() < kTilesMinChannels) return false;
  const GemmKernel& k = GemmFor(Kernels().gemm[0], kElemBF16);
  return k.shifted != nullptr || (k.shifted_rows != nullptr && FilterTilesMergeColumns(g));
}

inline TilesPlan PlanFilterTiles(const ConvGeometry& g) {
  TilesPlan p;
  p.amx = GemmFor(Kernels().gemm[0], kElemBF16).shifted != nullptr;
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
    const GemmShiftedFn shifted = GemmFor(table.gemm[0], kElemBF16).shifted;
    const GemmShiftedRowsFn shifted_rows = GemmFor(table.gemm[0], kElemBF16).shifted_rows;
    const TransposeFn transpose32 = table.transpose32;
    const PackPairsFn pack_pairs = table.pack_pairs;
    Note(Path::kFilterTiles);
    if (g.groups > 1) Note(Path::kFilterTilesGroups);
    if (plan.k_chunks > 1) Note(Path::kFilterTilesChannelChunks);
    if (plan.slices > 1) Note(Path::kFilterTilesSlices);
    if (plan.merged) Note(Path::kFilterTilesMerged);
    if (plan.amx) {
      NoteKernel(shifted), NoteKernel(transpose32);
    } else {
      Note(Path::kFilterTilesRows);
      NoteKernel(shifted_rows);
    }
    NoteKernel(pack_pairs);
    const int64_t KW = g.filter_cols, taps = g.filter_rows * KW;
    // The GEMMs of shifted input: one per tap, or with merged columns one per filter row.
    const int64_t shifts = plan.merged ? g.filter_rows : taps;
    const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group();
    const int64_t C = g.in_depth, Wg = plan.grid_cols, image = plan.grid_rows * Wg;
    const int64_t total = g.batch * image, filter_size = taps * FI * K;
    // Shift t reads input phase phase_of[t] (of `phases`, each a (row, column) phase) at grid
    // shift offsets[t].
    std::vector<int64_t> offsets(shifts), phase_of(shifts);
    std::vector<std::pair<int64_t, int64_t>> phases;
    bool odd = false;
    for (int64_t t = 0; t < shifts; ++t) {
      const int64_t rows = (plan.merged ? t : t / KW) * g.dilation_rows;
      const int64_t cols = plan.merged ? 0 : t % KW * g.dilation_cols;
      const std::pair<int64_t, int64_t> phase(rows % g.stride_rows, cols % g.stride_cols);
      const auto found = std::find(phases.begin(), phases.end(), phase);
      phase_of[t] = found - phases.begin();
      if (found == phases.end()) phases.push_back(phase);
      offsets[t] = rows / g.stride_rows * Wg + cols / g.stride_cols;
      odd = odd || offsets[t] % 2 != 0;
    }
    if (phases.size() > 1) Note(Path::kFilterTilesPhases);
    const int64_t copies = static_cast<int64_t>(phases.size()) * (odd ? 2 : 1);
    // Pair rows past a piece's that the taps' shifts read, and the pair rows of a piece.
    const int64_t reach = *std::max_element(offsets.begin(), offsets.end()) / 2;
    const int64_t row_bytes = copies * plan.channels * static_cast<int64_t>(sizeof(uint32_t));
    const int64_t piece = std::clamp<int64_t>((kTilesPieceBytes / row_bytes - reach) / 16 * 16, 16,
                                              plan.amx ? kTilesPiecePairs : kTilesRowsPiecePairs);
    // Calls fn(k, len, n, i, j) for the runs of grid pixels q0 + k to q0 + k + len - 1, k <
    // count, that lie in one grid row: image n (batch or past it), row i, columns j to j + len
    // - 1.
    const auto walk = [&](int64_t q0, int64_t count, const auto& fn) {
      int64_t n = q0 / image, i = q0 % image / Wg, j = q0 % Wg;
      for (int64_t k = 0; k < count;) {
        const int64_t len = std::min(count - k, Wg - j);
        fn(k, len, n, i, j);
        k += len, j = 0;
        if (++i == plan.grid_rows) i = 0, ++n;
      }
    };
    // Pixels (pointers to their values, null for zeros) of grid pixels (n, i, j + m), m < len,
    // of dy (channels [first, ...), null past its rows and columns) and of x's phase (a row
    // phase and a column phase; null in the padding or past the batch).
    // (The loops read locals: their stores of pointers could alias what references point to.)
    const auto dy_pixels = [&](int64_t len, int64_t n, int64_t i, int64_t j, int64_t first,
                               const uint16_t** out) {
      const int64_t inside = n < g.batch && i < g.out_rows ? std::clamp<int64_t>(g.out_cols - j, 0, len) : 0;
      if (inside > 0) {  // (no pointer formed past the batch)
        const uint16_t* const start =
            reinterpret_cast<const uint16_t*>(dy) + ((n * g.out_rows + i) * g.out_cols + j) * K + first;
        for (int64_t m = 0, step = K; m < inside; ++m) out[m] = start + m * step;
      }
      std::fill(out + inside, out + len, nullptr);
    };
    // The input row of grid row i (n: its image) of row phase `phase`, or null.
    const auto x_line = [&](int64_t n, int64_t i, int64_t phase) {
      const int64_t row = i * g.stride_rows + phase - g.pad_top;
      const bool inside = n < g.batch && row >= 0 && row < g.in_rows;
      return inside ? reinterpret_cast<const uint16_t*>(x) + (n * g.in_rows + row) * g.in_cols * C : nullptr;
    };
    const auto x_pixels = [&](int64_t len, int64_t n, int64_t i, int64_t j, std::pair<int64_t, int64_t> phase,
                              const uint16_t** out) {
      const uint16_t* const line = x_line(n, i, phase.first);
      const int64_t stride = g.stride_cols, first = j * stride + phase.second - g.pad_left, cols = g.in_cols;
      for (int64_t m = 0, c = C; m < len; ++m) {
        const int64_t col = first + m * stride;
        out[m] = line != nullptr && col >= 0 && col < cols ? line + col * c : nullptr;
      }
    };
    // Merged columns: the input's channels of every filter column (KW * C values) at grid
    // pixels (n, i, j + m) of a row phase, in x where they lie whole in it, else gathered into
    // `gathered` + m * pixel_values with zeros for the padding; null where the row lies in the
    // padding or past the batch.
    const int64_t pixel_values = plan.merged ? KW * C : C;
    // A shift's slots of one group (and filter elements per output channel).
    const int64_t slots = (plan.merged ? KW : 1) * FI;
    const auto x_columns = [&](int64_t len, int64_t n, int64_t i, int64_t j, int64_t phase,
                               uint16_t* gathered, const uint16_t** out) {
      const uint16_t* const line = x_line(n, i, phase);
      if (line == nullptr) return (void)std::fill(out, out + len, nullptr);
      const int64_t stride = g.stride_cols, first = j * stride - g.pad_left, cols = g.in_cols;
      // Pixels [lo, hi) read KW whole columns of x in a row (undilated): in place.
      int64_t lo = len, hi = len;
      if (g.dilation_cols == 1) {
        lo = std::min(len, first >= 0 ? 0 : CeilDiv(-first, stride));
        const int64_t last = cols - KW - first;  // the last in-place pixel's first column, less first
        hi = last < 0 ? lo : std::clamp(last / stride + 1, lo, len);
      }
      for (int64_t m = lo, step = stride * C; m < hi; ++m) out[m] = line + first * C + m * step;
      const auto gather = [&](int64_t m) {
        uint16_t* const buffer = gathered + m * pixel_values;
        const int64_t col0 = first + m * stride;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t col = col0 + kw * g.dilation_cols;
          for (int64_t c = 0; c < C; ++c) buffer[kw * C + c] = col >= 0 && col < cols ? line[col * C + c] : 0;
        }
        out[m] = buffer;
      };
      for (int64_t m = 0; m < lo; ++m) gather(m);
      for (int64_t m = hi; m < len; ++m) gather(m);
    };
    parallel_for(plan.units, Cost(2.0 * total / plan.slices * taps * FI * plan.k_chunk),
                 [&](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t slice = unit / plan.k_chunks, kc = unit % plan.k_chunks;
        // Output channels [k0, k1) of each group, `kr` transposed rows per group (whole tiles);
        // with several groups (one chunk) every group's rows, group after group.
        const int64_t k0 = kc * plan.k_chunk, k1 = std::min(Kg, k0 + plan.k_chunk);
        const int64_t kr = CeilDiv(k1 - k0, 16) * 16;
        const int64_t dy_first = g.groups > 1 ? 0 : k0, dy_count = g.groups > 1 ? K : k1 - k0;
        const int64_t a_rows = CeilDiv((g.groups - 1) * Kg + kr, 16) * 16;
        // The unit's sums: local[tap][group][k][ci], whole tiles.
        const int64_t ldc = plan.rows16, c_tap = g.groups * kr * ldc;
        float* const local = plan.amx ? Scratch<float, 40>(shifts * c_tap) : nullptr;
        // The slice's sums for tap t, group grp, output channel k0 + k, input channel 0.
        const auto acc_at = [&](int64_t t, int64_t grp, int64_t k) {
          return acc + slice * filter_size + t * FI * K + grp * Kg + k0 + k;
        };
        // Copies between local and acc (below); with merged columns local's rows are k and its
        // columns kw * FI + ci (one group), copied element by element.
        const auto exchange_merged = [&](bool to_acc) {
          if (!to_acc) std::fill(local, local + shifts * c_tap, 0.0f);
          for (int64_t t = 0; t < shifts; ++t) {
            for (int64_t k = 0; k < k1 - k0; ++k) {
              for (int64_t m = 0; m < KW * FI; ++m) {
                float* const l = local + t * c_tap + k * ldc + m;
                float* const f = acc_at(t * KW + m / FI, 0, k) + m % FI * K;
                if (to_acc) *f = *l; else *l = *f;
              }
            }
          }
        };
        // Copies between local (rows k, columns ci) and acc (rows ci, columns k), transposed
        // by blocks of 16 x 16; local's tile padding is zero.
        const auto exchange = [&](bool to_acc) {
          if (plan.merged) return exchange_merged(to_acc);
          for (int64_t t = 0; t < taps; ++t) {
            for (int64_t grp = 0; grp < g.groups; ++grp) {
              for (int64_t k = 0; k < kr; k += 16) {
                for (int64_t ci = 0; ci < ldc; ci += 16) {
                  float* const l = local + t * c_tap + (grp * kr + k) * ldc + ci;
                  float* const f = acc_at(t, grp, k) + ci * K;
                  const int64_t nk = std::min<int64_t>(16, k1 - k0 - k);
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
        };
        if (!first) Note(Path::kFilterTilesAdded);
        if (plan.amx && first) std::fill(local, local + shifts * c_tap, 0.0f);
        if (plan.amx && !first) exchange(/*to_acc=*/false);
        const int64_t s0 = plan.steps * slice / plan.slices * 16;
        const int64_t s1 = plan.steps * (slice + 1) / plan.slices * 16;
        std::vector<const uint32_t*> b_taps(shifts);
        for (int64_t p0 = s0; p0 < s1; p0 += piece) {
          const int64_t pairs = std::min(piece, s1 - p0);
          if (p0 > s0) Note(Path::kFilterTilesPieces);
          // The piece's output gradient, pairs [p0, p0 + pairs): on AMX transposed, in panels of
          // 16 pairs of a_rows rows of 32 values each; on vectors of rows, pair rows of a_rows
          // slots in order.
          const int64_t a_step = a_rows * 32;
          uint16_t* const a = Scratch<uint16_t, 41>(pairs / 16 * a_step);
          uint32_t* const transposing = plan.amx ? Scratch<uint32_t, 43>(16 * a_rows) : nullptr;
          const int64_t b_rows = pairs + reach, width = plan.channels;
          // Each pixel's values (null: zeros), two a pair row, dy's and then each copy's.
          const uint16_t** const pixels = Scratch<const uint16_t*, 44>(2 * b_rows);
          walk(2 * p0, 2 * pairs, [&](int64_t k, int64_t len, int64_t n, int64_t i, int64_t j) {
            dy_pixels(len, n, i, j, dy_first, pixels + k);
          });
          if (!plan.amx) {
            pack_pairs(pixels, pairs, dy_count, a_rows, reinterpret_cast<uint32_t*>(a));
          } else {
            for (int64_t r = 0; r < pairs; r += 16) {
              pack_pairs(pixels + 2 * r, 16, dy_count, a_rows, transposing);
              uint32_t* const panel = reinterpret_cast<uint32_t*>(a + r / 16 * a_step);
              for (int64_t c = 0; c < a_rows; c += 16) transpose32(transposing + c, a_rows, panel + c * 16, 16);
            }
          }
          // The piece's input in pairs, each phase from even grid pixels through the taps'
          // reach, and where a shift is odd, from odd ones: copy (phase, parity).
          uint32_t* const b = Scratch<uint32_t, 42>(copies * b_rows * width);
          // Merged columns: the pixels gathered where they lie partly in the padding.
          uint16_t* const gathered = plan.merged ? Scratch<uint16_t, 45>(2 * b_rows * pixel_values) : nullptr;
          for (int64_t copy = 0; copy < copies; ++copy) {
            const std::pair<int64_t, int64_t> phase = phases[odd ? copy / 2 : copy];
            walk(2 * p0 + (odd ? copy % 2 : 0), 2 * b_rows, [&](int64_t k, int64_t len, int64_t n, int64_t i, int64_t j) {
              if (plan.merged) {
                x_columns(len, n, i, j, phase.first, gathered + k * pixel_values, pixels + k);
              } else {
                x_pixels(len, n, i, j, phase, pixels + k);
              }
            });
            pack_pairs(pixels, b_rows, pixel_values, width, b + copy * b_rows * width);
          }
          for (int64_t grp = 0; grp < g.groups; ++grp) {
            for (int64_t t = 0; t < shifts; ++t) {
              const int64_t o = offsets[t];
              const int64_t copy = odd ? 2 * phase_of[t] + o % 2 : phase_of[t];
              b_taps[t] = b + (copy * b_rows + o / 2) * width + grp * FI;
            }
            const int64_t a_first = g.groups > 1 ? grp * Kg : 0;
            if (plan.amx) {
              shifted(shifts, a + a_first * 32, a_step, kr, b_taps.data(), width, plan.rows16,
                      pairs, local + grp * kr * ldc, ldc, c_tap);
            } else {
              // Slot j of shift t sums at acc_at(0, grp, 0) + (t * slots + j) * K: tap t's input
              // channel j, or with merged columns tap t * KW + j / FI's channel j % FI.
              shifted_rows(shifts, reinterpret_cast<const uint32_t*>(a) + a_first, a_rows, k1 - k0,
                           b_taps.data(), width, slots, pairs, acc_at(0, grp, 0), K, slots * K);
            }
          }
        }
        if (plan.amx) exchange(/*to_acc=*/true);
      }
    });
  }
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_FILTER_TILES_H_
