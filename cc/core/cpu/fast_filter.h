// The filter-gradient pass of the fast CPU kernels (GEMMs per filter tap over packed or
// in-place pixel runs) and its plan of work units. Internal to cc/core/cpu; included by
// conv_fast.cc.
#ifndef TF_OPS_CC_CORE_CPU_FAST_FILTER_H_
#define TF_OPS_CC_CORE_CPU_FAST_FILTER_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// How the filter gradient is split into work units: (slice, filter row, block of filter
// columns, group, row chunk, output-channel chunk); each unit sums its (batch, row) slice in
// order into its own float accumulators, and slices are added in order at the end. A
// unit's GEMM rows are (filter column in its block, input channel) pairs: with one group
// and no column dilation, the input values of neighbouring filter columns lie side by side,
// so small channel counts are merged across the whole filter row (`merged_cols` columns per
// block) instead of leaving most rows of a tile empty. The GEMM runs on the strided kernel
// `strided` of the column width's GemmKernel, tiles of `mr` rows.
struct FilterPlan {
  int64_t slices = 1, merged_cols = 1, ci_chunk = 0, k_chunk = 0, ci_chunks = 0, k_chunks = 0;
  int64_t units = 0, mr = 0;
  int strided = 0;
};

// A filter-gradient slice's rows of x and dy should fit in this much L2 cache: every unit of
// the slice reads all of them (each for its own tap, group and channel chunk).
inline constexpr double kFilterSliceBytes = 1 << 20;
// The slices' float accumulators together stay under this (or one slice's).
inline constexpr int64_t kFilterAccBytes = int64_t{8} << 20;

// Bytes of x and dy together: what a filter-gradient pass reads.
inline double OperandBytes(const ConvGeometry& g, int64_t element_size) {
  return static_cast<double>(element_size) *
         (g.input_elements() + static_cast<double>(g.output_elements()));
}

inline FilterPlan PlanFilter(const ConvGeometry& g, const GemmKernel& gk, int64_t element_size) {
  FilterPlan p;
  const int64_t FI = g.filter_in_depth, columns = g.out_depth_per_group();
  const int nb = gk.nb;
  // Columns merge below two tiles of input channels. Of the strided kernels, the one whose
  // tiles pad the GEMM rows by the smallest fraction (the taller on a tie): 48 rows as two
  // tiles of 24, not four of 14.
  const auto merged = [&](int64_t mr) {
    return g.groups == 1 && g.dilation_cols == 1 && FI < 2 * mr ? g.filter_cols : 1;
  };
  const auto padding = [&](int64_t mr) {
    const int64_t rows = merged(mr) * FI;
    return static_cast<double>(CeilDiv(rows, mr) * mr) / rows;
  };
  if (gk.strided[1].fn != nullptr && padding(gk.strided[1].mr) <= padding(gk.strided[0].mr)) {
    p.strided = 1;
  }
  const int64_t mr = p.mr = gk.strided[p.strided].mr;
  p.merged_cols = merged(mr);
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
  const double bytes = OperandBytes(g, element_size);
  const int64_t cached = std::min(static_cast<int64_t>(std::ceil(bytes / kFilterSliceBytes)),
                                  std::max<int64_t>(1, kFilterAccBytes / (4 * g.filter_elements())));
  p.slices = std::max<int64_t>(1, std::min(g.batch * g.out_rows,
                                           std::max(cached, CeilDiv(kMinUnits, base))));
  p.units = p.slices * base;
  return p;
}

// Output pixels whose operands a filter-gradient unit packs at a time.
inline constexpr int64_t kFilterBlockPixels = 256;
static_assert(kFilterBlockPixels % 2 == 0, "bfloat16 pairs of packed pixels fill whole blocks");
// Runs of at least this many output columns of float data are reduced in place, unpacked,
// several rows of an image to a micro-kernel call: for runs this long, skipping the packing's
// copy pays.
inline constexpr int64_t kFilterInPlaceRun = 8;

// A unit of the filter-gradient pass: its slice of the rows, filter row kh, first filter
// column kw0, group grp, GEMM rows [q0, q1) (row q: tap (kh, kw0 + q / FI), input channel
// q % FI) and output channels [k0, k1) of the group. It reads output columns [ow_lo, ow_hi)
// (some row of the unit reads each), and the run [in_lo, in_hi) of them (every row reads each)
// goes to the micro-kernel in place; the rest is packed.
struct FilterUnit {
  int64_t slice, kh, kw0, grp, q0, q1, k0, k1;
  int64_t ow_lo, ow_hi, in_lo, in_hi;
};

// Unit `unit` of `plan`; lo[kw] to hi[kw] are the output columns filter column kw reads
// inside the input (ReadRange).
template <typename T>
FilterUnit FilterUnitOf(const ConvGeometry& g, const FilterPlan& plan, const std::vector<int64_t>& lo,
                        const std::vector<int64_t>& hi, int64_t unit) {
  const int64_t FI = g.filter_in_depth, Q = plan.merged_cols * FI;
  const int64_t per_slice = plan.units / plan.slices, col_blocks = g.filter_cols / plan.merged_cols;
  FilterUnit u;
  u.slice = unit / per_slice;
  int64_t rest = unit % per_slice;
  const int64_t kc = rest % plan.k_chunks;
  rest /= plan.k_chunks;
  const int64_t cc = rest % plan.ci_chunks;
  rest /= plan.ci_chunks;
  u.grp = rest % g.groups;
  rest /= g.groups;
  u.kh = rest / col_blocks, u.kw0 = rest % col_blocks * plan.merged_cols;
  u.q0 = cc * plan.ci_chunk, u.q1 = std::min(Q, u.q0 + plan.ci_chunk);
  u.k0 = kc * plan.k_chunk, u.k1 = std::min(g.out_depth_per_group(), u.k0 + plan.k_chunk);
  u.ow_lo = g.out_cols, u.ow_hi = 0, u.in_lo = 0, u.in_hi = g.out_cols;
  for (int64_t kw = u.kw0 + u.q0 / FI; kw <= u.kw0 + (u.q1 - 1) / FI; ++kw) {
    u.in_lo = std::max(u.in_lo, lo[kw]);
    u.in_hi = std::min(u.in_hi, hi[kw]);
    if (hi[kw] == lo[kw]) continue;  // a column no output reads through
    u.ow_lo = std::min(u.ow_lo, lo[kw]);
    u.ow_hi = std::max(u.ow_hi, hi[kw]);
  }
  // Long runs of float columns every row reads go to the micro-kernel in place.
  const bool in_place = std::is_same_v<T, float> && u.k1 - u.k0 == plan.k_chunk &&
                        u.in_hi - u.in_lo >= kFilterInPlaceRun;
  if (!in_place) u.in_lo = u.in_hi = u.ow_hi;
  return u;
}

// The slice's sums of the unit's row q: acc[slice][tap][ci][group's channel 0].
inline float* FilterSumsRow(const ConvGeometry& g, const FilterUnit& u, float* acc, int64_t q) {
  const int64_t FI = g.filter_in_depth, K = g.out_depth;
  return acc + u.slice * g.filter_elements() +
         ((u.kh * g.filter_cols + u.kw0 + q / FI) * FI + q % FI) * K + u.grp * g.out_depth_per_group();
}

// The unit's accumulators (rows of k_chunk floats) from acc, or zero with `first`; zero in the
// tile padding past its rows and columns.
inline void LoadFilterSums(const ConvGeometry& g, const FilterPlan& plan, const FilterUnit& u, float* acc,
                           bool first, float* local) {
  for (int64_t q = u.q0; q < u.q0 + plan.ci_chunk; ++q) {
    float* const l = local + (q - u.q0) * plan.k_chunk;
    const int64_t valid = q < u.q1 && !first ? u.k1 - u.k0 : 0;
    if (valid > 0) std::memcpy(l, FilterSumsRow(g, u, acc, q) + u.k0, valid * sizeof(float));
    std::fill(l + valid, l + plan.k_chunk, 0.0f);
  }
}

inline void StoreFilterSums(const ConvGeometry& g, const FilterPlan& plan, const FilterUnit& u,
                            const float* local, float* acc) {
  for (int64_t q = u.q0; q < u.q1; ++q) {
    std::memcpy(FilterSumsRow(g, u, acc, q) + u.k0, local + (q - u.q0) * plan.k_chunk, (u.k1 - u.k0) * sizeof(float));
  }
}

// Reduces `count` packed pixels (rows of ci_chunk and k_chunk values, or with `pairs` rows of
// pairs of them) into the unit's accumulators.
TF_OPS_INLINE_STEP void ReducePacked(const FilterPlan& plan, const FilterUnit& u, GemmStridedFn strided, int64_t nb,
                                     bool pairs, int64_t count, const float* a_pack, const float* b_pack,
                                     float* local) {
  // An odd count's last slot already has its zero partner.
  const int64_t len = pairs ? CeilDiv(count, 2) : count, mr = plan.mr;
  Note(Path::kFilterPacked);
  if (count == kFilterBlockPixels) Note(Path::kFilterFullBlock);
  for (int64_t q = u.q0; q < u.q1; q += mr) {
    for (int64_t k = u.k0; k < u.k1; k += nb) {
      strided(1, len, a_pack + (q - u.q0), 0, plan.ci_chunk, std::min<int64_t>(mr, u.q1 - q), b_pack + (k - u.k0), 0,
              plan.k_chunk, local + (q - u.q0) * plan.k_chunk + (k - u.k0), plan.k_chunk);
    }
  }
}

// In-place runs of float columns wait in a batch of consecutive output rows of one image (their
// operands lie a fixed distance apart, row after row): the first run's input row (x_row) and
// output-gradient row, the runs waiting, and the row after the last.
struct InPlaceBatch {
  const float* x = nullptr;
  const float* dy = nullptr;
  int64_t runs = 0, end = 0;
};

// Reduces the batch's runs (one call per tile) into the unit's accumulators, and empties it.
TF_OPS_INLINE_STEP void ReduceInPlace(const ConvGeometry& g, const FilterPlan& plan, const FilterUnit& u,
                                      GemmStridedFn strided, int64_t nb, InPlaceBatch* batch, float* local) {
  if (batch->runs == 0) return;
  Note(Path::kFilterInPlace);
  if (batch->runs > 1) Note(Path::kFilterInPlaceRows);
  const int64_t C = g.in_depth, K = g.out_depth, mr = plan.mr;
  // Row q's input at column ow is x_row[(ow * sw - pl + kw0 * dw) * C + q]: the rows of merged
  // columns are adjacent.
  const float* a = batch->x + ((u.in_lo * g.stride_cols - g.pad_left + u.kw0 * g.dilation_cols) * C + u.q0);
  for (int64_t q = u.q0; q < u.q1; q += mr) {
    for (int64_t k = u.k0; k < u.k1; k += nb) {
      strided(batch->runs, u.in_hi - u.in_lo, a + (q - u.q0), g.stride_rows * g.in_cols * C, g.stride_cols * C,
              std::min<int64_t>(mr, u.q1 - q), batch->dy + u.in_lo * K + k, g.out_cols * K, K,
              local + (q - u.q0) * plan.k_chunk + (k - u.k0), plan.k_chunk);
    }
  }
  batch->runs = 0;
}

// Sums the unit's rows into `local`: in-place runs by batches, every other column packed, up
// to kFilterBlockPixels pixels at a time (a_pack and b_pack), and reduced.
template <typename T>
void FilterUnitRows(const ConvGeometry& g, const FilterPlan& plan, const FilterUnit& u, const GemmKernel& gk,
                    const T* x, const T* dy, float* local, float* a_pack, float* b_pack) {
  const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group(), C = g.in_depth;
  const int64_t q0 = u.q0, q1 = u.q1, k0 = u.k0, k1 = u.k1, kw0 = u.kw0;
  const int64_t ow_lo = u.ow_lo, ow_hi = u.ow_hi, in_lo = u.in_lo, in_hi = u.in_hi;
  // bfloat16 where the processor has AVX-512 BF16: the packed operands hold bfloat16 pairs of
  // consecutive packed pixels (the second zero past an odd count), reduced by dot products.
  const GemmKernel& kernels = GemmFor(Kernels(), gk, KindOf<T>());
  const bool pairs = &kernels != &gk;
  // The plan was made for these kernels (PlanFilter with GemmFor's table): plan.mr rows.
  const GemmStridedFn strided = kernels.strided[plan.strided].fn;
  const PackHalvesFn pack_halves = Kernels().pack_halves;
  const int64_t nb = gk.nb;
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
  InPlaceBatch batch;
  const int64_t max_runs = std::max<int64_t>(1, kFilterBlockPixels / std::max<int64_t>(1, in_hi - in_lo));
  const int64_t rows = g.batch * g.out_rows;
  const int64_t row0 = rows * u.slice / plan.slices, row1 = rows * (u.slice + 1) / plan.slices;
  for (int64_t row = row0; row < row1 && ow_hi > ow_lo; ++row) {
    const int64_t n = row / g.out_rows, oh = row % g.out_rows;
    const int64_t ih = oh * g.stride_rows - g.pad_top + u.kh * g.dilation_rows;
    if (ih < 0 || ih >= g.in_rows) continue;
    const T* x_row = x + (n * g.in_rows + ih) * g.in_cols * C + u.grp * FI;
    const T* dy_row = dy + (n * g.out_rows + oh) * g.out_cols * K + u.grp * Kg;
    if constexpr (std::is_same_v<T, float>) {
      if (in_hi > in_lo) {
        // Rows of one image follow each other at fixed distances; a new image starts a
        // new batch.
        if (batch.runs == max_runs) Note(Path::kFilterInPlaceFullBatch);
        if (batch.runs == max_runs || row != batch.end || oh == 0) ReduceInPlace(g, plan, u, strided, nb, &batch, local);
        if (batch.runs == 0) batch.x = x_row, batch.dy = dy_row;
        ++batch.runs;
        batch.end = row + 1;
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
      } else {
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
      }
      if (++count == kFilterBlockPixels) ReducePacked(plan, u, strided, nb, pairs, count, a_pack, b_pack, local), count = 0;
    }
  }
  if constexpr (std::is_same_v<T, float>) ReduceInPlace(g, plan, u, strided, nb, &batch, local);
  if (count > 0) ReducePacked(plan, u, strided, nb, pairs, count, a_pack, b_pack, local);
}

// Adds this pass's contribution to acc[slice][tap][ci][k] (float, the filter's layout per
// slice), or with `first`, writes it there (acc's earlier contents are not read). NHWC, any
// batch. Float rows whose columns every GEMM row reads for a long run go through the
// micro-kernel in place. Everything else is packed, up to kFilterBlockPixels output pixels at
// a time (the input values of the GEMM rows, zero where a merged filter column falls outside
// the input, and the output gradient of the columns, as float), and the block is reduced at
// once, so short rows and borders cost little more than long ones.
template <typename T>
void FilterGemmNhwc(const ConvGeometry& g, const FilterPlan& plan, const GemmKernel& gk,
                    const T* x, const T* dy, float* acc, bool first,
                    const ParallelFor& parallel_for) {
  const GemmKernel& kernels = GemmFor(Kernels(), gk, KindOf<T>());
  Note(Path::kFilterGemm);
  if (plan.merged_cols > 1) Note(Path::kFilterMergedCols);
  if (plan.ci_chunks > 1 || plan.k_chunks > 1) Note(Path::kFilterSplitAccumulators);
  if (plan.slices > 1) Note(Path::kFilterSlices);
  if (&kernels != &gk) Note(Path::kFilterPairs);
  NoteKernel(kernels.strided[plan.strided].fn);
  std::vector<int64_t> lo(g.filter_cols), hi(g.filter_cols);
  for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
    ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo[kw], &hi[kw]);
  }
  const int64_t rows = g.batch * g.out_rows;
  parallel_for(plan.units, Cost(2.0 * rows / plan.slices * g.out_cols * plan.ci_chunk * plan.k_chunk),
               [&](int64_t begin, int64_t end) {
    float* const local = Scratch<float, 15>(plan.ci_chunk * plan.k_chunk);
    float* const a_pack = Scratch<float, 16>(kFilterBlockPixels * plan.ci_chunk);
    float* const b_pack = Scratch<float, 17>(kFilterBlockPixels * plan.k_chunk);
    for (int64_t unit = begin; unit < end; ++unit) {
      const FilterUnit u = FilterUnitOf<T>(g, plan, lo, hi, unit);
      // The unit's accumulators so far (NCHW passes add chunk after chunk of images).
      LoadFilterSums(g, plan, u, acc, first, local);
      FilterUnitRows(g, plan, u, gk, x, dy, local, a_pack, b_pack);
      StoreFilterSums(g, plan, u, local, acc);
    }
  });
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_FILTER_H_
