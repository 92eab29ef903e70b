// The CUDA kernels' dispatch as plain host code: the tilings, the thresholds the dispatch reads,
// and PlanLaunch, the pure function from one GEMM problem's sizes to the launch that runs it
// (which kernel, how many tiles, how the reduction is split into slices). conv_gpu.cu launches
// what PlanLaunch returns; the emulated sweep (tests/cuda_emu/gpu_sweep.cc) generates its
// geometries from the same constants and plans, and requires every case of the plan (every
// path below) to be reached.
//
// TF-free and free of CUDA headers.
#ifndef TF_OPS_CC_CORE_GPU_CONV_GPU_PLAN_H_
#define TF_OPS_CC_CORE_GPU_CONV_GPU_PLAN_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cc/core/conv_geometry.h"

namespace tf_ops {
namespace gpu {

// The GEMM on CUDA cores (float, double, int32): a block of kThreads threads computes a
// kTileM x kTileN tile of C, taking the reduction kTileK steps at a time through shared memory;
// thread (tx, ty) of a 16 x 16 arrangement holds rows ty + 16 i and columns tx + 16 j.
struct Tiling {
  static constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kThreads = 256;
  static constexpr int kRowsPerThread = kTileM / 16, kColsPerThread = kTileN / 16;
};

// The GEMM on tensor cores (half, bfloat16): the same 64 x 64 tiles, four warps of 32 x 32, the
// reduction kTileK at a time, kWords 32-bit words a row of a shared tile (kTileK / 2 pairs and
// 4 words of padding).
struct MmaTiling {
  static constexpr int kTileM = Tiling::kTileM, kTileN = Tiling::kTileN, kTileK = 32, kThreads = 128;
  static constexpr int kWords = kTileK / 2 + 4;
};

// A problem's reduction is split into slices of at least kSliceMin values while its launch has
// fewer than kTargetThreads threads (a deep layer on small images has few rows and a long
// reduction: without slices its few tiles would leave most of a GPU idle).
constexpr int64_t kSliceMin = 256;
constexpr int64_t kTargetThreads = 512 * Tiling::kThreads;
constexpr int kReduceThreads = 256;

// Groups with at most this many GEMM columns would fill at most an eighth of a tile's: those
// problems run in the direct kernel (one thread an output), kDirectThreads threads a block.
constexpr int64_t kDirectMaxCols = Tiling::kTileN / 8;
constexpr int kDirectThreads = 256;

// Which kernel runs: chosen from the geometry (kAuto), or one forced, for the tests that prove
// both over every geometry.
enum class Kernel { kAuto, kGemm, kDirect };

// The kernel a launch runs.
enum class Kind { kGemm, kMma, kDirect };

// Whether a problem with `cols` columns a group runs in the direct kernel.
inline bool Direct(Kernel kernel, int64_t cols) {
  return kernel == Kernel::kDirect || (kernel == Kernel::kAuto && cols <= kDirectMaxCols);
}

// One GEMM problem: `groups` products of M x R by R x N.
struct ProblemSizes {
  int64_t M = 0, N = 0, R = 0, groups = 1;
};

// The launch of a problem: its kernel and grid, and its reduction's split into `slices` slices
// of `slice_len` values (the last one possibly shorter), z = slice * groups + group.
struct LaunchPlan {
  Kind kind = Kind::kGemm;
  int64_t m_tiles = 0, n_tiles = 0, blocks = 0, block_threads = 0;
  int64_t slices = 1, slice_len = 0;
  int64_t tile_k = 0;  // the GEMM's reduction step (0 in the direct kernel)
  int64_t threads() const { return blocks * block_threads; }
  // Reduction steps of the first (longest) slice; 0 where the reduction is empty.
  int64_t steps() const { return tile_k > 0 ? CeilDiv(slice_len, tile_k) : 0; }
  // The workspace the slices' partial sums take, in accumulator elements (0 with one slice).
  int64_t partial_elements(const ProblemSizes& p) const { return slices > 1 ? slices * p.groups * p.M * p.N : 0; }
};

// The grid over `zs` problems of M x N outputs: a thread per output in the direct kernel, a
// block per tile in the GEMMs.
inline LaunchPlan ShapeOf(Kind kind, int64_t M, int64_t N, int64_t zs) {
  LaunchPlan plan;
  plan.kind = kind;
  plan.m_tiles = CeilDiv(M, Tiling::kTileM), plan.n_tiles = CeilDiv(N, Tiling::kTileN);
  if (kind == Kind::kDirect) {
    plan.block_threads = kDirectThreads;
    plan.blocks = CeilDiv(M * zs * N, kDirectThreads);
  } else {
    plan.block_threads = kind == Kind::kMma ? MmaTiling::kThreads : Tiling::kThreads;
    plan.blocks = plan.m_tiles * plan.n_tiles * zs;
    plan.tile_k = kind == Kind::kMma ? MmaTiling::kTileK : Tiling::kTileK;
  }
  return plan;
}

// The launch of problem `p` in kernel `kind`: as many slices as take the launch to
// kTargetThreads threads, at most one per kSliceMin values of the reduction and at most
// `max_slices` (1 where no workspace is had, or where the direct kernel sums a problem in one
// pass), none empty. M, N and groups are positive.
inline LaunchPlan PlanLaunch(const ProblemSizes& p, Kind kind, int64_t max_slices) {
  const int64_t one_slice = ShapeOf(kind, p.M, p.N, p.groups).threads();
  int64_t slices = std::max<int64_t>(1, std::min(CeilDiv(p.R, kSliceMin), kTargetThreads / one_slice));
  slices = std::min(slices, std::max<int64_t>(1, max_slices));
  const int64_t slice_len = CeilDiv(p.R, slices);
  if (p.R > 0) slices = CeilDiv(p.R, slice_len);
  LaunchPlan plan = ShapeOf(kind, p.M, p.N, slices * p.groups);
  plan.slices = slices, plan.slice_len = slice_len;
  return plan;
}

// The launch of problem `p` where a workspace for its slices is had: the direct kernel where
// `kernel` asks for it or the groups' columns are few (Direct), else the GEMM on tensor cores
// (`tensor_cores`: half and bfloat16) or on CUDA cores; its reduction in slices, which the
// direct kernel takes only where `direct_slices` (the filter gradient's).
inline LaunchPlan PlanProblem(const ProblemSizes& p, Kernel kernel, bool tensor_cores, bool direct_slices) {
  const bool direct = Direct(kernel, p.N);
  const Kind kind = direct ? Kind::kDirect : tensor_cores ? Kind::kMma : Kind::kGemm;
  return PlanLaunch(p, kind, direct && !direct_slices ? 1 : kTargetThreads);
}

// ---------------------------------------------------------------------------------------
// The GEMM problems of each direction over a geometry with no empty tensor (conv_gpu.cu runs
// exactly these, in this order):
//   forward:          C[m = (n, oh, ow)][col = k]   = sum_{r = (kh, kw, ci)} x[..] w[..]
//   backprop input:   per stride-residue class (ch, cw) of input pixels,
//                     C[m = (n, i, j)][col = ci]     = sum_{r = (tap a, tap b, k)} dy[..] w[..]
//                     over the taps (kh, kw) that reach the class, so no inserted zero is read
//   backprop filter:  C[m = (kh, kw, ci)][col = k]  = sum_{r = (n, oh, ow)} x[..] dy[..]
// one group at a time.

inline ProblemSizes ForwardSizes(const ConvGeometry& g) {
  return {g.batch * g.out_rows * g.out_cols, g.out_depth_per_group(),
          g.filter_rows * g.filter_cols * g.filter_in_depth, g.groups};
}

inline ProblemSizes FilterSizes(const ConvGeometry& g) {
  return {g.filter_rows * g.filter_cols * g.filter_in_depth, g.out_depth_per_group(),
          g.batch * g.out_rows * g.out_cols, g.groups};
}

// Backprop input's residue class of input rows `row` and columns `col` (`rows` x `cols`
// members an image), its taps, and its problem.
struct InputClass {
  int64_t row = 0, col = 0, rows = 0, cols = 0;
  ClassTaps th, tw;
  ProblemSizes sizes;
};

inline std::vector<InputClass> InputClasses(const ConvGeometry& g) {
  std::vector<InputClass> classes;
  for (int64_t ch = 0; ch < std::min(g.stride_rows, g.in_rows); ++ch) {
    for (int64_t cw = 0; cw < std::min(g.stride_cols, g.in_cols); ++cw) {
      InputClass c;
      c.row = ch, c.col = cw;
      c.rows = CeilDiv(g.in_rows - ch, g.stride_rows), c.cols = CeilDiv(g.in_cols - cw, g.stride_cols);
      c.th = TapsOfClass(ch, g.filter_rows, g.stride_rows, g.dilation_rows, g.pad_top);
      c.tw = TapsOfClass(cw, g.filter_cols, g.stride_cols, g.dilation_cols, g.pad_left);
      c.sizes = {g.batch * c.rows * c.cols, g.filter_in_depth, c.th.count * c.tw.count * g.out_depth_per_group(),
                 g.groups};
      classes.push_back(c);
    }
  }
  return classes;
}

// ---------------------------------------------------------------------------------------
// Coverage: what the launches of the sweep reached, by direction, kernel and case of the plan.
// Off unless a test turns it on.

constexpr int kKinds = 3;

#define TF_OPS_GPU_PATHS(X)                                                                  \
  X(kMTiles1, "one tile in M")                                                               \
  X(kMTiles2, "two tiles in M")                                                              \
  X(kMTiles3, "three or more tiles in M")                                                    \
  X(kNTiles1, "one tile in N")                                                               \
  X(kNTiles2, "two tiles in N")                                                              \
  X(kNTiles3, "three or more tiles in N")                                                    \
  X(kTilesBoth, "several tiles in both M and N")                                             \
  X(kMPartial, "M not a whole number of tiles")                                              \
  X(kMWhole, "M a whole number of tiles")                                                    \
  X(kNPartial, "N not a whole number of tiles")                                              \
  X(kNWhole, "N a whole number of tiles")                                                    \
  X(kSteps1, "one reduction step a slice")                                                   \
  X(kSteps2, "two reduction steps a slice")                                                  \
  X(kSteps3, "three or more reduction steps a slice")                                        \
  X(kStepPartial, "a slice not a whole number of steps")                                     \
  X(kStepWhole, "slices of whole steps")                                                     \
  X(kNoReduction, "an empty reduction: sums of nothing written")                             \
  X(kOneColumn, "one column a group")                                                        \
  X(kFewColumns, "2 to kDirectMaxCols columns a group")                                      \
  X(kManyColumns, "more than kDirectMaxCols columns a group")                                \
  X(kSlices1, "one slice")                                                                   \
  X(kSlices2, "two slices")                                                                  \
  X(kSlices3, "three or more slices")                                                        \
  X(kSliceShort, "a last slice shorter than the others")                                     \
  X(kNoWorkspace, "slices wanted, no workspace: one slice")                                  \
  X(kGroups, "several groups")                                                               \
  X(kGroupsSlices, "several groups, each in several slices")                                 \
  X(kNchw, "NCHW")                                                                           \
  X(kNhwc, "NHWC")

// An enum class NAME of the entries of LIST (X(entry, text) ... ), its kCount, and
// TEXT(NAME) naming each.
#define TF_OPS_GPU_ENUM_ENTRY(name, text) name,
#define TF_OPS_GPU_ENUM_TEXT(name, text) text,
#define TF_OPS_GPU_NAMED_ENUM(NAME, TEXT, LIST)                                               \
  enum class NAME : int { LIST(TF_OPS_GPU_ENUM_ENTRY) kCount };                               \
  inline const char* TEXT(NAME value) {                                                      \
    static const char* const texts[] = {LIST(TF_OPS_GPU_ENUM_TEXT)};                          \
    return texts[static_cast<int>(value)];                                                   \
  }

TF_OPS_GPU_NAMED_ENUM(Path, PathName, TF_OPS_GPU_PATHS)
constexpr int kPaths = static_cast<int>(Path::kCount);

inline const char* KindName(Kind k) {
  static const char* const names[] = {"GEMM on CUDA cores", "GEMM on tensor cores", "direct kernel"};
  return names[static_cast<int>(k)];
}

// Whether a case of the plan exists for a direction and kernel: the direct kernel has no tiles
// or steps and splits only the filter gradient's reduction; only backprop input has empty
// reductions (a stride-residue class no filter tap reaches). (The dispatch sends problems of
// few columns to the direct kernel; the sweep forces the GEMMs onto them too.)
inline bool PathApplies(Direction d, Kind k, Path path) {
  const int p = static_cast<int>(path);
  const bool tiles = p >= static_cast<int>(Path::kMTiles1) && p <= static_cast<int>(Path::kStepWhole);
  const bool slices = p >= static_cast<int>(Path::kSlices2) && p <= static_cast<int>(Path::kNoWorkspace);
  if (k == Kind::kDirect && tiles) return false;
  if (k == Kind::kDirect && d != Direction::kBackpropFilter && (slices || path == Path::kGroupsSlices)) return false;
  if (path == Path::kNoReduction) return d == Direction::kBackpropInput;
  return true;
}

// What a direction does before (or besides) its launches.
#define TF_OPS_GPU_OP_PATHS(X)                                                               \
  X(kZeroFill, "an empty reduction over the whole op: the output zero-filled")               \
  X(kNoOutput, "an empty output: nothing launched")                                          \
  X(kClassesUneven, "stride-residue classes of different sizes")                             \
  X(kSharedFactor, "stride and dilation sharing a factor, a class reached by several taps")  \
  X(kFewerClasses, "a stride larger than the image: fewer classes than the stride")

TF_OPS_GPU_NAMED_ENUM(OpPath, OpPathName, TF_OPS_GPU_OP_PATHS)
constexpr int kOpPaths = static_cast<int>(OpPath::kCount);

inline bool OpPathApplies(Direction d, OpPath path) {
  return d == Direction::kBackpropInput || path == OpPath::kZeroFill || path == OpPath::kNoOutput;
}

// The op-level cases a direction reaches over geometry g.
template <typename Fn>
void ForEachOpPath(Direction d, const ConvGeometry& g, const Fn& fn) {
  const EmptyCall empty = EmptyRule(d, g);
  if (empty == EmptyCall::kNothing) return fn(OpPath::kNoOutput);
  if (empty == EmptyCall::kZeros) return fn(OpPath::kZeroFill);
  if (d != Direction::kBackpropInput) return;
  const std::vector<InputClass> classes = InputClasses(g);
  for (const InputClass& c : classes) {
    if (c.sizes.M != classes[0].sizes.M) {
      fn(OpPath::kClassesUneven);
      break;
    }
  }
  const bool shared = std::gcd(g.stride_rows, g.dilation_rows) > 1 || std::gcd(g.stride_cols, g.dilation_cols) > 1;
  for (const InputClass& c : classes) {
    if (shared && c.th.count * c.tw.count > 1) {
      fn(OpPath::kSharedFactor);
      break;
    }
  }
  if (g.stride_rows > g.in_rows || g.stride_cols > g.in_cols) fn(OpPath::kFewerClasses);
}

inline int PathIndex(Direction d, Kind k, Path path) {
  return (static_cast<int>(d) * kKinds + static_cast<int>(k)) * kPaths + static_cast<int>(path);
}

inline int OpPathIndex(Direction d, OpPath path) {
  return kDirections * kKinds * kPaths + static_cast<int>(d) * kOpPaths + static_cast<int>(path);
}
constexpr int kPathIndices = kDirections * kKinds * kPaths + kDirections * kOpPaths;

struct Coverage {
  std::atomic<bool> on{false};
  std::atomic<int64_t> counts[kPathIndices] = {};
};
inline Coverage coverage;

// The cases of the plan that launch `plan` of problem `p` (its `nchw` layout) reaches;
// `no_workspace`: slices were wanted and no workspace was had.
template <typename Fn>
void ForEachPath(const ProblemSizes& p, const LaunchPlan& plan, bool nchw, bool no_workspace, const Fn& fn) {
  if (plan.kind != Kind::kDirect) {
    fn(plan.m_tiles == 1 ? Path::kMTiles1 : plan.m_tiles == 2 ? Path::kMTiles2 : Path::kMTiles3);
    fn(plan.n_tiles == 1 ? Path::kNTiles1 : plan.n_tiles == 2 ? Path::kNTiles2 : Path::kNTiles3);
    if (plan.m_tiles > 1 && plan.n_tiles > 1) fn(Path::kTilesBoth);
    fn(p.M % Tiling::kTileM != 0 ? Path::kMPartial : Path::kMWhole);
    fn(p.N % Tiling::kTileN != 0 ? Path::kNPartial : Path::kNWhole);
    if (p.R > 0) {
      const int64_t steps = plan.steps();
      fn(steps == 1 ? Path::kSteps1 : steps == 2 ? Path::kSteps2 : Path::kSteps3);
      const bool whole = plan.slice_len % plan.tile_k == 0 && p.R % plan.tile_k == 0;
      fn(whole ? Path::kStepWhole : Path::kStepPartial);
    }
  }
  if (p.R == 0) fn(Path::kNoReduction);
  fn(p.N == 1 ? Path::kOneColumn : p.N <= kDirectMaxCols ? Path::kFewColumns : Path::kManyColumns);
  fn(plan.slices == 1 ? Path::kSlices1 : plan.slices == 2 ? Path::kSlices2 : Path::kSlices3);
  if (plan.slices > 1 && p.R % plan.slice_len != 0) fn(Path::kSliceShort);
  if (no_workspace) fn(Path::kNoWorkspace);
  if (p.groups > 1) fn(Path::kGroups);
  if (p.groups > 1 && plan.slices > 1) fn(Path::kGroupsSlices);
  fn(nchw ? Path::kNchw : Path::kNhwc);
}

inline void NoteOp(Direction d, const ConvGeometry& g) {
  if (!coverage.on.load(std::memory_order_relaxed)) return;
  ForEachOpPath(d, g, [&](OpPath path) {
    coverage.counts[OpPathIndex(d, path)].fetch_add(1, std::memory_order_relaxed);
  });
}

inline void NoteLaunch(Direction d, const ProblemSizes& p, const LaunchPlan& plan, bool nchw, bool no_workspace) {
  if (!coverage.on.load(std::memory_order_relaxed)) return;
  ForEachPath(p, plan, nchw, no_workspace, [&](Path path) {
    coverage.counts[PathIndex(d, plan.kind, path)].fetch_add(1, std::memory_order_relaxed);
  });
}

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_CONV_GPU_PLAN_H_
