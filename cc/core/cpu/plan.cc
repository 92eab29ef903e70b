#include "cc/core/cpu/plan.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_winograd.h"
#include "cc/core/cpu/fast_columns_merged.h"
#include "cc/core/cpu/fast_space_to_depth.h"

namespace tf_ops {
namespace cpu {

using namespace fast;  // fast_common.h

namespace {

// Images per NHWC copy of an NCHW pass whose images have `elements` elements.
int64_t NchwChunk(int64_t batch, int64_t elements) {
  return std::max<int64_t>(1, std::min(batch, kNchwChunkElements / std::max<int64_t>(1, elements)));
}

// Whether bfloat16 GEMMs run on AMX tiles.
bool AmxTiles(const KernelTable& table) { return table.amx_tiles; }

// Calls fn(T{}) with T the element type of `kind` (float, half or bfloat16).
template <typename Fn>
auto WithKind(int kind, const Fn& fn) {
  if (kind == kElemF16) return fn(Eigen::half());
  if (kind == kElemBF16) return fn(Eigen::bfloat16());
  return fn(float());
}

// Whether a strided forward or backprop-input pass runs as Winograd F(4x4, 3x3) over a
// space-to-depth copy: its filter spans three strides each way (5x5 and 6x6 at stride 2, 7x7 to
// 9x9 at stride 3), padded with zero taps to whole strides, and the stride-1 pass over the copy,
// 3x3 over stride-rows x stride-cols times the input channels, is one Winograd takes, with at
// most kPhasesMaxProducts of the strided pass's products. Winograd's are 36 x sr x sc per 4x4
// tile of its destination and channel pair, the destination being the output forward and, for
// backprop input, the copy of dx. bfloat16 on pairs keeps its direct passes, which run at twice
// float's rate.
template <typename T>
bool WinogradPhasesApply(const KernelTable& table, const ConvGeometry& g, bool forward) {
  if ((g.stride_rows == 1 && g.stride_cols == 1) || g.dilation_rows != 1 || g.dilation_cols != 1 ||
      g.groups != 1 || CeilDiv(g.filter_rows, g.stride_rows) != 3 ||
      CeilDiv(g.filter_cols, g.stride_cols) != 3 ||
      (KindOf<T>() == kElemBF16 && table.gemm_bf16_pairs != nullptr)) {
    return false;
  }
  const ConvGeometry d = SpaceToDepthGeometry(g);
  const int64_t rows = forward ? d.out_rows : d.in_rows, cols = forward ? d.out_cols : d.in_cols;
  const double winograd = 36.0 * g.stride_rows * g.stride_cols * CeilDiv(rows, 4) * CeilDiv(cols, 4);
  const double strided = 1.0 * g.filter_rows * g.filter_cols * g.out_rows * g.out_cols;
  return winograd <= kPhasesMaxProducts * strided && WinogradApplies<T>(table, d, forward);
}

// The GEMM pass's kind among pointwise, banded (merged or not) and indirect (bordered or not),
// and what that needs: the rules in the order they are tried.
//  1. A 1x1 filter at stride 1 without padding reads each computed pixel's own source pixel:
//     one affine run over every pixel (pointwise).
//  2. Banded, forward or at stride 1, where the indirect pass would spend about as long setting
//     up its pixels as computing them: short tiles (reduction x columns <= kBandedTile); on AMX
//     tiles, stride-1 passes with whole tiles of 32 reduction rows a tap (each band one affine
//     run, whole_runs), and strided forward passes of filters wider than a column whose rows
//     hold one to three tiles (strided_rows), whose tiles would otherwise straddle rows.
//     Merged (the taps of a filter row one reduction) with one group, no column dilation and a
//     panel of one reduction chunk; on AMX tiles an odd merged reduction of a few channels
//     gets a zero channel per pixel (pad_pixels), whole pairs in one short tile.
//     A band copy past kMaxBandCopy elements runs indirect instead.
//  3. Indirect; for strided backprop input on AMX tiles whose column classes are rows of whole
//     tiles, over a copy of dy with a zero border (bordered), so that each class's rows are
//     affine runs of whole tiles.
void PlanGemmKind(const ConvGeometry& g, GemmPlan* p) {
  const bool forward = p->forward;
  const bool stride1 = g.stride_rows == 1 && g.stride_cols == 1;
  const bool pointwise = g.filter_rows == 1 && g.filter_cols == 1 && stride1 && g.pad_top == 0 &&
                         g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
  const bool amx_whole = p->amx && p->src_group >= 32;
  p->whole_runs = amx_whole && stride1;
  p->strided_rows = amx_whole && forward && !stride1 && g.filter_cols > 1 && g.out_cols >= p->mr &&
                    g.out_cols <= 3 * p->mr;
  const int64_t taps = g.filter_rows * g.filter_cols;
  bool banded = !pointwise && (p->src_group * p->nb <= kBandedTile || p->whole_runs || p->strided_rows) &&
                (forward || stride1);
  const bool mergeable = g.groups == 1 && g.dilation_cols == 1 && taps * p->rows * p->row_floats <= kPanelFloats;
  p->pad_pixels = g.filter_cols > 1 && mergeable && p->amx && p->src_group % 2 == 1 &&
                  g.filter_cols * (p->src_group + 1) < 32;
  if (banded) {
    p->band = PlanBands(g.batch, p->dh, p->dw, g.groups * p->blocks, static_cast<int>(p->mr), p->whole_runs);
    p->band_copy_too_large = !BandCopyFits(p->band, p->src_channels + (p->pad_pixels ? 1 : 0));
    banded = !p->band_copy_too_large;
  }
  p->reversed = banded && !forward;
  p->merge = banded && mergeable;
  p->depth = p->merge && p->pad_pixels ? p->src_group + 1 : p->src_group;
  p->unit_taps = p->merge ? g.filter_cols : 1;
  if (banded) {
    p->algorithm = p->merge ? Algorithm::kBandedMerged : Algorithm::kBanded;
  } else if (pointwise) {
    p->algorithm = Algorithm::kPointwise;
  } else {
    p->algorithm = Algorithm::kIndirect;
    if (p->amx && !forward && p->dw.stride > 1) {
      const std::pair<int64_t, int64_t> border = TransposedBorder(p->dw);
      bool whole = border.first + border.second > 0;
      for (int64_t c = 0; c < p->dw.classes() && whole; ++c) whole = p->dw.count(c) % p->mr == 0;
      if (whole) {
        p->algorithm = Algorithm::kIndirectBordered;
        p->border = border;
        const int64_t image = g.out_rows * (g.out_cols + border.first + border.second) * p->src_channels;
        p->bordered_images = std::clamp<int64_t>(kMaxBorderedCopy / image, 1, g.batch);
      }
    }
  }
}

// The filter's panel: read in place (forward floats whose groups' output channels fill whole
// column blocks: the filter w[t][ci][k] holds every block's panel; a banded pass's kernels read
// rows of nb floats, so there only a filter of one group and one column block), else packed;
// backprop input floats are transposed into the panel while packed.
void PlanPanel(const ConvGeometry& g, int kind, GemmPlan* p) {
  const int64_t taps = g.filter_rows * g.filter_cols;
  const int64_t K = g.out_depth, Kg = g.out_depth_per_group();
  const bool banded = p->algorithm == Algorithm::kBanded || p->algorithm == Algorithm::kBandedMerged;
  p->filter_in_place = p->forward && kind == kElemF32 && Kg % p->nb == 0 &&
                       (K == p->nb || (!banded && taps <= kMaxInPlaceTaps &&
                                       g.batch * g.out_rows * g.out_cols <= kMaxInPlacePixels));
  p->transpose_in_pack = !p->forward && kind == kElemF32;
  p->ldb = p->filter_in_place ? K : p->row_floats;
  p->panel_floats = p->filter_in_place ? 0 : g.groups * p->blocks * taps * p->rows * p->row_floats;
  // Reduction chunks: the panel of a chunk within kPanelFloats (at least 16 rows); chunks of
  // pairs start at even rows; on AMX tiles, equal chunks of whole tiles of 32 rows, so that no
  // chunk's last rows run on the vector kernels.
  int64_t chunk = std::max<int64_t>(
      16, std::min<int64_t>(p->src_group, kPanelFloats / std::max<int64_t>(1, taps * p->row_floats)));
  if (p->pairs) chunk += chunk % 2;
  if (p->amx && chunk < p->src_group) {
    chunk = CeilDiv(CeilDiv(p->src_group, CeilDiv(p->src_group, chunk)), 32) * 32;
  }
  p->chunk = chunk;
}

// Work units and workspace of a GEMM pass (the band copies and indirection tables are
// per-thread scratch, not counted).
void PlanGemmCosts(const ConvGeometry& g, int64_t element_size, GemmPlan* p) {
  const int64_t column_blocks = g.groups * p->blocks;
  const bool directed = !p->forward && !p->transpose_in_pack;  // transposed filter copy
  p->workspace_bytes = p->panel_floats * 4 + (directed ? g.filter_elements() * element_size : 0);
  switch (p->algorithm) {
    case Algorithm::kBanded:
    case Algorithm::kBandedMerged:
      p->units = g.batch * p->band.bands * column_blocks;
      return;
    case Algorithm::kPointwise: {
      const int64_t pixels = g.batch * g.in_rows * g.in_cols;
      p->indirect = PlanIndirect(1, ForwardDim(1, 1, 1, 0, 1, 1), ForwardDim(pixels, pixels, 1, 0, 1, 1), p->mr);
      p->units = p->indirect.blocks * column_blocks;
      return;
    }
    case Algorithm::kIndirectBordered: {
      const DimMap bordered = BorderedTransposed(p->dw, p->border);
      p->indirect = PlanIndirect(p->bordered_images, p->dh, bordered, p->mr);
      if (g.batch % p->bordered_images != 0) {
        p->bordered_last = PlanIndirect(g.batch % p->bordered_images, p->dh, bordered, p->mr);
      }
      p->units = p->indirect.blocks * column_blocks;
      const int64_t cols = g.out_cols + p->border.first + p->border.second;
      p->workspace_bytes += p->bordered_images * g.out_rows * cols * p->src_channels * element_size;
      return;
    }
    default:
      p->indirect = PlanIndirect(g.batch, p->dh, p->dw, p->mr);
      p->units = p->indirect.blocks * column_blocks;
  }
}

}  // namespace

void PassDims(const ConvGeometry& g, bool forward, DimMap* dh, DimMap* dw) {
  if (forward) {
    *dh = ForwardDim(g.out_rows, g.in_rows, g.stride_rows, g.pad_top, g.dilation_rows, g.filter_rows);
    *dw = ForwardDim(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, g.filter_cols);
  } else {
    *dh = TransposedDim(g.in_rows, g.out_rows, g.stride_rows, g.pad_top, g.dilation_rows, g.filter_rows);
    *dw = TransposedDim(g.in_cols, g.out_cols, g.stride_cols, g.pad_left, g.dilation_cols, g.filter_cols);
  }
}

GemmPlan PlanGemm(const KernelTable& table, const ConvGeometry& g, bool forward, int kind) {
  GemmPlan p;
  p.forward = forward;
  PassDims(g, forward, &p.dh, &p.dw);
  p.src_channels = forward ? g.in_depth : g.out_depth;
  p.dst_channels = forward ? g.out_depth : g.in_depth;
  // Per group, the GEMM's columns are the destination channels of the group, its reduction the
  // source channels of the group for every tap.
  p.dst_group = forward ? g.out_depth_per_group() : g.filter_in_depth;
  p.src_group = forward ? g.filter_in_depth : g.out_depth_per_group();
  const GemmKernel& gk = PickGemm(table, p.dst_group, kind);
  p.gemm = static_cast<int>(&gk - table.gemm);
  const GemmKernel& kernels = GemmFor(table, gk, kind);
  p.pairs = &kernels != &gk;
  p.amx = p.pairs && AmxTiles(table);
  p.nb = gk.nb, p.mr = kernels.mr;
  p.blocks = CeilDiv(p.dst_group, p.nb);
  if (test_switches.planted_planner_bug.load(std::memory_order_relaxed) && p.dst_group % p.nb != 0) --p.blocks;
  // bfloat16 pairs along the reduction: a panel of bfloat16 pairs, half a float per value.
  p.rows = p.pairs ? CeilDiv(p.src_group, 2) * 2 : p.src_group;
  p.row_floats = p.pairs ? p.nb / 2 : p.nb;
  PlanGemmKind(g, &p);
  PlanPanel(g, kind, &p);
  PlanGemmCosts(g, kind == kElemF32 ? 4 : 2, &p);
  return p;
}

namespace {

void Refuse(Algorithm algorithm, Rule rule, Plan* plan) { plan->refused.push_back({algorithm, rule}); }

// The GEMM kinds PlanGemmKind tried before the pass's, in its order: banded, pointwise, and on AMX
// tiles bordered before plain indirect.
void RefusedGemmKinds(const GemmPlan& p, Plan* plan) {
  const Algorithm a = p.algorithm;
  if (a == Algorithm::kBanded || a == Algorithm::kBandedMerged) return;
  Refuse(Algorithm::kBanded, p.band_copy_too_large ? Rule::kBandCopy : Rule::kShape, plan);
  if (a == Algorithm::kPointwise) return;
  Refuse(Algorithm::kPointwise, Rule::kShape, plan);
  if (a == Algorithm::kIndirect && !p.forward) {
    Refuse(Algorithm::kIndirectBordered, p.amx ? Rule::kShape : Rule::kNoAmx, plan);
  }
}

// The NHWC pass of forward or backprop input over g (a chunk's geometry), the rules in order:
// Winograd over the copy (decided for the whole call), bfloat16 on AMX tiles through a
// space-to-depth copy, backprop input's merged filter columns (one group, at most 8 input
// channels, a filter wider than a column), depthwise rows (multiplier 1), the GEMM passes.
void PlanPass(const ConvGeometry& g, bool forward, int kind, Plan* plan) {
  const KernelTable& table = *plan->table;
  const int64_t bytes = ElementBytes(plan->element);
  if (plan->algorithm == Algorithm::kWinograd) {
    plan->pass = Algorithm::kWinograd;
    plan->winograd_pass = PlanWinograd(table, g, forward, bytes);
    plan->units = plan->winograd_pass.units;
    plan->workspace_bytes += plan->winograd_pass.workspace_bytes;
    return;
  }
  const bool s2d_amx = kind == kElemBF16 && AmxTiles(table) && SpaceToDepthApplies(g, forward);
  if (plan->algorithm != Algorithm::kWinogradSpaceToDepth && !s2d_amx) {
    Refuse(Algorithm::kSpaceToDepth,
           kind != kElemBF16 ? Rule::kElementType : !AmxTiles(table) ? Rule::kNoAmx : Rule::kShape, plan);
  }
  if (plan->algorithm == Algorithm::kWinogradSpaceToDepth || s2d_amx) {
    if (s2d_amx) plan->algorithm = Algorithm::kSpaceToDepth;
    ConvGeometry d = SpaceToDepthGeometry(g);
    plan->copy_images = NchwChunk(g.batch, d.in_rows * d.in_cols * d.in_depth);
    d.batch = plan->copy_images;
    plan->stride1 = d;
    plan->workspace_bytes += (d.filter_elements() + d.input_elements()) * bytes;
    if (s2d_amx) {
      plan->gemm = PlanGemm(table, d, forward, kind);
      plan->pass = plan->gemm.algorithm;
      plan->units = plan->gemm.units;
      plan->workspace_bytes += plan->gemm.workspace_bytes;
    } else {
      plan->pass = Algorithm::kWinograd;
      plan->winograd_pass = PlanWinograd(table, d, forward, bytes);
      plan->units = plan->winograd_pass.units;
      plan->workspace_bytes += plan->winograd_pass.workspace_bytes;
    }
    return;
  }
  if (!forward) {
    if (g.groups == 1 && g.filter_in_depth <= 8 && g.filter_cols > 1) {
      plan->algorithm = plan->pass = Algorithm::kColumnsMerged;
      plan->units = g.batch * g.in_rows;
      plan->columns_merged = PlanColumnsMerged(table, g, kind);
      plan->workspace_bytes += plan->columns_merged.panel_floats * 4;
      return;
    }
    Refuse(Algorithm::kColumnsMerged, Rule::kShape, plan);
  }
  if (IsDepthwiseOne(g)) {
    plan->algorithm = plan->pass = Algorithm::kDepthwiseRows;
    DimMap dh, dw;
    PassDims(g, forward, &dh, &dw);
    plan->depthwise_rows = PlanDepthwiseRows(table, g, dh, dw, kind, bytes);
    plan->units = g.batch * (forward ? g.out_rows : g.in_rows);
    plan->workspace_bytes += DepthwiseRowsPanelFloats(g) * 4;
    return;
  }
  Refuse(Algorithm::kDepthwiseRows, Rule::kShape, plan);
  plan->gemm = PlanGemm(table, g, forward, kind);
  plan->algorithm = plan->pass = plan->gemm.algorithm;
  plan->units = plan->gemm.units;
  plan->workspace_bytes += plan->gemm.workspace_bytes;
  RefusedGemmKinds(plan->gemm, plan);
}

// The batches a pass over `batch` images runs on in chunks of at most `chunk`: the chunk's and,
// where it does not divide the batch, the rest's.
std::vector<int64_t> ChunkBatches(int64_t batch, int64_t chunk) {
  const int64_t c = std::min(chunk, batch);
  std::vector<int64_t> out{c};
  if (batch % c != 0) out.push_back(batch % c);
  return out;
}

// The GEMM or Winograd pass of every batch the executor runs besides plan->pass_batch's: the
// chunks of NCHW copies (nchw_images) of the call's batch and, within each, the chunks of
// space-to-depth copies (copy_images).
void PlanOtherBatches(const ConvGeometry& g, bool forward, int kind, Plan* plan) {
  const bool winograd = plan->pass == Algorithm::kWinograd;
  const bool gemm = plan->pass == Algorithm::kPointwise || plan->pass == Algorithm::kBanded ||
                    plan->pass == Algorithm::kBandedMerged || plan->pass == Algorithm::kIndirect ||
                    plan->pass == Algorithm::kIndirectBordered;
  if (!winograd && !gemm) return;
  const bool s2d = plan->algorithm == Algorithm::kWinogradSpaceToDepth || plan->algorithm == Algorithm::kSpaceToDepth;
  ConvGeometry pass = s2d ? plan->stride1 : g;  // the stride-1 geometry has its chunk's batch
  if (!s2d && plan->layout == Layout::kNCHW) pass.batch = plan->nchw_images;
  plan->pass_batch = pass.batch;
  std::vector<int64_t> batches;
  for (const int64_t b : plan->layout == Layout::kNCHW ? ChunkBatches(g.batch, plan->nchw_images)
                                                       : std::vector<int64_t>{g.batch}) {
    for (const int64_t c : s2d ? ChunkBatches(b, plan->copy_images) : std::vector<int64_t>{b}) {
      if (c != plan->pass_batch && std::find(batches.begin(), batches.end(), c) == batches.end()) batches.push_back(c);
    }
  }
  for (const int64_t b : batches) {
    pass.batch = b;
    Plan::BatchPass other;
    other.batch = b;
    if (winograd) {
      other.winograd = PlanWinograd(*plan->table, pass, forward, ElementBytes(plan->element));
    } else {
      other.gemm = PlanGemm(*plan->table, pass, forward, kind);
    }
    plan->other_batches.push_back(std::move(other));
  }
}

// Forward or backprop input: Winograd (3x3 at stride 1, WinogradApplies), Winograd over a
// space-to-depth copy (WinogradPhasesApply), neither in exact mode; then the pass over each
// chunk of images (PlanPass).
void PlanForwardOrInput(const ConvGeometry& g, bool forward, bool exact, Plan* plan) {
  const KernelTable& table = *plan->table;
  const int kind = static_cast<int>(plan->element);
  const bool winograd = !exact && WithKind(kind, [&](auto t) { return WinogradApplies<decltype(t)>(table, g, forward); });
  if (!winograd) Refuse(Algorithm::kWinograd, exact ? Rule::kExactMode : Rule::kShape, plan);
  const bool phases =
      !exact && !winograd && WithKind(kind, [&](auto t) { return WinogradPhasesApply<decltype(t)>(table, g, forward); });
  if (!winograd && !phases) Refuse(Algorithm::kWinogradSpaceToDepth, exact ? Rule::kExactMode : Rule::kShape, plan);
  plan->algorithm = winograd ? Algorithm::kWinograd : phases ? Algorithm::kWinogradSpaceToDepth : Algorithm::kDirect;
  plan->winograd = winograd || phases;
  ConvGeometry gc = g;
  if (plan->layout == Layout::kNCHW) {
    const int64_t x_image = g.in_rows * g.in_cols * g.in_depth, y_image = g.out_rows * g.out_cols * g.out_depth;
    plan->nchw_images = gc.batch = NchwChunk(g.batch, std::max(x_image, y_image));
    plan->workspace_bytes += gc.batch * (x_image + y_image) * ElementBytes(plan->element);
  }
  PlanPass(gc, forward, kind, plan);
  PlanOtherBatches(g, forward, kind, plan);
}

// Backprop filter, the rules in order: depthwise (multiplier 1); bfloat16 tiles
// (FilterTilesApply); Winograd (WinogradFilterApplies, not in exact mode); the GEMM per tap,
// whose 16-bit operands are widened to float copies where its filter columns merge (they would
// otherwise be packed once per filter row, a few values at a time).
void PlanFilterDirection(const ConvGeometry& g, bool exact, Plan* plan) {
  const KernelTable& table = *plan->table;
  const int kind = static_cast<int>(plan->element);
  const int64_t bytes = ElementBytes(plan->element);
  const int64_t in_hw = g.in_rows * g.in_cols, out_hw = g.out_rows * g.out_cols;
  const int64_t image_elements = in_hw * g.in_depth + out_hw * g.out_depth;
  const int64_t chunk = NchwChunk(g.batch, std::max(in_hw * g.in_depth, out_hw * g.out_depth));
  ConvGeometry gc = g;
  if (plan->layout == Layout::kNCHW) gc.batch = chunk;
  const bool depthwise = IsDepthwiseOne(g);
  const bool tiles = kind == kElemBF16 && !depthwise && FilterTilesApply(table, g);
  const bool winograd =
      !exact && !depthwise && !tiles && WithKind(kind, [&](auto t) { return WinogradFilterApplies<decltype(t)>(table, g); });
  if (!depthwise) {
    Refuse(Algorithm::kFilterDepthwise, Rule::kShape, plan);
    if (!tiles) Refuse(Algorithm::kFilterTiles, kind != kElemBF16 ? Rule::kElementType : Rule::kShape, plan);
    if (!tiles && !winograd) Refuse(Algorithm::kFilterWinograd, exact ? Rule::kExactMode : Rule::kShape, plan);
  }
  const GemmKernel& gk = PickGemm(table, g.out_depth_per_group(), kind);
  plan->filter_gemm = static_cast<int>(&gk - table.gemm);
  plan->winograd = winograd;
  if (depthwise) {
    plan->algorithm = Algorithm::kFilterDepthwise;
    plan->depthwise_filter = PlanDepthwiseFilter(table, gc, bytes);
    plan->slices = plan->depthwise_filter.slices, plan->units = plan->depthwise_filter.units;
  } else if (tiles) {
    plan->algorithm = Algorithm::kFilterTiles;
    plan->tiles = PlanFilterTiles(table, gc);
    plan->slices = plan->tiles.slices, plan->units = plan->tiles.units;
  } else if (winograd) {
    plan->algorithm = Algorithm::kFilterWinograd;
  } else {
    plan->algorithm = Algorithm::kFilterGemm;
    plan->filter = PlanFilter(gc, gk, bytes);
    plan->widen = kind != kElemF32 && plan->filter.merged_cols > 1;
    if (plan->widen) {
      gc.batch = std::min(chunk, std::max<int64_t>(1, kWidenChunkBytes / (4 * image_elements)));
      plan->filter = PlanFilter(gc, gk, 4);
    } else {
      plan->filter = PlanFilter(gc, GemmFor(table, gk, kind), bytes);
    }
    plan->slices = plan->filter.slices, plan->units = plan->filter.units;
  }
  plan->pass = plan->algorithm;
  plan->chunk_images = gc.batch;
  plan->sums_in_output = kind == kElemF32 && plan->slices == 1;
  const int64_t chunk_elements = gc.batch * image_elements;
  plan->workspace_bytes = (plan->sums_in_output ? 0 : plan->slices * g.filter_elements() * 4) +
                          (plan->layout == Layout::kNCHW ? chunk_elements * bytes : 0) +
                          (plan->widen ? chunk_elements * 4 : 0);
  if (winograd) {
    plan->winograd_filter = PlanWinogradFilter(table, gc);
    plan->units = plan->winograd_filter.units;
    plan->workspace_bytes += plan->winograd_filter.workspace_bytes;
  }
}

}  // namespace

namespace {

// The plan's pass of `batch` images, by the pass plan the plan keeps for it.
template <typename Pass, typename Of>
const Pass& OfBatch(const Plan& plan, int64_t batch, const Pass& first, const Of& of) {
  if (batch == plan.pass_batch) return first;
  for (const Plan::BatchPass& b : plan.other_batches) {
    if (b.batch == batch) return of(b);
  }
  throw std::logic_error("tf_ops: no pass planned for a chunk of " + std::to_string(batch) + " images");
}

}  // namespace

const GemmPlan& GemmOfBatch(const Plan& plan, int64_t batch) {
  return OfBatch(plan, batch, plan.gemm, [](const Plan::BatchPass& b) -> const GemmPlan& { return b.gemm; });
}

const WinogradPlan& WinogradOfBatch(const Plan& plan, int64_t batch) {
  return OfBatch(plan, batch, plan.winograd_pass,
                 [](const Plan::BatchPass& b) -> const WinogradPlan& { return b.winograd; });
}

bool AlgorithmInTable(Algorithm algorithm, const KernelTable& table) {
  switch (algorithm) {
    case Algorithm::kSpaceToDepth:
    case Algorithm::kIndirectBordered:
      return table.amx_tiles;
    case Algorithm::kFilterTiles:
      return table.gemm_bf16_pairs != nullptr;
    default:
      return true;
  }
}

Plan DirectPlan(Direction direction, Layout layout, Element element, const KernelTable& table) {
  Plan plan;
  plan.direction = direction, plan.layout = layout, plan.element = element;
  plan.table = &table;
  plan.isa = table.isa;
  return plan;
}

Plan PlanConv(Direction direction, const ConvGeometry& g, Layout layout, Element element, const KernelTable& table,
              bool exact) {
  Plan plan = DirectPlan(direction, layout, element, table);
  // The direct loops: element types without fast kernels, and empty operands.
  if (element == Element::kDouble || element == Element::kInt32 || EmptyRule(direction, g) != EmptyCall::kCompute) {
    return plan;
  }
  if (direction == Direction::kBackpropFilter) {
    PlanFilterDirection(g, exact, &plan);
  } else {
    PlanForwardOrInput(g, direction == Direction::kForward, exact, &plan);
  }
  return plan;
}

namespace {

void AppendBlocking(const Plan& plan, std::string* out) {
  char buf[512];
  buf[0] = '\0';
  const GemmPlan& p = plan.gemm;
  switch (plan.pass) {
    case Algorithm::kPointwise:
    case Algorithm::kBanded:
    case Algorithm::kBandedMerged:
    case Algorithm::kIndirect:
    case Algorithm::kIndirectBordered:
      std::snprintf(buf, sizeof(buf), "tile:%lldx%lld,blocks_per_group:%lld,chunk:%lld,panel:%s%s%s",
                    (long long)p.mr, (long long)p.nb, (long long)p.blocks, (long long)p.chunk, p.filter_in_place ? "in_place" : p.pairs ? "bf16_pairs" : "packed",
                    p.amx ? ",amx:yes" : "", p.pad_pixels && p.merge ? ",padded_pixels:yes" : "");
      break;
    case Algorithm::kWinograd: {
      const WinogradPlan& w = plan.winograd_pass;
      const GemmKernel& gk = plan.table->gemm[w.gemm];
      if (w.fused) {
        std::snprintf(buf, sizeof(buf), "tile:%dx%d,fused:yes,tiles_per_chunk:%lld,chunks:%lld,parts:%lld,depth_chunk:%lld",
                      gk.mr, gk.nb, (long long)w.fused_blocking.tb, (long long)w.fused_blocking.chunks,
                      (long long)w.fused_blocking.parts, (long long)w.fused_blocking.kc);
      } else {
        std::snprintf(buf, sizeof(buf), "tile:%dx%d,tiles_per_block:%lld,blocks:%lld,parts:%lld%s%s", gk.mr, gk.nb,
                      (long long)w.tiles.tb, (long long)w.tiles.tile_blocks, (long long)w.tiles.parts,
                      w.tiles.streamed ? ",streamed:yes" : "", w.tiles.all ? ",all_groups:yes" : "");
      }
      break;
    }
    case Algorithm::kFilterWinograd: {
      const WinogradFilterPlan& w = plan.winograd_filter;
      const GemmKernel& gk = plan.table->gemm[w.gemm];
      std::snprintf(buf, sizeof(buf), "tile:%dx%d,", gk.strided[0].mr, gk.nb);
      const size_t n = std::strlen(buf);
      if (w.fused) {
        std::snprintf(buf + n, sizeof(buf) - n, "fused:yes");
      } else if (w.slices > 1) {
        std::snprintf(buf + n, sizeof(buf) - n, "slices:%lld,slice_block:%lld", (long long)w.slices,
                      (long long)w.slice_block);
      } else {
        std::snprintf(buf + n, sizeof(buf) - n, "chunk_tiles:%lld", (long long)w.chunk_tiles);
      }
      break;
    }
    case Algorithm::kFilterGemm:
      std::snprintf(buf, sizeof(buf), "tile:%lld,merged_cols:%lld,ci_chunk:%lld,k_chunk:%lld,slices:%lld%s",
                    (long long)plan.filter.mr, (long long)plan.filter.merged_cols, (long long)plan.filter.ci_chunk,
                    (long long)plan.filter.k_chunk, (long long)plan.slices, plan.widen ? ",widened:yes" : "");
      break;
    case Algorithm::kFilterTiles:
      std::snprintf(buf, sizeof(buf), "k_chunk:%lld,slices:%lld,piece:%lld,on:%s%s", (long long)plan.tiles.k_chunk,
                    (long long)plan.slices, (long long)plan.tiles.piece, plan.tiles.amx ? "amx_tiles" : "vector_rows",
                    plan.tiles.merged ? ",merged_cols:yes" : "");
      break;
    case Algorithm::kFilterDepthwise:
      std::snprintf(buf, sizeof(buf), "slices:%lld,units:%s", (long long)plan.slices,
                    plan.depthwise_filter.whole_rows ? "whole_rows" : "channel_blocks");
      break;
    default:
      break;
  }
  std::string blocking = buf;
  char images[96];
  if (plan.nchw_images > 0) {
    std::snprintf(images, sizeof(images), "%snchw_images:%lld", blocking.empty() ? "" : ",", (long long)plan.nchw_images);
    blocking += images;
  }
  if (plan.copy_images > 0) {
    std::snprintf(images, sizeof(images), "%scopy_images:%lld", blocking.empty() ? "" : ",", (long long)plan.copy_images);
    blocking += images;
  }
  if (!blocking.empty()) *out += " blocking=" + blocking;
}

}  // namespace

std::string DescribePlan(const Plan& plan) {
  const int64_t units = plan.algorithm == Algorithm::kDirect ? 0 : std::max<int64_t>(1, plan.units);
  std::string out = PlanLineFields(NameOf(plan.algorithm), plan.pass != plan.algorithm ? NameOf(plan.pass) : nullptr,
                                   plan.direction, plan.element, plan.layout, plan.isa,
                                   plan.winograd ? "winograd" : "direct", plan.workspace_bytes, units);
  AppendBlocking(plan, &out);
  for (size_t i = 0; i < plan.refused.size(); ++i) {
    AppendRefusal(NameOf(plan.refused[i].algorithm), NameOf(plan.refused[i].rule), "", i == 0, &out);
  }
  return out;
}


}  // namespace cpu
}  // namespace tf_ops
