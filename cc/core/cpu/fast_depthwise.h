// Depthwise (multiplier 1) passes of the fast CPU kernels: forward and backprop input by
// output rows, and the filter gradient. Internal to cc/core/cpu; included by conv_fast.cc.
#ifndef TF_OPS_CC_CORE_CPU_FAST_DEPTHWISE_H_
#define TF_OPS_CC_CORE_CPU_FAST_DEPTHWISE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"
#include "cc/core/cpu/fast_filter.h"
#include "cc/core/cpu/fast_indirect.h"

namespace tf_ops {
namespace cpu {
namespace fast {

// Depthwise operands (source and output, or x and dy) together larger than this (more than a
// server's L3 cache holds) come from memory and go back to it:
// - the forward and backprop input passes write such float outputs through non-temporal
//   stores (StreamOut), which write whole cache lines without reading them first;
// - filter-gradient units read such rows whole, through every channel block. A unit per
//   channel block reads a part of every cache line, and the memory's prefetching fetches the
//   rest as well. Smaller ones, read from the caches, run a unit per channel block.
inline constexpr double kDepthwiseMemoryBytes = 32.0 * (1 << 20);

// Bytes of source (through every filter row) that one group of depthwise tiles reads.
inline constexpr int64_t kDepthwiseGroupBytes = 16 * 1024;

// Depthwise channels [begin, end) handled by one kernel shape.
struct ChannelSegment {
  int64_t begin, end;
  const DepthwiseKernel* kernel;
};

// The channels in blocks of the widest depthwise kernel that fits, then narrower ones; a
// remainder under 16 goes with the 16-wide kernel, which sums it in scalar code.
inline std::vector<ChannelSegment> DepthwiseSegments(int64_t channels) {
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

inline std::vector<DepthwiseBlock> DepthwiseBlocks(int64_t channels) {
  std::vector<DepthwiseBlock> out;
  for (const ChannelSegment& seg : DepthwiseSegments(channels)) {
    for (int64_t c = seg.begin; c < seg.end; c += seg.kernel->nb) {
      out.push_back({c, std::min<int64_t>(seg.kernel->nb, seg.end - c), seg.kernel});
    }
  }
  return out;
}

inline bool IsDepthwiseOne(const ConvGeometry& g) {
  return g.filter_in_depth == 1 && g.groups == g.in_depth && g.out_depth == g.in_depth;
}

// The depthwise rows' filter as floats, [taps][C]: their workspace.
inline int64_t DepthwiseRowsPanelFloats(const ConvGeometry& g) {
  return g.filter_rows * g.filter_cols * g.in_depth;
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
class DepthwiseRowsPass {
 public:
  DepthwiseRowsPass(const ConvGeometry& g, const DimMap& dh, const DimMap& dw, const float* panel, const T* src,
                    T* dst)
      : g_(g), dh_(dh), dw_(dw), panel_(panel), src_(src), dst_(dst), C_(g.in_depth), KW_(g.filter_cols),
        taps_(g.filter_rows * g.filter_cols), blocks_(DepthwiseBlocks(g.in_depth)),
        nblocks_(static_cast<int64_t>(blocks_.size())), pixel_step_(dw.mult() * g.in_depth),
        from_memory_(OperandBytes(g, sizeof(T)) > kDepthwiseMemoryBytes) {
    // Inside pixels go in groups of whole tiles of every kernel, of about kDepthwiseGroupBytes
    // of source.
    for (const DepthwiseBlock& blk : blocks_) {
      max_mr_ = std::max<int64_t>(max_mr_, blk.kernel->mr);
      max_nb_ = std::max<int64_t>(max_nb_, blk.kernel->nb);
      unit_mr_ = std::lcm<int64_t>(unit_mr_, blk.kernel->mr);
    }
    group_ = std::max<int64_t>(1, kDepthwiseGroupBytes / (dh.taps * C_ * sizeof(T)) / unit_mr_) * unit_mr_;
    column_classes_.resize(dw.classes());
    for (int64_t c = 0; c < dw.classes(); ++c) PlanColumnClass(c, &column_classes_[c]);
    row_taps_.resize(dh.classes()), row_bases_.resize(dh.classes());
    for (int64_t c = 0; c < dh.classes(); ++c) dh.Candidates(c, &row_taps_[c], &row_bases_[c]);
    zeros_.assign(max_nb_, T(0.0f));
    // Operands far larger than the caches: the source rows are fetched a row ahead, and float
    // outputs in whole cache lines per channel block go out through non-temporal stores (each
    // pixel is written once, and a plain store would first read its line from memory).
    if constexpr (std::is_same_v<T, float>) {
      stream_ = from_memory_ && C_ % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
      if (stream_) Note(Path::kDepthwiseStreamed);
    }
  }

  void Run(const ParallelFor& parallel_for) const {
    parallel_for(g_.batch * dh_.size, Cost(2.0 * dw_.size * C_ * taps_ / (dh_.step() * dw_.step())),
                 [&](int64_t begin, int64_t end) {
      const Tables t = ThreadTables();
      AheadRows ahead;
      for (int64_t unit = begin; unit < end; ++unit) RunRow(t, &ahead, unit, end);
      if (stream_) StreamFence();
    });
  }

 private:
  // Column class c: members j < count at column c + j * step; candidate tap a reads source
  // column bases[a] + j * mult; members [lo, hi) read inside the source through every tap.
  // Where the candidates read neighbouring columns (no dilation) and the row kernels cover the
  // class's spacing and tap count, `by_column` lists the candidates from the leftmost column
  // read (`first`) rightwards, and the inside members go through the row kernels.
  struct ColumnClass {
    int64_t count = 0, lo = 0, hi = 0, first = 0;
    std::vector<int64_t> taps, bases, by_column;
  };
  // A thread's pointers and tables for one row.
  struct Tables {
    const void** a;
    const float** b;
    int64_t* src_rows;
    int64_t* tap_rows;
    float* cbuf;
    // Element offset of member 0's source pixel through each tap (through each filter row at
    // the class's first column, for the row kernels), and the filters in the row kernels'
    // order.
    int64_t* tap_offset;
    const float** b_rows;
    int64_t* next_rows;
  };
  // One column class of one row: its image, the source rows and their taps' count.
  struct Row {
    int64_t n, rows, cw, count;
    T* out_row;
  };

  static bool IsVector(const DepthwiseBlock& blk) { return blk.width == blk.kernel->nb; }

  void PlanColumnClass(int64_t c, ColumnClass* cc) const {
    constexpr int kind = KindOf<T>();
    cc->count = dw_.count(c);
    dw_.Candidates(c, &cc->taps, &cc->bases);
    cc->lo = 0, cc->hi = cc->count;
    for (int64_t base : cc->bases) {
      cc->lo = std::max(cc->lo, CeilDivSigned(-base, dw_.mult()));
      cc->hi = std::min(cc->hi, FloorDivSigned(dw_.src_size - 1 - base, dw_.mult()) + 1);
    }
    cc->hi = std::max(cc->hi, cc->lo);
    const int64_t cols = static_cast<int64_t>(cc->bases.size());
    if (cols == 0 || cols > kDepthwiseRowCols || dw_.mult() > kDepthwiseRowMults ||
        blocks_.front().kernel->row[dw_.mult() - 1][cols - 1][kind] == nullptr) {
      return;
    }
    cc->first = *std::min_element(cc->bases.begin(), cc->bases.end());
    std::vector<int64_t> order(cols, -1);
    for (int64_t a = 0; a < cols; ++a) {
      const int64_t k = cc->bases[a] - cc->first;
      if (k < cols) order[k] = a;
    }
    if (std::find(order.begin(), order.end(), -1) == order.end()) cc->by_column = order;
  }

  Tables ThreadTables() const {
    return {Scratch<const void*, 15>(taps_ * max_mr_),
            Scratch<const float*, 16>(nblocks_ * taps_),
            Scratch<int64_t, 17>(g_.filter_rows),
            Scratch<int64_t, 18>(g_.filter_rows),
            Scratch<float, 19>(std::max(group_, max_mr_) * max_nb_),
            Scratch<int64_t, 20>(taps_),
            Scratch<const float*, 21>(nblocks_ * taps_),
            Scratch<int64_t, 26>(g_.filter_rows)};
  }

  void Put(const float* c, int64_t n, T* out) const {
    if constexpr (std::is_same_v<T, float>) {
      if (stream_) return StreamOut(c, n, out);
    }
    WriteOut(c, n, out);
  }

  // The source rows unit u reads (in its image), into rows[], and through which filter rows
  // (into filter_rows[] where given); returns their count.
  int64_t SourceRows(int64_t u, int64_t* rows, int64_t* filter_rows) const {
    const int64_t r = u % dh_.size, rc = r % dh_.step(), i = r / dh_.step();
    int64_t count = 0;
    for (size_t t = 0; t < row_taps_[rc].size(); ++t) {
      const int64_t s = row_bases_[rc][t] + i * dh_.mult();
      if (s < 0 || s >= dh_.src_size) continue;
      if (filter_rows != nullptr) filter_rows[count] = row_taps_[rc][t];
      rows[count++] = s;
    }
    return count;
  }

  T* OutPixel(const Row& row, int64_t j) const { return row.out_row + (row.cw + j * dw_.step()) * C_; }

  // Unit `unit` (of the thread's units up to `end`): one computed row of one image, column class
  // by column class. From memory, the source rows that the thread's next unit reads and this
  // one does not are fetched while this row is computed, a share after each group.
  void RunRow(const Tables& t, AheadRows* ahead, int64_t unit, int64_t end) const {
    const int64_t n = unit / dh_.size, r = unit % dh_.size;
    const int64_t rows = SourceRows(unit, t.src_rows, t.tap_rows);
    ahead->Clear();
    if (from_memory_ && unit + 1 < end) {
      const int64_t n2 = (unit + 1) / dh_.size;
      const int64_t next = SourceRows(unit + 1, t.next_rows, nullptr);
      const int64_t row_bytes = dw_.src_size * C_ * static_cast<int64_t>(sizeof(T));
      for (int64_t q = 0; q < next; ++q) {
        if (n2 == n && std::find(t.src_rows, t.src_rows + rows, t.next_rows[q]) != t.src_rows + rows) continue;
        ahead->Add(src_ + (n2 * dh_.src_size + t.next_rows[q]) * dw_.src_size * C_, row_bytes);
      }
    }
    int64_t done_pixels = 0;
    for (int64_t cw = 0; cw < dw_.classes(); ++cw) {
      const ColumnClass& cc = column_classes_[cw];
      const Row row{n, rows, cw, rows * static_cast<int64_t>(cc.taps.size()), dst_ + (n * dh_.size + r) * dw_.size * C_};
      if (row.count == 0) {
        Note(Path::kDepthwiseNoTap);
        for (int64_t j = 0; j < cc.count; ++j) std::fill(OutPixel(row, j), OutPixel(row, j) + C_, T(0.0f));
        continue;
      }
      PointTaps(t, cc, row);
      done_pixels = InsideGroups(t, ahead, cc, row, done_pixels);
      Others(t, cc, row);
    }
    ahead->FetchTo(1, 1);
  }

  // The row's taps for class cc: each tap's source offset and filter, for every channel block.
  void PointTaps(const Tables& t, const ColumnClass& cc, const Row& row) const {
    const int64_t cols = static_cast<int64_t>(cc.taps.size());
    const bool by_rows = !cc.by_column.empty();
    for (int64_t q = 0; q < row.count; ++q) {
      const int64_t column = by_rows ? cc.first : cc.bases[q % cols];
      t.tap_offset[q] = ((row.n * dh_.src_size + t.src_rows[q / cols]) * dw_.src_size + column) * C_;
    }
    for (int64_t k = 0; k < nblocks_; ++k) {
      for (int64_t q = 0; q < row.count; ++q) {
        const float* tap_panel = panel_ + t.tap_rows[q / cols] * KW_ * C_ + blocks_[k].begin;
        t.b[k * row.count + q] = tap_panel + cc.taps[q % cols] * C_;
        if (by_rows) t.b_rows[k * row.count + q] = tap_panel + cc.taps[cc.by_column[q % cols]] * C_;
      }
    }
  }

  // The inside members [lo, InsideEnd(cc)), group by group, each through every vector block;
  // returns the row's pixels done.
  int64_t InsideGroups(const Tables& t, AheadRows* ahead, const ColumnClass& cc, const Row& row,
                       int64_t done_pixels) const {
    constexpr int kind = KindOf<T>();
    const int64_t cols = static_cast<int64_t>(cc.taps.size());
    const bool by_rows = !cc.by_column.empty();
    const int64_t inside_end = InsideEnd(cc);
    for (int64_t p0 = cc.lo; p0 < inside_end; p0 += group_) {
      const int64_t pixels = std::min(group_, inside_end - p0);
      if (p0 > cc.lo) Note(Path::kDepthwiseGroups);
      for (int64_t k = 0; k < nblocks_ && IsVector(blocks_[k]); ++k) {
        const DepthwiseBlock& blk = blocks_[k];
        const DepthwiseKernel& dk = *blk.kernel;
        // The row kernels take one source pointer per filter row.
        const int64_t pointers = by_rows ? row.rows : row.count, stride = by_rows ? cols : 1;
        for (int64_t q = 0; q < pointers; ++q) t.a[q] = src_ + t.tap_offset[q * stride] + p0 * pixel_step_ + blk.begin;
        float* c = t.cbuf;
        int64_t ldc = dk.nb;
        if constexpr (std::is_same_v<T, float>) {
          if (!stream_) c = OutPixel(row, p0) + blk.begin, ldc = dw_.step() * C_;
        }
        if (by_rows) {
          Note(Path::kDepthwiseRowKernel);
          NoteKernel(dk.row[dw_.mult() - 1][cols - 1][kind]);
          dk.row[dw_.mult() - 1][cols - 1][kind](pixels / dk.mr, row.rows, t.a, C_, t.b_rows + k * row.count, c,
                                                 ldc, false);
        } else {
          Note(Path::kDepthwiseAffine);
          NoteKernel(dk.affine[kind]);
          dk.affine[kind](pixels / dk.mr, row.count, t.a, pixel_step_, t.b + k * row.count, c, ldc, false);
        }
        if (c == t.cbuf) {
          for (int64_t m = 0; m < pixels; ++m) Put(t.cbuf + m * dk.nb, dk.nb, OutPixel(row, p0 + m) + blk.begin);
        }
      }
      ahead->FetchTo(done_pixels += pixels, dw_.size);
    }
    return done_pixels;
  }

  int64_t InsideEnd(const ColumnClass& cc) const { return cc.lo + (cc.hi - cc.lo) / unit_mr_ * unit_mr_; }

  // The source pixel of member j of class cc through tap q = (row tap, column tap), or null.
  const T* Source(const Tables& t, const ColumnClass& cc, const Row& row, int64_t q, int64_t j) const {
    const int64_t cols = static_cast<int64_t>(cc.taps.size());
    const int64_t col = cc.bases[q % cols] + j * dw_.mult();
    if (col < 0 || col >= dw_.src_size) return nullptr;
    return src_ + ((row.n * dh_.src_size + t.src_rows[q / cols]) * dw_.src_size + col) * C_;
  }

  // The other members, e < rest in order, in tiles of the indirect kernel (taps outside the
  // source, and lanes past the last member, read zeros); and the channels past the last vector
  // block, of every member, in scalar code.
  void Others(const Tables& t, const ColumnClass& cc, const Row& row) const {
    constexpr int kind = KindOf<T>();
    const int64_t inside_end = InsideEnd(cc);
    const int64_t rest = cc.count - (inside_end - cc.lo);
    const auto member = [&](int64_t e) { return e < cc.lo ? e : e - cc.lo + inside_end; };
    for (int64_t k = 0; k < nblocks_; ++k) {
      const DepthwiseBlock& blk = blocks_[k];
      if (!IsVector(blk)) {
        Scalar(t, cc, row, k);
        continue;
      }
      const DepthwiseKernel& dk = *blk.kernel;
      const int64_t mr = dk.mr;
      for (int64_t e0 = 0; e0 < rest; e0 += mr) {
        const int64_t valid = std::min(mr, rest - e0);
        for (int64_t q = 0; q < row.count; ++q) {
          for (int64_t m = 0; m < mr; ++m) {
            const T* p = m < valid ? Source(t, cc, row, q, member(e0 + m)) : nullptr;
            t.a[q * mr + m] = p != nullptr ? static_cast<const void*>(p + blk.begin)
                                           : static_cast<const void*>(zeros_.data());
          }
        }
        Note(Path::kDepthwiseEdges);
        NoteKernel(dk.indirect[kind]);
        dk.indirect[kind](row.count, t.a, t.b + k * row.count, t.cbuf, false);
        for (int64_t m = 0; m < valid; ++m) Put(t.cbuf + m * dk.nb, dk.nb, OutPixel(row, member(e0 + m)) + blk.begin);
      }
    }
  }

  // Channel block k, narrower than its kernel, of every member: summed in scalar code.
  void Scalar(const Tables& t, const ColumnClass& cc, const Row& row, int64_t k) const {
    const DepthwiseBlock& blk = blocks_[k];
    Note(Path::kDepthwiseScalar);
    for (int64_t j = 0; j < cc.count; ++j) {
      for (int64_t c = 0; c < blk.width; ++c) {
        float sum = 0.0f;
        for (int64_t q = 0; q < row.count; ++q) {
          const T* p = Source(t, cc, row, q, j);
          if (p != nullptr) sum += static_cast<float>(p[blk.begin + c]) * t.b[k * row.count + q][c];
        }
        OutPixel(row, j)[blk.begin + c] = static_cast<T>(sum);
      }
    }
  }

  const ConvGeometry& g_;
  const DimMap& dh_;
  const DimMap& dw_;
  const float* const panel_;
  const T* const src_;
  T* const dst_;
  const int64_t C_, KW_, taps_;
  const std::vector<DepthwiseBlock> blocks_;
  const int64_t nblocks_, pixel_step_;
  const bool from_memory_;
  bool stream_ = false;
  int64_t max_mr_ = 1, max_nb_ = 1, unit_mr_ = 1, group_ = 1;
  std::vector<ColumnClass> column_classes_;
  std::vector<std::vector<int64_t>> row_taps_, row_bases_;
  std::vector<T> zeros_;
};

template <typename T>
void DepthwiseRowsNhwc(const ConvGeometry& g, const DimMap& dh, const DimMap& dw, const T* w,
                       const T* src, T* dst, const ParallelFor& parallel_for) {
  const int64_t size = DepthwiseRowsPanelFloats(g);
  Workspace panel_space(size * sizeof(float));
  float* const panel = panel_space.data<float>();
  for (int64_t i = 0; i < size; ++i) panel[i] = static_cast<float>(w[i]);
  DepthwiseRowsPass<T>(g, dh, dw, panel, src, dst).Run(parallel_for);
}

// Depthwise: a unit is a slice of the rows, through every channel block (`whole_rows`) or
// through one (`block_units` units a slice, one per channel block, or one for whole rows).
struct DepthwiseFilterPlan {
  int64_t slices = 1, units = 0, block_units = 1;
  bool whole_rows = false;
};

inline DepthwiseFilterPlan PlanDepthwiseFilter(const ConvGeometry& g, int64_t element_size) {
  DepthwiseFilterPlan p;
  const int64_t blocks = static_cast<int64_t>(DepthwiseBlocks(g.in_depth).size());
  p.whole_rows = OperandBytes(g, element_size) > kDepthwiseMemoryBytes;
  p.block_units = p.whole_rows ? 1 : blocks;
  p.slices = std::max<int64_t>(1, std::min(g.batch * g.out_rows, CeilDiv(kMinUnits, p.block_units)));
  p.units = p.slices * p.block_units;
  return p;
}

// Depthwise (multiplier 1) filter gradient into acc[slice][tap][c]; a unit is a slice of the
// rows and walks every tap of each row, and for each tap its channel blocks (see
// PlanDepthwiseFilter).
template <typename T>
class FilterDepthwisePass {
 public:
  FilterDepthwisePass(const ConvGeometry& g, const DepthwiseFilterPlan& plan, const T* x, const T* dy, float* acc)
      : g_(g), plan_(plan), x_(x), dy_(dy), acc_(acc), C_(g.in_depth), taps_(g.filter_rows * g.filter_cols),
        blocks_(DepthwiseBlocks(g.in_depth)), count_(static_cast<int64_t>(blocks_.size())),
        rows_(g.batch * g.out_rows), max_nb_(Kernels().dw[2].nb), lo_(g.filter_cols), hi_(g.filter_cols) {
    Note(Path::kFilterDepthwise);
    if (plan.whole_rows) Note(Path::kFilterDepthwiseWholeRows);
    for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
      ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo_[kw], &hi_[kw]);
    }
  }

  void Run(const ParallelFor& parallel_for) const {
    const int64_t unit_channels = plan_.whole_rows ? C_ : max_nb_;
    parallel_for(plan_.units, Cost(2.0 * rows_ / plan_.slices * g_.out_cols * unit_channels * taps_),
                 [&](int64_t begin, int64_t end) {
      // local[(k * taps + t) * max_nb + j]: block k's channel j through tap t.
      float* const local = Scratch<float, 18>(count_ * taps_ * max_nb_);
      AheadRows ahead;
      for (int64_t unit = begin; unit < end; ++unit) RunUnit(unit, local, &ahead);
    });
  }

 private:
  // The x row that dy row (row_n, row_oh) reads through filter row kh, or null.
  const T* XRow(int64_t row_n, int64_t row_oh, int64_t kh) const {
    const int64_t ih = row_oh * g_.stride_rows - g_.pad_top + kh * g_.dilation_rows;
    return ih < 0 || ih >= g_.in_rows ? nullptr : x_ + (row_n * g_.in_rows + ih) * g_.in_cols * C_;
  }

  // One unit: its channel blocks [k0, k1) over its slice of the rows, in local accumulators.
  void RunUnit(int64_t unit, float* local, AheadRows* ahead) const {
    const int64_t slice = unit / plan_.block_units;
    const int64_t k0 = plan_.whole_rows ? 0 : unit % plan_.block_units;
    const int64_t k1 = plan_.whole_rows ? count_ : k0 + 1;
    float* const out = acc_ + slice * taps_ * C_;
    for (int64_t k = k0; k < k1; ++k) {
      for (int64_t t = 0; t < taps_; ++t) {
        for (int64_t j = 0; j < max_nb_; ++j) {
          local[(k * taps_ + t) * max_nb_ + j] = j < blocks_[k].width ? out[t * C_ + blocks_[k].begin + j] : 0.0f;
        }
      }
    }
    const int64_t row0 = rows_ * slice / plan_.slices, row1 = rows_ * (slice + 1) / plan_.slices;
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t n = row / g_.out_rows, oh = row % g_.out_rows;
      const T* dy_row = dy_ + (n * g_.out_rows + oh) * g_.out_cols * C_;
      FetchNextRow(row, row1, dy_row, ahead);
      for (int64_t kh = 0; kh < g_.filter_rows; ++kh) {
        const T* x_row = XRow(n, oh, kh);
        if (x_row == nullptr) continue;
        // Each channel block through the row's taps in turn, so that its parts of the x and dy
        // rows stay in the L1 cache across the taps.
        for (int64_t k = k0; k < k1; ++k) {
          float* const l = local + (k * taps_ + kh * g_.filter_cols) * max_nb_;
          const int64_t share = kh * (k1 - k0) + k - k0, shares = taps_ * (k1 - k0);
          if (blocks_[k].width == blocks_[k].kernel->nb) {
            VectorBlock(blocks_[k], x_row, dy_row, l, ahead, share, shares);
          } else {
            ScalarBlock(blocks_[k], x_row, dy_row, l);
          }
          ahead->FetchTo((share + 1) * g_.filter_cols, shares);
        }
      }
      ahead->FetchTo(1, 1);
    }
    for (int64_t k = k0; k < k1; ++k) {
      for (int64_t t = 0; t < taps_; ++t) {
        for (int64_t j = 0; j < blocks_[k].width; ++j) {
          out[t * C_ + blocks_[k].begin + j] = local[(k * taps_ + t) * max_nb_ + j];
        }
      }
    }
  }

  // Read from memory (whole rows): the next row's dy, and the x rows it reads that this one
  // does not, are fetched while this row runs, a share after each filter row of each channel
  // block.
  void FetchNextRow(int64_t row, int64_t row1, const T* dy_row, AheadRows* ahead) const {
    ahead->Clear();
    if (!plan_.whole_rows || row + 1 >= row1) return;
    const int64_t n = row / g_.out_rows, oh = row % g_.out_rows;
    const int64_t n2 = (row + 1) / g_.out_rows, oh2 = (row + 1) % g_.out_rows;
    ahead->Add(dy_row + g_.out_cols * C_, g_.out_cols * C_ * static_cast<int64_t>(sizeof(T)));
    for (int64_t kh = 0; kh < g_.filter_rows; ++kh) {
      const T* next = XRow(n2, oh2, kh);
      bool read = next == nullptr;
      for (int64_t k = 0; k < g_.filter_rows && !read; ++k) read = XRow(n, oh, k) == next;
      if (!read) ahead->Add(next, g_.in_cols * C_ * static_cast<int64_t>(sizeof(T)));
    }
  }

  // x under output column o through filter column kw, channels of blk.
  const T* XAt(const T* x_row, const DepthwiseBlock& blk, int64_t o, int64_t kw) const {
    return x_row + (o * g_.stride_cols - g_.pad_left + kw * g_.dilation_cols) * C_ + blk.begin;
  }

  // A whole vector block through one filter row: up to kDepthwiseStridedTaps neighbouring
  // filter columns at once over the output columns that all of them read (each dy vector then
  // read once for them all), and each alone over the rest of its own; in a piece a filter
  // column, each followed by its share of the fetches ahead.
  void VectorBlock(const DepthwiseBlock& blk, const T* x_row, const T* dy_row, float* l, AheadRows* ahead,
                   int64_t share, int64_t shares) const {
    const DepthwiseStridedFn strided = blk.kernel->strided[KindOf<T>()];
    NoteKernel(strided);
    // Output columns [from, to) through `count` filter columns from kw at once.
    const auto sum = [&](int64_t kw, int64_t count, int64_t from, int64_t to) {
      if (to <= from) return;
      strided(to - from, static_cast<int>(count), XAt(x_row, blk, from, kw), g_.stride_cols * C_,
              g_.dilation_cols * C_, dy_row + from * C_ + blk.begin, C_, l + kw * max_nb_, max_nb_);
    };
    for (int64_t kw0 = 0; kw0 < g_.filter_cols; kw0 += kDepthwiseStridedTaps) {
      const int64_t kw1 = std::min<int64_t>(g_.filter_cols, kw0 + kDepthwiseStridedTaps);
      int64_t both_lo = lo_[kw0], both_hi = hi_[kw0];
      for (int64_t kw = kw0 + 1; kw < kw1; ++kw) both_lo = std::max(both_lo, lo_[kw]), both_hi = std::min(both_hi, hi_[kw]);
      if (kw1 - kw0 < 2 || both_hi <= both_lo) both_lo = both_hi = 0;
      if (both_hi > both_lo) Note(Path::kFilterDepthwiseTaps);
      for (int64_t kw = kw0; kw < kw1; ++kw) {
        const int64_t width = both_hi - both_lo;
        sum(kw0, kw1 - kw0, both_lo + width * (kw - kw0) / (kw1 - kw0), both_lo + width * (kw + 1 - kw0) / (kw1 - kw0));
        ahead->FetchTo(share * g_.filter_cols + kw + 1, shares);
      }
      for (int64_t kw = kw0; kw < kw1; ++kw) {
        if (both_hi > both_lo) {
          sum(kw, 1, lo_[kw], both_lo), sum(kw, 1, both_hi, hi_[kw]);
        } else {
          sum(kw, 1, lo_[kw], hi_[kw]);
        }
      }
    }
  }

  // Fewer than 16 channels left (a whole vector could read past the tensor's end): in scalar
  // code.
  void ScalarBlock(const DepthwiseBlock& blk, const T* x_row, const T* dy_row, float* l) const {
    Note(Path::kFilterDepthwiseScalar);
    for (int64_t kw = 0; kw < g_.filter_cols; ++kw) {
      if (hi_[kw] <= lo_[kw]) continue;
      const T* a = XAt(x_row, blk, lo_[kw], kw);
      const T* b = dy_row + lo_[kw] * C_ + blk.begin;
      for (int64_t j = 0; j < blk.width; ++j) {
        float total = l[kw * max_nb_ + j];
        for (int64_t o = 0; o < hi_[kw] - lo_[kw]; ++o) {
          total += static_cast<float>(a[o * g_.stride_cols * C_ + j]) * static_cast<float>(b[o * C_ + j]);
        }
        l[kw * max_nb_ + j] = total;
      }
    }
  }

  const ConvGeometry& g_;
  const DepthwiseFilterPlan& plan_;
  const T* const x_;
  const T* const dy_;
  float* const acc_;
  const int64_t C_, taps_;
  const std::vector<DepthwiseBlock> blocks_;
  const int64_t count_, rows_, max_nb_;
  std::vector<int64_t> lo_, hi_;
};

template <typename T>
void FilterDepthwiseNhwc(const ConvGeometry& g, const DepthwiseFilterPlan& plan, const T* x,
                         const T* dy, float* acc, const ParallelFor& parallel_for) {
  FilterDepthwisePass<T>(g, plan, x, dy, acc).Run(parallel_for);
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_DEPTHWISE_H_
