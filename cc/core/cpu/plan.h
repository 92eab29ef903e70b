// The CPU planner: from a call's geometry, layout, element type, the instruction set's kernel
// table and exact mode to a Plan that names the algorithm and its blocking. Pure: it reads no
// data and runs nothing, so the plan of a call can be asked for without running it
// (ExplainCpuPlan, tf_ops.explain) and the kernel sweep can check that every algorithm it
// enumerates is reached. The executors (conv_fast.cc) take a plan and decide nothing of what
// it holds. Internal to cc/core/cpu.
#ifndef TF_OPS_CC_CORE_CPU_PLAN_H_
#define TF_OPS_CC_CORE_CPU_PLAN_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/conv_winograd.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_banded.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/fast_depthwise.h"
#include "cc/core/cpu/fast_filter.h"
#include "cc/core/cpu/fast_filter_tiles.h"
#include "cc/core/cpu/fast_indirect.h"

namespace tf_ops {
namespace cpu {

// Every algorithm a plan can name: (enumerator, stable name, what it does).
#define TF_OPS_CPU_ALGORITHMS(X)                                                                  \
  X(kDirect, "direct", "the direct loops, one output element at a time (the oracle)")             \
  X(kWinograd, "winograd", "Winograd F(4x4, 3x3)")                                                \
  X(kWinogradSpaceToDepth, "winograd_space_to_depth", "strided, as Winograd over a space-to-depth copy") \
  X(kSpaceToDepth, "space_to_depth", "strided, as a stride-1 pass over a space-to-depth copy")     \
  X(kColumnsMerged, "columns_merged", "backprop input, filter columns merged into GEMM columns")   \
  X(kDepthwiseRows, "depthwise_rows", "depthwise (multiplier 1), a row of pixels per unit")        \
  X(kPointwise, "pointwise", "1x1 at stride 1 without padding: one GEMM over every pixel")         \
  X(kBanded, "banded", "GEMM over bands of rows copied per thread")                                \
  X(kBandedMerged, "banded_merged", "banded, the taps of a filter row merged into one reduction")  \
  X(kIndirect, "indirect", "implicit GEMM through an indirection table")                          \
  X(kIndirectBordered, "indirect_bordered", "indirect, over a copy of dy with bordered columns")   \
  X(kFilterGemm, "filter_gemm", "filter gradient, a GEMM per tap over (batch, rows, columns)")    \
  X(kFilterTiles, "filter_tiles", "filter gradient, bfloat16 tiles over shifted rows")             \
  X(kFilterDepthwise, "filter_depthwise", "filter gradient, depthwise vector products")            \
  X(kFilterWinograd, "filter_winograd", "filter gradient, Winograd F(4x4, 3x3)")

enum class Algorithm : int {
#define TF_OPS_ALGORITHM_ENUM(id, name, what) id,
  TF_OPS_CPU_ALGORITHMS(TF_OPS_ALGORITHM_ENUM)
#undef TF_OPS_ALGORITHM_ENUM
      kCount
};
static_assert(static_cast<int>(Algorithm::kCount) <= coverage::kMaxAlgorithms, "room in coverage records");

const char* AlgorithmName(Algorithm a);

// The directions of the sum (conv_cpu.h).
enum class ConvDirection : int { kForward, kBackpropInput, kBackpropFilter };

// Element types the kernels take, in the order the explain entry point numbers them.
enum class Element : int { kHalf, kBFloat16, kFloat, kDouble, kInt32 };

template <typename T>
constexpr Element ElementOf() {
  if constexpr (std::is_same_v<T, float>) {
    return Element::kFloat;
  } else if constexpr (std::is_same_v<T, Eigen::half>) {
    return Element::kHalf;
  } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    return Element::kBFloat16;
  } else if constexpr (std::is_same_v<T, double>) {
    return Element::kDouble;
  } else {
    return Element::kInt32;
  }
}

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
  int64_t units = 0;  // work units of the pass
  int64_t workspace_bytes = 0;
};

// The plan of one call of one direction.
struct Plan {
  ConvDirection direction = ConvDirection::kForward;
  Algorithm algorithm = Algorithm::kDirect;
  Element element = Element::kFloat;
  Layout layout = Layout::kNHWC;
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
};

// The plan of the direct loops.
Plan DirectPlan(ConvDirection direction, Layout layout, Element element);

// A test switch of the kernel sweep: while on, the planner counts one column block too few
// where a GEMM pass's columns are not whole blocks (an off-by-one in its blocking), which the
// sweep must report.
inline std::atomic<bool> planted_planner_bug{false};

// The plan for one call, with this process's kernel table, in exact mode `exact`.
Plan PlanConv(ConvDirection direction, const ConvGeometry& g, Layout layout, Element element,
              bool exact);

// The GEMM pass of forward or backprop input over g, NHWC (g's batch: the images of one pass).
GemmPlan PlanGemm(const ConvGeometry& g, bool forward, int kind);

// The rows and columns of a forward or backprop-input pass over g: what each computed index
// reads (forward: x from y's indices; backprop input: dy from dx's, by stride residue class).
void PassDims(const ConvGeometry& g, bool forward, fast::DimMap* dh, fast::DimMap* dw);

// The plan a call of ConvForward, ConvBackpropInput or ConvBackpropFilter (conv_cpu.h) runs now:
// PlanConv in this process's exact mode, or the direct loops where TF_OPS_CPU_KERNELS says so.
Plan PlanCall(ConvDirection direction, const ConvGeometry& g, Layout layout, Element element);

// What RunPlan did: ran the plan; nothing, the plan being the direct loops' (or the element
// type having no fast kernels); or nothing, its workspace not to be had.
enum class RunResult : int { kRan, kDirect, kNoWorkspace };

// Runs `plan` (conv_fast.cc): forward reads a = x and b = w, backprop input a = dy and b = w,
// backprop filter a = x and b = dy. Its workspace, ArenaBytes(plan.workspace_bytes), is asked
// of `workspace` (empty: the heap) once, before anything runs. Writes nothing where it returns
// kDirect or kNoWorkspace. (An exception from a pass, out of memory for a thread's scratch,
// leaves the output partly written.)
template <typename T>
RunResult RunPlan(const Plan& plan, const ConvGeometry& g, const T* a, const T* b, T* out,
                  const ParallelFor& parallel_for, const WorkspaceFn& workspace);

// The plan as one line of space-separated key=value fields (algorithm, pass, direction, dtype,
// layout, isa, accuracy, workspace_bytes, work_units, blocking).
std::string DescribePlan(const Plan& plan);

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_PLAN_H_
