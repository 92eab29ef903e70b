// Register-blocked inner loops of the fast CPU convolution kernels (conv_fast.cc).
//
// Each routine computes a small tile of one output in float registers and is compiled
// once per instruction set (generic x86-64, AVX2+FMA+F16C, AVX-512); the table for the
// best set this processor and OS support is chosen at run time. The routines take
// activations as float, IEEE half or bfloat16 (kind below, widened to float on load) and
// always accumulate in float. Their summation order is fixed by their arguments alone.
//
// TF-free and header-light: the instruction-set translation units include nothing that
// another translation unit also instantiates, so no code built for a wider instruction set
// can be picked by the linker for a caller that runs on a narrower one.
#ifndef TF_OPS_CC_CORE_CPU_MICROKERNELS_H_
#define TF_OPS_CC_CORE_CPU_MICROKERNELS_H_

#include <cstdint>
#include <string>

#include "cc/core/vocabulary.h"  // Element (its enum only: nothing of it is called here)

namespace tf_ops {
namespace cpu {

// The element type of the activations a routine reads, the index of the tables below: the
// first three Elements (cc/core/vocabulary.h), by shorter names.
enum ElemKind : int {
  kElemF16 = static_cast<int>(Element::kHalf),
  kElemBF16 = static_cast<int>(Element::kBFloat16),
  kElemF32 = static_cast<int>(Element::kFloat),
  kElemKinds = 3
};
static_assert(kElemF16 < kElemKinds && kElemBF16 < kElemKinds && kElemF32 < kElemKinds, "the tables' index");

// Implicit GEMM over an indirection table (forward and backprop input):
//   c[m][j] (=, or += if accumulate) sum_{t < taps} sum_{r < depth} a[t*MR + m][r] * b[t][r*NB + j]
// for m < MR, j < NB. `a` holds MR activation pointers per tap (each a row of `depth`
// contiguous channels; rows past the tile's end repeat a valid one); `b` holds one packed
// float panel per tap. `c` is an MR x NB float tile, row stride NB.
using GemmIndirectFn = void (*)(int64_t taps, const void* const* a, const float* const* b,
                                int64_t depth, float* c, bool accumulate);

// The same over an affine table, for `tiles` consecutive tiles of evenly spaced pixels all
// inside the source: pixel p = q * MR + m of the run reads tap t at a[t] + p * pixel_step
// elements, and its row of the result is c + p * ldc.
using GemmAffineFn = void (*)(int64_t tiles, int64_t taps, const void* const* a,
                              int64_t pixel_step, const float* const* b, int64_t depth,
                              float* c, int64_t ldc, bool accumulate);

// The indirect and affine GEMMs over float activations and a float filter read in place
// (forward: w[t][ci][k], whose rows hold every output channel), b[t]'s rows ldb floats apart
// instead of NB:
//   c[m][j] (=, or +=) sum_{t < taps} sum_{r < depth} a[t*MR + m][r] * b[t][r*ldb + j].
using GemmIndirectInPlaceFn = void (*)(int64_t taps, const void* const* a, const float* const* b,
                                       int64_t ldb, int64_t depth, float* c, bool accumulate);
using GemmAffineInPlaceFn = void (*)(int64_t tiles, int64_t taps, const void* const* a,
                                     int64_t pixel_step, const float* const* b, int64_t ldb,
                                     int64_t depth, float* c, int64_t ldc, bool accumulate);

// The affine GEMM with its results rounded to the activations' 16-bit kind (IEEE half or
// bfloat16, as NarrowFn rounds) and written at c, a destination of that kind (row stride ldc
// elements), instead of as floats; it never accumulates. For a whole reduction in one call
// (at most kMaxNarrowTaps taps): the float results never reach memory. The tiles need not
// be consecutive: pixel p = q * MR + m reads tap t at a[t] + q * tile_step + m * pixel_step
// elements (tile_step MR * pixel_step for one run along a row; more for one tile per row of
// a band), its result row still at c + p * ldc.
constexpr int64_t kMaxNarrowTaps = 64;
using GemmAffineNarrowFn = void (*)(int64_t tiles, int64_t taps, const void* const* a,
                                    int64_t pixel_step, int64_t tile_step,
                                    const float* const* b, int64_t depth, void* c, int64_t ldc);

// Strided GEMM reduction (backprop filter), over float operands (packed, or in place in
// `runs` runs of `len` pixels at a fixed distance from each other):
//   c[m*ldc + j] += sum_{s < runs} sum_{r < len} a[s*a_run + r*a_step + m] *
//                                                b[s*b_run + r*b_step + j]
// for m < rows (rows <= MR), j < NB, summed in the order of s, then r; c's rows from `rows`
// to MR are read and written back unchanged.
using GemmStridedFn = void (*)(int64_t runs, int64_t len, const float* a, int64_t a_run,
                               int64_t a_step, int64_t rows, const float* b, int64_t b_run,
                               int64_t b_step, float* c, int64_t ldc);

// The filter gradient's reduction on AMX tiles, one operand shifted per tap (bfloat16): for
// t < taps, m < rows and j < cols (both multiples of 16),
//   c[t*c_tap + m*ldc + j] += sum_{r < pairs} dot(pair r of a's row m, b[t][r*ldb + j])
// where a holds bfloat16 rows (one output channel's pixels, in order) in panels of 16 pairs:
// pairs [16s, 16s + 16) of row m are the 32 values at a + s*a_step + m*32; each b[t] holds
// bfloat16 pairs (two consecutive pixels of one input channel) in 32-bit slots. `pairs` a
// multiple of 16. Each sum adds its pairs in order, 16 at a time. Every value read must be
// finite: a zero in one operand does not hide a NaN in the other.
using GemmShiftedFn = void (*)(int64_t taps, const uint16_t* a, int64_t a_step, int64_t rows,
                               const uint32_t* const* b, int64_t ldb, int64_t cols,
                               int64_t pairs, float* c, int64_t ldc, int64_t c_tap);

// The same reduction on vectors of rows (AVX-512 BF16, vdpbf16ps), its results transposed:
// for t < taps, j < cols and m < rows,
//   c[t*c_tap + j*ldc + m] += sum_{r < pairs} dot(a[r*lda + m], b[t][r*ldb + j])
// where a's row r holds the rows' bfloat16 pairs (two consecutive pixels of one output
// channel) in 32-bit slots, lda a multiple of 16 and a's slots up to rows rounded up to 16
// readable; each b[t] as for GemmShiftedFn. Any rows and cols; c is written at m < rows and
// j < cols only. Each sum adds its pairs in order.
using GemmShiftedRowsFn = void (*)(int64_t taps, const uint32_t* a, int64_t lda, int64_t rows,
                                   const uint32_t* const* b, int64_t ldb, int64_t cols,
                                   int64_t pairs, float* c, int64_t ldc, int64_t c_tap);

// Depthwise over an indirection table (forward and backprop input, one filter per channel):
//   c[m][j] (=, or +=) sum_{t < taps} a[t*MR + m][j] * b[t][j]       for m < MR, j < NB.
using DepthwiseIndirectFn = void (*)(int64_t taps, const void* const* a, const float* const* b,
                                     float* c, bool accumulate);

using DepthwiseAffineFn = void (*)(int64_t tiles, int64_t taps, const void* const* a,
                                   int64_t pixel_step, const float* const* b, float* c,
                                   int64_t ldc, bool accumulate);

// Depthwise along rows, the column taps of each filter row applied from registers (forward
// and backprop input where the taps of a filter row read neighbouring source pixels): each
// source vector is loaded once and multiplied into every pixel of the tile that reads it.
// Pixel m of tile q reads, through filter row r and column tap k < COLS, the source pixel
// (q * MR + m) * MULT + k pixels after a[r] (pixels pixel_step elements apart), with filter
// b[r * COLS + k]; its result goes to c + (q * MR + m) * ldc:
//   c[p][j] (=, or +=) sum_{r < rows} sum_{k < COLS} src(r, p * MULT + k)[j] * b[r * COLS + k][j]
// summed over r, then k, in order. row[MULT - 1][COLS - 1][kind]; null in every kernel of a
// table whose instruction set has too few registers for the tiles (the caller then uses
// `affine`).
using DepthwiseRowFn = void (*)(int64_t tiles, int64_t rows, const void* const* a,
                                int64_t pixel_step, const float* const* b, float* c, int64_t ldc,
                                bool accumulate);
constexpr int kDepthwiseRowMults = 2;  // pixel spacing (stride) 1 or 2
constexpr int kDepthwiseRowCols = 5;   // 1 to 5 column taps per filter row

// Depthwise strided reduction (backprop filter), for `taps` (1 to kDepthwiseStridedTaps)
// neighbouring column taps at once, each b vector read once for all of them:
//   c[t*c_step + j] += sum_{r < len} a[r*a_step + t*tap_step + j] * b[r*b_step + j]
// for t < taps, j < NB, with a and b both activations of `kind`. The sum over r is taken in
// 4 / NV interleaved partial sums (r mod 4 / NV; one where NV >= 4) added in order at the
// end, a fixed order.
constexpr int kDepthwiseStridedTaps = 3;
using DepthwiseStridedFn = void (*)(int64_t len, int taps, const void* a, int64_t a_step,
                                    int64_t tap_step, const void* b, int64_t b_step, float* c,
                                    int64_t c_step);

// Plain aggregates with trivial constructors (no member initializers), so that no
// constructor code is emitted by the instruction-set translation units.
// Transposes one 16 x 16 block of 4-byte (transpose32) or 2-byte (transpose16) elements:
//   dst[j * dst_stride + i] = src[i * src_stride + j]   for i, j < 16 (strides in elements).
using TransposeFn = void (*)(const void* src, int64_t src_stride, void* dst, int64_t dst_stride);

// dst[i] = src[i] rounded to IEEE half or bfloat16 (nearest, ties to even, as Eigen's
// conversions round; a NaN stays a quiet NaN of the same sign), for i < n.
using NarrowFn = void (*)(const float* src, int64_t n, void* dst);

// dst[i] = src[i] widened to float (exact), src IEEE half or bfloat16, for i < n.
using WidenFn = void (*)(const void* src, int64_t n, float* dst);

// Stores 16-bit values into the low or high halves of 32-bit slots (the bfloat16 pairs of
// the filter gradient's packed operands): out[i] = in[i] (high half zero) when !high, else
// out[i] |= in[i] << 16, for i < n.
using PackHalvesFn = void (*)(const uint16_t* in, int64_t n, uint32_t* out, bool high);

// Both halves at once, `pairs` rows of `width` slots: with lo = pixels[2 * r] and hi =
// pixels[2 * r + 1], out[r * width + i] = lo[i] | hi[i] << 16 for i < n (a null lo or hi read
// as zeros) and 0 for n <= i < width (width >= n).
using PackPairsFn = void (*)(const uint16_t* const* pixels, int64_t pairs, int64_t n, int64_t width,
                             uint32_t* out);

// Winograd F(4x4, 3x3) transforms (conv_winograd.cc), each along `n` contiguous channels:
//   input:    v[xi * v_step + c] = (B^T d B)[xi] for the 6 x 6 patch d[i][j] = patch[i * 6 + j][c]
//             (arrays of the activations' kind);
//   filter:   u[xi * u_step + c] = (G g G^T)[xi] for the 3 x 3 filter g[i][j] = taps[i * 3 + j][c];
//   output:   y[i * 4 + j][c] = (A^T m A)[i][j] for the 6 x 6 products m[xi] = m[xi * m_step + c];
// and for the filter gradient, the transposed forms:
//   gradient: v[xi * v_step + c] = (A e A^T)[xi] for the 4 x 4 output-gradient tile
//             e[i][j] = tile[i * 4 + j][c] (of the activations' kind);
//   reduce:   y[i * 3 + j][c] = (G^T m G)[i][j] for the 6 x 6 sums m[xi] = m[xi * m_step + c];
// for xi < 36 (row-major over the 6 x 6 positions) and c < n, with the matrices of
// F(4x4, 3x3) at the points 0, 1, -1, 2, -2 (conv_winograd.h).
using WinogradInputFn = void (*)(const void* const* patch, int64_t n, float* v, int64_t v_step);
using WinogradFilterFn = void (*)(const void* const* taps, int64_t n, float* u, int64_t u_step);
using WinogradOutputFn = void (*)(const float* m, int64_t m_step, int64_t n, float* const* y);

struct WinogradKernel {
  WinogradInputFn input[kElemKinds];
  WinogradFilterFn filter[kElemKinds];
  WinogradOutputFn output;
  WinogradInputFn gradient[kElemKinds];
  WinogradOutputFn reduce;
};

// A strided reduction (the filter gradient's GEMM) of mr rows by its GemmKernel's nb columns.
struct StridedKernel {
  int mr;
  GemmStridedFn fn;
};

struct GemmKernel {
  int mr, nb;  // tile: mr rows (pixels or input channels) x nb output columns
  GemmIndirectFn indirect[kElemKinds];
  GemmAffineFn affine[kElemKinds];
  // By the activations' kind, kElemF16 and kElemBF16; null for kElemF32 and where the
  // instruction set has no vector rounding to the kind.
  GemmAffineNarrowFn affine_narrow[kElemKinds];
  // affine[kElemF32] for b panels streamed from memory, one after another (the Winograd
  // pass's transformed filter): its first tile fetches b ahead. Null in the bfloat16 pair
  // tables.
  GemmAffineFn affine_ahead;
  // indirect[kElemF32] and affine[kElemF32] on a float filter read in place (rows ldb floats
  // apart). Null in the bfloat16 pair tables.
  GemmIndirectInPlaceFn indirect_in_place;
  GemmAffineInPlaceFn affine_in_place;
  // strided[0] has the tile's mr rows; strided[1] more rows where the registers allow them
  // (fewer loads of b per product, and a closer fit to some row counts), else fn is null.
  StridedKernel strided[2];
  // The filter gradient on AMX tiles (GemmShiftedFn); null but in the AMX tables.
  GemmShiftedFn shifted;
  // The filter gradient on vectors of rows (GemmShiftedRowsFn); null but in the AVX-512 BF16
  // pair table's first entry.
  GemmShiftedRowsFn shifted_rows;
};

struct DepthwiseKernel {
  int mr, nb;  // tile: mr pixels x nb channels
  DepthwiseIndirectFn indirect[kElemKinds];
  DepthwiseAffineFn affine[kElemKinds];
  DepthwiseStridedFn strided[kElemKinds];
  DepthwiseRowFn row[kDepthwiseRowMults][kDepthwiseRowCols][kElemKinds];
};

// Entries of a table's gemm[], and of its bfloat16 pair table (gemm[0..2]'s widths: the pair
// kernels have no 48-column tile).
inline constexpr int kGemmTiles = 4;
inline constexpr int kPairTiles = 3;

struct KernelTable {
  const char* isa;
  // bfloat16 GEMMs (gemm_bf16_pairs) run on AMX tiles.
  bool amx_tiles;
  // By column block width: gemm[0] has nb 16, gemm[1] nb 32, gemm[2] nb 64, gemm[3] nb 48 (or,
  // where an instruction set lacks the registers for a width, the next narrower one).
  GemmKernel gemm[kGemmTiles];
  // Likewise for depthwise: dw[0] nb 16, dw[1] nb 32, dw[2] nb 64 (or narrower).
  DepthwiseKernel dw[3];
  TransposeFn transpose32, transpose16;
  // By element kind: narrow[kElemF16] and narrow[kElemBF16]; null where this instruction
  // set has no vector form (the caller then converts element by element).
  NarrowFn narrow[kElemKinds];
  // By element kind: widen[kElemF16] and widen[kElemBF16]; null for kElemF32.
  WidenFn widen[kElemKinds];
  PackHalvesFn pack_halves;
  PackPairsFn pack_pairs;
  // Where the processor has AVX-512 BF16: bfloat16 gemm kernels on bfloat16-pair filter
  // panels (microkernels_avx512bf16.cc), the same column widths as gemm[] (and, but for AMX,
  // the same tiles), and a strided reduction whose operands both hold bfloat16 pairs along the
  // reduction; on AMX tiles where the processor has AMX-BF16 (AmxBf16GemmKernels); else null.
  const GemmKernel* gemm_bf16_pairs;
  WinogradKernel winograd;
};

// Calls fn(name, index, kind, kernel) for every micro-kernel of `t` and of its bfloat16
// pair table, null entries included: the list the tests check was each reached. `name` is
// the member ("gemm.affine", "dw.row", ...), `index` the table entry (for "dw.row", entry *
// 100 + pixel spacing * 10 + column taps), `kind` the element kind or -1. A new member of the
// tables belongs here too (the size checks below fail until it is).
template <typename Fn>
void ForEachKernel(const KernelTable& t, Fn fn) {
  const auto gemm = [&](const char* indirect, const char* affine, const char* narrow,
                        const char* ahead, const char* in_place, const char* in_place_affine,
                        const char* strided, const char* tall, const char* shifted,
                        const char* shifted_rows, int i, const GemmKernel& k) {
    for (int e = 0; e < kElemKinds; ++e) {
      fn(indirect, i, e, k.indirect[e]), fn(affine, i, e, k.affine[e]);
      fn(narrow, i, e, k.affine_narrow[e]);
    }
    fn(ahead, i, kElemF32, k.affine_ahead);
    fn(in_place, i, kElemF32, k.indirect_in_place);
    fn(in_place_affine, i, kElemF32, k.affine_in_place);
    fn(strided, i, -1, k.strided[0].fn), fn(tall, i, -1, k.strided[1].fn);
    fn(shifted, i, -1, k.shifted), fn(shifted_rows, i, -1, k.shifted_rows);
  };
  for (int i = 0; i < kGemmTiles; ++i) {
    gemm("gemm.indirect", "gemm.affine", "gemm.affine_narrow", "gemm.affine_ahead",
         "gemm.indirect_in_place", "gemm.affine_in_place", "gemm.strided", "gemm.strided_tall",
         "gemm.shifted", "gemm.shifted_rows", i, t.gemm[i]);
  }
  for (int i = 0; t.gemm_bf16_pairs != nullptr && i < kPairTiles; ++i) {
    gemm("pairs.indirect", "pairs.affine", "pairs.affine_narrow", "pairs.affine_ahead",
         "pairs.indirect_in_place", "pairs.affine_in_place", "pairs.strided", "pairs.strided_tall",
         "pairs.shifted", "pairs.shifted_rows", i, t.gemm_bf16_pairs[i]);
  }
  for (int i = 0; i < 3; ++i) {
    const DepthwiseKernel& k = t.dw[i];
    for (int e = 0; e < kElemKinds; ++e) {
      fn("dw.indirect", i, e, k.indirect[e]), fn("dw.affine", i, e, k.affine[e]);
      fn("dw.strided", i, e, k.strided[e]);
    }
    for (int m = 0; m < kDepthwiseRowMults; ++m) {
      for (int c = 0; c < kDepthwiseRowCols; ++c) {
        for (int e = 0; e < kElemKinds; ++e) fn("dw.row", i * 100 + (m + 1) * 10 + c + 1, e, k.row[m][c][e]);
      }
    }
  }
  fn("transpose32", 0, -1, t.transpose32), fn("transpose16", 0, -1, t.transpose16);
  fn("pack_halves", 0, -1, t.pack_halves), fn("pack_pairs", 0, -1, t.pack_pairs);
  for (int e = 0; e < kElemKinds; ++e) fn("narrow", 0, e, t.narrow[e]);
  for (int e = 0; e < kElemKinds; ++e) fn("widen", 0, e, t.widen[e]);
  for (int e = 0; e < kElemKinds; ++e) {
    fn("winograd.input", 0, e, t.winograd.input[e]), fn("winograd.filter", 0, e, t.winograd.filter[e]);
  }
  for (int e = 0; e < kElemKinds; ++e) fn("winograd.gradient", 0, e, t.winograd.gradient[e]);
  fn("winograd.output", 0, -1, t.winograd.output), fn("winograd.reduce", 0, -1, t.winograd.reduce);
}
static_assert(sizeof(GemmKernel) == 2 * sizeof(int) + (3 * kElemKinds + 5) * sizeof(void*) +
                                         2 * sizeof(StridedKernel),
              "a new GemmKernel member: list it in ForEachKernel");
static_assert(sizeof(DepthwiseKernel) ==
                  2 * sizeof(int) +
                      (3 * kElemKinds + kDepthwiseRowMults * kDepthwiseRowCols * kElemKinds) *
                          sizeof(void*),
              "a new DepthwiseKernel member: list it in ForEachKernel");
static_assert(sizeof(WinogradKernel) == (3 * kElemKinds + 2) * sizeof(void*),
              "a new WinogradKernel member: list it in ForEachKernel");
static_assert(sizeof(KernelTable) == 2 * sizeof(const char*) + kGemmTiles * sizeof(GemmKernel) +
                                         3 * sizeof(DepthwiseKernel) +
                                         (4 + 2 * kElemKinds + 1) * sizeof(void*) +
                                         sizeof(WinogradKernel),
              "a new KernelTable member: list it in ForEachKernel");

// The arithmetic peak of an instruction set's vectors, for the roofline benchmark
// (roofline.h): fn(rounds) runs `rounds` rounds of `flops_per_round` independent multiply-adds
// (one fused instruction each where the set has FMA, a multiply and an add otherwise) on
// accumulators that stay in registers, and returns a value that depends on all of them.
struct PeakLoop {
  float (*fn)(int64_t rounds);
  int64_t flops_per_round;
};
PeakLoop GenericPeakLoop();
PeakLoop Avx2PeakLoop();
PeakLoop Avx512PeakLoop();

// One table per instruction set; each is null when this build lacks it.
const KernelTable* GenericKernels();
const KernelTable* Avx2Kernels();
const KernelTable* Avx512Kernels();
const GemmKernel* Avx512Bf16GemmKernels();
// Avx512Bf16GemmKernels on AMX tiles (tdpbf16ps), for processors with AMX-BF16 whose OS grants
// this process the tile state: tiles of 16 pixels (mr) for the indirect and affine GEMMs, and
// strided reductions of the float table's rows and of 32 rows.
const GemmKernel* AmxBf16GemmKernels();

// The table for the best instruction set the processor and OS support or, where the
// environment variable TF_OPS_CPU_ISA is set, the one it names ("generic", "avx2", "avx512",
// "avx512_bf16" or "amx_bf16"). Read once, on first use. A value that names no table, or one
// this processor cannot run, leaves the best table here and its reason in KernelIsaError(),
// which the ops report as their error instead of running.
const KernelTable& Kernels();
const std::string& KernelIsaError();

// The table of instruction set `isa` (a name as above), or null with the reason in *error where
// the name is unknown or the processor and OS cannot run that table. Tables live for the
// process.
const KernelTable* KernelsNamed(const std::string& isa, std::string* error);

// Makes Kernels() the table for the best instruction set at most `cap` (a value of
// TF_OPS_CPU_ISA; empty: the processor's best) from now on, and returns its name: for test
// programs that run every instruction set in one process (tests/cc/sweep_driver.cc), between
// calls of the fast kernels, never during one.
const char* UseKernelsForTesting(const std::string& cap);

// The instruction set of the table in use (Kernels().isa).
const char* FastKernelIsa();

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_MICROKERNELS_H_
