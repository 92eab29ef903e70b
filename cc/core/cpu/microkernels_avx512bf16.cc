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
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

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
#include "cc/core/cpu/transpose16.inc"

typedef uint32_t Slots __attribute__((vector_size(64)));  // 16 bfloat16 pairs

constexpr int64_t CeilDiv16(int64_t n) { return (n + 15) / 16; }

// Rounds a tile row's NV vectors to bfloat16 at out, bit for bit as RoundToBf16: through
// vcvtne2ps2bf16 (nearest, ties to even, as RoundToBf16), two vectors an instruction, unless
// a lane is a NaN or a denormal, which that instruction quiets its own way or reads as zero;
// such a row goes through RoundToBf16. (vdpbf16ps flushes the denormals of its results, so
// the accumulators hold none.)
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

// The results go to c as floats or, with Narrowed, rounded to bfloat16 (RoundToBf16). The
// reduction runs over rows k0 to k0 + depth - 1 of each tap (k0 even: the AMX kernels below
// leave the rows past their last whole tile of 32 to it).
template <int MR, int NV, bool Affine, bool Narrowed = false>
TF_OPS_INLINE void DotTile(int64_t taps, const void* const* a, int64_t pixel_step,
                           const float* const* b, int64_t depth, void* out, int64_t ldc,
                           bool accumulate, int64_t k0 = 0) {
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
    for (int m = 0; m < MR; ++m) ap[m] = PixelOf<MR, Affine>(a, t, m, pixel_step) + k0;
    const float* bp = b[t] + k0 / 2 * NB;
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
                     int64_t tile_step, const float* const* b, int64_t depth, void* c,
                     int64_t ldc) {
  static_assert(kMaxNarrowTaps <= kMaxAffineTaps, "one tile call");
  const void* ap[kMaxNarrowTaps];
  for (int64_t q = 0; q < tiles; ++q) {
    for (int64_t t = 0; t < taps; ++t) ap[t] = static_cast<const uint16_t*>(a[t]) + q * tile_step;
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

// AMX (Advanced Matrix Extensions): tdpbf16ps multiplies a tile of up to 16 pixels by 32
// bfloat16 reduction rows with a tile of 16 pair rows by 16 columns (the pair panels' layout
// above) and adds the products to a tile of 16 x 16 floats: 8,192 multiply-adds an
// instruction. The kernels take the reduction in whole tiles of 32 rows, tap by tap, and the
// rows past the last whole tile (depth % 32) through DotTile after all taps, so each result's
// order of summation is fixed by the arguments alone; a reduction shorter than 32 rows and
// even (16 channels, say) is one tile of that many rows (TiledDepth). The affine kernels take
// blocks of two tiles of 16 pixels by one or two column tiles at a time (64 columns: two
// halves in turn), so that each panel tile loaded serves two pixel tiles. Tiles: the results of pixel tile pb and
// column tile v in tmm(pb * CV + v) (CV column tiles at a time); the pixels of tile pb in
// tmm(4 + pb); panel rows in tmm6 and tmm7, by turns. Every call loads its own tile
// configuration (the thread may have run other AMX code since) and releases the tiles before
// it returns.

struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "the ldtilecfg layout");

// Column tiles at a time (CV) for a tile width of NV column tiles.
template <int NV>
constexpr int kAmxColumns = NV < 2 ? NV : 2;

// Configures the tiles for CV column tiles of pixel tiles of rows0 and rows1 pixels (rows1
// 0: one pixel tile; CV 4: one pixel tile), each tdpbf16ps reducing over `pairs` pair rows
// (16: a whole tile of 32 reduction rows).
template <int CV>
TF_OPS_INLINE void ConfigureTiles(int rows0, int rows1, int pairs = 16) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  const int rows[2] = {rows0, CV <= 2 ? rows1 : 0};
  for (int pb = 0; pb < 2 && rows[pb] > 0; ++pb) {
    for (int v = 0; v < CV; ++v) cfg.rows[pb * CV + v] = static_cast<uint8_t>(rows[pb]);
    for (int v = 0; v < CV; ++v) cfg.colsb[pb * CV + v] = 64;
    cfg.rows[4 + pb] = static_cast<uint8_t>(rows[pb]);
    cfg.colsb[4 + pb] = static_cast<uint16_t>(4 * pairs);
  }
  for (int t = 6; t < 8; ++t) cfg.rows[t] = static_cast<uint8_t>(pairs), cfg.colsb[t] = 64;
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

// The reduction rows the AMX kernels take in tiles, and the pair rows of each tdpbf16ps: whole
// tiles of 32 rows, or all of a reduction shorter than 32 and even in one shorter tile, whose
// configured width keeps the loads within the pixels' rows. An odd reduction shorter than 32
// goes to DotTile whole: a tile would read past its last row.
struct TiledDepth {
  explicit TiledDepth(int64_t depth) {
    const bool short_tile = depth < 32 && depth % 2 == 0;
    rows = short_tile ? depth : depth / 32 * 32;
    pairs = short_tile ? static_cast<int>(depth / 2) : 16;
  }
  int64_t rows;
  int pairs;
};

TF_OPS_INLINE void ReleaseTiles() { asm volatile("tilerelease" ::: "memory"); }

template <int T>
TF_OPS_INLINE void TileLoad(const void* p, int64_t stride_bytes) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(p), "r"(stride_bytes), "i"(T) : "memory");
}

template <int T>
TF_OPS_INLINE void TileStore(void* p, int64_t stride_bytes) {
  asm volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(p), "r"(stride_bytes), "i"(T) : "memory");
}

template <int T>
TF_OPS_INLINE void TileZero() {
  asm volatile("tilezero %%tmm%c0" : : "i"(T));
}

// tmm(C) += tmm(A) x tmm(B), bfloat16 pairs.
template <int C, int A, int B>
TF_OPS_INLINE void TileDot() {
  asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
}

// fn(std::integral_constant<int, i>) for i < N, in order.
template <typename Fn, int... I>
TF_OPS_INLINE void Unrolled(const Fn& fn, std::integer_sequence<int, I...>) {
  (fn(std::integral_constant<int, I>{}), ...);
}
template <int N, typename Fn>
TF_OPS_INLINE void Unrolled(const Fn& fn) {
  Unrolled(fn, std::make_integer_sequence<int, N>{});
}

// The result tiles of PB tiles of 16 pixels (the last possibly fewer, as configured) by CV
// column tiles from column `col` of panels NB columns wide: loaded from c (row stride ldc
// floats) or zeroed, the whole tiles of 32 reduction rows of every tap added, stored to c.
// Pixel tile pb's pixels at tap t start at pixel(t, pb) and lie a_stride bytes apart; the
// panel of tap t at b[t].
template <int CV, int PB, int NB, typename Pixel>
TF_OPS_INLINE void TileSums(int64_t taps, const Pixel& pixel, int64_t a_stride,
                            const float* const* b, int64_t col, int64_t whole, float* c,
                            int64_t ldc, bool accumulate) {
  const auto result = [&](int tile) { return c + tile / CV * 16 * ldc + col + tile % CV * 16; };
  Unrolled<PB * CV>([&](auto tile) {
    if (accumulate) {
      TileLoad<tile>(result(tile), ldc * 4);
    } else {
      TileZero<tile>();
    }
  });
  for (int64_t t = 0; t < taps; ++t) {
    const uint16_t* const p0 = pixel(t, 0);
    const uint16_t* const p1 = PB > 1 ? pixel(t, 1) : p0;
    const float* bp = b[t] + col;
    for (int64_t k = 0; k < whole; k += 32, bp += 16 * NB) {
      TileLoad<4>(p0 + k, a_stride);
      if constexpr (PB > 1) TileLoad<5>(p1 + k, a_stride);
      Unrolled<CV>([&](auto v) {
        constexpr int kPanel = 6 + v % 2;
        TileLoad<kPanel>(bp + v * 16, NB * 4);
        TileDot<v, 4, kPanel>();
        if constexpr (PB > 1) TileDot<CV + v, 5, kPanel>();
      });
    }
  }
  Unrolled<PB * CV>([&](auto tile) { TileStore<tile>(result(tile), ldc * 4); });
}

// Reduction rows k0 to k0 + depth - 1 of `rows` pixels from pixel `first`, added to c (or
// written, unless accumulate; row stride ldc): affine (pixel p of tap t at a[t] + p * step
// elements) or indirect (at a[t * step + p]), through DotTile in groups of the float table's
// tile height for the width, then of 4 and 1 pixels.
template <int NV, bool Affine>
void RowGroups(int64_t first, int64_t rows, int64_t taps, const void* const* a, int64_t step,
               const float* const* b, int64_t depth, int64_t k0, float* c, int64_t ldc,
               bool accumulate) {
  constexpr int kGroup = NV == 1 ? 14 : NV == 2 ? 12 : 6;
  const void* ap[kMaxAffineTaps * kGroup];
  for (int64_t t0 = 0; t0 < taps; t0 += kMaxAffineTaps) {
    const int64_t n = std::min<int64_t>(kMaxAffineTaps, taps - t0);
    const bool acc = accumulate || t0 > 0;
    for (int64_t r = 0; r < rows;) {
      const int group = rows - r >= kGroup ? kGroup : rows - r >= 4 ? 4 : 1;
      for (int64_t t = 0; t < n; ++t) {
        if constexpr (Affine) {
          ap[t] = static_cast<const uint16_t*>(a[t0 + t]) + (first + r) * step;
        } else {
          for (int m = 0; m < group; ++m) ap[t * group + m] = a[(t0 + t) * step + first + r + m];
        }
      }
      const int64_t pixel_step = Affine ? step : 0;
      float* const out = c + r * ldc;
      if (group == kGroup) {
        DotTile<kGroup, NV, Affine>(n, ap, pixel_step, b + t0, depth, out, ldc, acc, k0);
      } else if (group == 4) {
        DotTile<4, NV, Affine>(n, ap, pixel_step, b + t0, depth, out, ldc, acc, k0);
      } else {
        DotTile<1, NV, Affine>(n, ap, pixel_step, b + t0, depth, out, ldc, acc, k0);
      }
      r += group;
    }
  }
}

// The affine GEMM (Narrowed: rounded to bfloat16, as DotAffineNarrow) in blocks of 32
// pixels, whatever MR: a pixel's sums do not depend on its block. Tile q of 16 pixels starts
// tile_step elements after tile q - 1 (GemmAffineNarrowFn), so that a block's two tiles may
// come from two rows.
template <int MR, int NV, bool Narrowed>
void AmxAffine(int64_t tiles, int64_t taps, const void* const* a, int64_t pixel_step,
               int64_t tile_step, const float* const* b, int64_t depth, void* out, int64_t ldc,
               bool accumulate) {
  static_assert(MR == 16, "tiles of 16 pixels");
  constexpr int NB = NV * 16, CV = kAmxColumns<NV>, kBlock = 32;
  const TiledDepth tiled(depth);
  const int64_t whole = tiled.rows, pixels = tiles * MR;
  alignas(64) float staged[Narrowed ? kBlock * NB : 1];
  int rows0 = 0, rows1 = 0;
  for (int64_t first = 0; first < pixels; first += kBlock) {
    const int n = static_cast<int>(std::min<int64_t>(kBlock, pixels - first));
    const int n0 = std::min(n, 16), n1 = std::max(n - 16, 0);  // the block's two tiles
    // A configuration serves any block whose first tile has its rows0 pixels and whose
    // second, if any, its rows1: a run's last block of 16 pixels keeps the configuration of
    // the blocks of 32 before it (ldtilecfg waits for the tile instructions before it).
    if (whole > 0 && (n0 != rows0 || (n1 > 0 && n1 != rows1))) {
      rows0 = n0, rows1 = n1;
      ConfigureTiles<CV>(rows0, rows1, tiled.pairs);
    }
    float* const c = Narrowed ? staged : static_cast<float*>(out) + first * ldc;
    const int64_t c_ld = Narrowed ? NB : ldc;
    const auto pixel = [&](int64_t t, int pb) {
      return static_cast<const uint16_t*>(a[t]) + (first / 16 + pb) * tile_step;
    };
    for (int64_t col = 0; col < NB && whole > 0; col += CV * 16) {
      if (n1 > 0) {
        TileSums<CV, 2, NB>(taps, pixel, pixel_step * 2, b, col, whole, c, c_ld, accumulate);
      } else {
        TileSums<CV, 1, NB>(taps, pixel, pixel_step * 2, b, col, whole, c, c_ld, accumulate);
      }
    }
    if (depth > whole && tile_step == 16 * pixel_step) {
      RowGroups<NV, true>(first, n, taps, a, pixel_step, b, depth - whole, whole, c, c_ld,
                          accumulate || whole > 0);
    } else if (depth > whole) {
      // Tiles apart: the rows past the whole tiles one tile at a time (narrowed runs only).
      const void* ap[kMaxNarrowTaps];
      for (int pb = 0; pb * 16 < n; ++pb) {
        for (int64_t t = 0; t < taps; ++t) ap[t] = pixel(t, pb);
        RowGroups<NV, true>(0, std::min(16, n - pb * 16), taps, ap, pixel_step, b,
                            depth - whole, whole, c + pb * 16 * c_ld, c_ld,
                            accumulate || whole > 0);
      }
    }
    if constexpr (Narrowed) {
      for (int r = 0; r < n; ++r) {
        __m512 acc[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[v] = _mm512_load_ps(staged + r * NB + v * 16);
        RoundRowToBf16<NV>(acc, static_cast<uint16_t*>(out) + (first + r) * ldc);
      }
    }
  }
  if (whole > 0) ReleaseTiles();
}

template <int MR, int NV>
void AmxAffineFloat(int64_t tiles, int64_t taps, const void* const* a, int64_t pixel_step,
                    const float* const* b, int64_t depth, float* c, int64_t ldc,
                    bool accumulate) {
  AmxAffine<MR, NV, false>(tiles, taps, a, pixel_step, MR * pixel_step, b, depth, c, ldc,
                           accumulate);
}

template <int MR, int NV>
void AmxAffineNarrow(int64_t tiles, int64_t taps, const void* const* a, int64_t pixel_step,
                     int64_t tile_step, const float* const* b, int64_t depth, void* c,
                     int64_t ldc) {
  AmxAffine<MR, NV, true>(tiles, taps, a, pixel_step, tile_step, b, depth, c, ldc, false);
}

// The indirect GEMM: each tap's MR pixels are copied, 32 reduction rows at a time, into
// one tile's rows. The copy runs a step ahead of the tile load that reads it, into the other
// of two buffers: a tile load does not take data from stores still in flight, and waits for
// them.
template <int MR, int NV>
void AmxIndirect(int64_t taps, const void* const* a, const float* const* b, int64_t depth,
                 float* c, bool accumulate) {
  constexpr int NB = NV * 16;
  const TiledDepth tiled(depth);
  const int64_t whole = tiled.rows;
  if (whole > 0) {
    alignas(64) uint16_t rows[2][MR][32];
    // A short tile's rows are read up to its last reduction row only.
    const __mmask32 row_mask = whole < 32 ? (__mmask32{1} << whole) - 1 : ~__mmask32{0};
    const auto copy = [&](int64_t t, int64_t k, uint16_t (*to)[32]) {
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const uint16_t* src = static_cast<const uint16_t*>(a[t * MR + m]) + k;
        _mm512_store_si512(to[m], _mm512_maskz_loadu_epi16(row_mask, src));
      }
    };
    copy(0, 0, rows[0]);
    ConfigureTiles<NV>(MR, 0, tiled.pairs);
    const auto result = [&](int tile) { return c + tile * 16; };
    Unrolled<NV>([&](auto tile) {
      if (accumulate) {
        TileLoad<tile>(result(tile), NB * 4);
      } else {
        TileZero<tile>();
      }
    });
    for (int64_t t = 0, step = 0; t < taps; ++t) {
      const float* bp = b[t];
      for (int64_t k = 0; k < whole; k += 32, bp += 16 * NB, ++step) {
        TileLoad<4>(rows[step % 2], 64);
        if (k + 32 < whole) {
          copy(t, k + 32, rows[(step + 1) % 2]);
        } else if (t + 1 < taps) {
          copy(t + 1, 0, rows[(step + 1) % 2]);
        }
        Unrolled<NV>([&](auto v) {
          constexpr int kPanel = 6 + v % 2;
          TileLoad<kPanel>(bp + v * 16, NB * 4);
          TileDot<v, 4, kPanel>();
        });
      }
    }
    Unrolled<NV>([&](auto tile) { TileStore<tile>(result(tile), NB * 4); });
    ReleaseTiles();
  }
  if (depth > whole || whole == 0) {
    RowGroups<NV, false>(0, MR, taps, a, MR, b, depth - whole, whole, c, NB,
                         accumulate || whole > 0);
  }
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

// The strided reduction of the filter gradient (DotStrided's contract) on AMX tiles: 16 pair
// rows at a time, a's slots transposed into tiles of up to 16 GEMM rows (two where MR > 16,
// then one or two column tiles at a time, each a's transposed tiles kept for the next columns
// where they fit), a last group of fewer pair rows padded with zeros in both operands.
template <int MR, int NV>
void AmxStrided(int64_t runs, int64_t len, const float* a, int64_t a_run, int64_t a_step,
                int64_t rows, const float* b, int64_t b_run, int64_t b_step, float* c,
                int64_t ldc) {
  constexpr int NB = NV * 16, RT = MR > 16 ? 2 : 1, CV = RT == 2 ? kAmxColumns<NV> : NV;
  static_assert(RT * CV <= 4 && MR <= 32, "result tiles");
  const int rows0 = static_cast<int>(std::min<int64_t>(rows, 16));
  const int rows1 = static_cast<int>(std::max<int64_t>(rows - 16, 0));
  const bool two = RT > 1 && rows1 > 0;
  const __mmask16 masks[2] = {static_cast<__mmask16>((1u << rows0) - 1),
                              static_cast<__mmask16>((1u << rows1) - 1)};
  const int64_t groups = CeilDiv16(len), total = runs * groups;
  constexpr int64_t kKept = 8;  // groups of transposed tiles kept across column passes
  const bool keep = NV > CV && total <= kKept;
  alignas(64) uint32_t kept[kKept][RT][16][16];
  alignas(64) uint32_t tail[16][NB];
  ConfigureTiles<CV>(rows0, rows1);
  for (int64_t col = 0; col < NB; col += CV * 16) {
    const auto result = [&](int tile) { return c + tile / CV * 16 * ldc + col + tile % CV * 16; };
    Unrolled<RT * CV>([&](auto tile) {
      if (tile / CV == 0 || two) TileLoad<tile>(result(tile), ldc * 4);
    });
    for (int64_t s = 0, index = 0; s < runs; ++s) {
      const float* const as = a + s * a_run;
      const float* const bs = b + s * b_run;
      for (int64_t r0 = 0; r0 < len; r0 += 16, ++index) {
        const int n = static_cast<int>(std::min<int64_t>(16, len - r0));
        uint32_t(*const at)[16][16] = kept[keep ? index : 0];
        for (int pb = 0; pb < RT && (col == 0 || !keep) && (pb == 0 || two); ++pb) {
          Slots row[16];
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) {
            const float* const slots = as + (r0 + i) * a_step + pb * 16;
            row[i] = (Slots)(i < n ? _mm512_maskz_loadu_epi32(masks[pb], slots)
                                   : _mm512_setzero_si512());
          }
          TransposeRegisters<Slots, Slots>(row);
#pragma GCC unroll 16
          for (int m = 0; m < 16; ++m) std::memcpy(at[pb][m], &row[m], 64);
        }
        TileLoad<4>(at[0], 64);
        if (two) TileLoad<5>(at[RT - 1], 64);
        const float* bp = bs + r0 * b_step + col;
        int64_t b_stride = b_step * 4;
        if (n < 16) {
          for (int i = 0; i < 16; ++i) {
            for (int v = 0; v < CV; ++v) {
              const __m512i row = i < n ? _mm512_loadu_si512(bp + i * b_step + v * 16)
                                        : _mm512_setzero_si512();
              _mm512_store_si512(tail[i] + v * 16, row);
            }
          }
          bp = reinterpret_cast<const float*>(&tail[0][0]);
          b_stride = NB * 4;
        }
        Unrolled<CV>([&](auto v) {
          constexpr int kPanel = 6 + v % 2;
          TileLoad<kPanel>(bp + v * 16, b_stride);
          TileDot<v, 4, kPanel>();
          if constexpr (RT > 1) {
            if (two) TileDot<CV + v, 5, kPanel>();
          }
        });
      }
    }
    Unrolled<RT * CV>([&](auto tile) {
      if (tile / CV == 0 || two) TileStore<tile>(result(tile), ldc * 4);
    });
  }
  ReleaseTiles();
}

// GemmShiftedFn on AMX tiles: a block of one or two row tiles (M2) by one or two column tiles
// (N2) of every tap's results over pair rows [r0, r1). Tiles as ConfigureTiles<2>: results in
// tmm0-3 (row tile * 2 + column tile), rows of a in tmm4 and tmm5, pairs of b in tmm6 and tmm7.
template <bool M2, bool N2>
TF_OPS_INLINE void ShiftedBlock(int64_t taps, const uint16_t* a, int64_t a_step,
                                const uint32_t* const* b, int64_t col, int64_t ldb, int64_t r0,
                                int64_t r1, float* c, int64_t ldc, int64_t c_tap) {
  const int64_t c_stride = ldc * 4, b_stride = ldb * 4;
  for (int64_t t = 0; t < taps; ++t) {
    float* const ct = c + t * c_tap;
    TileLoad<0>(ct, c_stride);
    if constexpr (N2) TileLoad<1>(ct + 16, c_stride);
    if constexpr (M2) TileLoad<2>(ct + 16 * ldc, c_stride);
    if constexpr (M2 && N2) TileLoad<3>(ct + 16 * ldc + 16, c_stride);
    const uint16_t* at = a + r0 / 16 * a_step;
    const uint32_t* bt = b[t] + r0 * ldb + col;
    for (int64_t r = r0; r < r1; r += 16, at += a_step, bt += 16 * ldb) {
      TileLoad<4>(at, 64);
      TileLoad<6>(bt, b_stride);
      TileDot<0, 4, 6>();
      if constexpr (N2) {
        TileLoad<7>(bt + 16, b_stride);
        TileDot<1, 4, 7>();
      }
      if constexpr (M2) {
        TileLoad<5>(at + 16 * 32, 64);
        TileDot<2, 5, 6>();
        if constexpr (N2) TileDot<3, 5, 7>();
      }
    }
    TileStore<0>(ct, c_stride);
    if constexpr (N2) TileStore<1>(ct + 16, c_stride);
    if constexpr (M2) TileStore<2>(ct + 16 * ldc, c_stride);
    if constexpr (M2 && N2) TileStore<3>(ct + 16 * ldc + 16, c_stride);
  }
}

// Pair rows a block of results takes before the next block: its rows of a and the taps'
// pairs of b stay in the L1 cache through every tap.
constexpr int64_t kShiftedPairs = 128;

void AmxShifted(int64_t taps, const uint16_t* a, int64_t a_step, int64_t rows,
                const uint32_t* const* b, int64_t ldb, int64_t cols, int64_t pairs, float* c,
                int64_t ldc, int64_t c_tap) {
  ConfigureTiles<2>(16, 16);
  for (int64_t r0 = 0; r0 < pairs; r0 += kShiftedPairs) {
    const int64_t r1 = std::min(pairs, r0 + kShiftedPairs);
    for (int64_t m = 0; m < rows; m += 32) {
      const uint16_t* const am = a + m * 32;
      for (int64_t j = 0; j < cols; j += 32) {
        float* const cm = c + m * ldc + j;
        if (rows - m > 16) {
          if (cols - j > 16) {
            ShiftedBlock<true, true>(taps, am, a_step, b, j, ldb, r0, r1, cm, ldc, c_tap);
          } else {
            ShiftedBlock<true, false>(taps, am, a_step, b, j, ldb, r0, r1, cm, ldc, c_tap);
          }
        } else if (cols - j > 16) {
          ShiftedBlock<false, true>(taps, am, a_step, b, j, ldb, r0, r1, cm, ldc, c_tap);
        } else {
          ShiftedBlock<false, false>(taps, am, a_step, b, j, ldb, r0, r1, cm, ldc, c_tap);
        }
      }
    }
  }
  ReleaseTiles();
}

// GemmShiftedRowsFn on vdpbf16ps: JB input slots (columns of b) by MV vectors of 16 rows of
// one tap, over every pair: each pair row of a loaded once as MV vectors, each slot of b
// broadcast; the sums added to c at the end, the last vector's lanes masked by `last`.
template <int MV, int JB>
void ShiftedRowsBlock(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                      int64_t pairs, float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[JB][MV];
#pragma GCC unroll 24
  for (int j = 0; j < JB; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) acc[j][v] = _mm512_setzero_ps();
  }
  for (int64_t r = 0; r < pairs; ++r, a += lda, b += ldb) {
    __m512bh rows[MV];
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) rows[v] = (__m512bh)_mm512_loadu_si512(a + v * 16);
#pragma GCC unroll 24
    for (int j = 0; j < JB; ++j) {
      const __m512bh slot = (__m512bh)_mm512_set1_epi32(static_cast<int>(b[j]));
#pragma GCC unroll 4
      for (int v = 0; v < MV; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], rows[v], slot);
    }
  }
#pragma GCC unroll 24
  for (int j = 0; j < JB; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) {
      float* const cv = c + j * ldc + v * 16;
      const __mmask16 mask = v + 1 < MV ? __mmask16{0xffff} : last;
      _mm512_mask_storeu_ps(cv, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, cv), acc[j][v]));
    }
  }
}

// Slots a block takes with MV vectors of rows: 24 accumulators.
constexpr int ShiftedRowsSlots(int mv) { return 24 / mv; }

using ShiftedRowsBlockFn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, int64_t,
                                    float*, int64_t, __mmask16);

// blocks[mv - 1][jb - 1]: ShiftedRowsBlock<mv, jb> for jb <= ShiftedRowsSlots(mv), else null.
template <int MV, int... J>
constexpr std::array<ShiftedRowsBlockFn, 24> ShiftedRowsBlocksOf(std::integer_sequence<int, J...>) {
  return {(J < ShiftedRowsSlots(MV) ? &ShiftedRowsBlock<MV, std::min(J + 1, ShiftedRowsSlots(MV))>
                                    : nullptr)...};
}
constexpr std::array<ShiftedRowsBlockFn, 24> kShiftedRowsBlocks[4] = {
    ShiftedRowsBlocksOf<1>(std::make_integer_sequence<int, 24>()),
    ShiftedRowsBlocksOf<2>(std::make_integer_sequence<int, 24>()),
    ShiftedRowsBlocksOf<3>(std::make_integer_sequence<int, 24>()),
    ShiftedRowsBlocksOf<4>(std::make_integer_sequence<int, 24>())};

void DotShiftedRows(int64_t taps, const uint32_t* a, int64_t lda, int64_t rows,
                    const uint32_t* const* b, int64_t ldb, int64_t cols, int64_t pairs, float* c,
                    int64_t ldc, int64_t c_tap) {
  for (int64_t m = 0; m < rows; m += 64) {
    const int64_t n = std::min<int64_t>(64, rows - m);
    const int mv = static_cast<int>(CeilDiv16(n));
    const __mmask16 last = static_cast<__mmask16>(0xffffu >> (mv * 16 - n));
    const int slots = ShiftedRowsSlots(mv);
    for (int64_t t = 0; t < taps; ++t) {
      for (int64_t j = 0; j < cols; j += slots) {
        const int64_t jb = std::min<int64_t>(slots, cols - j);
        kShiftedRowsBlocks[mv - 1][jb - 1](a + m, lda, b[t] + j, ldb, pairs,
                                           c + t * c_tap + j * ldc + m, ldc, last);
      }
    }
  }
}

// MakeDot's kernels on AMX tiles; MR is the float table's tile height.
template <int MR, int NV>
GemmKernel MakeAmx() {
  GemmKernel k = MakeDot<MR, NV, 0>();
  // Tiles of 16 pixels, a whole AMX tile (the passes take the pair table's tile height).
  k.mr = 16;
  k.indirect[kElemBF16] = AmxIndirect<16, NV>;
  k.affine[kElemBF16] = AmxAffineFloat<16, NV>;
  k.affine_narrow[kElemBF16] = AmxAffineNarrow<16, NV>;
  // Tiles of 32 GEMM rows beside the float table's: AMX computes only the configured rows, so
  // taller tiles cost nothing where rows are few, and fill both pixel tiles where they are many.
  // Those pay only past 16 GEMM rows (input channels: pair operands never merge filter
  // columns), and with 16 output channels or more as well (a table of 32 or 64 columns) the
  // filter gradient runs on `shifted`: only the 16-column table keeps them.
  k.strided[0] = {MR, AmxStrided<MR, NV>};
  if constexpr (NV == 1) k.strided[1] = {32, AmxStrided<32, NV>};
  k.shifted = AmxShifted;
  return k;
}

}  // namespace

// The same tile shapes (and taller strided kernels) as the AVX-512 table's gemm entries.
const GemmKernel* Avx512Bf16GemmKernels() {
  static const GemmKernel* const kernels = [] {
    static GemmKernel k[kPairTiles] = {MakeDot<14, 1, 24>(), MakeDot<12, 2, 0>(), MakeDot<6, 4, 0>()};
    // Its blocks do not depend on the column width: the first entry alone (GemmFor's of
    // gemm[0], which the filter tiles take).
    k[0].shifted_rows = DotShiftedRows;
    return k;
  }();
  return kernels;
}

const GemmKernel* AmxBf16GemmKernels() {
  static const GemmKernel kernels[kPairTiles] = {MakeAmx<14, 1>(), MakeAmx<12, 2>(), MakeAmx<6, 4>()};
  return kernels;
}

}  // namespace cpu
}  // namespace tf_ops
