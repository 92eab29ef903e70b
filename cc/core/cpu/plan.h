// The CPU planner: from a call's geometry, layout, element type, the instruction set's kernel
// table and exact mode to a Plan that names the algorithm, its blocking for every chunk of images
// and the algorithms it tried first. Pure: it reads no data and runs nothing, so the plan of a
// call can be asked for without running it (ExplainCpuCall, tf_ops.explain) and the kernel sweep
// can check that every algorithm it enumerates is reached. The executor (conv_fast.h) takes a
// plan and plans nothing. Internal to cc/core/cpu.
#ifndef TF_OPS_CC_CORE_CPU_PLAN_H_
#define TF_OPS_CC_CORE_CPU_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/vocabulary.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/conv_winograd.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_banded.h"
#include "cc/core/cpu/fast_columns_merged.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/fast_depthwise.h"
#include "cc/core/cpu/fast_filter.h"
#include "cc/core/cpu/fast_filter_tiles.h"
#include "cc/core/cpu/fast_indirect.h"

namespace tf_ops {
namespace cpu {

// Algorithm, Direction and Element, and their names: cc/core/vocabulary.h.
static_assert(static_cast<int>(Algorithm::kCount) <= coverage::kMaxAlgorithms, "room in coverage records");

// The planner's thresholds, where the tests that cross them read them too.
// Floats of packed filter one reduction chunk may span: within the L2 cache of server cores.
// Shorter chunks re-walk every tile's source pixels once per chunk.
inline constexpr int64_t kPanelFloats = 192 * 1024;

// A forward pass over float activations reads the filter in place, unpacked, where its output
// channels fill whole column blocks and (indirect passes) it has at most kMaxInPlaceTaps taps
// and computes at most kMaxInPlacePixels pixels: packing costs a pass over the filter, while in
// place the taps' rows, FI * K floats apart, share the L2 cache's sets, which costs more the
// more taps and pixels read them.
inline constexpr int64_t kMaxInPlaceTaps = 9;
inline constexpr int64_t kMaxInPlacePixels = 4096;

// A strided pass runs as Winograd over a space-to-depth copy (kWinogradSpaceToDepth) where
// Winograd's products are at most this share of the strided pass's: the copies and the zero
// taps that pad the filter to whole strides cost the rest.
inline constexpr double kPhasesMaxProducts = 0.6;

// NCHW passes run on NHWC copies of this many elements at most (and at least one image), and
// space-to-depth passes on copies of as many: bounded workspace, still whole images.
inline constexpr int64_t kNchwChunkElements = int64_t{1} << 21;

// Half and bfloat16 filter gradients widened to float run on float copies of chunks of images
// of about this many bytes (x and dy together, at least one image): bounded copies, long
// enough that a chunk is not a pass per image.
inline constexpr int64_t kWidenChunkBytes = int64_t{4} << 20;

// Most elements of a chunk of backprop input's copy of dy with bordered columns.
inline constexpr int64_t kMaxBorderedCopy = int64_t{1} << 20;

// The blocking of a GEMM pass of forward or backprop input (pointwise, banded, indirect) over
// one geometry: the micro-kernel, the filter panel, the reduction chunks, the bands.
struct GemmPlan {
  Algorithm algorithm = Algorithm::kIndirect;
  bool forward = true;
  int gemm = 0;        // the float table's tile (Kernels().gemm[gemm]), picked by column width
  bool pairs = false;  // bfloat16 on the pair kernels (AVX-512 BF16 or AMX tiles)
  bool amx = false;    // ... on AMX tiles
  int64_t nb = 0, mr = 0;
  int64_t src_channels = 0, dst_channels = 0;  // per pixel of the pass's source, destination
  int64_t src_group = 0, dst_group = 0;        // reduction and GEMM columns per group
  int64_t blocks = 0;                          // column blocks of a group
  int64_t rows = 0, row_floats = 0;            // panel rows per tap, floats per panel row
  int64_t depth = 0;      // reduction rows per tap (merged: per slot, a padded pixel included)
  int64_t unit_taps = 1;  // taps one packing unit packs (merged: a filter row)
  int64_t chunk = 0;      // reduction rows per chunk
  bool reversed = false, merge = false, pad_pixels = false;
  bool strided_rows = false, whole_runs = false;
  bool filter_in_place = false, transpose_in_pack = false;
  int64_t ldb = 0;           // floats from one panel row to the next
  int64_t panel_floats = 0;  // the packed panel (0 when the filter is read in place)
  fast::DimMap dh, dw;
  fast::BandPlan band;  // banded passes
  bool band_copy_too_large = false;  // banded but for its copy: indirect instead
  // kIndirectBordered: dy's columns with this zero border, left and right, by chunks of images.
  std::pair<int64_t, int64_t> border{0, 0};
  int64_t bordered_images = 0;
  // Indirect, pointwise and bordered passes: the parts and blocks of tiles of the first chunk
  // of images (bordered: of bordered_images).
  fast::IndirectLayout indirect;
  fast::IndirectLayout bordered_last;  // bordered: of the last chunk's fewer images, if any
  int64_t units = 0;  // work units of the pass
  int64_t workspace_bytes = 0;
};

// An algorithm the planner tried before the plan's, and the rule that refused it.
struct Refusal {
  Algorithm algorithm;
  Rule rule;
};

// The plan of one call of one direction.
struct Plan {
  Direction direction = Direction::kForward;
  Algorithm algorithm = Algorithm::kDirect;
  Element element = Element::kFloat;
  Layout layout = Layout::kNHWC;
  const KernelTable* table = nullptr;  // the kernel table planned for, whose tiles the plan names
  const char* isa = "";
  bool winograd = false;  // sums of transformed values (accuracy: docs/accuracy.md)
  // NCHW through NHWC copies of this many images at a time (0: NHWC, no copies).
  int64_t nchw_images = 0;
  // kSpaceToDepth and kWinogradSpaceToDepth: the stride-1 geometry over the copy, and images
  // per copy.
  ConvGeometry stride1;
  int64_t copy_images = 0;
  // Forward and backprop input: the pass over the first chunk of images (the whole batch in
  // NHWC): its GEMM plan where it is one (Algorithm of the pass in gemm.algorithm).
  Algorithm pass = Algorithm::kDirect;
  GemmPlan gemm;
  WinogradPlan winograd_pass;  // pass kWinograd (over stride1 for kWinogradSpaceToDepth)
  int64_t pass_batch = 0;      // the batch of the pass gemm or winograd_pass plans
  // The same pass for every other batch a chunk of the call runs on (the last, smaller chunk of
  // NCHW or space-to-depth copies), so that the executors plan nothing (GemmOfBatch,
  // WinogradOfBatch).
  struct BatchPass {
    int64_t batch = 0;
    GemmPlan gemm;
    WinogradPlan winograd;
  };
  std::vector<BatchPass> other_batches;
  fast::ColumnsMergedPlan columns_merged;  // kColumnsMerged
  fast::DepthwiseRowsPlan depthwise_rows;  // kDepthwiseRows
  // Backprop filter.
  int filter_gemm = 0;  // the float table's tile (Kernels().gemm[filter_gemm]) of the GEMM pass
  fast::FilterPlan filter;
  fast::TilesPlan tiles;
  fast::DepthwiseFilterPlan depthwise_filter;
  WinogradFilterPlan winograd_filter;
  bool widen = false;         // 16-bit operands widened to float copies
  int64_t chunk_images = 0;   // images per pass (NCHW copies, widened copies)
  int64_t slices = 1;         // accumulator slices added in order at the end
  bool sums_in_output = false;  // float with one slice: sums accumulate in dw itself
  int64_t units = 0;            // work units of the main pass
  int64_t workspace_bytes = 0;  // workspace the executors hold at most at once
  std::vector<Refusal> refused;  // the algorithms tried before this one, in order
};

// Whether the planner can choose `algorithm` with kernel table `table`: space-to-depth GEMM
// passes and bordered columns are AMX tiles' (KernelTable::amx_tiles), the filter tiles need the
// bfloat16 pair kernels; every other algorithm, every table.
bool AlgorithmInTable(Algorithm algorithm, const KernelTable& table);

// The plan's GEMM or Winograd pass for a chunk of `batch` images: one PlanConv made for every
// chunk the executor runs (std::logic_error for another batch: a planner's bug).
const GemmPlan& GemmOfBatch(const Plan& plan, int64_t batch);
const WinogradPlan& WinogradOfBatch(const Plan& plan, int64_t batch);

// The plan of the direct loops.
Plan DirectPlan(Direction direction, Layout layout, Element element, const KernelTable& table);

// The plan for one call on kernel table `table` (RunPlan runs it only with the process's,
// Kernels()), in exact mode `exact`. It reads nothing but its arguments (and the machine's thread
// count, which sizes Winograd's blocks of tiles: StreamedUnits).
Plan PlanConv(Direction direction, const ConvGeometry& g, Layout layout, Element element,
              const KernelTable& table, bool exact);

// The GEMM pass of forward or backprop input over g, NHWC (g's batch: the images of one pass).
GemmPlan PlanGemm(const KernelTable& table, const ConvGeometry& g, bool forward, int kind);

// The rows and columns of a forward or backprop-input pass over g: what each computed index
// reads (forward: x from y's indices; backprop input: dy from dx's, by stride residue class).
void PassDims(const ConvGeometry& g, bool forward, fast::DimMap* dh, fast::DimMap* dw);

// The plan as one line of space-separated key=value fields (algorithm, pass, direction, dtype,
// layout, isa, accuracy, workspace_bytes, work_units, blocking, refused=algorithm:rule;...).
std::string DescribePlan(const Plan& plan);

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_PLAN_H_
