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

// Adds this pass's contribution to acc[slice][tap][ci][k] (float, the filter's layout per
// slice), or with `first`, writes it there (acc's earlier contents are not read). NHWC, any batch. Float rows whose columns every GEMM row reads for a long run go
// through the micro-kernel in place. Everything else is packed, up to kFilterBlockPixels
// output pixels at a time (the input values of the GEMM rows, zero where a merged filter
// column falls outside the input, and the output gradient of the columns, as float), and
// the block is reduced at once, so short rows and borders cost little more than long ones.
template <typename T>
class FilterGemmPass {
 public:
  FilterGemmPass(const ConvGeometry& g, const FilterPlan& plan, const GemmKernel& gk, const T* x, const T* dy,
                 float* acc, bool first)
      : g_(g), plan_(plan), x_(x), dy_(dy), acc_(acc), first_(first), FI_(g.filter_in_depth), K_(g.out_depth),
        Kg_(g.out_depth_per_group()), C_(g.in_depth), mr_(plan.mr), nb_(gk.nb), rows_(g.batch * g.out_rows),
        filter_size_(g.filter_rows * g.filter_cols * g.filter_in_depth * g.out_depth),
        col_blocks_(g.filter_cols / plan.merged_cols), Q_(plan.merged_cols * g.filter_in_depth),
        lo_(g.filter_cols), hi_(g.filter_cols) {
    // bfloat16 where the processor has AVX-512 BF16: the packed operands hold bfloat16 pairs of
    // consecutive packed pixels (the second zero past an odd count), reduced by dot products.
    // The plan was made for these kernels (PlanFilter with GemmFor's table): plan.mr rows.
    const GemmKernel& kernels = GemmFor(gk, KindOf<T>());
    pairs_ = &kernels != &gk;
    strided_ = kernels.strided[plan.strided].fn;
    pack_halves_ = Kernels().pack_halves;
    Note(Path::kFilterGemm);
    if (plan.merged_cols > 1) Note(Path::kFilterMergedCols);
    if (plan.ci_chunks > 1 || plan.k_chunks > 1) Note(Path::kFilterSplitAccumulators);
    if (plan.slices > 1) Note(Path::kFilterSlices);
    if (pairs_) Note(Path::kFilterPairs);
    NoteKernel(strided_);
    for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
      ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo_[kw], &hi_[kw]);
    }
  }

  void Run(const ParallelFor& parallel_for) const {
    parallel_for(plan_.units, Cost(2.0 * rows_ / plan_.slices * g_.out_cols * plan_.ci_chunk * plan_.k_chunk),
                 [&](int64_t begin, int64_t end) {
      Unit u;
      u.local = Scratch<float, 15>(plan_.ci_chunk * plan_.k_chunk);
      u.a_pack = Scratch<float, 16>(kFilterBlockPixels * plan_.ci_chunk);
      u.b_pack = Scratch<float, 17>(kFilterBlockPixels * plan_.k_chunk);
      for (int64_t unit = begin; unit < end; ++unit) RunUnit(unit, &u);
    });
  }

 private:
  // One work unit: its place (slice; tap row kh, first merged column kw0; group; GEMM rows
  // [q0, q1), row q being filter tap (kh, kw0 + q / FI), input channel q % FI; output channels
  // [k0, k1)), its accumulators and packed operands, and the in-place rows waiting.
  struct Unit {
    float* local;
    float* a_pack;
    float* b_pack;
    int64_t slice, kh, kw0, grp, q0, q1, k0, k1;
    int64_t count;  // pixels packed
    // In-place runs: columns [in_lo, in_hi) that every row reads; waiting runs in a batch of
    // consecutive rows of one image, from the rows batch_x and batch_dy; the row after the last.
    int64_t in_lo, in_hi, max_runs, batch_runs, batch_end;
    const T* batch_x;
    const T* batch_dy;
  };

  float* OutRow(const Unit& u, int64_t q) const {
    return acc_ + u.slice * filter_size_ + ((u.kh * g_.filter_cols + u.kw0 + q / FI_) * FI_ + q % FI_) * K_ +
           u.grp * Kg_;
  }

  void Place(int64_t unit, Unit* u) const {
    const int64_t per_slice = plan_.units / plan_.slices;
    u->slice = unit / per_slice;
    int64_t r = unit % per_slice;
    const int64_t kc = r % plan_.k_chunks;
    r /= plan_.k_chunks;
    const int64_t cc = r % plan_.ci_chunks;
    r /= plan_.ci_chunks;
    u->grp = r % g_.groups;
    r /= g_.groups;
    u->kh = r / col_blocks_, u->kw0 = r % col_blocks_ * plan_.merged_cols;
    u->q0 = cc * plan_.ci_chunk, u->q1 = std::min(Q_, u->q0 + plan_.ci_chunk);
    u->k0 = kc * plan_.k_chunk, u->k1 = std::min(Kg_, u->k0 + plan_.k_chunk);
  }

  // The unit's accumulators so far (NCHW passes add chunk after chunk of images; zero in the
  // first), zero in the tile padding past its rows and columns; and back.
  void Load(Unit* u) const {
    for (int64_t q = u->q0; q < u->q0 + plan_.ci_chunk; ++q) {
      float* const l = u->local + (q - u->q0) * plan_.k_chunk;
      const int64_t valid = q < u->q1 && !first_ ? u->k1 - u->k0 : 0;
      if (valid > 0) std::memcpy(l, OutRow(*u, q) + u->k0, valid * sizeof(float));
      std::fill(l + valid, l + plan_.k_chunk, 0.0f);
    }
  }
  void Store(const Unit& u) const {
    for (int64_t q = u.q0; q < u.q1; ++q) {
      std::memcpy(OutRow(u, q) + u.k0, u.local + (q - u.q0) * plan_.k_chunk, (u.k1 - u.k0) * sizeof(float));
    }
  }

  void RunUnit(int64_t unit, Unit* u) const {
    Place(unit, u);
    Load(u);
    // The output columns some row of the unit reads, and those every row reads.
    int64_t ow_lo = g_.out_cols, ow_hi = 0;
    u->in_lo = 0, u->in_hi = g_.out_cols;
    for (int64_t kw = u->kw0 + u->q0 / FI_; kw <= u->kw0 + (u->q1 - 1) / FI_; ++kw) {
      u->in_lo = std::max(u->in_lo, lo_[kw]);
      u->in_hi = std::min(u->in_hi, hi_[kw]);
      if (hi_[kw] == lo_[kw]) continue;  // a column no output reads through
      ow_lo = std::min(ow_lo, lo_[kw]);
      ow_hi = std::max(ow_hi, hi_[kw]);
    }
    // Long runs of float columns every row reads go to the micro-kernel in place; the rest is
    // packed.
    const bool in_place = std::is_same_v<T, float> && u->k1 - u->k0 == plan_.k_chunk &&
                          u->in_hi - u->in_lo >= kFilterInPlaceRun;
    if (!in_place) u->in_lo = u->in_hi = ow_hi;
    u->count = 0;
    u->max_runs = std::max<int64_t>(1, kFilterBlockPixels / std::max<int64_t>(1, u->in_hi - u->in_lo));
    u->batch_runs = 0, u->batch_end = 0, u->batch_x = nullptr, u->batch_dy = nullptr;
    const int64_t row0 = rows_ * u->slice / plan_.slices, row1 = rows_ * (u->slice + 1) / plan_.slices;
    for (int64_t row = row0; row < row1 && ow_hi > ow_lo; ++row) {
      const int64_t n = row / g_.out_rows, oh = row % g_.out_rows;
      const int64_t ih = oh * g_.stride_rows - g_.pad_top + u->kh * g_.dilation_rows;
      if (ih < 0 || ih >= g_.in_rows) continue;
      const T* x_row = x_ + (n * g_.in_rows + ih) * g_.in_cols * C_ + u->grp * FI_;
      const T* dy_row = dy_ + (n * g_.out_rows + oh) * g_.out_cols * K_ + u->grp * Kg_;
      if (in_place) {
        // Rows of one image follow each other at fixed distances; a new image starts a new
        // batch.
        if (u->batch_runs == u->max_runs) Note(Path::kFilterInPlaceFullBatch);
        if (u->batch_runs == u->max_runs || row != u->batch_end || oh == 0) ReduceBatch(u);
        if (u->batch_runs == 0) u->batch_x = x_row, u->batch_dy = dy_row;
        ++u->batch_runs;
        u->batch_end = row + 1;
      }
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
        if (ow == u->in_lo) ow = u->in_hi;
        if (ow >= ow_hi) break;
        if (pairs_) {
          PackPairs(*u, x_row, dy_row + ow * K_, ow);
        } else {
          PackFloats(*u, x_row, dy_row + ow * K_, ow);
        }
        if (++u->count == kFilterBlockPixels) Flush(u);
      }
    }
    ReduceBatch(u);
    if (u->count > 0) Flush(u);
    Store(*u);
  }

  // Pair slot r of a pair operand holds packed pixels 2r (low half) and 2r + 1 (high half): an
  // even pixel's bits are stored with zero high halves, an odd pixel's are or-ed in above them.
  // `n` values from `in`, or zeros where `in` is null.
  void PutPair(const Unit& u, uint32_t* out, const T* in, int64_t n) const {
    const bool even = u.count % 2 == 0;
    if (in == nullptr) {
      if (even) std::fill(out, out + n, uint32_t{0});
      return;
    }
    // The bits of a bfloat16 are its first (and only) member, a uint16_t.
    NoteKernel(pack_halves_);
    pack_halves_(reinterpret_cast<const uint16_t*>(in), n, out, !even);
  }

  // Output column ow's operands, packed as bfloat16 pairs: dy's, then each GEMM row's input.
  // (Both read the unit's fields into constants first: the element conversions and packing calls
  // below could otherwise make the compiler reload them from the unit at every step.)
  void PackPairs(const Unit& u, const T* x_row, const T* d, int64_t ow) const {
    const int64_t q0 = u.q0, q1 = u.q1, k0 = u.k0, k1 = u.k1, kw0 = u.kw0, FI = FI_, C = C_;
    uint32_t* const a32 = reinterpret_cast<uint32_t*>(u.a_pack) + u.count / 2 * plan_.ci_chunk;
    uint32_t* const b32 = reinterpret_cast<uint32_t*>(u.b_pack) + u.count / 2 * plan_.k_chunk;
    PutPair(u, b32, d + k0, k1 - k0);
    PutPair(u, b32 + (k1 - k0), nullptr, plan_.k_chunk - (k1 - k0));
    for (int64_t q = q0; q < q1;) {
      const int64_t kw = kw0 + q / FI, q_end = std::min(q1, q - q % FI + FI);
      const int64_t iw = ow * g_.stride_cols - g_.pad_left + kw * g_.dilation_cols;
      const bool inside = iw >= 0 && iw < g_.in_cols;
      PutPair(u, a32 + (q - q0), inside ? x_row + iw * C + q % FI : nullptr, q_end - q);
      q = q_end;
    }
  }

  // Output column ow's operands, packed as floats.
  void PackFloats(const Unit& u, const T* x_row, const T* d, int64_t ow) const {
    const int64_t q0 = u.q0, q1 = u.q1, k0 = u.k0, k1 = u.k1, kw0 = u.kw0, FI = FI_, C = C_;
    const int64_t stride = g_.stride_cols, pad = g_.pad_left, dilation = g_.dilation_cols, cols = g_.in_cols;
    float* const b = u.b_pack + u.count * plan_.k_chunk;
    for (int64_t k = k0; k < k1; ++k) b[k - k0] = static_cast<float>(d[k]);
    std::fill(b + (k1 - k0), b + plan_.k_chunk, 0.0f);
    float* const a = u.a_pack + u.count * plan_.ci_chunk;
    for (int64_t q = q0; q < q1;) {
      // The channels of one filter column: contiguous, or zero outside the input.
      const int64_t kw = kw0 + q / FI, q_end = std::min(q1, q - q % FI + FI);
      const int64_t iw = ow * stride - pad + kw * dilation;
      if (iw >= 0 && iw < cols) {
        const T* xs = x_row + iw * C + q % FI;
        for (int64_t i = 0; i < q_end - q; ++i) a[q - q0 + i] = static_cast<float>(xs[i]);
      } else {
        std::fill(a + (q - q0), a + (q_end - q0), 0.0f);
      }
      q = q_end;
    }
  }

  // Reduces the packed pixels into the unit's accumulators (an odd count's last pair slot
  // already has its zero partner).
  void Flush(Unit* u) const {
    const int64_t len = pairs_ ? CeilDiv(u->count, 2) : u->count;
    Note(Path::kFilterPacked);
    if (u->count == kFilterBlockPixels) Note(Path::kFilterFullBlock);
    for (int64_t q = u->q0; q < u->q1; q += mr_) {
      for (int64_t k = u->k0; k < u->k1; k += nb_) {
        strided_(1, len, u->a_pack + (q - u->q0), 0, plan_.ci_chunk, std::min<int64_t>(mr_, u->q1 - q),
                 u->b_pack + (k - u->k0), 0, plan_.k_chunk, u->local + (q - u->q0) * plan_.k_chunk + (k - u->k0),
                 plan_.k_chunk);
      }
    }
    u->count = 0;
  }

  // Reduces the waiting in-place runs, one call per tile: their operands lie a fixed distance
  // apart, row after row.
  void ReduceBatch(Unit* u) const {
    if constexpr (std::is_same_v<T, float>) {
      if (u->batch_runs == 0) return;
      Note(Path::kFilterInPlace);
      if (u->batch_runs > 1) Note(Path::kFilterInPlaceRows);
      // Row q's input at column ow is x_row[(ow * sw - pl + kw0 * dw) * C + q]: the rows of
      // merged columns are adjacent.
      const float* a =
          u->batch_x + ((u->in_lo * g_.stride_cols - g_.pad_left + u->kw0 * g_.dilation_cols) * C_ + u->q0);
      for (int64_t q = u->q0; q < u->q1; q += mr_) {
        for (int64_t k = u->k0; k < u->k1; k += nb_) {
          strided_(u->batch_runs, u->in_hi - u->in_lo, a + (q - u->q0), g_.stride_rows * g_.in_cols * C_,
                   g_.stride_cols * C_, std::min<int64_t>(mr_, u->q1 - q), u->batch_dy + u->in_lo * K_ + k,
                   g_.out_cols * K_, K_, u->local + (q - u->q0) * plan_.k_chunk + (k - u->k0), plan_.k_chunk);
        }
      }
    }
    u->batch_runs = 0;
  }

  const ConvGeometry& g_;
  const FilterPlan& plan_;
  const T* const x_;
  const T* const dy_;
  float* const acc_;
  const bool first_;
  const int64_t FI_, K_, Kg_, C_, mr_, nb_, rows_, filter_size_, col_blocks_, Q_;
  bool pairs_ = false;
  GemmStridedFn strided_ = nullptr;
  PackHalvesFn pack_halves_ = nullptr;
  std::vector<int64_t> lo_, hi_;
};

template <typename T>
void FilterGemmNhwc(const ConvGeometry& g, const FilterPlan& plan, const GemmKernel& gk,
                    const T* x, const T* dy, float* acc, bool first,
                    const ParallelFor& parallel_for) {
  FilterGemmPass<T>(g, plan, gk, x, dy, acc, first).Run(parallel_for);
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_FILTER_H_
