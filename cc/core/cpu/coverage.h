// The tests' hooks in the CPU kernels, all here: which plans' algorithms, fast paths and
// micro-kernels the CPU kernels take, a record for the tests that prove every one of them against
// the direct loops (tests/cc/sweep_driver.cc fails when one is never reached), and the switches
// that plant faults for the sweep to find (TestSwitches). Off unless a test turns them on; while
// off, a record is one relaxed load and a branch, taken once per pass or per micro-kernel call.
//
// TF-free, header-only: the variables are C++17 inline variables, one copy per program.
#ifndef TF_OPS_CC_CORE_CPU_COVERAGE_H_
#define TF_OPS_CC_CORE_CPU_COVERAGE_H_

#include <atomic>
#include <cstdint>

namespace tf_ops {
namespace cpu {

// Every decision of the fast kernels' dispatchers and blockings, by name. A new branch gets
// a name here and a Note() where it is taken; the sweep then has to reach it.
#define TF_OPS_CPU_PATHS(X)                                                                   \
  X(kForwardPointwise, "forward/pointwise: 1x1 stride 1 as one affine run")                  \
  X(kForwardBanded, "forward/banded")                                                         \
  X(kForwardBandedMerged, "forward/banded, filter-row taps merged")                           \
  X(kForwardIndirect, "forward/indirect")                                                     \
  X(kForwardFilterIsPanel, "forward/banded: float filter of one column block is the panel")  \
  X(kForwardFilterInPlace, "forward/float filter read in place, rows K floats apart")         \
  X(kForwardBandedStridedRows, "forward/AMX: strided, rows of one to three tiles, banded")    \
  X(kForwardDepthwise, "forward/depthwise rows")                                              \
  X(kForwardWinograd, "forward/Winograd F(4x4, 3x3)")                                         \
  X(kForwardSpaceToDepth, "forward/strided as stride 1 over a space-to-depth copy")           \
  X(kSpaceToDepthChunks, "space to depth/several chunks of images")                           \
  X(kSpaceToDepthUnreachedZeros, "space to depth/outputs wholly in the padding written as zeros") \
  X(kForwardWinogradPhases, "forward/strided as Winograd over a space-to-depth copy")         \
  X(kInputColumnsMerged, "backprop input/filter columns merged into GEMM columns")           \
  X(kInputPointwise, "backprop input/pointwise")                                              \
  X(kInputBanded, "backprop input/banded")                                                    \
  X(kInputBandedMerged, "backprop input/banded, filter-row taps merged")                      \
  X(kInputIndirect, "backprop input/indirect")                                                \
  X(kInputFilterTransposedInPack, "backprop input/float filter transposed while packed")     \
  X(kInputDepthwise, "backprop input/depthwise rows")                                         \
  X(kInputWinograd, "backprop input/Winograd F(4x4, 3x3)")                                    \
  X(kInputSpaceToDepth, "backprop input/strided as stride 1 into a space-to-depth copy")      \
  X(kInputWinogradPhases, "backprop input/strided as Winograd into a space-to-depth copy")    \
  X(kWinogradColumnBlocks, "winograd/several column blocks")                                  \
  X(kWinogradPaddedRows, "winograd/a block's tiles padded to whole GEMM tiles")               \
  X(kWinogradAllGroups, "winograd/a unit transforms every group's channels")                 \
  X(kWinogradEdgeTiles, "winograd/tiles past the output's last row or column")                \
  X(kWinogradUnreachedZeros, "winograd/pixels wholly in the padding written as exact zeros")   \
  X(kWinogradStreamedFilter, "winograd/transformed filter streamed, fetched ahead")           \
  X(kWinogradColumnHalves, "winograd/a block's column blocks split between two units")        \
  X(kWinogradFused, "winograd/fused: each unit transforms its column block of the filter")    \
  X(kWinogradFusedChunks, "winograd/fused: several chunks of tiles")                          \
  X(kWinogradFusedParts, "winograd/fused: a column block's tiles split between units")        \
  X(kWinogradFusedDepthChunks, "winograd/fused: the source's channels in several chunks")     \
  X(kGemmBf16Pairs, "gemm/bfloat16 pair panels")                                              \
  X(kColumnsMergedBlocks, "columns merged/several column blocks")                             \
  X(kColumnsMergedFullTiles, "columns merged/whole tiles of a row")                           \
  X(kColumnsMergedTail, "columns merged/a row's last partial tile")                           \
  X(kColumnsMergedPairs, "columns merged/bfloat16 pair panels")                               \
  X(kIndirectAffineRun, "indirect/affine run of tiles")                                       \
  X(kIndirectTile, "indirect/tile through the indirection table")                             \
  X(kIndirectEdgesSplit, "indirect/edge pixels in parts of their own, padding taps skipped")  \
  X(kInputBorderedColumns, "backprop input/AMX: strided, dy's columns copied with a zero border") \
  X(kInputBorderedChunks, "backprop input/AMX: dy with bordered columns by chunks of images") \
  X(kIndirectNarrowed, "indirect/16-bit results rounded by the micro-kernel, in place")       \
  X(kIndirectNoTap, "indirect/tile that no tap reaches")                                      \
  X(kIndirectInPlace, "indirect/float results written in place")                              \
  X(kIndirectChunks, "indirect/several reduction chunks")                                     \
  X(kBandedChunks, "banded/several reduction chunks")                                         \
  X(kBandedSplit, "banded/bands narrowed for enough work units")                              \
  X(kBandCopyTooLarge, "banded/band copy past its cap: indirect instead")                     \
  X(kBandedRowRuns, "banded/an affine run of whole tiles per computed row")                   \
  X(kBandedWholeRuns, "banded/each band one affine run over whole copy rows")                 \
  X(kBandedRowRests, "banded/rows' left-over pixels through the indirect kernel")             \
  X(kBandedRowsInPlace, "banded/float rows written in place")                                 \
  X(kBandedWholeRowsOut, "banded/whole runs of one column block written out a row at a time") \
  X(kBandedRowsNarrowed, "banded/16-bit rows rounded by the micro-kernel, in place")          \
  X(kBandedNarrowedBand, "banded/rows of one tile each as one rounded call per band")         \
  X(kBandedMergedStraddling, "banded/bfloat16 pairs straddling merged filter-row taps")       \
  X(kBandedPaddedPixels, "banded/AMX: odd merged reductions over pixels padded by a zero")    \
  X(kDepthwiseRowKernel, "depthwise/row kernels")                                             \
  X(kDepthwiseAffine, "depthwise/affine kernels")                                             \
  X(kDepthwiseGroups, "depthwise/several pixel groups in a row")                              \
  X(kDepthwiseEdges, "depthwise/edge pixels through the indirect kernel")                     \
  X(kDepthwiseScalar, "depthwise/channels past the last vector block")                        \
  X(kDepthwiseNoTap, "depthwise/pixel class that no tap reaches")                             \
  X(kDepthwiseStreamed, "depthwise/float output through non-temporal stores")                  \
  X(kNchwCopies, "NCHW through NHWC copies")                                                  \
  X(kNchwChunks, "NCHW in several chunks of images")                                          \
  X(kFilterGemm, "backprop filter/gemm")                                                      \
  X(kFilterMergedCols, "backprop filter/filter columns merged into GEMM rows")                \
  X(kFilterSplitAccumulators, "backprop filter/channel chunks of bounded accumulators")       \
  X(kFilterSlices, "backprop filter/several row slices")                                      \
  X(kFilterInPlace, "backprop filter/float runs reduced in place")                            \
  X(kFilterInPlaceRows, "backprop filter/in-place runs of several rows in one call")          \
  X(kFilterInPlaceFullBatch, "backprop filter/in-place rows cut at a block's pixels")         \
  X(kFilterPacked, "backprop filter/packed pixels")                                           \
  X(kFilterFullBlock, "backprop filter/a full block of packed pixels")                        \
  X(kFilterPairs, "backprop filter/bfloat16 pairs")                                           \
  X(kFilterWidened, "backprop filter/16-bit operands widened to float once")                  \
  X(kFilterWidenedChunks, "backprop filter/16-bit operands widened by chunks of images")     \
  X(kFilterDepthwise, "backprop filter/depthwise")                                            \
  X(kFilterDepthwiseWholeRows, "backprop filter/depthwise rows whole, every channel block")    \
  X(kFilterDepthwiseTaps, "backprop filter/depthwise neighbouring filter columns at once")     \
  X(kFilterTiles, "backprop filter/tiles over shifted rows")                                 \
  X(kFilterTilesRows, "backprop filter/tiles on vectors of rows (AVX-512 BF16)")              \
  X(kFilterTilesGroups, "backprop filter/tiles, several groups")                              \
  X(kFilterTilesChannelChunks, "backprop filter/tiles, output-channel chunks")                \
  X(kFilterTilesSlices, "backprop filter/tiles, several slices")                              \
  X(kFilterTilesPieces, "backprop filter/tiles, several pieces in a slice")                   \
  X(kFilterTilesMerged, "backprop filter/tiles, filter columns merged into the pixels")       \
  X(kFilterTilesAdded, "backprop filter/tiles added to an earlier chunk's sums")              \
  X(kFilterTilesPhases, "backprop filter/tiles, input phases of a stride")                    \
  X(kFilterWinograd, "backprop filter/Winograd F(4x4, 3x3)")                                  \
  X(kWinogradFilterChunks, "winograd/filter gradient in several chunks of tiles")             \
  X(kWinogradFilterSliced, "winograd/filter gradient by slices of tiles, blocks kept in cache") \
  X(kWinogradFilterFused, "winograd/filter gradient fused: sums per tile of input channels")   \
  X(kWinogradFilterFusedAdded, "winograd/filter gradient fused: later calls add to dw")         \
  X(kFilterWinogradUnreachedTaps, "winograd/filter taps wholly in the padding written as zeros") \
  X(kFilterDepthwiseScalar, "backprop filter/depthwise channels past the last vector block")

enum class Path : int {
#define TF_OPS_PATH_ENUM(id, name) id,
  TF_OPS_CPU_PATHS(TF_OPS_PATH_ENUM)
#undef TF_OPS_PATH_ENUM
      kCount
};

inline const char* PathName(Path p) {
  static const char* const names[] = {
#define TF_OPS_PATH_NAME(id, name) name,
      TF_OPS_CPU_PATHS(TF_OPS_PATH_NAME)
#undef TF_OPS_PATH_NAME
  };
  return names[static_cast<int>(p)];
}

// Every switch only a test turns on, in one place: off in every other program, each read where
// its pass runs (a relaxed load).
struct TestSwitches {
  // The workspace's buffers filled with 0xFF bytes when first handed out (NaN in float, half and
  // bfloat16), so that a pass that reads workspace it did not write gives NaN instead of a value
  // left by an earlier call.
  std::atomic<bool> poison_workspace{false};
  // Planted faults the kernel sweep must report: the planner counts one column block too few
  // where a GEMM pass's columns are not whole blocks (an off-by-one in its blocking); the filter
  // gradient leaves its accumulators uncleared (a read of unwritten workspace).
  std::atomic<bool> planted_planner_bug{false};
  std::atomic<bool> planted_unwritten_workspace{false};
};
inline TestSwitches test_switches;

namespace coverage {

// Algorithms (plan.h's Algorithm) a record has room for.
inline constexpr int kMaxAlgorithms = 32;

// One record of the plans' algorithms run, paths taken and micro-kernels called.
struct Record {
  std::atomic<uint64_t> algorithm_counts[kMaxAlgorithms] = {};
  std::atomic<uint64_t> path_counts[static_cast<int>(Path::kCount)] = {};
  // The micro-kernels called, by address: an open-addressed set, lock-free (0 = empty slot).
  static constexpr int kKernelSlots = 4096;
  std::atomic<uintptr_t> kernels[kKernelSlots] = {};
};

// Where the fast kernels record; none while null.
inline std::atomic<Record*> current{nullptr};

inline int Slot(uintptr_t key) { return static_cast<int>((key >> 4) * 2654435761u % Record::kKernelSlots); }

inline void InsertKernel(Record* r, uintptr_t key) {
  for (int i = Slot(key), probes = 0; probes < Record::kKernelSlots; i = (i + 1) % Record::kKernelSlots, ++probes) {
    uintptr_t seen = r->kernels[i].load(std::memory_order_relaxed);
    if (seen == key) return;
    if (seen == 0 && r->kernels[i].compare_exchange_strong(seen, key)) return;
    if (seen == key) return;
  }
}

}  // namespace coverage

// Makes `record` the one the fast kernels record into, or turns recording off (nullptr).
// Switched between calls of the fast kernels, never during one.
inline void RecordCoverageInto(coverage::Record* record) { coverage::current.store(record); }

// Records that path `p` was taken.
inline void Note(Path p) {
  if (coverage::Record* r = coverage::current.load(std::memory_order_relaxed)) {
    r->path_counts[static_cast<int>(p)].fetch_add(1, std::memory_order_relaxed);
  }
}

// Records that a plan of algorithm `a` (plan.h's Algorithm, as an int) ran.
inline void NoteAlgorithm(int a) {
  coverage::Record* r = coverage::current.load(std::memory_order_relaxed);
  if (r != nullptr && a >= 0 && a < coverage::kMaxAlgorithms) {
    r->algorithm_counts[a].fetch_add(1, std::memory_order_relaxed);
  }
}

inline uint64_t AlgorithmCount(const coverage::Record& r, int a) { return r.algorithm_counts[a].load(); }

// Records that micro-kernel `fn` (a function pointer) was called.
template <typename Fn>
inline void NoteKernel(Fn fn) {
  coverage::Record* r = coverage::current.load(std::memory_order_relaxed);
  if (r != nullptr && fn != nullptr) coverage::InsertKernel(r, reinterpret_cast<uintptr_t>(fn));
}

inline uint64_t PathCount(const coverage::Record& r, Path p) {
  return r.path_counts[static_cast<int>(p)].load();
}

template <typename Fn>
inline bool KernelCalled(const coverage::Record& r, Fn fn) {
  const uintptr_t key = reinterpret_cast<uintptr_t>(fn);
  for (int i = coverage::Slot(key), probes = 0; probes < coverage::Record::kKernelSlots;
       i = (i + 1) % coverage::Record::kKernelSlots, ++probes) {
    const uintptr_t seen = r.kernels[i].load();
    if (seen == key) return true;
    if (seen == 0) return false;
  }
  return false;
}

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_COVERAGE_H_
