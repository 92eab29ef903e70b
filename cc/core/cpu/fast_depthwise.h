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
inline std::vector<ChannelSegment> DepthwiseSegments(const KernelTable& table, int64_t channels) {
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

inline std::vector<DepthwiseBlock> DepthwiseBlocks(const KernelTable& table, int64_t channels) {
  std::vector<DepthwiseBlock> out;
  for (const ChannelSegment& seg : DepthwiseSegments(table, channels)) {
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

// A column class of a depthwise rows pass: members j < count at column c + j * step; candidate
// tap a reads source column bases[a] + j * mult; members [lo, hi) read inside the source
// through every tap. Where the candidates read neighbouring columns (no dilation) and the row
// kernels cover the class's spacing and tap count, `by_column` lists the candidates from the
// leftmost column read (`first`) rightwards, and the inside members go through the row
// kernels.
struct DepthwiseColumnClass {
  int64_t count = 0, lo = 0, hi = 0, first = 0;
  std::vector<int64_t> taps, bases, by_column;
};

inline std::vector<DepthwiseColumnClass> DepthwiseColumnClasses(const DimMap& dw, const DepthwiseKernel& widest,
                                                                int kind) {
  std::vector<DepthwiseColumnClass> classes(dw.classes());
  for (int64_t c = 0; c < dw.classes(); ++c) {
    DepthwiseColumnClass& cc = classes[c];
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
        widest.row[dw.mult() - 1][cols - 1][kind] == nullptr) {
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
  return classes;
}

// The blocking of a depthwise rows pass over a geometry (PlanDepthwiseRows).
struct DepthwiseRowsPlan {
  DimMap dh, dw;  // the pass's rows and columns (PassDims)
  // Channel blocks; one narrower than its kernel (the remainder under 16) is summed in
  // scalar code.
  std::vector<DepthwiseBlock> blocks;
  int64_t max_mr = 1, max_nb = 1, unit_mr = 1;
  int64_t group = 0;  // inside pixels per group
  std::vector<DepthwiseColumnClass> column_classes;
  std::vector<std::vector<int64_t>> row_taps, row_bases;  // candidates of each row class
  bool from_memory = false;  // operands past kDepthwiseMemoryBytes: rows fetched ahead
};

// Inside pixels go in groups of whole tiles of every kernel, of about kDepthwiseGroupBytes of
// source.
inline DepthwiseRowsPlan PlanDepthwiseRows(const KernelTable& table, const ConvGeometry& g, const DimMap& dh,
                                           const DimMap& dw, int kind, int64_t element_size) {
  DepthwiseRowsPlan p;
  p.dh = dh, p.dw = dw;
  const int64_t C = g.in_depth;
  p.blocks = DepthwiseBlocks(table, C);
  for (const DepthwiseBlock& blk : p.blocks) {
    p.max_mr = std::max<int64_t>(p.max_mr, blk.kernel->mr);
    p.max_nb = std::max<int64_t>(p.max_nb, blk.kernel->nb);
    p.unit_mr = std::lcm<int64_t>(p.unit_mr, blk.kernel->mr);
  }
  p.group = std::max<int64_t>(1, kDepthwiseGroupBytes / (dh.taps * C * element_size) / p.unit_mr) * p.unit_mr;
  p.column_classes = DepthwiseColumnClasses(dw, *p.blocks.front().kernel, kind);
  p.row_taps.resize(dh.classes()), p.row_bases.resize(dh.classes());
  for (int64_t c = 0; c < dh.classes(); ++c) dh.Candidates(c, &p.row_taps[c], &p.row_bases[c]);
  p.from_memory = OperandBytes(g, element_size) > kDepthwiseMemoryBytes;
  return p;
}

// A depthwise rows pass of one call: its plan and operands.
template <typename T>
struct DepthwiseRowsPass : DepthwiseRowsPlan {
  const ConvGeometry& g;
  const T* src;
  T* dst;
  const float* panel;  // the filter as floats, [taps][C]
  std::vector<T> zeros{};
  bool stream = false;  // float outputs through non-temporal stores

  static bool IsVector(const DepthwiseBlock& blk) { return blk.width == blk.kernel->nb; }

  void Put(const float* c, int64_t n, T* out) const {
    if constexpr (std::is_same_v<T, float>) {
      if (stream) return StreamOut(c, n, out);
    }
    WriteOut(c, n, out);
  }

  // The source rows computed row u (of its image) reads, into rows[], and through which filter
  // rows (into filter_rows[] where given); returns their count.
  int64_t SourceRows(int64_t u, int64_t* rows, int64_t* filter_rows) const {
    const int64_t r = u % dh.size, rc = r % dh.step(), i = r / dh.step();
    int64_t count = 0;
    for (size_t t = 0; t < row_taps[rc].size(); ++t) {
      const int64_t s = row_bases[rc][t] + i * dh.mult();
      if (s < 0 || s >= dh.src_size) continue;
      if (filter_rows != nullptr) filter_rows[count] = row_taps[rc][t];
      rows[count++] = s;
    }
    return count;
  }
};

// A thread's scratch for a depthwise rows pass, and the row it computes: image n, source rows
// src_rows[0 .. rows) through filter rows tap_rows[...]. Per class: tap_offset is the element
// offset of member 0's source pixel through each tap (through each filter row at the class's
// first column, for the row kernels); b and b_rows the filters of each channel block, in tap
// order and in the row kernels' order.
struct DepthwiseRow {
  const void** a;
  const float** b;
  const float** b_rows;
  int64_t* src_rows;
  int64_t* tap_rows;
  int64_t* tap_offset;
  float* cbuf;
  int64_t n = 0, rows = 0;
};

// The inside members [lo, lo + whole groups of unit_mr) of class cw of the row (out_row: its
// first computed pixel), group by group, each through every vector block; returns the end
// of those members.
template <typename T>
TF_OPS_INLINE_STEP int64_t DepthwiseInside(const DepthwiseRowsPass<T>& p, const DepthwiseRow& row, int64_t cw,
                                           T* out_row, AheadRows* ahead, int64_t* done_pixels) {
  constexpr int kind = KindOf<T>();
  const DepthwiseColumnClass& cc = p.column_classes[cw];
  const int64_t C = p.g.in_depth, pixel_step = p.dw.mult() * C, nblocks = static_cast<int64_t>(p.blocks.size());
  const int64_t cols = static_cast<int64_t>(cc.taps.size()), count = row.rows * cols;
  const bool by_rows = !cc.by_column.empty();
  const int64_t inside_end = cc.lo + (cc.hi - cc.lo) / p.unit_mr * p.unit_mr;
  for (int64_t p0 = cc.lo; p0 < inside_end; p0 += p.group) {
    const int64_t pixels = std::min(p.group, inside_end - p0);
    if (p0 > cc.lo) Note(Path::kDepthwiseGroups);
    T* const out = out_row + (cw + p0 * p.dw.step()) * C;
    for (int64_t k = 0; k < nblocks && p.IsVector(p.blocks[k]); ++k) {
      const DepthwiseBlock& blk = p.blocks[k];
      const DepthwiseKernel& dk = *blk.kernel;
      // The row kernels take one source pointer per filter row.
      const int64_t pointers = by_rows ? row.rows : count, stride = by_rows ? cols : 1;
      // (Locals: the stores of pointers could alias what p and row hold.)
      const void** const a = row.a;
      const int64_t* const tap_offset = row.tap_offset;
      const T* const first = p.src + p0 * pixel_step + blk.begin;
      for (int64_t t = 0; t < pointers; ++t) a[t] = first + tap_offset[t * stride];
      float* c = row.cbuf;
      int64_t ldc = dk.nb;
      if constexpr (std::is_same_v<T, float>) {
        if (!p.stream) c = out + blk.begin, ldc = p.dw.step() * C;
      }
      if (by_rows) {
        Note(Path::kDepthwiseRowKernel);
        NoteKernel(dk.row[p.dw.mult() - 1][cols - 1][kind]);
        dk.row[p.dw.mult() - 1][cols - 1][kind](pixels / dk.mr, row.rows, row.a, C, row.b_rows + k * count, c, ldc,
                                                false);
      } else {
        Note(Path::kDepthwiseAffine);
        NoteKernel(dk.affine[kind]);
        dk.affine[kind](pixels / dk.mr, count, row.a, pixel_step, row.b + k * count, c, ldc, false);
      }
      if (c == row.cbuf) {
        for (int64_t m = 0; m < pixels; ++m) {
          p.Put(row.cbuf + m * dk.nb, dk.nb, out + m * p.dw.step() * C + blk.begin);
        }
      }
    }
    ahead->FetchTo(*done_pixels += pixels, p.dw.size);
  }
  return inside_end;
}

// The other members of class cw of the row (before lo and from inside_end), e < rest in
// order, in tiles of the indirect kernel (taps outside the source, and lanes past the last
// member, read zeros); and every member's channels of a block narrower than its kernel, in
// scalar code.
template <typename T>
TF_OPS_INLINE_STEP void DepthwiseEdges(const DepthwiseRowsPass<T>& p, const DepthwiseRow& row, int64_t cw,
                                       int64_t inside_end, T* out_row) {
  constexpr int kind = KindOf<T>();
  const DepthwiseColumnClass& cc = p.column_classes[cw];
  const int64_t C = p.g.in_depth, nblocks = static_cast<int64_t>(p.blocks.size());
  const int64_t cols = static_cast<int64_t>(cc.taps.size()), count = row.rows * cols;
  const auto out_pixel = [&](int64_t j) { return out_row + (cw + j * p.dw.step()) * C; };
  // The source pixel of member j through tap t = (row tap, column tap), or null. (Locals: the
  // stores of pointers below could alias what p and row hold.)
  const T* const image = p.src + row.n * p.dh.src_size * p.dw.src_size * C;
  const int64_t* const bases = cc.bases.data();
  const int64_t* const src_rows = row.src_rows;
  const int64_t mult = p.dw.mult(), src_cols = p.dw.src_size;
  const auto source = [=](int64_t t, int64_t j) -> const T* {
    const int64_t col = bases[t % cols] + j * mult;
    if (col < 0 || col >= src_cols) return nullptr;
    return image + (src_rows[t / cols] * src_cols + col) * C;
  };
  const void** const a = row.a;
  const void* const zeros = p.zeros.data();
  const int64_t rest = cc.count - (inside_end - cc.lo);
  const auto member = [&](int64_t e) { return e < cc.lo ? e : e - cc.lo + inside_end; };
  for (int64_t k = 0; k < nblocks; ++k) {
    const DepthwiseBlock& blk = p.blocks[k];
    if (!p.IsVector(blk)) {
      Note(Path::kDepthwiseScalar);
      for (int64_t j = 0; j < cc.count; ++j) {
        for (int64_t c = 0; c < blk.width; ++c) {
          float sum = 0.0f;
          for (int64_t t = 0; t < count; ++t) {
            const T* s = source(t, j);
            if (s != nullptr) sum += static_cast<float>(s[blk.begin + c]) * row.b[k * count + t][c];
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
          const T* s = m < valid ? source(t, member(e0 + m)) : nullptr;
          a[t * mr + m] = s != nullptr ? static_cast<const void*>(s + blk.begin) : zeros;
        }
      }
      Note(Path::kDepthwiseEdges);
      NoteKernel(dk.indirect[kind]);
      dk.indirect[kind](count, row.a, row.b + k * count, row.cbuf, false);
      for (int64_t m = 0; m < valid; ++m) p.Put(row.cbuf + m * dk.nb, dk.nb, out_pixel(member(e0 + m)) + blk.begin);
    }
  }
}

// Computes row r of image row.n (its source rows in `row`), class by class.
template <typename T>
void DepthwiseRowOut(const DepthwiseRowsPass<T>& p, const DepthwiseRow& row, int64_t r, AheadRows* ahead) {
  const int64_t C = p.g.in_depth, KW = p.g.filter_cols, nblocks = static_cast<int64_t>(p.blocks.size());
  const DimMap& dh = p.dh;
  const DimMap& dw = p.dw;
  int64_t done_pixels = 0;
  T* const out_row = p.dst + (row.n * dh.size + r) * dw.size * C;
  for (int64_t cw = 0; cw < dw.classes(); ++cw) {
    const DepthwiseColumnClass& cc = p.column_classes[cw];
    const int64_t cols = static_cast<int64_t>(cc.taps.size()), count = row.rows * cols;
    if (count == 0) {
      Note(Path::kDepthwiseNoTap);
      for (int64_t j = 0; j < cc.count; ++j) {
        T* const out = out_row + (cw + j * dw.step()) * C;
        std::fill(out, out + C, T(0.0f));
      }
      continue;
    }
    const bool by_rows = !cc.by_column.empty();
    for (int64_t t = 0; t < count; ++t) {
      const int64_t column = by_rows ? cc.first : cc.bases[t % cols];
      row.tap_offset[t] = ((row.n * dh.src_size + row.src_rows[t / cols]) * dw.src_size + column) * C;
    }
    for (int64_t k = 0; k < nblocks; ++k) {
      for (int64_t t = 0; t < count; ++t) {
        const float* tap_panel = p.panel + row.tap_rows[t / cols] * KW * C + p.blocks[k].begin;
        row.b[k * count + t] = tap_panel + cc.taps[t % cols] * C;
        if (by_rows) row.b_rows[k * count + t] = tap_panel + cc.taps[cc.by_column[t % cols]] * C;
      }
    }
    const int64_t inside_end = DepthwiseInside(p, row, cw, out_row, ahead, &done_pixels);
    DepthwiseEdges(p, row, cw, inside_end, out_row);
  }
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
void DepthwiseRowsNhwc(const DepthwiseRowsPlan& plan, const ConvGeometry& g, const T* w, const T* src, T* dst,
                       const ParallelFor& parallel_for) {
  const int64_t C = g.in_depth, taps = g.filter_rows * g.filter_cols;
  const DimMap& dh = plan.dh;
  const DimMap& dw = plan.dw;
  Workspace panel_space(DepthwiseRowsPanelFloats(g) * sizeof(float));
  float* const panel = panel_space.data<float>();
  for (int64_t i = 0; i < taps * C; ++i) panel[i] = static_cast<float>(w[i]);
  DepthwiseRowsPass<T> p{plan, g, src, dst, panel};
  const int64_t nblocks = static_cast<int64_t>(p.blocks.size());
  p.zeros.assign(p.max_nb, T(0.0f));
  // Operands far larger than the caches (from_memory): the source rows are fetched a row ahead,
  // and float outputs in whole cache lines per channel block go out through non-temporal stores
  // (each pixel is written once, and a plain store would first read its line from memory).
  if constexpr (std::is_same_v<T, float>) {
    p.stream = p.from_memory && C % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
    if (p.stream) Note(Path::kDepthwiseStreamed);
  }
  parallel_for(g.batch * dh.size, Cost(2.0 * dw.size * C * taps / (dh.step() * dw.step())),
               [&](int64_t begin, int64_t end) {
    DepthwiseRow row;
    row.a = Scratch<const void*, 15>(taps * p.max_mr);
    row.b = Scratch<const float*, 16>(nblocks * taps);
    row.src_rows = Scratch<int64_t, 17>(g.filter_rows);
    row.tap_rows = Scratch<int64_t, 18>(g.filter_rows);
    row.cbuf = Scratch<float, 19>(std::max(p.group, p.max_mr) * p.max_nb);
    row.tap_offset = Scratch<int64_t, 20>(taps);
    row.b_rows = Scratch<const float*, 21>(nblocks * taps);
    int64_t* const next_rows = Scratch<int64_t, 26>(g.filter_rows);
    AheadRows ahead;
    const int64_t row_bytes = dw.src_size * C * static_cast<int64_t>(sizeof(T));
    for (int64_t unit = begin; unit < end; ++unit) {
      row.n = unit / dh.size;
      row.rows = p.SourceRows(unit, row.src_rows, row.tap_rows);
      // From memory, the source rows that the thread's next unit reads and this one does not
      // are fetched while this row is computed, a share after each group.
      ahead.Clear();
      if (p.from_memory && unit + 1 < end) {
        const int64_t n2 = (unit + 1) / dh.size;
        const int64_t next = p.SourceRows(unit + 1, next_rows, nullptr);
        for (int64_t t = 0; t < next; ++t) {
          if (n2 == row.n && std::find(row.src_rows, row.src_rows + row.rows, next_rows[t]) != row.src_rows + row.rows) {
            continue;
          }
          ahead.Add(src + (n2 * dh.src_size + next_rows[t]) * dw.src_size * C, row_bytes);
        }
      }
      DepthwiseRowOut(p, row, unit % dh.size, &ahead);
      ahead.FetchTo(1, 1);
    }
    if (p.stream) StreamFence();
  });
}

// Depthwise: a unit is a slice of the rows, through every channel block (`whole_rows`) or
// through one (`block_units` units a slice, one per channel block, or one for whole rows).
struct DepthwiseFilterPlan {
  std::vector<DepthwiseBlock> blocks;  // the channel blocks (DepthwiseBlocks)
  int64_t slices = 1, units = 0, block_units = 1;
  bool whole_rows = false;
};

inline DepthwiseFilterPlan PlanDepthwiseFilter(const KernelTable& table, const ConvGeometry& g,
                                               int64_t element_size) {
  DepthwiseFilterPlan p;
  p.blocks = DepthwiseBlocks(table, g.in_depth);
  const int64_t blocks = static_cast<int64_t>(p.blocks.size());
  p.whole_rows = OperandBytes(g, element_size) > kDepthwiseMemoryBytes;
  p.block_units = p.whole_rows ? 1 : blocks;
  p.slices = std::max<int64_t>(1, std::min(g.batch * g.out_rows, CeilDiv(kMinUnits, p.block_units)));
  p.units = p.slices * p.block_units;
  return p;
}

// The x row that dy row (n, oh) reads through filter row kh, or null.
template <typename T>
const T* DepthwiseXRow(const ConvGeometry& g, const T* x, int64_t n, int64_t oh, int64_t kh) {
  const int64_t ih = oh * g.stride_rows - g.pad_top + kh * g.dilation_rows;
  return ih < 0 || ih >= g.in_rows ? nullptr : x + (n * g.in_rows + ih) * g.in_cols * g.in_depth;
}

// Adds the filter gradient of channel block `blk` through the taps of one filter row over one
// dy row (x_row: the x row it reads there) to l[kw * max_nb + j]; lo[kw] to hi[kw] are the
// output columns filter column kw reads inside the input. After each filter column the rows
// ahead are fetched up to share done + kw + 1 of `total`.
template <typename T>
TF_OPS_INLINE_STEP void DepthwiseFilterBlock(const ConvGeometry& g, const DepthwiseBlock& blk,
                                             const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                                             const T* x_row, const T* dy_row, float* l, int64_t max_nb,
                                             AheadRows* ahead, int64_t done, int64_t total) {
  const int64_t C = g.in_depth;
  // x under output column o through filter column kw.
  const auto x_at = [&](int64_t o, int64_t kw) {
    return x_row + (o * g.stride_cols - g.pad_left + kw * g.dilation_cols) * C + blk.begin;
  };
  if (blk.width < blk.kernel->nb) {
    Note(Path::kFilterDepthwiseScalar);
    // Fewer than 16 channels left: a whole vector could read past the tensor's end.
    for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
      if (hi[kw] <= lo[kw]) continue;
      const T* a = x_at(lo[kw], kw);
      const T* b = dy_row + lo[kw] * C + blk.begin;
      for (int64_t j = 0; j < blk.width; ++j) {
        float sum = l[kw * max_nb + j];
        for (int64_t o = 0; o < hi[kw] - lo[kw]; ++o) {
          sum += static_cast<float>(a[o * g.stride_cols * C + j]) * static_cast<float>(b[o * C + j]);
        }
        l[kw * max_nb + j] = sum;
      }
    }
    return;
  }
  const DepthwiseStridedFn strided = blk.kernel->strided[KindOf<T>()];
  NoteKernel(strided);
  // Output columns [from, to) through `count` filter columns from kw at once.
  const auto sum = [&](int64_t kw, int64_t count, int64_t from, int64_t to) {
    if (to <= from) return;
    strided(to - from, static_cast<int>(count), x_at(from, kw), g.stride_cols * C, g.dilation_cols * C,
            dy_row + from * C + blk.begin, C, l + kw * max_nb, max_nb);
  };
  // Up to kDepthwiseStridedTaps neighbouring filter columns at once over the output columns
  // that all of them read (each dy vector then read once for them all), and each alone over
  // the rest of its own.
  for (int64_t kw0 = 0; kw0 < g.filter_cols; kw0 += kDepthwiseStridedTaps) {
    const int64_t kw1 = std::min<int64_t>(g.filter_cols, kw0 + kDepthwiseStridedTaps);
    int64_t both_lo = lo[kw0], both_hi = hi[kw0];
    for (int64_t kw = kw0 + 1; kw < kw1; ++kw) both_lo = std::max(both_lo, lo[kw]), both_hi = std::min(both_hi, hi[kw]);
    if (kw1 - kw0 < 2 || both_hi <= both_lo) both_lo = both_hi = 0;
    if (both_hi > both_lo) Note(Path::kFilterDepthwiseTaps);
    // In a piece a filter column, each followed by its share of the fetches ahead.
    for (int64_t kw = kw0; kw < kw1; ++kw) {
      const int64_t width = both_hi - both_lo;
      sum(kw0, kw1 - kw0, both_lo + width * (kw - kw0) / (kw1 - kw0), both_lo + width * (kw + 1 - kw0) / (kw1 - kw0));
      ahead->FetchTo(done + kw + 1, total);
    }
    for (int64_t kw = kw0; kw < kw1; ++kw) {
      if (both_hi > both_lo) {
        sum(kw, 1, lo[kw], both_lo), sum(kw, 1, both_hi, hi[kw]);
      } else {
        sum(kw, 1, lo[kw], hi[kw]);
      }
    }
  }
}

// Depthwise (multiplier 1) filter gradient into acc[slice][tap][c]; a unit is a slice of the
// rows and walks every tap of each row, and for each tap its channel blocks (see
// PlanDepthwiseFilter).
template <typename T>
void FilterDepthwiseNhwc(const ConvGeometry& g, const DepthwiseFilterPlan& plan, const T* x,
                         const T* dy, float* acc, const ParallelFor& parallel_for) {
  const int64_t C = g.in_depth, taps = g.filter_rows * g.filter_cols;
  const std::vector<DepthwiseBlock>& blocks = plan.blocks;
  const int64_t rows = g.batch * g.out_rows, count = static_cast<int64_t>(blocks.size());
  const int64_t max_nb = Kernels().dw[2].nb;
  Note(Path::kFilterDepthwise);
  if (plan.whole_rows) Note(Path::kFilterDepthwiseWholeRows);
  std::vector<int64_t> lo(g.filter_cols), hi(g.filter_cols);
  for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
    ReadRange(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, kw, &lo[kw], &hi[kw]);
  }
  const int64_t unit_channels = plan.whole_rows ? C : max_nb;
  parallel_for(plan.units, Cost(2.0 * rows / plan.slices * g.out_cols * unit_channels * taps),
               [&](int64_t begin, int64_t end) {
    // local[(k * taps + t) * max_nb + j]: block k's channel j through tap t.
    float* const local = Scratch<float, 18>(count * taps * max_nb);
    AheadRows ahead;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t slice = unit / plan.block_units;
      // The unit's channel blocks [k0, k1).
      const int64_t k0 = plan.whole_rows ? 0 : unit % plan.block_units;
      const int64_t k1 = plan.whole_rows ? count : k0 + 1;
      float* const out = acc + slice * taps * C;
      for (int64_t k = k0; k < k1; ++k) {
        for (int64_t t = 0; t < taps; ++t) {
          for (int64_t j = 0; j < max_nb; ++j) {
            local[(k * taps + t) * max_nb + j] = j < blocks[k].width ? out[t * C + blocks[k].begin + j] : 0.0f;
          }
        }
      }
      const int64_t row0 = rows * slice / plan.slices, row1 = rows * (slice + 1) / plan.slices;
      for (int64_t row = row0; row < row1; ++row) {
        const int64_t n = row / g.out_rows, oh = row % g.out_rows;
        const T* dy_row = dy + (n * g.out_rows + oh) * g.out_cols * C;
        // Read from memory (whole rows): the next row's dy, and the x rows it reads that this
        // one does not, are fetched while this row runs, a share after each filter row of each
        // channel block.
        ahead.Clear();
        if (plan.whole_rows && row + 1 < row1) {
          const int64_t n2 = (row + 1) / g.out_rows, oh2 = (row + 1) % g.out_rows;
          ahead.Add(dy_row + g.out_cols * C, g.out_cols * C * static_cast<int64_t>(sizeof(T)));
          for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
            const T* next = DepthwiseXRow(g, x, n2, oh2, kh);
            bool read = next == nullptr;
            for (int64_t k = 0; k < g.filter_rows && !read; ++k) read = DepthwiseXRow(g, x, n, oh, k) == next;
            if (!read) ahead.Add(next, g.in_cols * C * static_cast<int64_t>(sizeof(T)));
          }
        }
        for (int64_t kh = 0; kh < g.filter_rows; ++kh) {
          const T* x_row = DepthwiseXRow(g, x, n, oh, kh);
          if (x_row == nullptr) continue;
          // Each channel block through the row's taps in turn, so that its parts of the x and
          // dy rows stay in the L1 cache across the taps.
          for (int64_t k = k0; k < k1; ++k) {
            const int64_t done = (kh * (k1 - k0) + k - k0) * g.filter_cols;
            DepthwiseFilterBlock(g, blocks[k], lo, hi, x_row, dy_row, local + (k * taps + kh * g.filter_cols) * max_nb,
                                 max_nb, &ahead, done, taps * (k1 - k0));
            ahead.FetchTo(done + g.filter_cols, taps * (k1 - k0));
          }
        }
        ahead.FetchTo(1, 1);
      }
      for (int64_t k = k0; k < k1; ++k) {
        for (int64_t t = 0; t < taps; ++t) {
          for (int64_t j = 0; j < blocks[k].width; ++j) out[t * C + blocks[k].begin + j] = local[(k * taps + t) * max_nb + j];
        }
      }
    }
  });
}

}  // namespace fast
}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_FAST_DEPTHWISE_H_
