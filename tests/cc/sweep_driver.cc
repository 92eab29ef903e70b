// Dense differential sweep of the fast CPU kernels (cc/core/cpu/conv_fast.cc) against the
// direct loops, TF-free.
//
// The fast kernels pick a pass, a micro-kernel and a blocking from the geometry. Each space
// below enumerates the quantities one group of those decisions reads (channel counts against
// the tile widths, filter columns times channels, pixels per row against the tile heights,
// stride and dilation residues, reduction chunk and band boundaries, depthwise channel
// blocks, filter-gradient plans), over their whole small range and across each threshold.
// Every case runs every direction it applies to, in float, half and bfloat16:
//   - against the direct loops in float64 on the same (rounded) values, with an error bound
//     relative to the sum of absolute products and the exact result: |fast - exact| <=
//     2 n u (1 + u_out) sum|p| + u_out |exact| + floor, n the products per output element,
//     u = 2**-24 (float accumulation), u_out the output type's rounding (every fast path
//     rounds once, from a float sum); cancellation can neither hide nor fake an error, and a
//     product lost from a long 16-bit sum is not hidden under u_out sum|p|;
//   - bitwise against itself with the work split into other ranges run in another order.
// At the end, every algorithm the planner can name (plan.h), every path of coverage.h and
// every micro-kernel of the active instruction set's table must have been reached, or the
// sweep fails.
//
// Usage: sweep_driver [--space NAME] [--isas A,B,...] [--shard I/N] [--sample N [--fill]] [--no-coverage]
//                     [--no-values] [--list] [--plant-fault] [--plant-planner-bug]
//                     [--plant-unwritten-workspace] [--digest]
// --sample N runs about one geometry in N of each part of each space (and at least the
// first of each part) and still requires every path and micro-kernel to be reached: a
// shorter run for slow builds (the sanitized one).
// --shard I/N runs geometries I, I + N, ... of the list (each on the data it gets in the
// whole run) and reports the paths and micro-kernels it did not reach without failing on
// them: a caller running the N parts side by side fails on what none of them reached.
// --no-values leaves out the float64 results and the bound (more than half the work): the fast
// kernels still run twice, compared bitwise, on every path; for the sanitized build, whose
// reports are what it is run for, the values being checked by the unsanitized sweep.
// --plant-fault hands the fast kernels a filter with its last value zeroed (the reference
// keeps it): a test that the checks report a kernel that drops a filter tap.
// Every workspace buffer is poisoned (0xFF bytes: NaN in every floating type) when a pass first
// takes it, so that a pass that reads workspace it did not write fails the checks; and the
// workspace a call holds at most must be its plan's, to the byte.
// --plant-planner-bug makes the planner count one column block too few where a GEMM pass's
// columns are not whole blocks: a test that the checks report an off-by-one in a plan.
// --plant-unwritten-workspace makes the filter gradient leave its accumulators uncleared: a
// test that the poisoned workspace shows such a read.
// --digest prints, per instruction set, a digest of the bits of every fast result in the order
// they ran (with the float64 results, of those some product reaches): a refactor of the kernels
// that changes no result leaves it as it was.
// The instruction set is the processor's best, capped by TF_OPS_CPU_ISA; --isas A,B,... runs
// each case on every one of those caps in turn (one block of results each, in that order),
// computing its float64 results once: for all three element types and both sums (exact and
// absolute) in one pass of the direct loops (Lanes).
// Exit status 0 when every check held; 1 otherwise, with the failures listed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "Eigen/Core"
#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/direct_loops.h"
#include "cc/core/cpu/microkernels.h"
#include "cc/core/cpu/plan.h"
#include "cc/core/switches.h"

namespace tf_ops {
namespace cpu {
namespace {

// Which directions a geometry runs: a bit each, bit d for the vocabulary's Direction d.
constexpr int Bit(Direction d) { return 1 << static_cast<int>(d); }
enum Directions : int {
  kForward = Bit(Direction::kForward),
  kInput = Bit(Direction::kBackpropInput),
  kFilter = Bit(Direction::kBackpropFilter),
  kAll = kForward | kInput | kFilter
};

// The fast kernels' run of direction d (RunPlan of PlanConv, in this process's exact mode; its
// operands as RunPlan takes them): whether they applied.
template <typename T>
bool RunFast(Direction d, const ConvGeometry& g, Layout layout, const T* a, const T* b, T* out,
             const ParallelFor& parallel_for) {
  return RunPlan(PlanConv(d, g, layout, ElementOf<T>(), Kernels(), ExactMode()), g, a, b, out, parallel_for, {}) ==
         RunResult::kRan;
}

bool plant_fault = false;
// Probing (--fill): each check runs the fast kernel once, for the paths and kernels it reaches,
// and checks nothing.
bool probe = false;
// --no-values: the fast kernels run and are compared bitwise with another split, nothing else.
bool check_values = true;

// An allocator of 64-byte aligned arrays.
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <typename U>
  bool operator==(const Aligned64<U>&) const { return true; }
  template <typename U>
  bool operator!=(const Aligned64<U>&) const { return false; }
};

struct Spec {
  const char* space;
  int64_t batch, rows, cols, depth;  // input [N, H, W, C]
  int64_t kh, kw, fi, k;             // filter [KH, KW, FI, K]
  ConvAttrs attrs;
  Layout layout;
  int directions;
};

ConvAttrs Attrs(int64_t sh, int64_t sw, int64_t dh, int64_t dw, Padding padding,
                int64_t pt = 0, int64_t pb = 0, int64_t pl = 0, int64_t pr = 0) {
  ConvAttrs a;
  a.stride_rows = sh, a.stride_cols = sw, a.dilation_rows = dh, a.dilation_cols = dw;
  a.padding = padding, a.pad_top = pt, a.pad_bottom = pb, a.pad_left = pl, a.pad_right = pr;
  return a;
}

// The paddings every spatial space runs: VALID, SAME, and two explicit ones (before > after
// and before < after).
std::vector<ConvAttrs> Paddings(int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
  return {Attrs(sh, sw, dh, dw, Padding::kValid), Attrs(sh, sw, dh, dw, Padding::kSame),
          Attrs(sh, sw, dh, dw, Padding::kExplicit, 2, 0, 3, 0),
          Attrs(sh, sw, dh, dw, Padding::kExplicit, 0, 1, 1, 2)};
}

std::vector<int64_t> Range(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t i = lo; i <= hi; ++i) v.push_back(i);
  return v;
}

// ---------------------------------------------------------------------------------------
// The spaces.

using Add = std::function<void(Spec)>;

// Channel counts against the GEMM tile widths (16, 32, 48, 64 columns; their remainders and
// multiples), the merged filter columns of backprop input (filter in-depth <= 8) and of the
// filter gradient (in-depth < 2 tile rows), the banded test (reduction x width <= 1024;
// odd reductions merged over a filter row's taps straddle bfloat16 pairs across taps):
// every in-depth and out-depth 1..72 and a few wider ones, one group, through a stride-1
// SAME geometry (banded), a strided one (forward banded where the tile is short, indirect
// otherwise and for backprop input) and a 1x1 one (pointwise).
void ChannelSpace(const Add& add) {
  std::vector<int64_t> counts = Range(1, 72);
  for (int64_t c : {80, 96, 100, 127, 128, 129, 160}) counts.push_back(c);
  for (int64_t fi : counts) {
    for (int64_t k : counts) {
      add({"channels", 1, 3, 4, fi, 3, 3, fi, k, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kAll});
      add({"channels", 1, 4, 5, fi, 2, 3, fi, k, Attrs(2, 2, 1, 1, Padding::kValid), Layout::kNHWC, kAll});
      add({"channels", 2, 2, 3, fi, 1, 1, fi, k, Attrs(1, 1, 1, 1, Padding::kValid), Layout::kNHWC, kAll});
    }
  }
}

// Groups: 2, 3 and 5 groups of 1..24 input and output channels each (NCHW for the strided
// geometry).
void GroupSpace(const Add& add) {
  for (int64_t groups : {2, 3, 5}) {
    for (int64_t fi : Range(1, 24)) {
      for (int64_t kg : Range(1, 24)) {
        add({"groups", 1, 3, 4, groups * fi, 3, 3, fi, groups * kg, Attrs(1, 1, 1, 1, Padding::kSame),
             Layout::kNHWC, kAll});
        add({"groups", 2, 4, 5, groups * fi, 2, 3, fi, groups * kg, Attrs(2, 1, 1, 2, Padding::kSame),
             Layout::kNCHW, kAll});
      }
    }
  }
}

// Backprop input's merged filter columns: every filter width 1..10 times in-depth 1..9
// (9 and width 1 fall outside the path, on either side of its test), reductions of 1, 2, 3
// and 17 output channels, and every output row length 1..30 (whole tiles and each tail of
// every tile height); then stride, dilation and padding over a few of them.
void ColumnsMergedSpace(const Add& add) {
  for (int64_t fi : Range(1, 9)) {
    for (int64_t kw : Range(1, 10)) {
      for (int64_t k : {1, 2, 3, 17}) {
        for (int64_t out_cols : Range(1, 30)) {
          add({"columns merged", 1, 3, out_cols + kw - 1, fi, 2, kw, fi, k,
               Attrs(1, 1, 1, 1, Padding::kValid), Layout::kNHWC, kInput});
        }
      }
    }
  }
  for (int64_t fi : {3, 6}) {
    for (int64_t kw : {2, 5, 7}) {
      for (int64_t sw : Range(1, 3)) {
        for (int64_t dw : Range(1, 3)) {
          for (const ConvAttrs& attrs : Paddings(2, sw, 2, dw)) {
            for (int64_t cols : Range(1, 16)) {
              add({"columns merged", 2, 5, cols, fi, 2, kw, fi, 2, attrs, Layout::kNHWC, kInput});
            }
          }
        }
      }
    }
  }
}

// Spatial decisions, for each GEMM tile width (channel pairs picking 16, 32, 48 and 64 columns
// in each direction, and merged filter columns) and, forward, short tiles (banded, at every
// stride: whole tiles per row, written in place where the column block is whole ({3, 64}),
// and left-over pixels) and long ones (indirect, {72, 20}):
// along the columns, every row length 1..28
// against every filter width 1..5, column stride 1..4, column dilation 1..3 and padding
// (pixel classes, candidate taps, affine runs of interior tiles and where they end, tiles of
// no tap); along the rows, every height 1..30 against filter height, stride, dilation and
// padding (band heights and the rows each reads), at batch 1 and 17 (band splits); 1x1
// filters at stride 1 over every pixel count 1..40 of a batch of 1..3 (one affine run).
void SpatialSpace(const Add& add) {
  const int64_t channels[][2] = {{2, 3}, {12, 17}, {5, 50}, {50, 4}, {72, 20}, {3, 64}, {40, 45}};
  for (const auto& ch : channels) {
    for (int64_t kw : Range(1, 5)) {
      for (int64_t sw : Range(1, 4)) {
        for (int64_t dw : Range(1, 3)) {
          for (const ConvAttrs& attrs : Paddings(1, sw, 1, dw)) {
            for (int64_t cols : Range(1, 28)) {
              add({"spatial columns", 1, 3, cols, ch[0], 2, kw, ch[0], ch[1], attrs, Layout::kNHWC, kAll});
            }
          }
        }
      }
    }
    for (int64_t kh : Range(1, 5)) {
      for (int64_t sh : Range(1, 4)) {
        for (int64_t dh : Range(1, 3)) {
          for (const ConvAttrs& attrs : Paddings(sh, 1, dh, 1)) {
            for (int64_t rows : Range(1, 30)) {
              add({"spatial rows", 1, rows, 3, ch[0], kh, 2, ch[0], ch[1], attrs, Layout::kNHWC, kAll});
            }
          }
        }
      }
    }
    for (int64_t rows : Range(1, 30)) {
      add({"spatial rows", 17, rows, 2, ch[0], 3, 2, ch[0], ch[1], Attrs(1, 1, 1, 1, Padding::kSame),
           Layout::kNHWC, kAll});
    }
    for (int64_t batch : Range(1, 3)) {
      for (int64_t rows : Range(1, 2)) {
        for (int64_t cols : Range(1, 40)) {
          add({"pointwise", batch, rows, cols, ch[0], 1, 1, ch[0], ch[1], Attrs(1, 1, 1, 1, Padding::kValid),
               Layout::kNHWC, kAll});
        }
      }
    }
  }
}

// Reduction chunks: a chunk spans at most 192K floats of packed filter, so a pass over
// `taps` taps of tile width nb (nb / 2 floats per row for bfloat16 pairs) splits its
// reduction past 196608 / (taps * row floats) channels. Reductions at that boundary (-1,
// 0, +1, +2, and twice it) for each filter size, tile width and row width, in both
// directions, banded (stride 1, where the tile is short) and indirect (stride 2). The same
// boundary separates banded passes whose filter-row taps merge from those whose do not.
void ChunkSpace(const Add& add) {
  for (int64_t f : {3, 5, 7, 9, 11, 14}) {
    for (int64_t nb : {16, 32, 48, 64}) {
      for (int64_t row_floats : {nb, nb / 2}) {
        const int64_t bound = 196608 / (f * f * row_floats);
        for (int64_t src : {bound - 1, bound, bound + 1, bound + 2, 2 * bound + 1}) {
          if (src < 1 || src > 1400) continue;
          for (int64_t stride : {1, 2}) {
            const ConvAttrs attrs = Attrs(stride, stride, 1, 1, Padding::kSame);
            // Forward: the reduction is the in-depth, the columns the out-depth.
            add({"chunks", 1, 3, 5, src, f, f, src, nb, attrs, Layout::kNHWC, kForward});
            // Backprop input: the reduction is the out-depth; in-depth 9..64 picks the width
            // (and stays out of the merged-columns path).
            add({"chunks", 1, 3, 5, nb == 16 ? 9 : nb, f, f, nb == 16 ? 9 : nb, src, attrs,
                 Layout::kNHWC, kInput});
          }
        }
      }
    }
  }
}

// Forward float filters read in place (plan.h: output channels in whole column blocks, at most
// kMaxInPlaceTaps taps, at most kMaxInPlacePixels computed pixels; rows K floats apart):
// out-depths of one to three column blocks and parts of one of the widest GEMM tile (nb; 3 nb /
// 4 picks the narrowest), in one group and two; 1x1 filters (one affine run) over
// kMaxInPlacePixels pixels and one row more; filters of kMaxInPlaceTaps taps and one more at
// stride 2 (indirect tiles, edge tiles among them); reductions at the chunk boundary of a 3x3
// filter (kPanelFloats / (9 nb) channels) and past it, whose chunks start K floats a row into
// the filter.
void InPlaceSpace(const Add& add) {
  const int64_t nb = Kernels().gemm[2].nb;
  const ConvAttrs valid = Attrs(1, 1, 1, 1, Padding::kValid), strided = Attrs(2, 2, 1, 1, Padding::kSame);
  for (int64_t k : {nb / 2, 3 * nb / 4, nb, nb + nb / 2, 2 * nb, 3 * nb, 2 * nb + 8}) {
    for (int64_t groups : {1, 2}) {
      constexpr int64_t rows = 64, cols = kMaxInPlacePixels / rows;
      static_assert(rows * cols == kMaxInPlacePixels, "a whole number of rows");
      for (int64_t c : {cols, cols + 1}) {
        add({"filter in place", 1, rows, c, 5 * groups, 1, 1, 5, groups * k, valid, Layout::kNHWC, kForward});
      }
      static_assert(kMaxInPlaceTaps == 9, "the filters below: 3x3, 1x9 at the cap, 2x5 and 1x10 past it");
      for (const auto& f : {std::pair<int64_t, int64_t>{3, 3}, {1, 9}, {2, 5}, {1, 10}}) {
        add({"filter in place", 2, 5, 19, 40 * groups, f.first, f.second, 40, groups * k, strided,
             Layout::kNHWC, kForward});
      }
    }
  }
  const int64_t bound = kPanelFloats / (9 * nb);
  for (int64_t src : {bound - 1, bound, bound + 1, 2 * bound + 1}) {
    add({"filter in place chunks", 1, 3, 5, src, 3, 3, src, 2 * nb, strided, Layout::kNHWC, kForward});
  }
  add({"filter in place nchw", 2, 9, 8, 24, 3, 3, 24, 2 * nb, strided, Layout::kNCHW, kForward});
}

// The band copy's cap (kMaxBandCopy, 2**20 elements): a banded pass copies, per band, every
// source row and column its taps span. 3x3 filters of dilation 64 over 16 channels span 129
// rows, so the copy of one band grows by 129 * 16 elements per source column and crosses the
// cap near 500 columns: rows of 360..520 columns, forward at stride 1 and 2 and backprop
// input at stride 1 (strided backprop input is never banded), banded below the cap and
// indirect above it.
void BandCopySpace(const Add& add) {
  for (int64_t stride : {1, 2}) {
    for (int64_t cols = 360; cols <= 520; cols += 8) {
      add({"band copy", 1, 129 + stride, cols, 16, 3, 3, 16, 16,
           Attrs(stride, stride, 64, 64, Padding::kValid), Layout::kNHWC,
           stride == 1 ? kForward | kInput : kForward});
    }
  }
}

// Winograd F(4x4, 3x3) (3x3, stride and dilation 1, at least 16 channels per group on both
// sides, at least 10 output pixels a tile): channel counts on both sides against the
// 16/32/64-wide column tiles, the GEMM tile heights (the filter gradient's rows) and the
// 16-channel vectors of the transforms (the tails of each), across the threshold; every
// output size 1..13 in each dimension with every padding (across the pixels-a-tile bound:
// 9x9 direct, 9x10 Winograd), and sizes 12..16 (whole 4x4 tiles and each partial one, all
// Winograd), explicit pads past the filter included (backprop input's source then starts
// inside the output gradient);
// batches whose tiles fill a unit's block across images, or leave rows of the last GEMM tile
// padded; reductions so wide that a block holds one GEMM tile; transformed filters too large
// for the cache; a filter gradient over several chunks of tiles, and by slices, and its sums
// too large for the cache on too few tiles (the direct pass instead); groups; NCHW.
void WinogradSpace(const Add& add) {
  const ConvAttrs same = Attrs(1, 1, 1, 1, Padding::kSame);
  std::vector<int64_t> counts = {15, 16, 17, 24, 31, 32, 33, 47, 48, 63, 64, 65, 80, 97, 128, 129};
  for (int64_t fi : counts) {
    for (int64_t k : counts) {
      add({"winograd channels", 1, 5, 8, fi, 3, 3, fi, k, same, Layout::kNHWC, kAll});
    }
  }
  std::vector<ConvAttrs> paddings = Paddings(1, 1, 1, 1);
  paddings.push_back(Attrs(1, 1, 1, 1, Padding::kExplicit, 3, 1, 0, 4));
  paddings.push_back(Attrs(1, 1, 1, 1, Padding::kExplicit, 1, 3, 4, 2));
  for (const ConvAttrs& attrs : paddings) {
    for (int64_t rows : Range(1, 13)) {
      for (int64_t cols : Range(1, 13)) {
        add({"winograd spatial", 1, rows, cols, 32, 3, 3, 32, 33, attrs, Layout::kNHWC, kAll});
      }
    }
    for (int64_t rows : Range(12, 16)) {
      for (int64_t cols : Range(12, 16)) {
        add({"winograd edges", 1, rows, cols, 32, 3, 3, 32, 33, attrs, Layout::kNHWC, kAll});
      }
    }
  }
  for (int64_t batch : Range(1, 9)) {
    for (int64_t size : {4, 7, 10, 14}) {
      add({"winograd batch", batch, size, size, 40, 3, 3, 40, 33, same, Layout::kNHWC, kAll});
    }
  }
  for (int64_t c : {900, 1200, 2100}) {
    add({"winograd wide", 2, 8, 9, c, 3, 3, c, 17, same, Layout::kNHWC, kAll});
    add({"winograd wide", 1, 5, 8, 33, 3, 3, 33, c, same, Layout::kNHWC, kAll});
  }
  // A unit's transformed filter past 256 Ki floats (streamed: blocks of 48 tiles, fetched
  // ahead), where the transformed source is larger (else fused): 128 -> 96 on 99 tiles, the
  // last block padded, in column halves of 3 column blocks (one and two; with a 48-column
  // tile, two blocks, one each) while blocks are fewer than 16, and 256 -> 32 (one block of
  // the 32-column tile); 769 images of one tile, 17 blocks, whole; channels whose 48 tiles
  // pass 512 Ki floats (blocks of 36); a group's own filter streamed, and every group's
  // together.
  add({"winograd streamed", 11, 10, 9, 128, 3, 3, 128, 96, same, Layout::kNHWC, kAll});
  add({"winograd streamed", 11, 10, 9, 256, 3, 3, 256, 32, same, Layout::kNHWC, kForward});
  add({"winograd streamed", 769, 4, 4, 96, 3, 3, 96, 80, same, Layout::kNHWC, kForward | kInput});
  add({"winograd streamed", 4, 16, 16, 400, 3, 3, 400, 48, same, Layout::kNHWC, kAll});
  add({"winograd streamed", 3, 12, 12, 256, 3, 3, 128, 256, same, Layout::kNHWC, kAll});
  add({"winograd streamed", 2, 15, 13, 128, 3, 3, 64, 128, same, Layout::kNCHW, kAll});
  // Fused (a transformed filter larger than the source's, past 256K floats): past 4M floats
  // (344 x 344 channels) only from 128 output pixels forward (126 direct) and 64 backprop
  // input (63 direct; edge tiles; columns and channels past whole blocks); the source's tiles
  // in several chunks of at most 2M floats (the forward of 30 tiles of 2048 channels); NCHW.
  add({"winograd fused", 1, 8, 16, 344, 3, 3, 344, 344, same, Layout::kNHWC, kForward});
  add({"winograd fused", 1, 9, 14, 344, 3, 3, 344, 344, same, Layout::kNHWC, kForward});
  add({"winograd fused", 1, 8, 8, 344, 3, 3, 344, 344, same, Layout::kNHWC, kInput});
  add({"winograd fused", 1, 9, 7, 344, 3, 3, 344, 344, same, Layout::kNHWC, kInput});
  add({"winograd fused chunks", 30, 4, 4, 2048, 3, 3, 2048, 32, same, Layout::kNHWC,
       kForward | kInput});
  add({"winograd fused nchw", 1, 4, 5, 100, 3, 3, 100, 100, same, Layout::kNCHW, kAll});
  add({"winograd filter chunks", 2, 44, 44, 512, 3, 3, 512, 32, same, Layout::kNHWC, kFilter});
  // The filter gradient fused (one group, sums past 256K floats, every tile in one chunk):
  // past 4M floats of sums only from 64 output pixels (64 and 63), below that from any, NHWC
  // and NCHW; NCHW images past kNchwChunkElements (23 x 23 x 2048), one a call, the second
  // call adding to the first's dw.
  add({"winograd filter fused", 1, 8, 8, 344, 3, 3, 344, 344, same, Layout::kNHWC, kFilter});
  add({"winograd filter fused", 1, 9, 7, 344, 3, 3, 344, 344, same, Layout::kNHWC, kFilter});
  add({"winograd filter fused", 3, 5, 8, 96, 3, 3, 96, 100, same, Layout::kNHWC, kFilter});
  add({"winograd filter fused", 2, 6, 8, 100, 3, 3, 100, 96, same, Layout::kNCHW, kFilter});
  add({"winograd filter fused calls", 2, 23, 23, 16, 3, 3, 16, 2048, same, Layout::kNCHW, kFilter});
  // Filter-gradient sums past 4 Mi floats (36 x 344 x 344; 4 groups of 176 x 176) on one tile,
  // fewer than pay for them: the direct pass.
  add({"winograd filter large sums", 1, 4, 4, 344, 3, 3, 344, 344, same, Layout::kNHWC, kFilter});
  add({"winograd filter large sums", 1, 4, 3, 704, 3, 3, 176, 704, same, Layout::kNHWC, kFilter});
  // The filter gradient by slices (sums of at most 256 Ki floats, more than 128 tiles): 4
  // tiles an image, so batches 32/33 and 256/257 cross one and eight slices of 128 tiles; the
  // sums' size against its cap by channel counts; slices of several blocks (80 -> 80: 45 tiles
  // a block); groups; NCHW in two chunks of images, the last of 16 tiles for 8 slices.
  for (int64_t batch : {32, 33, 47, 256, 257}) {
    add({"winograd filter slices", batch, 8, 7, 16, 3, 3, 16, 17, same, Layout::kNHWC, kFilter});
  }
  for (int64_t c : {80, 88, 96, 97, 112, 128}) {
    add({"winograd filter slices", 33, 8, 8, c, 3, 3, c, c, same, Layout::kNHWC, kFilter});
  }
  add({"winograd filter slices", 40, 8, 8, 128, 3, 3, 32, 96, same, Layout::kNHWC, kFilter});
  add({"winograd filter slices", 65, 16, 16, 128, 3, 3, 128, 16, same, Layout::kNCHW, kFilter});
  for (int64_t groups : {2, 3}) {
    for (int64_t fi : {15, 16, 33}) {
      for (int64_t kg : {16, 40}) {
        add({"winograd groups", 2, 6, 7, groups * fi, 3, 3, fi, groups * kg, same, Layout::kNHWC,
             kAll});
        add({"winograd groups", 1, 9, 7, groups * fi, 3, 3, fi, groups * kg, same, Layout::kNCHW,
             kAll});
      }
    }
  }
  // Groups too wide for a unit to transform every group's channels (2 x 80 source channels),
  // forward and backprop input each way.
  for (int64_t fi : {16, 80}) {
    add({"winograd groups", 2, 9, 10, 2 * fi, 3, 3, fi, 2 * (96 - fi), same, Layout::kNHWC, kAll});
  }
  for (int64_t c : {16, 33, 64}) {
    add({"winograd nchw", 3, 10, 11, c, 3, 3, c, c + 3, same, Layout::kNCHW, kAll});
  }
}

// Strided forward and backprop-input passes as Winograd over space-to-depth copies: filters
// spanning three strides each way (5x5, 6x6 and 6x5 at stride 2, 7x7 and 9x8 at stride 3,
// mixed strides) and two (4x4 at stride 2: never taken), each padding, sizes whose outputs
// end mid-tile and whose Winograd takes fewer or more than kPhasesMaxProducts of the strided
// products (backprop input, on the copy of dx, from 13 output pixels a side), channels across
// Winograd's least (copy depth 16, 16 columns), a forward pass fused, batches, NCHW, and
// copies in several chunks of images (both directions: a part of its own, so that sampled
// runs reach both).
void PhasesSpace(const Add& add) {
  const int64_t filters[][4] = {{5, 5, 2, 2}, {4, 4, 2, 2}, {6, 6, 2, 2}, {6, 5, 2, 2},
                                {7, 7, 3, 3}, {9, 8, 3, 3}, {3, 5, 1, 2}, {6, 3, 2, 1}};
  for (const auto& f : filters) {
    for (const ConvAttrs& attrs : Paddings(f[2], f[3], 1, 1)) {
      for (int64_t rows : {9, 16, 23, 28, 33}) {
        for (int64_t cols : {10, 16, 29, 31}) {
          add({"winograd phases", 1, rows * f[2] / 2, cols * f[3] / 2, 8, f[0], f[1], 8, 17, attrs,
               Layout::kNHWC, kForward | kInput});
        }
      }
    }
  }
  const ConvAttrs same = Attrs(2, 2, 1, 1, Padding::kSame);
  for (int64_t c : {3, 4, 5, 16, 33}) {
    for (int64_t k : {15, 16, 17, 33, 64}) {
      add({"winograd phases channels", 1, 30, 29, c, 5, 5, c, k, same, Layout::kNHWC, kForward | kInput});
    }
  }
  for (int64_t batch : {2, 3}) {
    add({"winograd phases batch", batch, 28, 30, 12, 5, 5, 12, 20, same, Layout::kNHWC, kForward | kInput});
    add({"winograd phases nchw", batch, 29, 28, 12, 5, 5, 12, 20, same, Layout::kNCHW, kForward | kInput});
  }
  add({"winograd phases fused", 1, 32, 32, 96, 5, 5, 96, 130, same, Layout::kNHWC, kForward | kInput});
  add({"winograd phases chunks", 17, 64, 64, 32, 5, 5, 32, 16, Attrs(2, 2, 1, 1, Padding::kValid),
       Layout::kNHWC, kForward | kInput});
}

// Depthwise: every channel count 1..150 (blocks of 64, 32 and 16 channels and the scalar
// remainder in every mix) at depth multipliers 1, 2 and 3; the column classes of the row
// kernels (filter width 1..7 against column stride 1..3, dilation 1..2 and every row length
// 1..30 with each padding); long rows that hold several pixel groups; NCHW.
void DepthwiseSpace(const Add& add) {
  for (int64_t c : Range(1, 150)) {
    for (int64_t m : {1, 2, 3}) {
      if (m > 1 && c > 40) continue;
      add({"depthwise channels", 1, 3, 5, c, 3, 3, 1, c * m, Attrs(1, 1, 1, 1, Padding::kSame),
           Layout::kNHWC, kAll});
      add({"depthwise channels", 2, 5, 6, c, 2, 3, 1, c * m, Attrs(2, 2, 1, 1, Padding::kValid),
           Layout::kNHWC, kAll});
    }
  }
  for (int64_t c : {16, 21, 48, 112}) {
    for (int64_t kw : Range(1, 7)) {
      for (int64_t sw : Range(1, 3)) {
        for (int64_t dw : Range(1, 2)) {
          for (const ConvAttrs& attrs : Paddings(1, sw, 1, dw)) {
            for (int64_t cols : Range(1, 30)) {
              add({"depthwise columns", 1, 3, cols, c, 2, kw, 1, c, attrs,
                   c == 21 ? Layout::kNCHW : Layout::kNHWC, kAll});
            }
          }
        }
      }
    }
  }
  for (int64_t c : {16, 64, 80}) {
    for (int64_t cols : {40, 80, 130}) {
      for (int64_t kh : {1, 3}) {
        for (int64_t stride : {1, 2}) {
          add({"depthwise groups", 1, 3, cols, c, kh, 3, 1, c, Attrs(stride, stride, 1, 1, Padding::kSame),
               Layout::kNHWC, kAll});
        }
      }
    }
  }
  // Past kDepthwiseMemoryBytes (32 MiB of source and output), float outputs whose channel
  // blocks are whole cache lines go out through non-temporal stores: column strides 1 and 2,
  // over channel blocks of two widths.
  for (int64_t stride : {1, 2}) {
    const int64_t size = stride == 1 ? 250 : 280;
    add({"depthwise streamed", 2, size, size, 48, 3, 3, 1, 48, Attrs(stride, stride, 1, 1, Padding::kSame),
         Layout::kNHWC, kForward | kInput});
  }
}

// The filter gradient's plan: accumulators bounded to 64K floats (in-depth 27 merged over 9
// filter columns against 256 | 257 output channels sits on that bound; wider ones split),
// row slices against the 1 MiB of x and dy a slice should keep cached (64 x 64 x 32 floats
// is on it), and blocks of 256 packed pixels filled whole.
void FilterSpace(const Add& add) {
  for (int64_t k : {255, 256, 257, 300}) {
    add({"filter plan", 1, 1, 9, 27, 1, 9, 27, k, Attrs(1, 1, 1, 1, Padding::kValid), Layout::kNHWC, kFilter});
    add({"filter plan", 1, 2, 9, 28, 2, 9, 28, k, Attrs(1, 1, 1, 1, Padding::kValid), Layout::kNHWC, kFilter});
  }
  add({"filter plan", 1, 1, 1, 100, 1, 1, 100, 700, Attrs(1, 1, 1, 1, Padding::kValid), Layout::kNHWC, kFilter});
  for (int64_t rows : {60, 64, 66}) {
    add({"filter plan", 1, rows, 64, 32, 3, 3, 32, 32, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kFilter});
  }
  for (int64_t size : {63, 64, 80}) {
    add({"filter plan", 1, size, size, 4, 3, 3, 4, 4, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kFilter});
    add({"filter plan", 1, size, size, 4, 3, 3, 1, 4, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kFilter});
  }
  // Half and bfloat16 filter gradients with merged filter columns run on float copies of
  // chunks of images (4 MiB of x and dy as float, at least one image): three images of
  // 480 x 480, 2 -> 3 channels (4.6 MB each), one per chunk, in both layouts.
  for (Layout layout : {Layout::kNHWC, Layout::kNCHW}) {
    add({"filter widened chunks", 3, 480, 480, 2, 3, 3, 2, 3, Attrs(1, 1, 1, 1, Padding::kSame),
         layout, kFilter});
  }
  // A depthwise filter gradient past kDepthwiseMemoryBytes (32 MiB of x and dy) in every
  // element type (the cases above stay under it), over channel blocks of two widths and a
  // scalar remainder.
  add({"depthwise whole rows", 2, 300, 300, 53, 3, 3, 1, 53, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC,
       kFilter});
}

// NCHW: channel counts and pixel counts across the 16 x 16 blocks of the transposes, and
// images over the 2**21 elements of an NHWC copy (several chunks), plain and depthwise.
void NchwSpace(const Add& add) {
  std::vector<int64_t> channels = Range(1, 20);
  for (int64_t c : {31, 32, 33, 63, 64, 65}) channels.push_back(c);
  for (int64_t c : channels) {
    for (int64_t cols : {1, 15, 16, 17, 63, 64, 65, 130}) {
      add({"nchw", 2, 1, cols, c, 1, 3, c, c + 1, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW, kAll});
    }
  }
  add({"nchw chunks", 3, 730, 730, 2, 3, 3, 2, 3, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW, kAll});
  add({"nchw chunks", 3, 730, 730, 2, 3, 3, 1, 2, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW, kAll});
}

// AMX tiles (bfloat16 where the processor has AMX-BF16): reductions in whole tiles of 32 rows
// and the rows past them (31, 32, 33, 63..65, 95, 97), for each tile width (16, 32 and 64
// columns and wider), and every affine run length 1..70 pixels (blocks of 16 and 32 pixels and
// each tail), pointwise; and 3x3 layers at stride 1 and 2 (indirect tiles at the edges,
// affine runs inside), and strided backprop input through dy with bordered columns. Then
// stride-1 bands as whole affine runs (32 reduction channels a tap and more): rows narrower
// than a tile and wider, several bands and a short last one, a 5x5 filter, dilations, groups,
// NCHW, and a reduction in two chunks. Then banded passes whose
// merged filter rows have an odd depth a pixel: padded by a zero, or straddling pairs. Then
// strided forward bands: output rows of 15, 16, 48 and 49 columns (either side of both
// bounds), source channels either side of 32, each tile width, filters one column wide (not
// taken) and wider, stride 3, VALID and explicit padding, groups, NCHW, and a reduction in
// two chunks.
void AmxSpace(const Add& add) {
  for (int64_t cols : {1, 3, 14, 17, 40}) {
    add({"amx runs", 2, 9, cols, 32, 3, 3, 32, 48, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kAll});
  }
  add({"amx runs", 1, 30, 30, 64, 3, 3, 64, 64, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kAll});
  add({"amx runs", 2, 11, 13, 40, 5, 5, 40, 33, Attrs(1, 1, 1, 1, Padding::kValid), Layout::kNHWC, kAll});
  add({"amx runs", 2, 12, 15, 33, 3, 3, 33, 35, Attrs(1, 1, 2, 3, Padding::kSame), Layout::kNHWC, kAll});
  add({"amx runs", 2, 7, 9, 128, 3, 3, 64, 96, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kAll});
  add({"amx runs", 2, 6, 19, 64, 3, 3, 64, 40, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW, kAll});
  add({"amx runs", 1, 5, 6, 700, 3, 3, 700, 64, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kAll});

  // Strided forward and backprop-input passes through space-to-depth copies: strides 2, 3, 4
  // and mixed, filters of one and several strides, copies of 60 and 63 channels (not taken), 64,
  // 72 and more, input channels across the forward pass's ceiling (15, 16) and backprop
  // input's (31 to 33), SAME, VALID (rows and columns past the last tap) and explicit padding
  // wider than a stride, NCHW, and each direction in two chunks of images.
  const int64_t s2d[][4] = {{2, 2, 2, 2}, {4, 4, 2, 2}, {6, 4, 2, 2}, {3, 3, 3, 3}, {6, 3, 3, 3},
                            {4, 3, 2, 1}, {3, 4, 1, 2}, {4, 4, 4, 4}, {4, 6, 2, 3}};
  for (const auto& f : s2d) {
    for (int64_t c : {15, 16, 31, 32, 33, 8, 7}) {
      for (int64_t size : {9, 17}) {
        for (Padding padding : {Padding::kSame, Padding::kValid}) {
          add({"amx space to depth", 2, size, size + 2, c, f[0], f[1], c, c == 31 ? 130 : 48,
               Attrs(f[2], f[3], 1, 1, padding), Layout::kNHWC, kForward | kInput});
        }
      }
    }
    const int64_t least = (64 + f[2] * f[3] - 1) / (f[2] * f[3]);  // the fewest channels taken
    add({"amx space to depth", 1, 10, 11, least, f[0], f[1], least, 17,
         Attrs(f[2], f[3], 1, 1, Padding::kExplicit, 5, 1, 0, 7), Layout::kNHWC, kForward | kInput});
    add({"amx space to depth", 2, 8, 13, least, f[0], f[1], least, 33,
         Attrs(f[2], f[3], 1, 1, Padding::kSame), Layout::kNCHW, kForward | kInput});
  }
  add({"amx space to depth chunks", 2, 256, 260, 16, 2, 2, 16, 16, Attrs(2, 2, 1, 1, Padding::kValid),
       Layout::kNHWC, kInput});
  add({"amx space to depth chunks", 2, 364, 366, 8, 4, 4, 8, 16, Attrs(4, 4, 1, 1, Padding::kValid),
       Layout::kNHWC, kForward});

  // Merged filter rows of an odd depth a pixel (source channels: forward's input, backprop
  // input's output), padded by a zero while the row's reduction stays under 32 rows and
  // straddling pairs past it: filter widths on both sides of the bound, strides 1 and 2
  // (forward), rows with left-over pixels, NCHW.
  for (int64_t c : {1, 3, 5, 7, 9, 15, 31}) {
    std::vector<int64_t> widths = {1, 3, 31 / (c + 1), 32 / (c + 1) + 1};
    std::sort(widths.begin(), widths.end());
    widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
    for (int64_t kw : widths) {
      if (kw < 1) continue;
      for (int64_t stride : {1, 2}) {
        add({"amx padded pixels", 2, 5, 37, c, 3, kw, c, 17, Attrs(stride, stride, 1, 1, Padding::kSame),
             Layout::kNHWC, kForward});
      }
      add({"amx padded pixels", 2, 5, 37, 9, 3, kw, 9, c, Attrs(1, 1, 1, 1, Padding::kSame),
           Layout::kNHWC, kInput});
      add({"amx padded pixels", 2, 4, 21, c, 2, kw, c, 33, Attrs(1, 1, 1, 1, Padding::kValid),
           Layout::kNCHW, kForward});
    }
  }

  const int64_t strided_channels[][2] = {{31, 40}, {32, 16}, {33, 40}, {64, 130}};
  const int64_t strided_filters[][2] = {{3, 3}, {3, 1}, {4, 4}};
  for (int64_t cols : {30, 31, 96, 97}) {
    for (const auto& ch : strided_channels) {
      for (const auto& f : strided_filters) {
        add({"amx strided bands", 2, 5, cols, ch[0], f[0], f[1], ch[0], ch[1],
             Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNHWC, kForward});
      }
    }
  }
  for (int64_t cols : {45, 46}) {
    add({"amx strided bands", 2, 7, cols, 32, 3, 3, 32, 40, Attrs(3, 3, 1, 1, Padding::kSame),
         Layout::kNHWC, kForward});
  }
  add({"amx strided bands", 2, 6, 37, 48, 3, 3, 48, 33, Attrs(2, 2, 1, 1, Padding::kValid), Layout::kNHWC,
       kForward});
  add({"amx strided bands", 1, 6, 35, 32, 5, 5, 32, 24, Attrs(2, 2, 1, 1, Padding::kExplicit, 3, 0, 4, 1),
       Layout::kNHWC, kForward});
  add({"amx strided bands", 2, 5, 40, 64, 3, 3, 32, 64, Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNHWC,
       kForward});
  add({"amx strided bands", 2, 5, 40, 32, 4, 4, 32, 40, Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNCHW,
       kForward});
  add({"amx strided bands", 1, 5, 33, 700, 3, 3, 700, 70, Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNHWC,
       kForward});

  // Strided backprop input whose column classes are rows of whole tiles, through a copy of dy
  // with a zero border left and right: classes of 16 and 32 members, strides 2 and 3 and
  // mixed, filters wider than the stride, dilated (a class no tap reaches), SAME, VALID and
  // explicit padding, other channel counts either side of the tiles (17: through space to
  // depth where the filter is a multiple of the stride), groups, NCHW, and in two chunks of
  // images.
  const int64_t bordered[][6] = {{32, 4, 4, 2, 2, 1}, {64, 3, 3, 2, 2, 1}, {48, 3, 3, 3, 3, 1},
                                 {32, 3, 5, 1, 2, 1}, {32, 3, 3, 2, 2, 2}};
  const int64_t bordered_channels[][2] = {{32, 48}, {17, 33}, {64, 16}};
  for (const auto& f : bordered) {
    for (const auto& ch : bordered_channels) {
      for (Padding padding : {Padding::kSame, Padding::kValid}) {
        add({"amx bordered columns", 2, 7, f[0], ch[0], f[1], f[2], ch[0], ch[1],
             Attrs(f[3], f[4], 1, f[5], padding), Layout::kNHWC, kInput});
      }
    }
  }
  add({"amx bordered columns", 1, 6, 32, 24, 4, 4, 24, 40, Attrs(2, 2, 1, 1, Padding::kExplicit, 2, 1, 3, 0),
       Layout::kNHWC, kInput});
  add({"amx bordered columns", 2, 6, 32, 64, 4, 4, 32, 96, Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNHWC,
       kInput});
  add({"amx bordered columns", 2, 6, 32, 32, 4, 4, 32, 40, Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNCHW,
       kInput});
  add({"amx bordered columns chunks", 2, 64, 64, 33, 3, 3, 33, 512, Attrs(2, 2, 1, 1, Padding::kSame),
       Layout::kNHWC, kInput});

  const int64_t channels[][2] = {{32, 16}, {33, 16}, {65, 32}, {64, 64}, {95, 40}, {31, 70}, {97, 130}};
  for (const auto& ch : channels) {
    for (int64_t cols : Range(1, 70)) {
      add({"amx tiles", 1, 1, cols, ch[0], 1, 1, ch[0], ch[1], Attrs(1, 1, 1, 1, Padding::kValid),
           Layout::kNHWC, kAll});
    }
    for (int64_t stride : {1, 2}) {
      add({"amx tiles", 2, 5, 37, ch[0], 3, 3, ch[0], ch[1], Attrs(stride, stride, 1, 1, Padding::kSame),
           Layout::kNHWC, kAll});
    }
  }
}

// The filter gradient as tiles (bfloat16, at least 16 output channels a group; on AMX, and
// where filter columns merge on vectors of rows with AVX-512 BF16 alone): channel
// counts either side of the 16- and 32-row tiles on both operands, and input channels below
// one tile (filter columns merged into the pixels where one group's fit 64 slots), filters of one
// tap, of odd and even shifts only (one row, one column), 3x3 and 5x5, dilations, every
// padding; strides 2 and 3 and mixed (one phase of the input, several, phases that dilation
// merges), groups (channels either side of a tile); several slices and several pieces of a
// slice (of 512 pairs, and shorter ones where the input's copies would pass the L2 bound);
// output channels in chunks (one slice: a filter past the sums' memory bound, or few pixels),
// the last chunk part of a tile; NCHW in two chunks of images, the second added to the
// first's sums; and, for vectors of rows, merged layers of one slice of enough pixels that the
// output channels run in one chunk: 1 to 4 vectors of rows (the last partly masked) and more
// than 64 rows, slots of 16 to 50 (whole blocks and the last block's remainders).
void FilterTilesSpace(const Add& add) {
  const int64_t channels[][2] = {{16, 16}, {17, 33}, {31, 32}, {32, 17}, {33, 48}, {48, 65}, {64, 64}, {65, 130},
                                 {1, 16}, {3, 17}, {8, 64}, {15, 33}};
  const int64_t filters[][4] = {{1, 1, 1, 1}, {1, 2, 1, 1}, {2, 1, 1, 1}, {1, 3, 1, 2}, {3, 3, 1, 1},
                                {3, 3, 2, 3}, {5, 5, 1, 1}, {2, 2, 3, 1}};
  for (const auto& ch : channels) {
    for (const auto& f : filters) {
      for (const ConvAttrs& attrs : Paddings(1, 1, f[2], f[3])) {
        add({"amx filter tiles", 2, 9, 11, ch[0], f[0], f[1], ch[0], ch[1], attrs, Layout::kNHWC, kFilter});
      }
    }
  }
  const int64_t strided[][6] = {{1, 1, 2, 2, 1, 1}, {3, 3, 2, 2, 1, 1}, {4, 4, 2, 2, 1, 1},
                                {3, 3, 3, 3, 1, 1}, {5, 5, 2, 1, 1, 1}, {3, 2, 1, 3, 1, 1},
                                {3, 3, 2, 2, 2, 2}, {3, 3, 2, 2, 3, 1}};
  for (const auto& f : strided) {
    for (int c : {0, 3, 6, 9}) {
      const auto& ch = channels[c];
      for (const ConvAttrs& attrs : Paddings(f[2], f[3], f[4], f[5])) {
        add({"amx filter tiles strided", 2, 11, 14, ch[0], f[0], f[1], ch[0], ch[1], attrs, Layout::kNHWC,
             kFilter});
      }
    }
  }
  const int64_t groups[][3] = {{2, 16, 16}, {2, 24, 20}, {3, 17, 33}, {4, 32, 16}, {2, 3, 16}, {3, 5, 17}};
  for (const auto& gr : groups) {
    add({"amx filter tiles groups", 2, 8, 13, gr[0] * gr[1], 3, 3, gr[1], gr[0] * gr[2],
         Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC, kFilter});
  }
  add({"amx filter tiles slices", 5, 62, 62, 16, 3, 3, 16, 16, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC,
       kFilter});
  add({"amx filter tiles slices", 4, 40, 41, 24, 1, 3, 24, 40, Attrs(1, 1, 1, 1, Padding::kValid), Layout::kNHWC,
       kFilter});
  add({"amx filter tiles slices", 6, 12, 12, 256, 5, 5, 256, 33, Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNHWC,
       kFilter});
  add({"amx filter tiles slices", 5, 62, 62, 3, 3, 3, 3, 16, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC,
       kFilter});
  add({"amx filter tiles slices", 4, 61, 59, 3, 7, 7, 3, 20, Attrs(2, 2, 1, 1, Padding::kSame), Layout::kNHWC,
       kFilter});
  // Slices of more than 2048 pairs: pieces on vectors of rows too.
  add({"amx filter tiles row pieces", 4, 130, 132, 3, 3, 3, 3, 16, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC,
       kFilter});
  add({"amx filter tiles chunks", 1, 5, 6, 33, 3, 3, 33, 130, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNHWC,
       kFilter});
  add({"amx filter tiles chunks", 1, 30, 30, 160, 7, 7, 160, 170, Attrs(1, 1, 1, 1, Padding::kSame),
       Layout::kNHWC, kFilter});
  const int64_t rows[][5] = {{3, 3, 3, 130, 1}, {5, 5, 3, 48, 1}, {3, 7, 7, 100, 2}, {2, 3, 8, 70, 1},
                             {1, 2, 24, 16, 1}, {2, 3, 25, 20, 1}, {3, 3, 3, 64, 1}};
  for (const auto& r : rows) {
    add({"amx filter tiles rows", 2, 64, 70, r[0], r[1], r[2], r[0], r[3],
         Attrs(r[4], r[4], 1, 1, r[4] > 1 ? Padding::kSame : Padding::kValid), Layout::kNHWC, kFilter});
  }
  add({"amx filter tiles nchw", 2, 370, 370, 16, 1, 2, 16, 17, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW,
       kFilter});
  add({"amx filter tiles nchw", 2, 6, 7, 48, 3, 3, 48, 40, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW,
       kFilter});
  // Chunks of one image through output channels rather than pixels, so that the bound (which
  // grows with the pixels summed) stays well below a chunk's share of the sums: a chunk's
  // sums lost or added twice fail the check.
  add({"amx filter tiles nchw", 3, 33, 32, 3, 3, 3, 3, 1000, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW,
       kFilter});
  add({"amx filter tiles nchw", 3, 33, 32, 16, 3, 3, 16, 1000, Attrs(1, 1, 1, 1, Padding::kSame), Layout::kNCHW,
       kFilter});
}

const std::pair<const char*, void (*)(const Add&)> kSpaces[] = {
    {"channels", ChannelSpace}, {"groups", GroupSpace},     {"columns", ColumnsMergedSpace},
    {"spatial", SpatialSpace},  {"chunks", ChunkSpace},     {"depthwise", DepthwiseSpace},
    {"filter", FilterSpace},    {"nchw", NchwSpace},       {"winograd", WinogradSpace},
    {"winograd phases", PhasesSpace}, {"band copy", BandCopySpace}, {"amx tiles", AmxSpace},
    {"amx filter tiles", FilterTilesSpace}, {"in place", InPlaceSpace},
};

// ---------------------------------------------------------------------------------------
// Running one case.

// Runs fn over the units in ranges of 1 to 3 units, the last range first: another split
// and order than SerialFor's single range, for the bitwise check.
void ReversedRanges(int64_t units, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t b = 0, len = 1; b < units; b += len, len = len % 3 + 1) {
    ranges.emplace_back(b, std::min(units, b + len));
  }
  for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) fn(it->first, it->second);
}

std::string Describe(const Spec& s, const ConvGeometry& g) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "[%s] %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] y[%lld,%lld] "
                "strides (%lld,%lld) dilations (%lld,%lld) pads (%lld,%lld,%lld,%lld) groups %lld",
                s.space, s.layout == Layout::kNHWC ? "NHWC" : "NCHW", (long long)s.batch,
                (long long)s.rows, (long long)s.cols, (long long)s.depth, (long long)s.kh,
                (long long)s.kw, (long long)s.fi, (long long)s.k, (long long)g.out_rows,
                (long long)g.out_cols, (long long)g.stride_rows, (long long)g.stride_cols,
                (long long)g.dilation_rows, (long long)g.dilation_cols, (long long)g.pad_top,
                (long long)g.pad_bottom, (long long)g.pad_left, (long long)g.pad_right,
                (long long)g.groups);
  return buf;
}

struct Stats {
  int64_t cases = 0, runs = 0, failures = 0, winograd_runs = 0;
  double worst[3] = {0, 0, 0};  // largest error / bound, by element type
  double worst_winograd[3] = {0, 0, 0};  // the same for Winograd runs, against its bound
  double winograd_factor[3] = {0, 0, 0};  // Winograd's error in units of 2 (n + 16) u P
  // The bits of every result of the fast kernels, in the order they ran (--digest): equal
  // digests before and after a change of the kernels' code show it changed no result.
  uint64_t digest = 0;
};

template <typename T>
struct TypeInfo;
constexpr int kTypes = 3;
template <>
struct TypeInfo<float> {
  static constexpr int index = 0;
  static constexpr const char* name = "float32";
  static constexpr double unit = 0x1p-24, floor = 0;
};
template <>
struct TypeInfo<Eigen::half> {
  static constexpr int index = 1;
  static constexpr const char* name = "float16";
  // Half results under 2**-14 are subnormal: rounding them errs by up to 2**-25 absolutely.
  static constexpr double unit = 0x1p-11, floor = 0x1p-25;
};
template <>
struct TypeInfo<Eigen::bfloat16> {
  static constexpr int index = 2;
  static constexpr const char* name = "bfloat16";
  static constexpr double unit = 0x1p-8, floor = 0;
};
// The element types' names by index.
constexpr const char* kTypeNames[kTypes] = {TypeInfo<float>::name, TypeInfo<Eigen::half>::name,
                                            TypeInfo<Eigen::bfloat16>::name};
static_assert(TypeInfo<float>::index == 0 && TypeInfo<Eigen::half>::index == 1 &&
              TypeInfo<Eigen::bfloat16>::index == 2);

// The float64 results of one case for every element type at once, summed by the direct loops
// (direct_loops.h) in one pass: lane i < kTypes is the exact result on the values rounded to
// element type i, lane kTypes + i the sum of absolute products on them. Each lane is the sum
// the direct loops make in float64 alone, in the same order.
struct Lanes {
  double v[2 * kTypes];
  Lanes() = default;
  explicit Lanes(double c) { std::fill(v, v + 2 * kTypes, c); }
  Lanes& operator+=(const Lanes& o) {
    for (int i = 0; i < 2 * kTypes; ++i) v[i] += o.v[i];
    return *this;
  }
  friend Lanes operator*(const Lanes& a, const Lanes& b) {
    Lanes p;
    for (int i = 0; i < 2 * kTypes; ++i) p.v[i] = a.v[i] * b.v[i];
    return p;
  }
};

// v rounded to T, as the fast kernels get it, in float64.
template <typename T>
double RoundedTo(double v) {
  return static_cast<double>(static_cast<float>(static_cast<T>(static_cast<float>(v))));
}

std::vector<Lanes> AsLanes(const std::vector<double>& v) {
  std::vector<Lanes> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double r[kTypes] = {RoundedTo<float>(v[i]), RoundedTo<Eigen::half>(v[i]),
                              RoundedTo<Eigen::bfloat16>(v[i])};  // by TypeInfo<T>::index
    for (int t = 0; t < kTypes; ++t) out[i].v[t] = r[t], out[i].v[kTypes + t] = std::fabs(r[t]);
  }
  return out;
}

// The index of element (n, r, c, ch) of an activation tensor of rows x cols pixels of `chans`
// channels in `layout`.
int64_t ElementAt(Layout layout, int64_t n, int64_t r, int64_t c, int64_t ch, int64_t rows, int64_t cols,
                  int64_t chans) {
  const ActivationStrides st = StridesFor(layout, rows, cols, chans);
  return n * st.n + r * st.h + c * st.w + ch * st.c;
}

// Winograd's error scale for each output element (forward: y; backprop input: dx): the
// pass computes a 4x4 tile of outputs from the 6x6 source patch under it, so an element's
// rounding error follows the whole patch, not its own products. P = sum over the reduction
// channels c of (sum of |source| over the tile's 6x6 patch in channel c) times (sum of
// |filter| over the 3x3 taps joining c to the element's channel). P is at least the
// element's sum of absolute products.
//
// A strided pass runs Winograd over a space-to-depth copy (its filter spanning three strides
// each way, one group): source pixel (i, j) of the copy holds input pixel (i * sr + a - pad_top,
// j * sc + b - pad_left) as channel (a, b, c), and its 3x3 filter tap (p, q) holds w's tap
// (p * sr + a, q * sc + b) (zero past w). Forward, the tiles are the output's and the patch
// of tile (th, tw) is copy pixels (4 th + r, 4 tw + c), r, c < 6; backprop input, the tiles
// are the copy of dx's (out_rows + 2 by out_cols + 2 pixels), the patch of tile (th, tw) is dy
// pixels (4 th + r - 2, 4 tw + c - 2), and dx pixel (R, C) takes the scale of its copy pixel
// ((R + pad_top) / sr, (C + pad_left) / sc) in channel (a, b, c) for a = (R + pad_top) % sr,
// b = (C + pad_left) % sc.
std::vector<double> PhasesScale(const ConvGeometry& g, Layout layout, bool forward,
                                const std::vector<double>& src_abs, const std::vector<double>& w_abs) {
  const int64_t C = g.in_depth, K = g.out_depth, KH = g.filter_rows, KW = g.filter_cols;
  const int64_t sr = g.stride_rows, sc = g.stride_cols;
  const auto at = [&](int64_t n, int64_t r, int64_t c, int64_t ch, int64_t rows, int64_t cols, int64_t chans) {
    return ElementAt(layout, n, r, c, ch, rows, cols, chans);
  };
  // taps[(a * sc + b) * C + c][k]: sum of |w| over the copy filter's taps joining copy channel
  // (a, b, c) to output channel k.
  std::vector<double> taps(sr * sc * C * K, 0.0);
  for (int64_t a = 0; a < sr; ++a) {
    for (int64_t b = 0; b < sc; ++b) {
      for (int64_t p = 0; p < 3 && p * sr + a < KH; ++p) {
        for (int64_t q = 0; q < 3 && q * sc + b < KW; ++q) {
          for (int64_t c = 0; c < C; ++c) {
            for (int64_t k = 0; k < K; ++k) {
              const int64_t tap = (p * sr + a) * KW + q * sc + b;
              taps[((a * sc + b) * C + c) * K + k] += w_abs[(tap * C + c) * K + k];
            }
          }
        }
      }
    }
  }
  std::vector<double> scale(forward ? g.output_elements() : g.input_elements(), 0.0);
  if (forward) {
    std::vector<double> patch(sr * sc * C);
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t th = 0; th * 4 < g.out_rows; ++th) {
        for (int64_t tw = 0; tw * 4 < g.out_cols; ++tw) {
          std::fill(patch.begin(), patch.end(), 0.0);
          for (int64_t i = th * 4; i < th * 4 + 6; ++i) {
            for (int64_t j = tw * 4; j < tw * 4 + 6; ++j) {
              for (int64_t a = 0; a < sr; ++a) {
                for (int64_t b = 0; b < sc; ++b) {
                  const int64_t r = i * sr + a - g.pad_top, c = j * sc + b - g.pad_left;
                  if (r < 0 || r >= g.in_rows || c < 0 || c >= g.in_cols) continue;
                  for (int64_t ch = 0; ch < C; ++ch) {
                    patch[(a * sc + b) * C + ch] += src_abs[at(n, r, c, ch, g.in_rows, g.in_cols, C)];
                  }
                }
              }
            }
          }
          for (int64_t k = 0; k < K; ++k) {
            double total = 0;
            for (int64_t x = 0; x < sr * sc * C; ++x) total += patch[x] * taps[x * K + k];
            for (int64_t oh = th * 4; oh < std::min(g.out_rows, th * 4 + 4); ++oh) {
              for (int64_t ow = tw * 4; ow < std::min(g.out_cols, tw * 4 + 4); ++ow) {
                scale[at(n, oh, ow, k, g.out_rows, g.out_cols, K)] = total;
              }
            }
          }
        }
      }
    }
    return scale;
  }
  std::vector<double> patch(K);
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t row = 0; row < g.in_rows; ++row) {
      for (int64_t col = 0; col < g.in_cols; ++col) {
        const int64_t i = (row + g.pad_top) / sr, a = (row + g.pad_top) % sr;
        const int64_t j = (col + g.pad_left) / sc, b = (col + g.pad_left) % sc;
        if (i >= g.out_rows + 2 || j >= g.out_cols + 2) continue;  // past the copy: zero
        const int64_t th = i / 4, tw = j / 4;
        std::fill(patch.begin(), patch.end(), 0.0);
        for (int64_t r = th * 4 - 2; r < th * 4 + 4; ++r) {
          for (int64_t c = tw * 4 - 2; c < tw * 4 + 4; ++c) {
            if (r < 0 || r >= g.out_rows || c < 0 || c >= g.out_cols) continue;
            for (int64_t k = 0; k < K; ++k) patch[k] += src_abs[at(n, r, c, k, g.out_rows, g.out_cols, K)];
          }
        }
        for (int64_t ch = 0; ch < C; ++ch) {
          double total = 0;
          for (int64_t k = 0; k < K; ++k) total += patch[k] * taps[((a * sc + b) * C + ch) * K + k];
          scale[at(n, row, col, ch, g.in_rows, g.in_cols, C)] = total;
        }
      }
    }
  }
  return scale;
}

std::vector<double> WinogradScale(const ConvGeometry& g, Layout layout, bool forward,
                                  const std::vector<double>& src_abs, const std::vector<double>& w_abs) {
  if (g.stride_rows > 1 || g.stride_cols > 1) return PhasesScale(g, layout, forward, src_abs, w_abs);
  const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group();
  const int64_t sr = forward ? g.in_rows : g.out_rows, sc = forward ? g.in_cols : g.out_cols;
  const int64_t sch = forward ? g.in_depth : K;
  const int64_t dr = forward ? g.out_rows : g.in_rows, dc = forward ? g.out_cols : g.in_cols;
  const int64_t dch = forward ? K : g.in_depth;
  const int64_t pt = forward ? g.pad_top : 2 - g.pad_top, pl = forward ? g.pad_left : 2 - g.pad_left;
  const auto at = [&](int64_t n, int64_t r, int64_t c, int64_t ch, int64_t rows, int64_t cols, int64_t chans) {
    return ElementAt(layout, n, r, c, ch, rows, cols, chans);
  };
  std::vector<double> scale(g.batch * dr * dc * dch, 0.0), patch(sch);
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t th = 0; th * 4 < dr; ++th) {
      for (int64_t tw = 0; tw * 4 < dc; ++tw) {
        std::fill(patch.begin(), patch.end(), 0.0);
        for (int64_t r = th * 4 - pt; r < th * 4 - pt + 6; ++r) {
          for (int64_t c = tw * 4 - pl; c < tw * 4 - pl + 6; ++c) {
            if (r < 0 || r >= sr || c < 0 || c >= sc) continue;
            for (int64_t ch = 0; ch < sch; ++ch) patch[ch] += src_abs[at(n, r, c, ch, sr, sc, sch)];
          }
        }
        for (int64_t d = 0; d < dch; ++d) {
          // The reduction channels of d's group, and the filter taps joining each to d.
          double total = 0;
          if (forward) {
            const int64_t grp = d / Kg;
            for (int64_t c = 0; c < FI; ++c) {
              double taps = 0;
              for (int64_t t = 0; t < 9; ++t) taps += w_abs[(t * FI + c) * K + d];
              total += patch[grp * FI + c] * taps;
            }
          } else {
            const int64_t grp = d / FI, ci = d % FI;
            for (int64_t k = grp * Kg; k < (grp + 1) * Kg; ++k) {
              double taps = 0;
              for (int64_t t = 0; t < 9; ++t) taps += w_abs[(t * FI + ci) * K + k];
              total += patch[k] * taps;
            }
          }
          for (int64_t a = th * 4; a < std::min(dr, th * 4 + 4); ++a) {
            for (int64_t b = tw * 4; b < std::min(dc, tw * 4 + 4); ++b) scale[at(n, a, b, d, dr, dc, dch)] = total;
          }
        }
      }
    }
  }
  return scale;
}

// The same for the filter gradient, which sums G^T [(A e A^T) . (B^T d B)] G over the output
// gradient's 4x4 tiles e and the 6x6 input patches d under them: P for dw[t][c][k] = sum over
// images and tiles of (sum of |x| over the patch in c's input channel) times (sum of |dy| over
// the tile in channel k), the same for every tap t.
std::vector<double> WinogradFilterScale(const ConvGeometry& g, Layout layout, const std::vector<double>& x_abs,
                                        const std::vector<double>& dy_abs) {
  const int64_t FI = g.filter_in_depth, K = g.out_depth, Kg = g.out_depth_per_group(), C = g.in_depth;
  const auto at = [&](int64_t n, int64_t r, int64_t c, int64_t ch, int64_t rows, int64_t cols, int64_t chans) {
    return ElementAt(layout, n, r, c, ch, rows, cols, chans);
  };
  std::vector<double> sums(FI * K, 0.0), patch(C), tile(K);
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t th = 0; th * 4 < g.out_rows; ++th) {
      for (int64_t tw = 0; tw * 4 < g.out_cols; ++tw) {
        std::fill(patch.begin(), patch.end(), 0.0);
        std::fill(tile.begin(), tile.end(), 0.0);
        for (int64_t r = th * 4 - g.pad_top; r < th * 4 - g.pad_top + 6; ++r) {
          for (int64_t c = tw * 4 - g.pad_left; c < tw * 4 - g.pad_left + 6; ++c) {
            if (r < 0 || r >= g.in_rows || c < 0 || c >= g.in_cols) continue;
            for (int64_t ch = 0; ch < C; ++ch) patch[ch] += x_abs[at(n, r, c, ch, g.in_rows, g.in_cols, C)];
          }
        }
        for (int64_t r = th * 4; r < std::min(g.out_rows, th * 4 + 4); ++r) {
          for (int64_t c = tw * 4; c < std::min(g.out_cols, tw * 4 + 4); ++c) {
            for (int64_t k = 0; k < K; ++k) tile[k] += dy_abs[at(n, r, c, k, g.out_rows, g.out_cols, K)];
          }
        }
        for (int64_t c = 0; c < FI; ++c) {
          for (int64_t k = 0; k < K; ++k) sums[c * K + k] += patch[k / Kg * FI + c] * tile[k];
        }
      }
    }
  }
  std::vector<double> scale(9 * FI * K);
  for (int64_t t = 0; t < 9; ++t) std::copy(sums.begin(), sums.end(), scale.begin() + t * FI * K);
  return scale;
}

// splitmix64's finaliser: a fixed scramble of the bits of x.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

class Runner {
 public:
  explicit Runner(Stats* stats) : stats_(stats) {}

  // Where the next runs count, and the instruction set their failures name.
  void UseStats(Stats* stats, const char* isa) { stats_ = stats, isa_ = isa; }

  // Whether s is a convolution (not one with an output of no pixels: nothing fast to check),
  // and its geometry.
  static bool Geometry(const Spec& s, ConvGeometry* g) {
    const std::string error =
        MakeConvGeometry(s.batch, s.rows, s.cols, s.depth, s.kh, s.kw, s.fi, s.k, s.attrs, g);
    return error.empty() && g->out_rows > 0 && g->out_cols > 0;
  }

  // Runs case number `number` (1, 2, ... over the whole list's convolutions), on data drawn
  // from that number.
  void Run(const Spec& s, int64_t number) {
    ConvGeometry g;
    if (!Geometry(s, &g)) return;
    ++stats_->cases;
    // Probing reads only which paths and kernels the geometry reaches: any values do.
    if (probe) {
      const std::vector<double> none;
      RunType<float>(s, g, none, none, none);
      RunType<Eigen::half>(s, g, none, none, none);
      RunType<Eigen::bfloat16>(s, g, none, none, none);
      return;
    }
    // The data and the float64 results depend on the case alone: kept while the same case runs
    // again (on another instruction set).
    const std::string key = Describe(s, g) + " directions " + std::to_string(s.directions) +
                            " number " + std::to_string(number);
    if (key != cached_case_) {
      cached_case_ = key, cached_.clear();
      std::mt19937_64 rng(0x5eed + number);
      std::uniform_real_distribution<double> uniform(-1.0, 1.0);
      const auto fill = [&](int64_t n) {
        std::vector<double> v(n);
        for (double& e : v) e = uniform(rng);
        return v;
      };
      x_ = fill(g.input_elements()), w_ = fill(g.filter_elements()), dy_ = fill(g.output_elements());
      ZeroRegion(&x_, s.layout, g.batch, g.in_rows, g.in_cols, g.in_depth);
      ZeroRegion(&dy_, s.layout, g.batch, g.out_rows, g.out_cols, g.out_depth);
      if (check_values) lanes_x_ = AsLanes(x_), lanes_w_ = AsLanes(w_), lanes_dy_ = AsLanes(dy_);
    }
    RunType<float>(s, g, x_, w_, dy_);
    RunType<Eigen::half>(s, g, x_, w_, dy_);
    RunType<Eigen::bfloat16>(s, g, x_, w_, dy_);
  }

 private:
  // A dead region inside every image of an activation tensor, as a ReLU leaves one: a block of
  // at least 4 x 4 pixels in the middle, every channel zero (images of 7 or more rows and
  // columns). An output whose window reads only zeros (and padding) has no nonzero product, and
  // Check requires an exact zero of every path there (Winograd's included: its transforms
  // would leave rounding noise).
  static void ZeroRegion(std::vector<double>* v, Layout layout, int64_t batch, int64_t rows, int64_t cols,
                         int64_t depth) {
    if (rows < 7 || cols < 7) return;
    const int64_t hr = std::max<int64_t>(2, rows / 6), hc = std::max<int64_t>(2, cols / 6);
    const ActivationStrides st = StridesFor(layout, rows, cols, depth);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t i = rows / 2 - hr; i < rows / 2 + hr; ++i)
        for (int64_t j = cols / 2 - hc; j < cols / 2 + hc; ++j)
          for (int64_t c = 0; c < depth; ++c) (*v)[n * st.n + i * st.h + j * st.w + c * st.c] = 0.0;
  }

  template <typename T>
  void RunType(const Spec& s, const ConvGeometry& g, const std::vector<double>& x,
               const std::vector<double>& w, const std::vector<double>& dy) {
    // The values as T (while probing, with no values given, a constant), and exactly those
    // values in float64 (none while probing).
    const auto as_t = [](const std::vector<double>& v, int64_t n) {
      std::vector<T> out(n, static_cast<T>(0.25f));
      for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(static_cast<float>(v[i]));
      return out;
    };
    // |value| as T, in float64: the Lanes' absolute lane of this type (Winograd's scales).
    const auto absolute = [](const std::vector<Lanes>& v) {
      std::vector<double> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = v[i].v[kTypes + TypeInfo<T>::index];
      return out;
    };
    const std::vector<T> xt = as_t(x, g.input_elements()), dyt = as_t(dy, g.output_elements());
    std::vector<T> wt = as_t(w, g.filter_elements());
    if (plant_fault) wt.back() = static_cast<T>(0.0f);
    const int64_t taps = g.filter_rows * g.filter_cols;
    if (s.directions & kForward) {
      Check<T>(s, g, Direction::kForward, "forward", g.output_elements(), taps * g.filter_in_depth,
               [&] { return WinogradScale(g, s.layout, true, absolute(lanes_x_), absolute(lanes_w_)); },
               [&](T* out, const ParallelFor& pf) {
                 return RunFast(Direction::kForward, g, s.layout, xt.data(), wt.data(), out, pf);
               },
               [&](Lanes* out) {
                 DirectConvForward<Lanes>(g, s.layout, lanes_x_.data(), lanes_w_.data(), out, SerialFor);
               });
    }
    if (s.directions & kInput) {
      Check<T>(s, g, Direction::kBackpropInput, "backprop input", g.input_elements(), taps * g.out_depth_per_group(),
               [&] { return WinogradScale(g, s.layout, false, absolute(lanes_dy_), absolute(lanes_w_)); },
               [&](T* out, const ParallelFor& pf) {
                 return RunFast(Direction::kBackpropInput, g, s.layout, dyt.data(), wt.data(), out, pf);
               },
               [&](Lanes* out) {
                 DirectConvBackpropInput<Lanes>(g, s.layout, lanes_w_.data(), lanes_dy_.data(), out, SerialFor);
               });
    }
    if (s.directions & kFilter) {
      Check<T>(s, g, Direction::kBackpropFilter, "backprop filter", g.filter_elements(), g.batch * g.out_rows * g.out_cols,
               [&] { return WinogradFilterScale(g, s.layout, absolute(lanes_x_), absolute(lanes_dy_)); },
               [&](T* out, const ParallelFor& pf) {
                 return RunFast(Direction::kBackpropFilter, g, s.layout, xt.data(), dyt.data(), out, pf);
               },
               [&](Lanes* out) {
                 DirectConvBackpropFilter<Lanes>(g, s.layout, lanes_x_.data(), lanes_dy_.data(), out, SerialFor);
               });
    }
  }

  // `op(out, pf)` writes the fast kernel's result through pf (returning whether it applied);
  // `reference(out)` the direction's float64 results for every element type (Lanes).
  template <typename T, typename Scale, typename Op, typename Reference>
  void Check(const Spec& s, const ConvGeometry& g, Direction dir, const char* direction, int64_t size,
             int64_t products, const Scale& scale, const Op& op, const Reference& reference) {
    const uint64_t before = WinogradCount();
    CheckOnce<T>(s, g, dir, direction, size, products, scale, op, reference, /*exact=*/false);
    if (WinogradCount() != before) {
      // The same case in exact mode: the direct sum, within the direct kernels' bound.
      SetExactMode(true);
      CheckOnce<T>(s, g, dir, direction, size, products, scale, op, reference, /*exact=*/true);
      SetExactMode(false);
    }
  }

  static uint64_t WinogradCount() {
    const coverage::Record& r = *coverage::current.load();
    return PathCount(r, Path::kForwardWinograd) + PathCount(r, Path::kInputWinograd) +
           PathCount(r, Path::kFilterWinograd);
  }

  template <typename T, typename Scale, typename Op, typename Reference>
  void CheckOnce(const Spec& s, const ConvGeometry& g, Direction dir, const char* direction, int64_t size,
                 int64_t products, const Scale& scale, const Op& op, const Reference& reference,
                 bool exact) {
    ++stats_->runs;
    // Aligned as TensorFlow's allocator aligns tensors (the non-temporal stores ask for it).
    std::vector<T, Aligned64<T>> fast(size, static_cast<T>(12345.0f)), split(size, static_cast<T>(-777.0f));
    const ParallelFor serial = SerialFor, reversed = ReversedRanges;
    if (probe) {
      op(fast.data(), serial);
      return;
    }
    const uint64_t before = WinogradCount();
    // The plan the call runs: the workspace it holds at most is the plan's to the byte.
    const Plan plan = PlanConv(dir, g, s.layout, ElementOf<T>(), Kernels(), ExactMode());
    fast::WorkspaceTally& tally = fast::ThreadWorkspace();
    tally.peak = tally.live;
    tally.overflows = tally.misorders = 0;
    if (!op(fast.data(), serial)) return Fail(s, g, direction, TypeInfo<T>::name, "the fast kernel did not apply");
    if (tally.peak - tally.live != plan.workspace_bytes) {
      return Fail(s, g, direction, TypeInfo<T>::name,
                  std::string(NameOf(plan.algorithm)) + " held " + std::to_string(tally.peak - tally.live) +
                      " bytes of workspace, its plan " + std::to_string(plan.workspace_bytes));
    }
    // Every Workspace inside the call's one block, given back last taken first.
    if (tally.overflows != 0 || tally.misorders != 0) {
      return Fail(s, g, direction, TypeInfo<T>::name,
                  std::string(NameOf(plan.algorithm)) + ": " + std::to_string(tally.overflows) +
                      " workspace requests outside the call's block, " + std::to_string(tally.misorders) +
                      " given back out of order");
    }
    const bool winograd = WinogradCount() != before;
    if (exact && winograd) return Fail(s, g, direction, TypeInfo<T>::name, "Winograd ran in exact mode");
    if (winograd) ++stats_->winograd_runs;
    op(split.data(), reversed);
    if (std::memcmp(fast.data(), split.data(), size * sizeof(T)) != 0) {
      return Fail(s, g, direction, TypeInfo<T>::name, "results differ bitwise between work splits");
    }
    if (!check_values) return Digest(fast.data(), size, nullptr);
    Results& cached = cached_[std::string(TypeInfo<T>::name) + " " + direction];
    if (cached.ref.empty()) {
      // One pass of the direct loops for every element type's results.
      std::vector<Lanes> lanes(size);
      reference(lanes.data());
      for (int type = 0; type < kTypes; ++type) {
        Results& r = cached_[std::string(kTypeNames[type]) + " " + direction];
        r.ref.resize(size), r.abs_ref.resize(size);
        for (int64_t i = 0; i < size; ++i) r.ref[i] = lanes[i].v[type], r.abs_ref[i] = lanes[i].v[kTypes + type];
      }
    }
    const std::vector<double>& ref = cached.ref;
    const std::vector<double>& abs_ref = cached.abs_ref;
    Digest(fast.data(), size, &abs_ref);
    // The direct bound: the float sum of n products within 2 n u sum|p| of the exact value
    // (Winograd adds 2 (n + 16) u P, WinogradScale: the transforms' own roundings), then
    // rounded once to the output type: that error times (1 + u_out), plus u_out |exact|
    // (+ floor).
    const double direct_gamma = 2.0 * static_cast<double>(products) * 0x1p-24;
    const double winograd_gamma = 2.0 * static_cast<double>(products + 16) * 0x1p-24;
    const double unit = TypeInfo<T>::unit;
    if (winograd && cached.winograd_scale.empty()) cached.winograd_scale = scale();
    const std::vector<double>& tile = cached.winograd_scale;
    const auto bound_at = [&](int64_t i) {
      const double sum_error = direct_gamma * abs_ref[i] + (winograd ? winograd_gamma * tile[i] : 0.0);
      return sum_error * (1 + unit) + unit * std::fabs(ref[i]) + TypeInfo<T>::floor;
    };
    double worst = 0, worst_scaled = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < size; ++i) {
      const double got = static_cast<double>(static_cast<float>(fast[i]));
      // No product reaches element i: its sum is structurally zero, and so is every path's.
      if (abs_ref[i] == 0 && got != 0) {
        char buf[160];
        std::snprintf(buf, sizeof(buf), "element %lld: no product reaches it, fast %.9g", (long long)i, got);
        return Fail(s, g, direction, TypeInfo<T>::name, buf);
      }
      const double bound = bound_at(i);
      const double err = std::fabs(got - ref[i]);
      // A NaN compares false either way: count it as failing.
      const double ratio = err <= bound ? (bound > 0 ? err / bound : 0.0) : (bound > 0 ? err / bound : 1e300);
      if (!(ratio <= worst)) worst = std::isnan(ratio) ? 1e300 : ratio, at = i;
      if (winograd && tile[i] > 0) {
        // The measured factor: error beyond the direct bound's rounding of the output, in
        // units of 2 (n + 16) u P (docs/accuracy.md's table).
        const double beyond = std::max(0.0, err - unit * std::fabs(ref[i]) - TypeInfo<T>::floor);
        worst_scaled = std::max(worst_scaled, beyond / (winograd_gamma * tile[i]));
      }
    }
    double& kept = (winograd ? stats_->worst_winograd : stats_->worst)[TypeInfo<T>::index];
    kept = std::max(kept, worst);
    if (winograd) {
      double& d = stats_->winograd_factor[TypeInfo<T>::index];
      d = std::max(d, worst_scaled);
    }
    if (worst > 1) {
      char buf[256];
      std::snprintf(buf, sizeof(buf), "%selement %lld: fast %.9g, exact %.9g, bound %.3g (sum |p| %.6g)",
                    winograd ? "Winograd, " : exact ? "exact mode, " : "", (long long)at,
                    static_cast<double>(static_cast<float>(fast[at])), ref[at], bound_at(at), abs_ref[at]);
      Fail(s, g, direction, TypeInfo<T>::name, buf);
    }
  }

  // Folds the bits of the results into the digest; with the float64 results, only those some
  // product reaches (the others are checked to be exact zeros).
  template <typename T>
  void Digest(const T* results, int64_t size, const std::vector<double>* abs_ref) {
    for (int64_t i = 0; i < size; ++i) {
      if (abs_ref != nullptr && (*abs_ref)[i] == 0) continue;
      uint64_t bits = 0;
      std::memcpy(&bits, &results[i], sizeof(T));
      stats_->digest = Mix(stats_->digest ^ bits);
    }
  }

  void Fail(const Spec& s, const ConvGeometry& g, const char* direction, const char* type,
            const std::string& what) {
    if (++stats_->failures <= 25) {
      std::printf("FAIL %s: %s %s %s: %s\n", isa_, direction, type, Describe(s, g).c_str(), what.c_str());
    }
  }

  // One direction's float64 results in one element type: the exact sums, the sums of
  // absolute products, and Winograd's scale where a run took Winograd.
  struct Results {
    std::vector<double> ref, abs_ref, winograd_scale;
  };

  Stats* stats_;
  const char* isa_ = FastKernelIsa();
  std::string cached_case_;
  std::map<std::string, Results> cached_;
  // The case's operands, and as Lanes for the float64 results.
  std::vector<double> x_, w_, dy_;
  std::vector<Lanes> lanes_x_, lanes_w_, lanes_dy_;
};


// What the run has not reached of the paths and kernels this instruction set's table has, a
// line each ("path: NAME", "kernel: NAME[I] kind K"); the kernels listed and missed. With
// `print`, every path's count.
std::vector<std::string> Unreached(const coverage::Record& record, bool print, int64_t* kernels_listed,
                                   int64_t* kernels_missed) {
  std::vector<std::string> missed;
  *kernels_missed = 0;
  // What this instruction set's table lacks, no geometry can reach: the bfloat16 pair
  // kernels (and the packing of pairs, and the filter tiles) without AVX-512 BF16, bands
  // run whole, strided forward bands, bordered columns and the filter tiles of several
  // groups without AMX (bfloat16 on AMX only), the filter tiles on vectors of rows with AMX,
  // the depthwise row kernels without AVX-512, the GEMMs that round 16-bit results without
  // vector rounding. Strided passes through space-to-depth copies run on every instruction
  // set, as Winograd (float32 and float16; on AMX, bfloat16's direct passes too).
  const KernelTable& table = Kernels();
  const bool pairs = table.gemm_bf16_pairs != nullptr;
  const bool rows = table.dw[0].row[0][0][kElemF32] != nullptr;
  const bool narrowed = table.gemm[0].affine_narrow[kElemF16] != nullptr;
  const bool amx = table.amx_tiles;
  using Paths = std::initializer_list<Path>;
  const Paths needs_pairs = {Path::kGemmBf16Pairs, Path::kFilterPairs, Path::kColumnsMergedPairs,
                             Path::kBandedMergedStraddling, Path::kFilterTiles, Path::kFilterTilesChannelChunks,
                             Path::kFilterTilesSlices, Path::kFilterTilesPieces, Path::kFilterTilesMerged,
                             Path::kFilterTilesAdded, Path::kFilterTilesPhases};
  const Paths needs_amx = {Path::kBandedWholeRuns, Path::kBandedWholeRowsOut, Path::kForwardBandedStridedRows,
                           Path::kBandedPaddedPixels, Path::kFilterTilesGroups, Path::kInputBorderedColumns,
                           Path::kInputBorderedChunks};
  const Paths needs_narrowing = {Path::kIndirectNarrowed, Path::kBandedRowsNarrowed, Path::kBandedNarrowedBand};
  const auto in = [](const Paths& paths, Path path) {
    return std::find(paths.begin(), paths.end(), path) != paths.end();
  };
  // Every algorithm the planner can name with this table (AlgorithmInTable), read from its
  // enum: a new one that no geometry reaches fails the sweep. The direct loops are the sweep's
  // reference, never a plan of the cases it runs.
  for (int a = 0; a < static_cast<int>(Algorithm::kCount); ++a) {
    const Algorithm algorithm = static_cast<Algorithm>(a);
    const uint64_t n = AlgorithmCount(record, a);
    const bool expected = algorithm != Algorithm::kDirect && AlgorithmInTable(algorithm, table);
    if (print) {
      std::printf("  algorithm %-65s %llu%s\n", NameOf(algorithm), (unsigned long long)n,
                  expected ? "" : " (not in this instruction set's table)");
    }
    if (n == 0 && expected) missed.push_back(std::string("algorithm: ") + NameOf(algorithm));
  }
  for (int p = 0; p < static_cast<int>(Path::kCount); ++p) {
    const Path path = static_cast<Path>(p);
    const uint64_t n = PathCount(record, path);
    const bool expected = (pairs || !in(needs_pairs, path)) && (amx || !in(needs_amx, path)) &&
                          (narrowed || !in(needs_narrowing, path)) &&
                          ((pairs && !amx) || path != Path::kFilterTilesRows) &&
                          (rows || path != Path::kDepthwiseRowKernel);
    if (print) {
      std::printf("  path %-70s %llu%s\n", PathName(path), (unsigned long long)n,
                  expected ? "" : " (not in this instruction set's table)");
    }
    if (n == 0 && expected) missed.push_back(std::string("path: ") + PathName(path));
  }
  int64_t kernels = 0;
  ForEachKernel(table, [&](const char* name, int index, int kind, auto fn) {
    if (fn == nullptr) return;
    if (!pairs && std::strcmp(name, "pack_halves") == 0) return;
    if (!pairs && std::strcmp(name, "pack_pairs") == 0) return;  // the filter tiles' alone
    // On AMX, bfloat16 runs Winograd nowhere: its forward and backprop input take the tiles
    // of the direct passes, its filter gradient the filter tiles (16 channels a group, as
    // Winograd needs).
    if (amx && kind == kElemBF16 && (std::strcmp(name, "winograd.input") == 0 ||
                                     std::strcmp(name, "winograd.filter") == 0 ||
                                     std::strcmp(name, "winograd.gradient") == 0)) {
      return;
    }
    // On AMX the filter tiles take every bfloat16 filter gradient of 16 output channels a
    // group or more: the strided pair kernels of column blocks past 16 run nowhere.
    if (amx && std::strcmp(name, "pairs.strided") == 0 && index > 0) return;
    ++kernels;
    if (!KernelCalled(record, fn)) {
      missed.push_back("kernel: " + std::string(name) + "[" + std::to_string(index) + "] kind " +
                       std::to_string(kind));
      ++*kernels_missed;
    }
  });
  *kernels_listed = kernels;
  return missed;
}

// One instruction set's run: its list of geometries (the spaces read its table), what its
// checks found and what its fast kernels reached.
struct IsaRun {
  std::string cap;  // a value of TF_OPS_CPU_ISA; empty: Kernels() as the environment sets it
  const char* isa = nullptr;
  std::vector<Spec> specs, left_out;
  std::vector<int64_t> number;  // case numbers, as the whole list runs
  Stats stats;
  std::unique_ptr<coverage::Record> record = std::make_unique<coverage::Record>();
};

// Makes `run`'s table the fast kernels' and its record theirs to record into.
void Activate(IsaRun& run, Runner& runner) {
  if (!run.cap.empty()) UseKernelsForTesting(run.cap);
  run.isa = FastKernelIsa();
  RecordCoverageInto(run.record.get());
  runner.UseStats(&run.stats, run.isa);
}

int Main(int argc, char** argv) {
  std::string only;
  int64_t shard = 0, shards = 1, sample = 1;
  bool coverage = true, list = false, fill = false, digest = false;
  std::vector<IsaRun> runs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--space" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--isas" && i + 1 < argc) {
      const std::string caps = argv[++i];
      for (size_t at = 0; at <= caps.size();) {
        const size_t end = std::min(caps.find(',', at), caps.size());
        runs.emplace_back().cap = caps.substr(at, end - at);
        if (runs.back().cap.empty()) {
          std::fprintf(stderr, "--isas takes values of TF_OPS_CPU_ISA, separated by commas\n");
          return 2;
        }
        at = end + 1;
      }
    } else if (arg == "--shard" && i + 1 < argc) {
      long long a = 0, b = 1;
      if (std::sscanf(argv[++i], "%lld/%lld", &a, &b) != 2 || b < 1 || a < 0 || a >= b) {
        std::fprintf(stderr, "--shard takes I/N with 0 <= I < N\n");
        return 2;
      }
      shard = a, shards = b;
    } else if (arg == "--sample" && i + 1 < argc) {
      sample = std::atoll(argv[++i]);
      if (sample < 1) {
        std::fprintf(stderr, "--sample takes N >= 1\n");
        return 2;
      }
    } else if (arg == "--fill") {
      fill = true;
    } else if (arg == "--no-coverage") {
      coverage = false;
    } else if (arg == "--no-values") {
      check_values = false;
    } else if (arg == "--plant-planner-bug") {
      test_switches.planted_planner_bug = true;
    } else if (arg == "--plant-unwritten-workspace") {
      test_switches.planted_unwritten_workspace = true;
    } else if (arg == "--digest") {
      digest = true;
    } else if (arg == "--list") {
      list = true;
    } else if (arg == "--plant-fault") {
      plant_fault = true;
    } else {
      std::fprintf(stderr, "usage: sweep_driver [--space NAME] [--isas A,B,...] [--shard I/N] [--sample N [--fill]] [--no-coverage] [--no-values] [--list] [--plant-fault] [--plant-planner-bug] [--plant-unwritten-workspace] [--digest]\n");
      return 2;
    }
  }
  if (runs.empty()) runs.emplace_back();
  test_switches.poison_workspace = true;
  if (!only.empty()) coverage = false;  // one space cannot reach everything
  if (fill && (shards > 1 || !coverage || runs.size() > 1)) {
    std::fprintf(stderr, "--fill fills the coverage of a whole run of one instruction set: not with --shard, --space, --no-coverage or several --isas\n");
    return 2;
  }
  if (list) {
    for (const auto& [name, space] : kSpaces) std::printf("%s\n", name);
    return 0;
  }
  Stats unused;
  Runner runner(&unused);
  for (IsaRun& run : runs) {
    Activate(run, runner);
    for (const auto& [name, space] : kSpaces) {
      // A fixed pseudo-random choice: a plain stride could fall in step with an inner loop of
      // the space's enumeration and never see some of its values. The first geometry of each
      // part is kept, so that parts of a single geometry (those that reach one path) run.
      uint64_t index = 0;
      const char* part = nullptr;
      if (only.empty() || only == name) {
        space([&](Spec s) {
          const bool first = part == nullptr || std::strcmp(part, s.space) != 0;
          part = s.space;
          (first || Mix(index++) % static_cast<uint64_t>(sample) == 0 ? run.specs : run.left_out).push_back(s);
        });
      }
    }
    if (run.specs.empty()) {
      std::fprintf(stderr, "no space named %s\n", only.c_str());
      return 2;
    }
    run.number.assign(run.specs.size(), 0);
    for (size_t i = 0, n = 0; i < run.specs.size(); ++i) {
      ConvGeometry g;
      if (Runner::Geometry(run.specs[i], &g)) run.number[i] = static_cast<int64_t>(++n);
    }
  }
  // Case by case, each on every instruction set in turn: the lists differ only where a space
  // reads the table, and a case that is the same on the next instruction set reuses its float64
  // results.
  size_t longest = 0;
  for (const IsaRun& run : runs) longest = std::max(longest, run.specs.size());
  for (size_t i = shard; i < longest; i += shards) {
    for (IsaRun& run : runs) {
      if (i >= run.specs.size()) continue;
      Activate(run, runner);
      runner.Run(run.specs[i], run.number[i]);
    }
  }
  // A sample's coverage filled: while a path or kernel is unreached, the geometries left out are
  // probed, cheapest first (the fast kernels run once, unchecked), and each that reaches one
  // runs whole, checked like the sample's.
  int64_t filled = 0;
  if (fill) {
    IsaRun& run = runs.front();
    std::vector<std::pair<int64_t, size_t>> order;  // (products of a forward pass, index)
    for (size_t i = 0; i < run.left_out.size(); ++i) {
      ConvGeometry g;
      if (!Runner::Geometry(run.left_out[i], &g)) continue;
      order.emplace_back(g.output_elements() * g.filter_rows * g.filter_cols * g.filter_in_depth, i);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    int64_t kernels = 0, kernels_missed = 0, n = static_cast<int64_t>(run.specs.size());
    for (const auto& [cost, i] : order) {
      const size_t missed = Unreached(*run.record, false, &kernels, &kernels_missed).size();
      if (missed == 0) break;
      const Stats kept = run.stats;
      probe = true;
      runner.Run(run.left_out[i], ++n);
      probe = false;
      run.stats = kept;
      if (Unreached(*run.record, false, &kernels, &kernels_missed).size() < missed) {
        runner.Run(run.left_out[i], n);
        ++filled;
      }
    }
  }
  RecordCoverageInto(nullptr);

  // A block per instruction set, each starting with its "isa" line.
  bool passed = true;
  for (IsaRun& run : runs) {
    Activate(run, runner);
    RecordCoverageInto(nullptr);
    const Stats& stats = run.stats;
    std::printf("isa %s\n", run.isa);
    std::printf("cases %lld runs %lld failures %lld\n", (long long)stats.cases, (long long)stats.runs,
                (long long)stats.failures);
    if (fill) std::printf("filled %lld\n", (long long)filled);
    if (digest) std::printf("digest %016llx\n", (unsigned long long)stats.digest);
    if (!check_values) {
      std::printf("values not checked (--no-values); winograd runs %lld\n", (long long)stats.winograd_runs);
    } else {
      std::printf("worst error/bound float32 %.3g float16 %.3g bfloat16 %.3g\n", stats.worst[0],
                  stats.worst[1], stats.worst[2]);
      std::printf("winograd runs %lld worst error/bound float32 %.3g float16 %.3g bfloat16 %.3g\n",
                  (long long)stats.winograd_runs, stats.worst_winograd[0], stats.worst_winograd[1],
                  stats.worst_winograd[2]);
      std::printf("winograd worst error/(2 (n + 16) u P) float32 %.3g float16 %.3g bfloat16 %.3g\n",
                  stats.winograd_factor[0], stats.winograd_factor[1], stats.winograd_factor[2]);
    }
    int64_t unreached = 0;
    if (coverage) {
      int64_t kernels = 0, kernels_missed = 0;
      const std::vector<std::string> missed = Unreached(*run.record, /*print=*/true, &kernels, &kernels_missed);
      for (const std::string& line : missed) std::printf("UNREACHED %s\n", line.c_str());
      unreached = static_cast<int64_t>(missed.size());
      std::printf("kernels %lld reached of %lld\n", (long long)(kernels - kernels_missed), (long long)kernels);
      std::printf("unreached %lld\n", (long long)unreached);
      if (shards > 1) {
        std::printf("coverage of part %lld of %lld\n", (long long)shard, (long long)shards);
      }
    }
    // A part's unreached paths and kernels are the caller's to unite.
    passed = passed && stats.failures == 0 && (unreached == 0 || shards > 1);
  }
  return passed ? 0 : 1;
}

}  // namespace
}  // namespace cpu
}  // namespace tf_ops

int main(int argc, char** argv) { return tf_ops::cpu::Main(argc, argv); }
