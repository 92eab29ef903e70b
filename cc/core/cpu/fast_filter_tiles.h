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
// reads add zeros. At stride 1 there is one phase.
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
// them (DCGAN's 5x5 stride-2 layer of 256 -> 512 channels, 8 copies of 256 channels, pieces
// of 112 pairs rather than 512: 12.3-12.7 -> 9.7 ms).
inline constexpr int64_t kTilesPiecePairs = 512;
inline constexpr int64_t kTilesPieceBytes = int64_t{1} << 20;
// Fewest pair rows per slice: each piece also packs the input of the taps' reach past its end.
inline constexpr int64_t kTilesSlicePairs = 256;

// Work units: (slice of the grid's pairs, chunk of output channels); a unit sums every tap,
// group and input channel of its slice and chunk. Slices add in order at the end (as
// FilterPlan's).
struct TilesPlan {
  int64_t grid_rows = 0, grid_cols = 0, steps = 0;  // steps: 16 pair rows each, all images
  int64_t slices = 1, k_chunk = 0, k_chunks = 1, units = 0;
  int64_t rows16 = 0;    // a group's input channels (the tiles' columns), whole tiles of 16
  int64_t channels = 0;  // pair slots per input pair row: every group's, whole tiles of 16
};

// Input and output channels per group from which the filter gradient runs on AMX tiles: a
// tile of 16 rows holds a group's channels with little padding.
inline constexpr int64_t kTilesMinChannels = 16;

inline bool FilterTilesApply(const ConvGeometry& g) {
  return g.filter_in_depth >= kTilesMinChannels && g.out_depth_per_group() >= kTilesMinChannels;
}

inline TilesPlan PlanFilterTiles(const ConvGeometry& g) {
  TilesPlan p;
  const int64_t FI = g.filter_in_depth, Kg = g.out_depth_per_group();
  p.grid_rows = g.out_rows + (g.filter_rows - 1) * g.dilation_rows / g.stride_rows;
  p.grid_cols = g.out_cols + (g.filter_cols - 1) * g.dilation_cols / g.stride_cols;
  const int64_t pixels = g.batch * p.grid_rows * p.grid_cols;
  p.steps = CeilDiv(CeilDiv(pixels, 2), 16);
  p.rows16 = CeilDiv(FI, 16) * 16;
  p.channels = CeilDiv((g.groups - 1) * FI + p.rows16, 16) * 16;
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
// slice), or with `first`, writes it there (acc's earlier contents are not read). NHWC,
// bfloat16 on AMX tiles (GemmFor's pair table has `shifted`).
template <typename T>
void FilterTilesNhwc(const ConvGeometry& g, const TilesPlan& plan, const T* x, const T* dy,
                     float* acc, bool first, const ParallelFor& parallel_for) {
  if constexpr (KindOf<T>() != kElemBF16) {
    return;
  } else {
    const KernelTable& table = Kernels();
    const GemmShiftedFn shifted = GemmFor(table.gemm[0], kElemBF16).shifted;
    const TransposeFn transpose32 = table.transpose32;
    const PackPairsFn pack_pairs = table.pack_pairs;
    Note(Path::kFilterTiles);
    if (g.groups > 1) Note(Path::kFilterTilesGroups);
    if (plan.k_chunks > 1) Note(Path::kFilterTilesChannelChunks);
    if (plan.slices > 1) Note(Path::kFilterTilesSlices);
    NoteKernel(shifted), NoteKernel(transpose32), NoteKernel(pack_pairs);
    const int64_t KW = g.filter_cols, taps = g.filter_rows * KW;
    const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group();
    const int64_t C = g.in_depth, Wg = plan.grid_cols, image = plan.grid_rows * Wg;
    const int64_t total = g.batch * image, filter_size = taps * FI * K;
    // Tap t reads input phase phase_of[t] (of `phases`, each a (row, column) phase) at grid
    // shift offsets[t].
    std::vector<int64_t> offsets(taps), phase_of(taps);
    std::vector<std::pair<int64_t, int64_t>> phases;
    bool odd = false;
    for (int64_t t = 0; t < taps; ++t) {
      const int64_t rows = t / KW * g.dilation_rows, cols = t % KW * g.dilation_cols;
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
                                              kTilesPiecePairs);
    // Calls fn(k, n, i, j) for grid pixels q0 + k, k < count: image n (batch or past it), row
    // i, column j.
    const auto walk = [&](int64_t q0, int64_t count, const auto& fn) {
      int64_t n = q0 / image, i = q0 % image / Wg, j = q0 % Wg;
      for (int64_t k = 0; k < count; ++k) {
        fn(k, n, i, j);
        if (++j == Wg) {
          j = 0;
          if (++i == plan.grid_rows) i = 0, ++n;
        }
      }
    };
    // The input's channels at grid pixel (n, i, j) of a phase, or null where the phase's pixel
    // lies in the padding or past the batch.
    const auto x_pixel = [&](int64_t n, int64_t i, int64_t j, std::pair<int64_t, int64_t> phase) {
      const int64_t row = i * g.stride_rows + phase.first - g.pad_top;
      const int64_t col = j * g.stride_cols + phase.second - g.pad_left;
      const bool inside = n < g.batch && row >= 0 && row < g.in_rows && col >= 0 && col < g.in_cols;
      return inside ? reinterpret_cast<const uint16_t*>(x + ((n * g.in_rows + row) * g.in_cols + col) * C)
                    : nullptr;
    };
    // The output gradient's channels [first, ...) at grid pixel (n, i, j), or null past it.
    const auto dy_pixel = [&](int64_t n, int64_t i, int64_t j, int64_t first) {
      const bool inside = n < g.batch && i < g.out_rows && j < g.out_cols;
      return inside ? reinterpret_cast<const uint16_t*>(dy + ((n * g.out_rows + i) * g.out_cols + j) * K + first)
                    : nullptr;
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
        float* const local = Scratch<float, 40>(taps * c_tap);
        // The slice's sums for tap t, group grp, output channel k0 + k, input channel 0.
        const auto acc_at = [&](int64_t t, int64_t grp, int64_t k) {
          return acc + slice * filter_size + t * FI * K + grp * Kg + k0 + k;
        };
        // Copies between local (rows k, columns ci) and acc (rows ci, columns k), transposed
        // by blocks of 16 x 16; local's tile padding is zero.
        const auto exchange = [&](bool to_acc) {
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
        if (first) {
          std::fill(local, local + taps * c_tap, 0.0f);
        } else {
          Note(Path::kFilterTilesAdded);
          exchange(/*to_acc=*/false);
        }
        const int64_t s0 = plan.steps * slice / plan.slices * 16;
        const int64_t s1 = plan.steps * (slice + 1) / plan.slices * 16;
        std::vector<const uint32_t*> b_taps(taps);
        for (int64_t p0 = s0; p0 < s1; p0 += piece) {
          const int64_t pairs = std::min(piece, s1 - p0);
          if (p0 > s0) Note(Path::kFilterTilesPieces);
          // The piece's output gradient, transposed, in panels of 16 pairs: pairs [p0, p0 +
          // pairs), a_rows rows of 32 values each.
          const int64_t a_step = a_rows * 32;
          uint16_t* const a = Scratch<uint16_t, 41>(pairs / 16 * a_step);
          uint32_t* const slots = Scratch<uint32_t, 43>(16 * a_rows);
          const uint16_t* lo = nullptr;
          walk(2 * p0, 2 * pairs, [&](int64_t k, int64_t n, int64_t i, int64_t j) {
            const uint16_t* const pixel = dy_pixel(n, i, j, dy_first);
            if (k % 2 == 0) return (void)(lo = pixel);
            const int64_t r = k / 2;
            uint32_t* const row = slots + r % 16 * a_rows;
            pack_pairs(lo, pixel, dy_count, row);
            std::fill(row + dy_count, row + a_rows, uint32_t{0});
            if (r % 16 != 15) return;
            uint32_t* const panel = reinterpret_cast<uint32_t*>(a + r / 16 * a_step);
            for (int64_t c = 0; c < a_rows; c += 16) transpose32(slots + c, a_rows, panel + c * 16, 16);
          });
          // The piece's input in pairs, each phase from even grid pixels through the taps'
          // reach, and where a shift is odd, from odd ones: copy (phase, parity).
          const int64_t b_rows = pairs + reach, width = plan.channels;
          uint32_t* const b = Scratch<uint32_t, 42>(copies * b_rows * width);
          for (int64_t copy = 0; copy < copies; ++copy) {
            const std::pair<int64_t, int64_t> phase = phases[odd ? copy / 2 : copy];
            uint32_t* const rows = b + copy * b_rows * width;
            walk(2 * p0 + (odd ? copy % 2 : 0), 2 * b_rows, [&](int64_t k, int64_t n, int64_t i, int64_t j) {
              const uint16_t* const pixel = x_pixel(n, i, j, phase);
              if (k % 2 == 0) return (void)(lo = pixel);
              uint32_t* const row = rows + k / 2 * width;
              pack_pairs(lo, pixel, C, row);
              std::fill(row + C, row + width, uint32_t{0});
            });
          }
          for (int64_t grp = 0; grp < g.groups; ++grp) {
            for (int64_t t = 0; t < taps; ++t) {
              const int64_t o = offsets[t];
              const int64_t copy = odd ? 2 * phase_of[t] + o % 2 : phase_of[t];
              b_taps[t] = b + (copy * b_rows + o / 2) * width + grp * FI;
            }
            const int64_t a_first = g.groups > 1 ? grp * Kg : 0;
            shifted(taps, a + a_first * 32, a_step, kr, b_taps.data(), width, plan.rows16,
                    pairs, local + grp * kr * ldc, ldc, c_tap);
          }
        }
        exchange(/*to_acc=*/true);
      }
    });
  }
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_FILTER_TILES_H_
