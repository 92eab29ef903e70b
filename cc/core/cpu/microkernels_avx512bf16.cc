// bfloat16 GEMM micro-kernels on AVX-512 BF16 dot products (vdpbf16ps): each instruction
// multiplies pairs of bfloat16 values and adds both products to float accumulators, twice
// the multiply-adds of a float FMA. Built with -mavx512bf16 besides the AVX-512 flags and
// called only where the processor has it (Kernels() in conv_fast.cc).
//
// Same tiles and contracts as the gemm entries of microkernels.h, except that b points to
// filter panels of bfloat16 pairs: row pair p of a panel holds, for each of its NB columns,
// the values of reduction rows 2p and 2p + 1 (the second zero past an odd depth), so a
// panel has depth / 2 rounded up rows of NB 32-bit pairs. Depth chunks start at even rows.
// Their `strided` (the filter gradient's reduction) takes both operands in pairs along the
// reduction instead: see DotStrided.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace {

#define TF_OPS_INLINE inline __attribute__((always_inline))

template <int MR, bool Affine>
TF_OPS_INLINE const uint16_t* PixelOf(const void* const* a, int64_t t, int m, int64_t pixel_step) {
  if constexpr (Affine) {
    return static_cast<const uint16_t*>(a[t]) + m * pixel_step;
  } else {
    return static_cast<const uint16_t*>(a[t * MR + m]);
  }
}

// acc[v] += the dot products of `pair` (two bfloat16 values, broadcast to every lane) with
// the pairs of b[v], for v < NV.
template <int NV>
TF_OPS_INLINE void DotPair(__m512* acc, uint32_t pair, const __m512* b) {
  const __m512i av = _mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_dpbf16_ps(acc[v], (__m512bh)av, (__m512bh)b[v]);
}

template <int MR, int NV>
TF_OPS_INLINE void StoreTile(const __m512 (&acc)[MR][NV], float* c, int64_t ldc) {
#pragma GCC unroll 32
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + m * ldc + v * 16, acc[m][v]);
  }
}

#include "cc/core/cpu/round_bf16.inc"

// Rounds a tile row's NV vectors to bfloat16 at out, bit for bit as RoundToBf16: through
// vcvtne2ps2bf16 (nearest, ties to even, as RoundToBf16), two vectors an instruction, unless
// a lane is a NaN or a denormal, which that instruction quiets its own way or reads as zero;
// such a row goes through RoundToBf16. (vdpbf16ps flushes the denormals of its results, so
// the accumulators hold none.) A 1x1 layer of 64 -> 256 channels in bfloat16: 6% faster.
template <int NV>
TF_OPS_INLINE void RoundRowToBf16(__m512* acc, uint16_t* out) {
  constexpr int kNanOrDenormal = 0x01 | 0x20 | 0x80;  // quiet NaN, denormal, signalling NaN
  __mmask16 special = 0;
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) special |= _mm512_fpclass_ps_mask(acc[v], kNanOrDenormal);
  if (__builtin_expect(special != 0, 0)) {
    for (int v = 0; v < NV; ++v) RoundToBf16(&acc[v], out + v * 16);
    return;
  }
#pragma GCC unroll 8
  for (int v = 0; v + 1 < NV; v += 2) {
    const __m512bh h = _mm512_cvtne2ps_pbh(acc[v + 1], acc[v]);  // acc[v] in the low half
    _mm512_storeu_si512(out + v * 16, (__m512i)h);
  }
  if constexpr (NV % 2 == 1) {
    const __m256bh h = _mm512_cvtneps_pbh(acc[NV - 1]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (NV - 1) * 16), (__m256i)h);
  }
}

// The results go to c as floats or, with Narrowed, rounded to bfloat16 (RoundToBf16).
template <int MR, int NV, bool Affine, bool Narrowed = false>
TF_OPS_INLINE void DotTile(int64_t taps, const void* const* a, int64_t pixel_step,
                           const float* const* b, int64_t depth, void* out, int64_t ldc,
                           bool accumulate) {
  constexpr int NB = NV * 16;
  float* const c = static_cast<float*>(out);
  __m512 acc[MR][NV];
#pragma GCC unroll 32
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[m][v] = accumulate ? _mm512_loadu_ps(c + m * ldc + v * 16) : _mm512_setzero_ps();
    }
  }
  const int64_t pairs = depth / 2;
  for (int64_t t = 0; t < taps; ++t) {
    const uint16_t* ap[MR];
#pragma GCC unroll 32
    for (int m = 0; m < MR; ++m) ap[m] = PixelOf<MR, Affine>(a, t, m, pixel_step);
    const float* bp = b[t];
    for (int64_t p = 0; p < pairs; ++p, bp += NB) {
      __m512 bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bp + v * 16);
#pragma GCC unroll 32
      for (int m = 0; m < MR; ++m) {
        uint32_t pair;
        std::memcpy(&pair, ap[m] + 2 * p, 4);
        DotPair<NV>(acc[m], pair, bv);
      }
    }
    if (depth & 1) {
      // The last row alone: its pair partner is zero in the panel and in the broadcast.
      __m512 bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bp + v * 16);
#pragma GCC unroll 32
      for (int m = 0; m < MR; ++m) {
        DotPair<NV>(acc[m], ap[m][depth - 1], bv);
      }
    }
  }
  if constexpr (Narrowed) {
#pragma GCC unroll 32
    for (int m = 0; m < MR; ++m) RoundRowToBf16<NV>(acc[m], static_cast<uint16_t*>(out) + m * ldc);
  } else {
    StoreTile<MR, NV>(acc, c, ldc);
  }
}

template <int MR, int NV>
void DotIndirect(int64_t taps, const void* const* a, const float* const* b, int64_t depth,
                 float* c, bool accumulate) {
  DotTile<MR, NV, false>(taps, a, 0, b, depth, c, NV * 16, accumulate);
}

constexpr int kMaxAffineTaps = 64;

template <int MR, int NV>
void DotAffine(int64_t tiles, int64_t taps, const void* const* a, int64_t pixel_step,
               const float* const* b, int64_t depth, float* c, int64_t ldc, bool accumulate) {
  for (int64_t t0 = 0; t0 < taps; t0 += kMaxAffineTaps) {
    const int64_t n = taps - t0 < kMaxAffineTaps ? taps - t0 : kMaxAffineTaps;
    const void* ap[kMaxAffineTaps];
    for (int64_t q = 0; q < tiles; ++q) {
      for (int64_t t = 0; t < n; ++t) {
        ap[t] = static_cast<const uint16_t*>(a[t0 + t]) + q * MR * pixel_step;
      }
      DotTile<MR, NV, true>(n, ap, pixel_step, b + t0, depth, c + q * MR * ldc, ldc,
                            accumulate || t0 > 0);
    }
  }
}

// DotAffine rounding its results to bfloat16: all taps (at most kMaxNarrowTaps) in one tile call.
template <int MR, int NV>
void DotAffineNarrow(int64_t tiles, int64_t taps, const void* const* a, int64_t pixel_step,
                     const float* const* b, int64_t depth, void* c, int64_t ldc) {
  static_assert(kMaxNarrowTaps <= kMaxAffineTaps, "one tile call");
  const void* ap[kMaxNarrowTaps];
  for (int64_t q = 0; q < tiles; ++q) {
    for (int64_t t = 0; t < taps; ++t) ap[t] = static_cast<const uint16_t*>(a[t]) + q * MR * pixel_step;
    DotTile<MR, NV, true, true>(taps, ap, pixel_step, b, depth,
                                static_cast<uint16_t*>(c) + q * MR * ldc, ldc, false);
  }
}

// The strided reduction of the filter gradient on pairs: a and b hold bfloat16 pairs (two
// consecutive output pixels of one input channel / output channel) in 32-bit slots;
//   c[m*ldc + j] += sum_{s < runs} sum_{r < len} dot(a[s*a_run + r*a_step + m],
//                                                  b[s*b_run + r*b_step + j])
// for m < rows, as GemmStridedFn.
template <int MR, int NV, bool Full>
TF_OPS_INLINE void DotStridedSums(__m512 (&acc)[MR][NV], int64_t runs, int64_t len,
                                  const float* a, int64_t a_run, int64_t a_step, int64_t rows,
                                  const float* b, int64_t b_run, int64_t b_step) {
  // Row m reads slot m, a constant displacement; unless Full (rows == MR), rows past `rows`
  // are skipped.
  for (int64_t s = 0; s < runs; ++s, a += a_run, b += b_run) {
    for (int64_t r = 0; r < len; ++r) {
      __m512 bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + r * b_step + v * 16);
      const float* const ar = a + r * a_step;
#pragma GCC unroll 32
      for (int m = 0; m < MR; ++m) {
        if (!Full && m >= rows) break;
        uint32_t pair;
        std::memcpy(&pair, ar + m, 4);
        DotPair<NV>(acc[m], pair, bv);
      }
    }
  }
}

template <int MR, int NV>
void DotStrided(int64_t runs, int64_t len, const float* a, int64_t a_run, int64_t a_step,
                int64_t rows, const float* b, int64_t b_run, int64_t b_step, float* c,
                int64_t ldc) {
  __m512 acc[MR][NV];
#pragma GCC unroll 32
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_loadu_ps(c + m * ldc + v * 16);
  }
  if (rows == MR) {
    DotStridedSums<MR, NV, true>(acc, runs, len, a, a_run, a_step, rows, b, b_run, b_step);
  } else {
    DotStridedSums<MR, NV, false>(acc, runs, len, a, a_run, a_step, rows, b, b_run, b_step);
  }
  StoreTile<MR, NV>(acc, c, ldc);
}

template <int MR, int NV, int TALL>
GemmKernel MakeDot() {
  GemmKernel k{};
  k.mr = MR;
  k.nb = NV * 16;
  k.indirect[kElemBF16] = DotIndirect<MR, NV>;
  k.affine[kElemBF16] = DotAffine<MR, NV>;
  k.affine_narrow[kElemBF16] = DotAffineNarrow<MR, NV>;
  k.strided[0] = {MR, DotStrided<MR, NV>};
  if constexpr (TALL > 0) k.strided[1] = {TALL, DotStrided<TALL, NV>};
  return k;
}

}  // namespace

// The same tile shapes (and taller strided kernels) as the AVX-512 table's gemm entries.
const GemmKernel* Avx512Bf16GemmKernels() {
  static const GemmKernel kernels[3] = {MakeDot<14, 1, 24>(), MakeDot<12, 2, 0>(),
                                                MakeDot<6, 4, 0>()};
  return kernels;
}

}  // namespace cpu
}  // namespace tf_ops
