#include "cc/core/cpu/conv_fast.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_winograd.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_banded.h"
#include "cc/core/cpu/fast_columns_merged.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/fast_depthwise.h"
#include "cc/core/cpu/fast_filter.h"
#include "cc/core/cpu/fast_filter_tiles.h"
#include "cc/core/cpu/fast_indirect.h"
#include "cc/core/cpu/fast_space_to_depth.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {

namespace {

// Whether the processor has AMX-TILE and AMX-BF16 and the OS lets this process use the tiles
// (on Linux, once granted on request: ARCH_REQ_XCOMP_PERM for the tile data).
bool AmxUsable() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;  // AMX-BF16, AMX-TILE
  uint32_t xcr0_low, xcr0_high;
  asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr uint32_t kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  if ((xcr0_low & kTileState) != kTileState) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// The table for the best instruction set the processor supports, at most `cap` (a value of
// TF_OPS_CPU_ISA; empty: no cap).
KernelTable BuildKernels(const std::string& cap) {
  const bool allow_amx = cap.empty() || cap == "amx_bf16";
  const bool allow_bf16 = allow_amx || cap == "avx512_bf16";
  const bool allow_avx512 = allow_bf16 || cap == "avx512";
  const bool allow_avx2 = allow_avx512 || cap == "avx2";
  KernelTable t = *GenericKernels();
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (allow_avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    t = *Avx512Kernels();
    if (allow_bf16 && __builtin_cpu_supports("avx512bf16")) {
      t.isa = "avx512_bf16";
      t.gemm_bf16_pairs = Avx512Bf16GemmKernels();
      if (allow_amx && AmxUsable()) {
        t.isa = "amx_bf16";
        t.gemm_bf16_pairs = AmxBf16GemmKernels();
        // bfloat16 forward and backprop input skip Winograd here (WinogradApplies), the only
        // user of its bfloat16 filter transform: the direct AMX sums are about twice as fast
        // as Winograd's float GEMMs on VGG's 3x3 layer of 64 channels.
        t.winograd.filter[kElemBF16] = nullptr;
      }
      // bfloat16 GEMMs run on the pair kernels, rounding included.
      for (GemmKernel& k : t.gemm) {
        k.indirect[kElemBF16] = nullptr;
        k.affine[kElemBF16] = nullptr;
        k.affine_narrow[kElemBF16] = nullptr;
      }
    }
  } else if (allow_avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c")) {
    t = *Avx2Kernels();
  }
#else
  (void)allow_avx2;
#endif
  return t;
}

// The table UseKernelsForTesting chose, if it was called.
std::atomic<const KernelTable*> chosen_kernels{nullptr};

}  // namespace

const KernelTable& Kernels() {
  if (const KernelTable* chosen = chosen_kernels.load(std::memory_order_acquire)) return *chosen;
  static const KernelTable table = [] {
    const char* env = std::getenv("TF_OPS_CPU_ISA");
    return BuildKernels(env != nullptr ? env : "");
  }();
  return table;
}

const char* UseKernelsForTesting(const std::string& cap) {
  static std::mutex mutex;
  static std::vector<std::pair<std::string, std::unique_ptr<const KernelTable>>> tables;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = std::find_if(tables.begin(), tables.end(), [&](const auto& e) { return e.first == cap; });
  if (it == tables.end()) {
    tables.emplace_back(cap, std::make_unique<const KernelTable>(BuildKernels(cap)));
    it = tables.end() - 1;
  }
  chosen_kernels.store(it->second.get(), std::memory_order_release);
  return it->second->isa;
}

const char* FastKernelIsa() { return Kernels().isa; }

namespace {

// Whether bfloat16 GEMMs run on AMX tiles. Read from the table's name, not by comparing with
// AmxBf16GemmKernels(): its table is built by code compiled for AVX-512, which a processor
// without AVX-512 cannot run.
bool AmxTiles() { return std::strcmp(Kernels().isa, "amx_bf16") == 0; }

std::atomic<bool>& ExactFlag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("TF_OPS_EXACT");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }()};
  return flag;
}
}  // namespace

void SetExactMode(bool exact) { ExactFlag().store(exact); }
bool ExactMode() { return ExactFlag().load(std::memory_order_relaxed); }

namespace {

using namespace fast;  // fast_common.h

// Floats of packed filter one reduction chunk may span (768 KiB: within the L2 cache of
// server cores). Shorter chunks re-walk every tile's source pixels once per chunk: on 5x5
// layers of 256 channels, 192 KiB chunks ran 15% slower.
constexpr int64_t kPanelFloats = 192 * 1024;

// An indirect forward pass over float activations reads the filter in place, unpacked,
// where its output channels fill whole column blocks, it has at most kMaxInPlaceTaps taps and
// it computes at most kMaxInPlacePixels pixels. Packing costs a pass over the filter (3x3,
// 512 -> 512 channels on a 1x14x14 image, 13% of the time); reading in place, the rows of a
// column block are K floats apart and each tap FI * K on, often a multiple of the L2 cache's
// way, so that the taps' rows share its sets: little harm while the pass reads each row
// few times, but 5x5 filters (25 taps) ran slower in place at any size (256 -> 512 channels
// at stride 2 over 16x16x16: 33 -> 46 ms; 512 -> 512 over 1x14x14: 19 -> 30 ms), as did
// larger passes (3x3, 64 -> 128 channels at stride 2 over 8x64x64, 8,192 pixels: 1.5%).
constexpr int64_t kMaxInPlaceTaps = 9;
constexpr int64_t kMaxInPlacePixels = 4096;

// Winograd over a space-to-depth copy (WinogradPhasesApply) with at most this share of the
// strided pass's products. Through the core (AMD EPYC, two threads, medians of 8-16
// interleaved runs), strided pass against Winograd, share in brackets: 5x5 at stride 2,
// 256 -> 512 over 16x16x16, forward (0.36) 29.9 -> 20.0 ms, backprop input (0.81) 29 -> 33;
// 128 -> 128 over 8x32x32, forward (0.36) 7.5 -> 5.3, backprop input (0.56) 7.7 -> 6.7;
// 256 -> 256 over 2x32x32, backprop input (0.56) 8.7 -> 6.9; 32 -> 64 over 1x64x64, forward
// (0.36) 0.90 -> 0.53, backprop input (0.46) 0.99 -> 0.72; 6x6 at stride 2, 64 -> 64 over
// 4x32x32, backprop input (0.39) 2.4 -> 1.5.
constexpr double kPhasesMaxProducts = 0.6;

// NCHW passes run on NHWC copies of this many elements at most (and at least one image), and
// space-to-depth passes on copies of as many.
constexpr int64_t kNchwChunkElements = int64_t{1} << 21;

// Half and bfloat16 filter gradients widened to float run on float copies of chunks of
// images of about this many bytes (x and dy together, at least one image), so that the
// copies stay bounded; on 8x112x112 images of 3 -> 16 channels, chunks of 1 MiB ran 20%
// slower (a pass per image), chunks of the whole batch level.
constexpr int64_t kWidenChunkBytes = int64_t{4} << 20;
// Most elements of a chunk of backprop input's copy of dy with bordered columns
// (IndirectNhwc).
constexpr int64_t kMaxBorderedCopy = int64_t{1} << 20;

// Images per NHWC copy of an NCHW pass whose images have `elements` elements.
int64_t NchwChunk(int64_t batch, int64_t elements) {
  return std::max<int64_t>(1, std::min(batch, kNchwChunkElements / std::max<int64_t>(1, elements)));
}

template <typename T>
void IndirectNhwc(const ConvGeometry& g, bool forward, bool winograd, const T* w, const T* src,
                  T* dst, const ParallelFor& parallel_for);

// A strided forward or backprop-input pass as the stride-1 pass over a space-to-depth copy of
// x (forward) or into one of dx, by chunks of images (at most kNchwChunkElements copy
// elements, at least one image), NHWC: where SpaceToDepthApplies, the direct stride-1 pass
// (on AMX tiles the strided pass runs indirect, each tile's pixels copied into a tile, and the
// stride-1 pass as affine runs; see SpaceToDepthApplies for where that pays); `winograd`
// (WinogradPhasesApply), Winograd F(4x4, 3x3) on the stride-1 pass.
template <typename T>
void SpaceToDepthNhwc(const ConvGeometry& g, bool forward, bool winograd, const T* w, const T* src,
                      T* dst, const ParallelFor& parallel_for) {
  Note(forward ? Path::kForwardSpaceToDepth : Path::kInputSpaceToDepth);
  if (winograd) Note(forward ? Path::kForwardWinogradPhases : Path::kInputWinogradPhases);
  ConvGeometry d = SpaceToDepthGeometry(g);
  const int64_t image = d.in_rows * d.in_cols * d.in_depth;
  const int64_t chunk = NchwChunk(g.batch, image);
  if (chunk < g.batch) Note(Path::kSpaceToDepthChunks);
  Workspace w_space(d.filter_elements() * sizeof(T)), copy_space(chunk * image * sizeof(T));
  T* const wd = w_space.data<T>();
  T* const copy = copy_space.data<T>();
  SpaceToDepthFilter(g, d, w, wd, parallel_for);
  const int64_t x_image = g.in_rows * g.in_cols * g.in_depth;
  const int64_t y_image = g.out_rows * g.out_cols * g.out_depth;
  for (int64_t n = 0; n < g.batch; n += chunk) {
    ConvGeometry gc = g;
    gc.batch = d.batch = std::min(chunk, g.batch - n);
    if (forward) {
      SpaceToDepthCopy(gc, d, src + n * x_image, copy, parallel_for);
      IndirectNhwc(d, forward, winograd, wd, copy, dst + n * y_image, parallel_for);
    } else {
      IndirectNhwc(d, forward, winograd, wd, src + n * y_image, copy, parallel_for);
      DepthToSpaceCopy(gc, d, copy, dst + n * x_image, parallel_for);
    }
  }
}

// Grouped GEMM over the indirection table, depthwise by rows, or (`winograd`, where
// WinogradApplies) Winograd, NHWC, any batch; bfloat16 on AMX tiles through a space-to-depth
// copy where SpaceToDepthApplies. `forward` picks the direction: forward reads x
// and writes y, otherwise reads dy and writes dx.
template <typename T>
void IndirectNhwc(const ConvGeometry& g, bool forward, bool winograd, const T* w, const T* src,
                  T* dst, const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const int64_t taps = g.filter_rows * g.filter_cols;
  const int64_t FI = g.filter_in_depth, K = g.out_depth, G = g.groups;
  const int64_t Kg = g.out_depth_per_group();
  if (winograd) return WinogradNhwc(g, forward, w, src, dst, parallel_for);
  if constexpr (kind == kElemBF16) {
    if (AmxTiles() && SpaceToDepthApplies(g, forward)) {
      return SpaceToDepthNhwc(g, forward, /*winograd=*/false, w, src, dst, parallel_for);
    }
  }
  if (!forward && G == 1 && FI <= 8 && g.filter_cols > 1) {
    Note(Path::kInputColumnsMerged);
    return BackpropInputColumnsMerged(g, w, src, dst, parallel_for);
  }
  DimMap dh, dw;
  if (forward) {
    dh = ForwardDim(g.out_rows, g.in_rows, g.stride_rows, g.pad_top, g.dilation_rows, g.filter_rows);
    dw = ForwardDim(g.out_cols, g.in_cols, g.stride_cols, g.pad_left, g.dilation_cols, g.filter_cols);
  } else {
    dh = TransposedDim(g.in_rows, g.out_rows, g.stride_rows, g.pad_top, g.dilation_rows, g.filter_rows);
    dw = TransposedDim(g.in_cols, g.out_cols, g.stride_cols, g.pad_left, g.dilation_cols, g.filter_cols);
  }
  const int64_t src_channels = forward ? g.in_depth : K, dst_channels = forward ? K : g.in_depth;

  if (IsDepthwiseOne(g)) {
    Note(forward ? Path::kForwardDepthwise : Path::kInputDepthwise);
    return DepthwiseRowsNhwc(g, dh, dw, w, src, dst, parallel_for);
  }

  // Grouped GEMM: per group, columns are the destination channels of the group (forward: Kg
  // output channels; backprop input: FI input channels), the reduction runs over the
  // source channels of the group (FI; Kg) for every tap.
  const int64_t dst_group = forward ? Kg : FI, src_group = forward ? FI : Kg;
  const KernelTable& table = Kernels();
  const GemmKernel& gk = PickGemm(dst_group);
  const int nb = gk.nb;
  const int64_t blocks = CeilDiv(dst_group, nb);
  // bfloat16 with AVX-512 BF16: dot products of bfloat16 pairs along the reduction, on a
  // panel that keeps the filter in bfloat16 pairs (half a float per value).
  // Tiles of the pair kernels' height (16 pixels on AMX tiles).
  const GemmKernel& kernels = GemmFor(gk, kind);
  const bool pairs = &kernels != &gk;
  const int64_t rows = pairs ? CeilDiv(src_group, 2) * 2 : src_group;  // panel rows per tap
  const int64_t row_floats = pairs ? nb / 2 : nb;
  // A 1x1 filter at stride 1 without padding reads each computed pixel's own source pixel:
  // the pass is a plain GEMM over all batch * rows * cols pixels, one affine run.
  const bool pointwise = g.filter_rows == 1 && g.filter_cols == 1 && g.stride_rows == 1 &&
                         g.stride_cols == 1 && g.pad_top == 0 && g.pad_bottom == 0 &&
                         g.pad_left == 0 && g.pad_right == 0;
  // Short tiles (few reduction channels times columns), forward or at stride 1, where the
  // indirect pass would spend about as long setting up the pixels that are not affine as
  // computing them: banded (see RunBanded), its filter slots along the source columns
  // (backprop input's column taps read leftwards), and with few enough channels for a single
  // reduction chunk, one group and no column dilation, the taps of a filter row merged.
  // Longer tiles, strided backprop input, and passes whose band copy would exceed
  // kMaxBandCopy stay indirect, which writes float results in place. On AMX tiles, stride-1
  // passes with whole tiles of 32 reduction rows per tap run banded, each band one affine
  // run (whole_runs), whatever their tile length: AMX's indirect tiles copy their pixels
  // into a tile first, and ran at 60% of the affine rate (3x3, 256 -> 256 channels, 14x14
  // images, whose rows hold no whole tile: forward 2.8 -> 2.2 ms, backprop input 3.7-4.4 ->
  // 2.8-3.0 ms). With fewer channels (3 -> 16) the tiles of the row runs do better.
  // Strided forward passes on AMX tiles, of 32 source channels and more and filters more than
  // one column wide, whose rows hold one to three tiles (strided_rows) run banded as well: a
  // band's rows run as whole tiles, where the indirect pass's tiles of the inner pixels
  // straddle rows and copy their pixels. Measured (bfloat16 forward at stride 2, 2 threads),
  // indirect -> banded: 4x4, 128 -> 256 channels, 16 output columns 3.75 -> 3.26 ms; 3x3,
  // 64 -> 128, 28 columns 2.15 -> 1.73 ms; 4x4, 64 -> 128, 32 columns 2.33 -> 1.71 ms; 3x3,
  // 64 -> 64, 44 columns 1.06 -> 0.99 ms; 5x5, 256 -> 256, 16 columns 8.8 -> 8.3 ms. Longer
  // rows already run mostly affine (56 columns: 1.33 -> 1.37 ms); shorter ones hold no whole
  // tile (5x5, 256 -> 512, 8 columns: 9.8 -> 10.7 ms); a 1x1 filter's band copies the
  // columns it skips (28 columns: 2.2 -> 2.6 ms).
  const bool stride1 = g.stride_rows == 1 && g.stride_cols == 1;
  // bfloat16 GEMMs on AMX tiles; amx_whole: with whole tiles of 32 reduction rows a tap.
  const bool amx = pairs && AmxTiles();
  const bool amx_whole = amx && src_group >= 32;
  const bool whole_runs = amx_whole && stride1;
  const bool strided_rows = amx_whole && forward && !stride1 && g.filter_cols > 1 &&
                            g.out_cols >= kernels.mr && g.out_cols <= 3 * kernels.mr;
  bool banded = !pointwise && (src_group * nb <= kBandedTile || whole_runs || strided_rows) &&
                (forward || stride1);
  const bool mergeable = G == 1 && g.dilation_cols == 1 && taps * rows * row_floats <= kPanelFloats;
  // On AMX tiles, a merged filter row of an odd src_group (3 channels a pixel: 9 reduction
  // rows for a 3-wide filter) would go to the row kernels, the tiles taking pairs only: the
  // band copy then gives each pixel a zero channel, which makes the reduction even (12) and,
  // if shorter than 32 rows, one short tile. Forward, 3 channels: 3x3 over 8x112x112, 16
  // output channels, 1.3 -> 1.0 ms; 7x7 at stride 2 over 8x224x224, 64 output channels,
  // 14 -> 3.5 ms. A 1x1 filter (one tap a row, 15 channels) measured 5-10% slower padded.
  const bool pad_pixels = g.filter_cols > 1 && mergeable && amx &&
                          src_group % 2 == 1 && g.filter_cols * (src_group + 1) < 32;
  const int64_t copy_channels = src_channels + (pad_pixels ? 1 : 0);
  BandPlan band_plan;
  if (banded) band_plan = PlanBands(g.batch, dh, dw, G * blocks, kernels.mr, whole_runs);
  if (banded && !BandCopyFits(band_plan, copy_channels)) {
    Note(Path::kBandCopyTooLarge);
    banded = false;
  }
  if (banded && strided_rows) Note(Path::kForwardBandedStridedRows);
  const bool reversed = banded && !forward;
  const bool merge = banded && mergeable;
  // A merged filter row's taps are one reduction of filter_cols * depth rows (depth:
  // src_group, with a padded pixel one more), in the order of their slots (RunBanded): row
  // s * depth + r of filter row th is row r of the tap in slot th * filter_cols + s, and its
  // panel starts at that row's first slot. In pairs with an odd depth, a pair straddles two
  // taps.
  const int64_t depth = merge && pad_pixels ? src_group + 1 : src_group;
  if (merge && pad_pixels) Note(Path::kBandedPaddedPixels);
  if (merge && pairs && depth % 2 == 1) Note(Path::kBandedMergedStraddling);
  const int64_t unit_taps = merge ? g.filter_cols : 1;  // taps packed by one unit
  // panel[((grp * blocks + cb) * taps + FilterSlot(t)) * rows + r][j], as floats or
  // bfloat16 pairs (merged: as above), packed below into a workspace that needs no clearing
  // of its own: each unit clears what its rows leave unwritten. Forward floats whose groups'
  // output channels fill whole column blocks are not packed: the filter w[t][ci][k] holds
  // every column block's panel (taps in order, rows of K floats, the block's nb columns at
  // its offset), which the indirect pass reads in place through the in-place kernels (a pass
  // over the filter less per call: 3x3, 512 -> 512 channels over 1x14x14, the packing took
  // 13% of the time). The banded pass's kernels read rows of nb floats: there, only a filter
  // of one group whose output channels fill one column block is read in place.
  const bool filter_in_place =
      forward && std::is_same_v<T, float> && Kg % nb == 0 &&
      (K == nb || (!banded && taps <= kMaxInPlaceTaps &&
                   g.batch * g.out_rows * g.out_cols <= kMaxInPlacePixels));
  const int64_t ldb = filter_in_place ? K : row_floats;  // floats from one panel row to the next
  const int64_t panel_floats = filter_in_place ? 0 : G * blocks * taps * rows * row_floats;
  Workspace panel_space(panel_floats * sizeof(float));
  float* const packed = panel_space.data<float>();
  const float* panel = packed;
  if constexpr (std::is_same_v<T, float>) {
    if (filter_in_place) {
      Note(banded ? Path::kForwardFilterIsPanel : Path::kForwardFilterInPlace);
      panel = w;
    }
  }
  // Backprop input packs from w_t[t][k][ci], except for floats: their rows are transposed
  // straight from w[t][ci][k] into the panel by 16 x 16 blocks (one pass over the filter
  // instead of two; 3x3, 512 -> 512 channels over 1x14x14: the two took 21% of the time).
  const bool transpose_in_pack = !forward && std::is_same_v<T, float>;
  if (transpose_in_pack) Note(Path::kInputFilterTransposedInPack);
  const DirectedFilter<T> directed(w, forward || transpose_in_pack, taps, FI, K, parallel_for);
  const T* const filter = directed.data();
  const TransposeFn transpose32 = table.transpose32;
  if (transpose_in_pack && src_group >= 16 && dst_group >= 16) NoteKernel(transpose32);
  // Packed in parallel, a unit per (group, tap or merged filter row, column block): a large
  // filter takes as long to pack as a small batch takes to convolve.
  const int64_t pack_units = taps / unit_taps;
  const auto pack = [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t grp = unit / (blocks * pack_units), pu = unit / blocks % pack_units;
      const int64_t cb = unit % blocks;
      const int64_t first = merge ? pu * unit_taps : FilterSlot(pu, g.filter_cols, reversed);
      float* const out = packed + ((grp * blocks + cb) * taps + first) * rows * row_floats;
      const int64_t width = std::min<int64_t>(nb, dst_group - cb * nb);  // valid columns
      // Cleared only where the rows below leave values unwritten: columns past the group's, a
      // padded pixel's channel, the high half of an odd depth's last pair. (A low half stores
      // its slot's high half as zero.)
      if (width < nb || depth != src_group || rows != src_group) {
        std::fill(out, out + unit_taps * rows * row_floats, 0.0f);
      }
      uint32_t* const out32 = reinterpret_cast<uint32_t*>(out);
      // Slot by slot (FilterSlot maps a tap to its slot and back), so that a pair that
      // straddles two taps gets its low half (pack_halves stores it alone) before its high.
      for (int64_t slot = first; slot < first + unit_taps; ++slot) {
        const int64_t t = FilterSlot(slot, g.filter_cols, reversed);
        // Row m = s * depth + r of the unit's panel, column j, is w[t][ci][k] with,
        // forward, (ci, k) = (r, grp*Kg + cb*nb + j) and, backprop input, (cb*nb + j,
        // grp*Kg + r) = w_t[t][grp*Kg + r][cb*nb + j]; zero past the group's rows and
        // columns. Floats: row m at out + m * nb. Pairs: the 32-bit slot (p, j) holds rows 2p
        // (low half) and 2p + 1.
        const int64_t m0 = (slot - first) * depth;
        if constexpr (std::is_same_v<T, float>) {
          if (transpose_in_pack) {
            // Row m0 + r, column j: w[t][cb*nb + j][grp*Kg + r].
            TransposeTile(w + (t * FI + cb * nb) * K + grp * Kg, K, width, src_group, out + m0 * nb, nb,
                          transpose32);
            continue;
          }
        }
        const int64_t row_step = forward ? K : FI;  // from row r to row r + 1 of the tap
        const T* const in = forward ? filter + t * FI * K + grp * Kg + cb * nb
                                    : filter + (t * K + grp * Kg) * FI + cb * nb;
        for (int64_t r = 0; r < src_group; ++r) {
          const T* row = in + r * row_step;
          const int64_t m = m0 + r;
          if (pairs) {
            // The bits of a bfloat16 are its first (and only) member, a uint16_t.
            table.pack_halves(reinterpret_cast<const uint16_t*>(row), width, out32 + m / 2 * nb,
                              m % 2 == 1);
          } else if constexpr (std::is_same_v<T, float>) {
            std::memcpy(out + m * nb, row, width * sizeof(float));
          } else {
            for (int64_t j = 0; j < width; ++j) out[m * nb + j] = static_cast<float>(row[j]);
          }
        }
      }
    }
  };
  if (!filter_in_place) parallel_for(G * blocks * pack_units, 2 * unit_taps * rows * nb, pack);
  int64_t chunk = std::max<int64_t>(
      16, std::min<int64_t>(src_group, kPanelFloats / std::max<int64_t>(1, taps * row_floats)));
  if (pairs) chunk += chunk % 2;  // chunks start at even rows of a pair panel
  if (amx && chunk < src_group) {
    // Chunks of equal whole tiles of 32 rows: a chunk's rows past its last whole tile would
    // run on the vector kernels (5x5, 256 -> 512 channels: chunks 246 + 10 -> 128 + 128).
    chunk = CeilDiv(CeilDiv(src_group, CeilDiv(src_group, chunk)), 32) * 32;
  }
  const auto column = [&](int64_t unit) {
    const int64_t grp = unit / blocks, cb = unit % blocks;
    ColumnBlock col;
    col.src_offset = grp * src_group;
    col.dst_offset = grp * dst_group + cb * nb;
    col.width = std::min<int64_t>(nb, dst_group - cb * nb);
    if (filter_in_place) {
      col.panel = panel + col.dst_offset;
      col.tap_stride = FI * K;
    } else {
      col.panel = panel + (grp * blocks + cb) * taps * rows * row_floats;
      col.tap_stride = rows * row_floats;
    }
    col.row_floats = ldb;
    return col;
  };
  const GemmIndirectFn indirect = kernels.indirect[kind];
  const GemmAffineFn affine = kernels.affine[kind];
  const GemmAffineNarrowFn narrow = kernels.affine_narrow[kind];
  const GemmIndirectInPlaceFn indirect_in_place = kernels.indirect_in_place;
  const GemmAffineInPlaceFn affine_in_place = kernels.affine_in_place;
  const TileKernel kernel = [=](int64_t tiles, int64_t count, const void* const* a,
                                int64_t pixel_step, const float* const* b, int64_t len, int64_t,
                                float* c, int64_t ldc, bool accumulate) {
    if (filter_in_place) {
      if (pixel_step > 0) {
        NoteKernel(affine_in_place);
        return affine_in_place(tiles, count, a, pixel_step, b, ldb, len, c, ldc, accumulate);
      }
      NoteKernel(indirect_in_place);
      return indirect_in_place(count, a, b, ldb, len, c, accumulate);
    }
    if (pixel_step > 0) {
      NoteKernel(affine);
      return affine(tiles, count, a, pixel_step, b, len, c, ldc, accumulate);
    }
    NoteKernel(indirect);
    indirect(count, a, b, len, c, accumulate);
  };
  if (pairs) Note(Path::kGemmBf16Pairs);
  if (banded) {
    Note(forward ? (merge ? Path::kForwardBandedMerged : Path::kForwardBanded)
                 : (merge ? Path::kInputBandedMerged : Path::kInputBanded));
    return RunBanded(band_plan, g.batch, dh, dw, g.filter_cols, reversed, merge, kernels.mr, nb,
                     src, src_channels, merge && pad_pixels, dst, dst_channels, G * blocks, depth,
                     std::min(chunk, depth), column, affine, indirect, narrow,
                     parallel_for);
  }
  if (pointwise) {
    Note(forward ? Path::kForwardPointwise : Path::kInputPointwise);
    const int64_t pixels = g.batch * g.in_rows * g.in_cols;
    return RunIndirect(1, ForwardDim(1, 1, 1, 0, 1, 1), ForwardDim(pixels, pixels, 1, 0, 1, 1),
                       1, kernels.mr, nb, src, src_channels, dst, dst_channels, G * blocks,
                       src_group, std::min(chunk, src_group), column, kernel, narrow,
                       parallel_for);
  }
  Note(forward ? Path::kForwardIndirect : Path::kInputIndirect);
  // Strided backprop input on AMX tiles whose column classes are rows of whole tiles: the
  // edge split leaves the inner members of a row fewer than whole tiles, and their tiles
  // straddle rows, copying their pixels into a tile. Read from a copy of dy with a zero
  // border left and right, every column class is whole and each of its rows one affine
  // run; the row edges still split. 4x4 at stride 2, 128 -> 256 channels over 16x32x32,
  // bfloat16, on two threads: through the core 3.6-3.7 -> 3.0-3.2 ms (means of 100 calls),
  // 0.78-0.80 -> 0.82-0.83 of TensorFlow in the harness.
  if (amx && !forward && dw.stride > 1) {
    const std::pair<int64_t, int64_t> border = TransposedBorder(dw);
    bool whole = border.first + border.second > 0;
    for (int64_t c = 0; c < dw.classes() && whole; ++c) whole = dw.count(c) % kernels.mr == 0;
    if (whole) {
      // By chunks of images of at most kMaxBorderedCopy elements (at least one image).
      Note(Path::kInputBorderedColumns);
      const int64_t cols = g.out_cols + border.first + border.second, row = g.out_cols * src_channels;
      const int64_t image = g.out_rows * cols * src_channels;
      const int64_t images = std::clamp<int64_t>(kMaxBorderedCopy / image, 1, g.batch);
      if (images < g.batch) Note(Path::kInputBorderedChunks);
      Workspace copy_space(images * image * sizeof(T));
      T* const copy = copy_space.data<T>();
      const DimMap bordered = BorderedTransposed(dw, border);
      for (int64_t n = 0; n < g.batch; n += images) {
        const int64_t count = std::min(images, g.batch - n);
        const T* const from = src + n * g.out_rows * row;
        parallel_for(count * g.out_rows, Cost(2.0 * cols * src_channels), [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            T* const out = copy + r * cols * src_channels;
            std::fill(out, out + border.first * src_channels, T(0.0f));
            std::copy(from + r * row, from + (r + 1) * row, out + border.first * src_channels);
            std::fill(out + border.first * src_channels + row, out + cols * src_channels, T(0.0f));
          }
        });
        RunIndirect(count, dh, bordered, g.filter_cols, kernels.mr, nb, copy, src_channels,
                    dst + n * g.in_rows * g.in_cols * dst_channels, dst_channels, G * blocks, src_group,
                    std::min(chunk, src_group), column, kernel, narrow, parallel_for);
      }
      return;
    }
  }
  RunIndirect(g.batch, dh, dw, g.filter_cols, kernels.mr, nb, src, src_channels, dst, dst_channels,
              G * blocks, src_group, std::min(chunk, src_group), column, kernel, narrow,
              parallel_for);
}

// Runs `nhwc(gc, src_images, dst_images)` on chunks of the images of an NCHW pass, through
// NHWC copies (gc is the geometry with the chunk's batch).
template <typename T, typename Fn>
void InNhwcChunks(const ConvGeometry& g, const T* src, int64_t src_c, int64_t src_hw, T* dst,
                  int64_t dst_c, int64_t dst_hw, const ParallelFor& parallel_for, const Fn& nhwc) {
  const int64_t chunk = NchwChunk(g.batch, std::max(src_c * src_hw, dst_c * dst_hw));
  Note(Path::kNchwCopies);
  if (chunk < g.batch) Note(Path::kNchwChunks);
  Workspace src_space(chunk * src_c * src_hw * sizeof(T)), dst_space(chunk * dst_c * dst_hw * sizeof(T));
  T* const src_nhwc = src_space.data<T>();
  T* const dst_nhwc = dst_space.data<T>();
  for (int64_t n = 0; n < g.batch; n += chunk) {
    ConvGeometry gc = g;
    gc.batch = std::min(chunk, g.batch - n);
    Transpose(src + n * src_c * src_hw, gc.batch, src_c, src_hw, src_nhwc, parallel_for);
    nhwc(gc, src_nhwc, dst_nhwc);
    Transpose(dst_nhwc, gc.batch, dst_hw, dst_c, dst + n * dst_c * dst_hw, parallel_for);
  }
}

bool AnyEmpty(int64_t a, int64_t b, int64_t c) { return a <= 0 || b <= 0 || c <= 0; }

// Whether a strided forward or backprop-input pass runs as Winograd F(4x4, 3x3) over a
// space-to-depth copy (SpaceToDepthNhwc): its filter spans three strides each way (5x5 and 6x6
// at stride 2, 7x7 to 9x9 at stride 3), padded with zero taps to whole strides, and the
// stride-1 pass over the copy, 3x3 over stride-rows x stride-cols times the input channels, is
// one Winograd takes (WinogradApplies), with at most kPhasesMaxProducts of the strided pass's
// products. Winograd's are 36 x sr x sc per 4x4 tile of its destination and channel pair (9 a
// pixel at stride 2, against a 5x5 filter's 25), the destination being the output forward
// and, for backprop input, the copy of dx, out_rows + 2 by out_cols + 2 pixels. bfloat16 on
// pairs keeps its direct passes, which run at twice float's rate.
template <typename T>
bool WinogradPhasesApply(const ConvGeometry& g, bool forward) {
  if ((g.stride_rows == 1 && g.stride_cols == 1) || g.dilation_rows != 1 || g.dilation_cols != 1 ||
      g.groups != 1 || CeilDiv(g.filter_rows, g.stride_rows) != 3 ||
      CeilDiv(g.filter_cols, g.stride_cols) != 3 ||
      (KindOf<T>() == kElemBF16 && Kernels().gemm_bf16_pairs != nullptr)) {
    return false;
  }
  const ConvGeometry d = SpaceToDepthGeometry(g);
  const int64_t rows = forward ? d.out_rows : d.in_rows, cols = forward ? d.out_cols : d.in_cols;
  const double winograd = 36.0 * g.stride_rows * g.stride_cols * CeilDiv(rows, 4) * CeilDiv(cols, 4);
  const double strided = 1.0 * g.filter_rows * g.filter_cols * g.out_rows * g.out_cols;
  return winograd <= kPhasesMaxProducts * strided && WinogradApplies<T>(d, forward);
}

// Forward (reads x, writes y) or backprop input (reads dy, writes dx) in either layout.
template <typename T>
bool FastIndirect(const ConvGeometry& g, Layout layout, bool forward, const T* w, const T* src,
                  T* dst, const ParallelFor& parallel_for) {
  if constexpr (KindOf<T>() < 0) {
    return false;
  } else {
    if (AnyEmpty(g.input_elements(), g.filter_elements(), g.output_elements())) return false;
    // A call that starts in exact mode runs no Winograd, whatever the mode's later reads say.
    const bool exact = ExactMode();
    const bool winograd = !exact && WinogradApplies<T>(g, forward);
    const bool phases = !exact && !winograd && WinogradPhasesApply<T>(g, forward);
    const auto nhwc = [&](const ConvGeometry& gc, const T* s, T* d) {
      if (phases) return SpaceToDepthNhwc(gc, forward, /*winograd=*/true, w, s, d, parallel_for);
      IndirectNhwc(gc, forward, winograd, w, s, d, parallel_for);
    };
    if (layout == Layout::kNHWC) {
      nhwc(g, src, dst);
      return true;
    }
    int64_t src_c = g.in_depth, src_hw = g.in_rows * g.in_cols;
    int64_t dst_c = g.out_depth, dst_hw = g.out_rows * g.out_cols;
    if (!forward) std::swap(src_c, dst_c), std::swap(src_hw, dst_hw);
    InNhwcChunks(g, src, src_c, src_hw, dst, dst_c, dst_hw, parallel_for, nhwc);
    return true;
  }
}

}  // namespace

template <typename T>
bool FastConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                     const ParallelFor& parallel_for) {
  return FastIndirect(g, layout, /*forward=*/true, w, x, y, parallel_for);
}

template <typename T>
bool FastConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy,
                           T* dx, const ParallelFor& parallel_for) {
  return FastIndirect(g, layout, /*forward=*/false, w, dy, dx, parallel_for);
}

template <typename T>
bool FastConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy,
                            T* dw, const ParallelFor& parallel_for) {
  if constexpr (KindOf<T>() < 0) {
    return false;
  } else {
    if (AnyEmpty(g.input_elements(), g.filter_elements(), g.output_elements())) return false;
    // NCHW runs on NHWC copies of chunks of images, and 16-bit operands that the GEMM would
    // pack once per filter tap on float copies of chunks (below); the plan (and so every sum)
    // is that of a chunk, the same for every chunk.
    const int64_t in_hw = g.in_rows * g.in_cols, out_hw = g.out_rows * g.out_cols;
    const int64_t chunk = NchwChunk(g.batch, std::max(in_hw * g.in_depth, out_hw * g.out_depth));
    const int64_t image_elements = in_hw * g.in_depth + out_hw * g.out_depth;
    ConvGeometry gc = g;
    if (layout == Layout::kNCHW) gc.batch = chunk;
    const int64_t size = g.filter_elements();
    const bool depthwise = IsDepthwiseOne(g);
    // bfloat16 on AMX tiles with 16 channels a group or more: every tap's sums as tiles of one
    // transposed copy of dy times shifted pairs of x (fast_filter_tiles.h), a direct sum and
    // ahead of Winograd too (VGG's 3x3 layer, 64 -> 64 channels over 8x56x56, through the core
    // on two threads: Winograd 2.33 ms, the strided pass 3.40 ms, tiles 1.14-1.19 ms). On
    // AVX-512 BF16 without AMX, the same on vectors of rows where few input channels merge
    // the filter columns (FilterTilesApply).
    const bool tiles = KindOf<T>() == kElemBF16 && !depthwise && FilterTilesApply(g);
    // Exact mode is read once per call, here.
    const bool winograd = !depthwise && !tiles && WinogradFilterApplies<T>(g);
    const GemmKernel& gk = PickGemm(g.out_depth_per_group());
    FilterPlan plan;
    TilesPlan tiles_plan;
    DepthwiseFilterPlan dw_plan;
    bool widen = false;
    if (depthwise) {
      dw_plan = PlanDepthwiseFilter(gc, sizeof(T));
    } else if (tiles) {
      tiles_plan = PlanFilterTiles(gc);
    } else if (!winograd) {
      plan = PlanFilter(gc, gk, sizeof(T));
      // With merged filter columns, half and bfloat16 pixels would be packed once per filter
      // row (each 3 or so values at a time); widened to float once, they run in place. On
      // 8x112x112 images of 3 -> 16 channels in bfloat16, 3.8 times faster.
      widen = !std::is_same_v<T, float> && plan.merged_cols > 1;
      if (widen) {
        const int64_t image_bytes = static_cast<int64_t>(sizeof(float)) * image_elements;
        gc.batch = std::min(chunk, std::max<int64_t>(1, kWidenChunkBytes / image_bytes));
        plan = PlanFilter(gc, gk, sizeof(float));
      } else {
        // The strided kernels of the activations' kind (bfloat16 pairs on AMX: taller tiles).
        plan = PlanFilter(gc, GemmFor(gk, KindOf<T>()), sizeof(T));
      }
    }
    // Each slice of the rows sums into its own accumulators; they are added in slice order.
    const int64_t slices = depthwise ? dw_plan.slices : tiles ? tiles_plan.slices : plan.slices;
    // float with one set of sums accumulates in dw itself, which the slices' pass below would
    // only copy.
    const bool in_dw = std::is_same_v<T, float> && slices == 1;
    std::optional<Workspace> acc_space;
    float* acc = nullptr;
    if constexpr (std::is_same_v<T, float>) acc = dw;
    if (!in_dw) acc = acc_space.emplace(slices * size * sizeof(float)).template data<float>();
    // Winograd (WinogradFilter) and the tiles pass on AMX write all of it.
    if (!winograd && (!tiles || !tiles_plan.amx)) std::fill(acc, acc + slices * size, 0.0f);
    std::unique_ptr<WinogradFilter<T>> wino;
    if (winograd) wino = std::make_unique<WinogradFilter<T>>(gc, acc, parallel_for);
    const auto pass = [&](const ConvGeometry& gp, const T* xp, const T* dyp, bool first) {
      if (winograd) {
        wino->Accumulate(gp, xp, dyp);
      } else if (depthwise) {
        FilterDepthwiseNhwc(gp, dw_plan, xp, dyp, acc, parallel_for);
      } else if (tiles) {
        FilterTilesNhwc(gp, tiles_plan, xp, dyp, acc, first, parallel_for);
      } else {
        FilterGemmNhwc(gp, plan, gk, xp, dyp, acc, first, parallel_for);
      }
    };
    if (layout == Layout::kNHWC && !widen) {
      pass(g, x, dy, /*first=*/true);
    } else {
      const bool nchw = layout == Layout::kNCHW;
      const int64_t x_chunk = gc.batch * in_hw * g.in_depth;
      const int64_t dy_chunk = gc.batch * out_hw * g.out_depth;
      std::optional<Workspace> x_space, dy_space, xf_space, dyf_space;
      if (nchw) {
        x_space.emplace(x_chunk * sizeof(T));
        dy_space.emplace(dy_chunk * sizeof(T));
      }
      if (widen) {
        Note(Path::kFilterWidened);
        if (gc.batch < g.batch) Note(Path::kFilterWidenedChunks);
        xf_space.emplace(x_chunk * sizeof(float));
        dyf_space.emplace(dy_chunk * sizeof(float));
      }
      for (int64_t n = 0; n < g.batch; n += gc.batch) {
        ConvGeometry gp = gc;
        gp.batch = std::min(gc.batch, g.batch - n);
        const T* xp = x + n * in_hw * g.in_depth;
        const T* dyp = dy + n * out_hw * g.out_depth;
        if (nchw) {
          Transpose(xp, gp.batch, g.in_depth, in_hw, x_space->data<T>(), parallel_for);
          Transpose(dyp, gp.batch, g.out_depth, out_hw, dy_space->data<T>(), parallel_for);
          xp = x_space->data<T>(), dyp = dy_space->data<T>();
        }
        if constexpr (sizeof(T) == 2) {
          if (widen) {
            float* const xf = xf_space->data<float>();
            float* const dyf = dyf_space->data<float>();
            Widen(xp, gp.batch * in_hw * g.in_depth, xf, parallel_for);
            Widen(dyp, gp.batch * out_hw * g.out_depth, dyf, parallel_for);
            FilterGemmNhwc(gp, plan, gk, xf, dyf, acc, /*first=*/n == 0, parallel_for);
            continue;
          }
        }
        pass(gp, xp, dyp, /*first=*/n == 0);
      }
    }
    if (winograd) wino->Finish();
    if (in_dw) return true;
    // The slices in order, each element's sum the same however the elements are shared out.
    constexpr int64_t kBlock = 256;
    parallel_for(CeilDiv(size, kBlock), Cost(2.0 * slices * kBlock), [&](int64_t begin, int64_t end) {
      float sums[kBlock];
      for (int64_t i0 = begin * kBlock; i0 < std::min(size, end * kBlock); i0 += kBlock) {
        const int64_t n = std::min(kBlock, size - i0);
        std::copy(acc + i0, acc + i0 + n, sums);
        for (int64_t s = 1; s < slices; ++s) {
          for (int64_t i = 0; i < n; ++i) sums[i] += acc[s * size + i0 + i];
        }
        WriteOut(sums, n, dw + i0);
      }
    });
    return true;
  }
}

#define TF_OPS_INSTANTIATE(T)                                                                  \
  template bool FastConvForward<T>(const ConvGeometry&, Layout, const T*, const T*, T*,        \
                                   const ParallelFor&);                                        \
  template bool FastConvBackpropInput<T>(const ConvGeometry&, Layout, const T*, const T*, T*,  \
                                         const ParallelFor&);                                  \
  template bool FastConvBackpropFilter<T>(const ConvGeometry&, Layout, const T*, const T*, T*, \
                                          const ParallelFor&);
TF_OPS_INSTANTIATE(float)
TF_OPS_INSTANTIATE(double)
TF_OPS_INSTANTIATE(Eigen::half)
TF_OPS_INSTANTIATE(Eigen::bfloat16)
TF_OPS_INSTANTIATE(int32_t)
#undef TF_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_ops
