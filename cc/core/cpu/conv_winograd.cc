#include "cc/core/cpu/conv_winograd.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>

#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/coverage.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/microkernels.h"

namespace tf_ops {
namespace cpu {
namespace {

using namespace fast;  // fast_common.h

constexpr int kAlpha = 6;                // transformed tile: 6 x 6
constexpr int kPoints = kAlpha * kAlpha;  // 36 element-wise GEMMs
constexpr int kOut = 4;                  // output tile: 4 x 4

// Channels a group needs on each side (reduction and columns) for the transforms to cost
// less than the multiplies they save.
constexpr int64_t kMinChannels = 16;
// Output pixels a 4x4 tile holds on average at least (of 16). Fewer, and its 36 products
// per channel pair (and the transforms) cost more than the direct sums' 9 a pixel, fewer
// still at the image's edges.
constexpr int64_t kMinTilePixels = 10;
// The float32 filter gradient's direct pass beats Winograd up to this product of in-depth and
// out-depth per group: Winograd's transforms cost in proportion to in-depth + out-depth, its
// GEMMs save in proportion to their product. The 16-bit kinds' direct passes are slower, so
// the bound is float32's alone.
constexpr int64_t kFilterMaxDirectProduct = 512;
// A transformed filter (forward and backprop input) or filter gradient's transformed sums
// past this many floats (16 MiB, sized against a server's last-level cache) cost more
// to transform than few output pixels save, and the direct passes are faster: forward below
// kLargeFilterMinPixels[1] output pixels, backprop input below kLargeFilterMinPixels[0];
// the filter gradient below kFilterLargeSumsMinTiles tiles where its sums are read and
// written through memory, below kFusedFilterMinPixels output pixels where it runs fused
// (FilterFused; twice as many either way in bfloat16 on pairs). At 256 -> 256 the sums, 9
// MiB, stay in the cache, and Winograd's filter gradient wins from few tiles.
constexpr int64_t kLargeFilterFloats = int64_t{4} << 20;
constexpr int64_t kLargeFilterMinPixels[2] = {64, 128};
constexpr int64_t kFilterLargeSumsMinTiles = 64;
// Forward and backprop input in bfloat16 where the direct sums run on pairs (AVX-512 BF16;
// AMX skips Winograd for them altogether): the pairs' rate, twice the float GEMMs', leaves
// Winograd ahead only while the channels are few, up to this product of in-depth and
// out-depth per group.
constexpr int64_t kPairsMaxProduct = 64 * 64;
// Floats of transformed source one work unit holds (36 x tiles x channels): 512 KiB.
constexpr int64_t kBlockFloats = 128 * 1024;
// A unit's share of the transformed filter past this size (1 MiB) does not stay in a core's
// cache: the unit reads it whole from memory, once for its block of tiles. Blocks then hold at
// least kStreamedTiles tiles (while that is at most kMaxBlockFloats of transformed source, 4
// MiB), and the GEMMs fetch the filter ahead (GemmKernel::affine_ahead). Where that leaves
// fewer units than StreamedUnits(), each block's column blocks are split between two units,
// both transforming the block's source. Larger blocks pay even where a block's transformed
// source no longer fits a core's L2: each block reads the filter once, and fewer blocks read
// it fewer times. Where units are many, halves cost more than they gain (each transforms the
// source again), which is why they are kept for few units.
constexpr int64_t kStreamedFilterFloats = int64_t{256} << 10;
constexpr int64_t kStreamedTiles = 64;
constexpr int64_t kMaxBlockFloats = int64_t{1} << 20;

// Forward and backprop input of one group whose transformed filter outgrows a core's cache
// and the transformed source (Fused) run fused: no unit reads a transformed filter from
// memory. The source's tiles are transformed first, kFusedSourceFloats at most at a time
// (8 MiB: in the last-level cache); then a unit per column block (and, for more units, part
// of the tiles) transforms its columns' filter into a panel of its own, kFusedDepth source
// channels at a time, runs the 36 GEMMs over each panel and, after the last, the output
// transform. The streamed pass instead writes the whole transformed filter to memory and
// every block of tiles reads it back from there.
constexpr int64_t kFusedSourceFloats = int64_t{2} << 20;
// Source channels a fused unit takes at a time: it gathers and transforms their filter (a
// panel of 36 x 128 x nb floats: 1.1 MiB at nb = 64) and runs the 36 GEMMs over them before
// the next ones, the GEMMs of later channels adding to the first's sums (the micro-kernel's
// order along the depth unchanged), instead of transforming every channel's filter first
// (4.5 MiB at 512 channels, out of a core's L2).
constexpr int64_t kFusedDepth = 128;

// Units a streamed pass aims for: 8, which on 2 threads is faster than more, smaller blocks
// (above), or one per hardware thread up to kMinUnits, so that larger machines keep every
// thread busy. Unlike the passes that split a reduction, the blocks of tiles change no sum
// (each tile's GEMM rows reduce over all channels in one call, whatever the block), so their
// size may follow the machine without the results doing so.
int64_t StreamedUnits() {
  static const int64_t units =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 8, kMinUnits);
  return units;
}
// Tiles a block of every group's channels holds at least for a unit to transform them all.
constexpr int64_t kAllGroupsMinTiles = 24;
// The 36 planes of transformed data (one per point of the 6 x 6 tile) lie their size plus
// this many floats (a cache line) apart, so that the transforms' 36 streams do not fall into
// a few cache sets where the size is a power of two or a multiple of a large one (256 tiles
// of 64 channels are 64 KiB: every plane in one L1 set).
constexpr int64_t kPlaneSkew = 16;

// The pass in forward terms: dst[n, oh, ow, d_off + j] = sum_{kh, kw, c}
// src[n, oh + kh - pad_top, ow + kw - pad_left, s_off + c] * f[kh][kw][c][j], out-of-range
// source pixels reading zero.
struct Problem {
  int64_t batch, src_rows, src_cols, src_channels, dst_rows, dst_cols, dst_channels;
  int64_t pad_top, pad_left;
  int64_t groups, src_group, dst_group;  // channels per group: reduction and columns
};

Problem MakeProblem(const ConvGeometry& g, bool forward) {
  Problem p;
  p.batch = g.batch;
  p.groups = g.groups;
  if (forward) {
    p.src_rows = g.in_rows, p.src_cols = g.in_cols, p.src_channels = g.in_depth;
    p.dst_rows = g.out_rows, p.dst_cols = g.out_cols, p.dst_channels = g.out_depth;
    p.pad_top = g.pad_top, p.pad_left = g.pad_left;
    p.src_group = g.filter_in_depth, p.dst_group = g.out_depth_per_group();
  } else {
    // dx[ih] = sum_kh dy[ih + pad_top - kh] w[kh] = sum_kh' dy[ih + kh' - (2 - pad_top)] w[2 - kh'].
    p.src_rows = g.out_rows, p.src_cols = g.out_cols, p.src_channels = g.out_depth;
    p.dst_rows = g.in_rows, p.dst_cols = g.in_cols, p.dst_channels = g.in_depth;
    p.pad_top = 2 - g.pad_top, p.pad_left = 2 - g.pad_left;
    p.src_group = g.out_depth_per_group(), p.dst_group = g.filter_in_depth;
  }
  return p;
}

// Pointers to an N x N block of pixels of an NHWC image (rows x cols pixels of `channels`
// elements), its top-left pixel at (r0, c0) of image n, each advanced by `offset` elements;
// pixels outside the image point at `zeros`.
template <int N, typename T>
void BlockPointers(const T* image, int64_t n, int64_t r0, int64_t c0, int64_t rows, int64_t cols,
                   int64_t channels, int64_t offset, const float* zeros, const void** out) {
  for (int a = 0; a < N; ++a) {
    for (int b = 0; b < N; ++b) {
      const int64_t r = r0 + a, c = c0 + b;
      const bool inside = r >= 0 && r < rows && c >= 0 && c < cols;
      out[a * N + b] = inside ? static_cast<const void*>(image + ((n * rows + r) * cols + c) * channels + offset)
                              : static_cast<const void*>(zeros);
    }
  }
}

// Tiles of 4 x 4 outputs, numbered across images: tile i is image i / per_image, tile row
// i % per_image / tiles_w, tile column i % tiles_w.
struct TileGrid {
  TileGrid(const Problem& p)
      : tiles_w(CeilDiv(p.dst_cols, kOut)),
        per_image(CeilDiv(p.dst_rows, kOut) * tiles_w),
        tiles(p.batch * per_image) {}
  int64_t tiles_w, per_image, tiles;
};

// Input transform of tiles [first, first + count): v[xi * v_plane + q * n + c] for tile
// first + q and the n source channels from `offset` on; rows count..rows (up to whole GEMM
// tiles) zero.
template <typename T>
void TransformTiles(const Problem& p, const TileGrid& grid, WinogradInputFn input_fn, const T* src,
                    int64_t first, int64_t count, int64_t rows, int64_t offset, int64_t n,
                    const float* zeros, float* v, int64_t v_plane) {
  NoteKernel(input_fn);
  for (int64_t q = 0; q < count; ++q) {
    const int64_t i = first + q, img = i / grid.per_image;
    const int64_t th = i % grid.per_image / grid.tiles_w, tw = i % grid.tiles_w;
    const void* patch[kPoints];
    BlockPointers<kAlpha>(src, img, th * kOut - p.pad_top, tw * kOut - p.pad_left, p.src_rows,
                          p.src_cols, p.src_channels, offset, zeros, patch);
    input_fn(patch, n, v + q * n, v_plane);
  }
  if (rows > count) {
    Note(Path::kWinogradPaddedRows);
    for (int xi = 0; xi < kPoints; ++xi) {
      std::fill(v + xi * v_plane + count * n, v + xi * v_plane + rows * n, 0.0f);
    }
  }
}

// Output transform of tiles [first, first + count) from the 36 GEMMs' results m[xi * m_plane +
// q * nb + j] into dst's `width` channels from `offset` on; y: scratch of 16 x nb floats.
template <typename T>
void WriteTiles(const Problem& p, const TileGrid& grid, WinogradOutputFn output_fn, const float* m,
                int64_t m_plane, int64_t nb, int64_t width, int64_t first, int64_t count,
                int64_t offset, float* y, T* dst) {
  NoteKernel(output_fn);
  // The block's first channel of output pixel (oh, ow) of image n.
  T* const dst_block = dst + offset;
  const auto pixel = [&](int64_t n, int64_t oh, int64_t ow) {
    return dst_block + ((n * p.dst_rows + oh) * p.dst_cols + ow) * p.dst_channels;
  };
  // Pixels whose 3x3 window lies wholly in the padding: no product reaches them, and they get
  // exact zeros, as the direct sums give (the transform leaves rounding noise there). The
  // reached rows and columns are [row_lo, row_hi) and [col_lo, col_hi).
  const int64_t row_lo = p.pad_top - 2, row_hi = p.src_rows + p.pad_top;
  const int64_t col_lo = p.pad_left - 2, col_hi = p.src_cols + p.pad_left;
  for (int64_t q = 0; q < count; ++q) {
    const int64_t i = first + q, n = i / grid.per_image;
    const int64_t th = i % grid.per_image / grid.tiles_w, tw = i % grid.tiles_w;
    const int64_t oh0 = th * kOut, ow0 = tw * kOut;
    // Every pixel of the tile inside the output and reached: straight out.
    const bool whole = oh0 + kOut <= p.dst_rows && ow0 + kOut <= p.dst_cols && oh0 >= row_lo &&
                       oh0 + kOut <= row_hi && ow0 >= col_lo && ow0 + kOut <= col_hi;
    const auto reached = [&](int64_t oh, int64_t ow) {
      return oh >= row_lo && oh < row_hi && ow >= col_lo && ow < col_hi;
    };
    float* out[kOut * kOut];
    for (int a = 0; a < kOut; ++a) {
      for (int b = 0; b < kOut; ++b) {
        const int64_t oh = oh0 + a, ow = ow0 + b;
        const bool direct = whole || (oh < p.dst_rows && ow < p.dst_cols && reached(oh, ow));
        float* const scratch = y + (a * kOut + b) * nb;
        if constexpr (std::is_same_v<T, float>) {
          out[a * kOut + b] = direct ? pixel(n, oh, ow) : scratch;
        } else {
          out[a * kOut + b] = scratch;
        }
      }
    }
    output_fn(m + q * nb, m_plane, width, out);
    if (whole && std::is_same_v<T, float>) continue;
    if (oh0 + kOut > p.dst_rows || ow0 + kOut > p.dst_cols) Note(Path::kWinogradEdgeTiles);
    for (int a = 0; a < kOut; ++a) {
      for (int b = 0; b < kOut; ++b) {
        const int64_t oh = oh0 + a, ow = ow0 + b;
        if (oh >= p.dst_rows || ow >= p.dst_cols) continue;
        if (!reached(oh, ow)) {
          Note(Path::kWinogradUnreachedZeros);
          std::fill(pixel(n, oh, ow), pixel(n, oh, ow) + width, T(0.0f));
        } else if constexpr (!std::is_same_v<T, float>) {
          WriteOut(y + (a * kOut + b) * nb, width, pixel(n, oh, ow));
        }
      }
    }
  }
}

// Whether the shape is Winograd's, in a kind it runs: 3x3, stride and dilation 1, at least
// kMinChannels a group on both sides and kMinTilePixels output pixels a tile (exact mode is
// the planner's to read).
template <typename T>
bool WinogradShape(const ConvGeometry& g, bool forward) {
  if constexpr (KindOf<T>() < 0) {
    return false;
  } else {
    if (g.filter_rows != 3 || g.filter_cols != 3 || g.stride_rows != 1 || g.stride_cols != 1 ||
        g.dilation_rows != 1 || g.dilation_cols != 1) {
      return false;
    }
    const Problem p = MakeProblem(g, forward);
    return p.src_group >= kMinChannels && p.dst_group >= kMinChannels && p.dst_rows > 0 &&
           p.dst_cols > 0 && p.batch > 0 &&
           p.batch * p.dst_rows * p.dst_cols >= kMinTilePixels * TileGrid(p).tiles;
  }
}

// Whether bfloat16 runs its direct sums on pairs (vdpbf16ps or AMX) at twice float's rate,
// against Winograd's float GEMMs.
template <typename T>
bool DirectOnPairs(const KernelTable& table) {
  return KindOf<T>() == kElemBF16 && table.gemm_bf16_pairs != nullptr;
}

// 36 transformed values of every (source, destination) channel pair of the filter: the
// transformed filter forward and backprop input, the sums of the filter gradient.
int64_t TransformedFilterFloats(const ConvGeometry& g) {
  return kPoints * g.groups * g.filter_in_depth * g.out_depth_per_group();
}

// Floats of the unfused pass's transformed filter: a panel of nb columns (zero past the group's
// columns) per (group, column block, point) and source channel.
int64_t FilterPanelsFloats(const Problem& p, int64_t nb) {
  return p.groups * CeilDiv(p.dst_group, nb) * kPoints * p.src_group * nb;
}

// 4 x 4 tiles of the pass's destination (the filter gradient's: the forward output's).
int64_t Tiles(const ConvGeometry& g, bool forward) { return TileGrid(MakeProblem(g, forward)).tiles; }

// Whether forward and backprop input run fused (kFusedSourceFloats): one group, whose
// transformed filter does not stay in a core's cache (kStreamedFilterFloats) and is larger
// than the transformed source, which the fused pass reads once per column block. Where the
// source is the larger, reading it once per column block costs more than streaming the filter.
bool Fused(const ConvGeometry& g, bool forward) {
  const int64_t filter = TransformedFilterFloats(g);
  return g.groups == 1 && filter > kStreamedFilterFloats &&
         filter > kPoints * Tiles(g, forward) * MakeProblem(g, forward).src_group;
}

// The blocking of a fused pass: tiles per chunk (as many as kFusedSourceFloats allows, in equal
// chunks of whole GEMM tiles), units per column block (parts of a chunk's GEMM tiles, enough
// for StreamedUnits() units), and source channels a unit takes at a time (kFusedDepth).
WinogradFusedBlocking PlanFused(const Problem& p, int64_t mr, int64_t blocks) {
  WinogradFusedBlocking b;
  const int64_t Cs = p.src_group, tiles = TileGrid(p).tiles;
  const int64_t most = std::max<int64_t>(mr, kFusedSourceFloats / (kPoints * Cs) / mr * mr);
  b.chunks = CeilDiv(tiles, most);
  b.tb = CeilDiv(CeilDiv(tiles, b.chunks), mr) * mr;
  b.parts = std::clamp<int64_t>(CeilDiv(StreamedUnits(), blocks), 1, b.tb / mr);
  b.v_plane = b.tb * Cs + kPlaneSkew;
  b.kc = std::min(kFusedDepth, Cs);
  return b;
}

// The blocking of an unfused pass: a unit transforms a block of `tb` tiles of its groups.
// Channels a unit transforms: with small groups (every group's source channels leave at least
// kAllGroupsMinTiles tiles a block), those of every group (`all`), whose GEMMs and output
// transforms then follow one by one; otherwise one group's. Blocks of kBlockFloats, fewer
// tiles while that leaves fewer than kMinUnits units; where the transformed filter is streamed
// (kStreamedFilterFloats), longer blocks, and column halves (`parts`) where they are too few.
WinogradTileBlocking PlanTileBlocks(const Problem& p, int64_t mr, int64_t nb, int64_t blocks) {
  WinogradTileBlocking b;
  const int64_t G = p.groups, Cs = p.src_group, tiles = TileGrid(p).tiles;
  const int64_t panel = Cs * nb;  // a column block's transformed filter per point
  b.all = G > 1 && kBlockFloats / (kPoints * G * Cs) >= kAllGroupsMinTiles;
  b.Ct = b.all ? G * Cs : Cs, b.ug = b.all ? 1 : G;
  const auto round = [&](int64_t n) { return std::max<int64_t>(mr, n / mr * mr); };
  b.tb = round(kBlockFloats / (kPoints * b.Ct));
  b.tb = std::min(b.tb, CeilDiv(CeilDiv(tiles, CeilDiv(kMinUnits, b.ug)), mr) * mr);
  b.streamed = G / b.ug * blocks * kPoints * panel > kStreamedFilterFloats;
  if (b.streamed) {
    const int64_t longest = round(kMaxBlockFloats / (kPoints * b.Ct));
    // Tiles a block holds for StreamedUnits() units, counting column halves.
    const int64_t spread = CeilDiv(CeilDiv(tiles * b.ug * (blocks > 1 ? 2 : 1), StreamedUnits()), mr) * mr;
    b.tb = std::max(b.tb, std::min({CeilDiv(kStreamedTiles, mr) * mr, longest, spread}));
    b.tb = std::min(b.tb, CeilDiv(tiles, mr) * mr);
  }
  b.tile_blocks = CeilDiv(tiles, b.tb);
  b.parts = b.streamed && blocks > 1 && b.ug * b.tile_blocks < StreamedUnits() ? 2 : 1;
  return b;
}

}  // namespace

template <typename T>
bool WinogradApplies(const KernelTable& table, const ConvGeometry& g, bool forward) {
  if (!WinogradShape<T>(g, forward)) return false;
  // bfloat16 on AMX tiles: the direct sums are faster than Winograd's float GEMMs for every shape.
  if (KindOf<T>() == kElemBF16 && table.amx_tiles) return false;
  // A transformed filter past kLargeFilterFloats costs more than few pixels save
  // (kLargeFilterMinPixels).
  const Problem p = MakeProblem(g, forward);
  if (TransformedFilterFloats(g) > kLargeFilterFloats &&
      p.batch * p.dst_rows * p.dst_cols < kLargeFilterMinPixels[forward]) {
    return false;
  }
  // Direct sums on bfloat16 pairs beat Winograd's float GEMMs past kPairsMaxProduct.
  return !DirectOnPairs<T>(table) || g.filter_in_depth * g.out_depth_per_group() <= kPairsMaxProduct;
}

namespace {

// The fused pass (kFusedSourceFloats): one group. Each unit gathers its column block of w
// (backprop input: transposed) for itself, instead of the whole filter being transposed.
template <typename T>
void WinogradFused(const WinogradPlan& plan, const ConvGeometry& g, const Problem& p, bool forward, const T* w,
                   const T* src, T* dst, const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const KernelTable& table = Kernels();
  const WinogradKernel& wk = table.winograd;
  const GemmKernel& gk = table.gemm[plan.gemm];
  const int mr = gk.mr, nb = gk.nb;
  const int64_t Cs = p.src_group, Cd = p.dst_group, blocks = CeilDiv(Cd, nb);
  Note(Path::kWinogradFused);
  const TileGrid grid(p);
  const WinogradFusedBlocking& fb = plan.fused_blocking;
  if (fb.chunks > 1) Note(Path::kWinogradFusedChunks);
  const int64_t tb = fb.tb, parts = fb.parts, v_plane = fb.v_plane, kc = fb.kc;
  if (parts > 1) Note(Path::kWinogradFusedParts);
  if (kc < Cs) Note(Path::kWinogradFusedDepthChunks);
  Workspace v_space(kPoints * v_plane * sizeof(float));
  float* const v = v_space.data<float>();
  const WinogradInputFn input_fn = wk.input[kind];
  const WinogradFilterFn filter_fn = wk.filter[kind];
  const WinogradOutputFn output_fn = wk.output;
  const GemmAffineFn gemm = gk.affine[kElemF32];
  const TransposeFn transpose = sizeof(T) == 4 ? table.transpose32 : table.transpose16;
  for (int64_t first = 0; first < grid.tiles; first += tb) {
    const int64_t count = std::min(tb, grid.tiles - first);
    const int64_t rows = CeilDiv(count, mr) * mr, gemm_tiles = rows / mr;
    // Input transform: v[xi][tile][c], a unit per GEMM tile of tiles.
    parallel_for(gemm_tiles, Cost(200.0 * mr * Cs), [&](int64_t begin, int64_t end) {
      const float* const zeros = Scratch<float, 33>(Cs);  // never written: zero in every kind
      const int64_t q0 = begin * mr, q1 = std::min(end * mr, count);
      TransformTiles(p, grid, input_fn, src, first + q0, q1 - q0, end * mr - q0, 0, Cs, zeros,
                     v + q0 * Cs, v_plane);
    });
    const double unit_ops = 2.0 * kPoints * rows * Cs * nb / parts + 400.0 * Cs * nb;
    parallel_for(blocks * parts, Cost(unit_ops), [&](int64_t begin, int64_t end) {
      const int64_t u_plane = kc * nb + kPlaneSkew, m_plane = tb * nb + kPlaneSkew;
      float* const u = Scratch<float, 35>(kPoints * u_plane);
      float* const m = Scratch<float, 31>(kPoints * m_plane);
      float* const y = Scratch<float, 32>(kOut * kOut * nb);
      T* const w_c = Scratch<T, 37>(9 * kc * nb);
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t cb = unit / parts, part = unit % parts;
        const int64_t width = std::min<int64_t>(nb, Cd - cb * nb);
        // This unit's GEMM tiles of the chunk, and their tiles.
        const int64_t t0 = gemm_tiles * part / parts, t1 = gemm_tiles * (part + 1) / parts;
        const int64_t q0 = t0 * mr, q1 = std::min(t1 * mr, count);
        if (q1 <= q0) continue;
        // Source channels [c0, c0 + depth) at a time; the GEMMs of later ones add to m.
        for (int64_t c0 = 0; c0 < Cs; c0 += kc) {
          const int64_t depth = std::min(kc, Cs - c0);
          // Their filter, gathered first so that its transform reads it from the cache:
          // w_c[t][c][j] for tap t of the pass, source channel c0 + c, j < width. Forward,
          // w[t][c0 + c][cb*nb + j], copied (rather than the transform reading w); backprop
          // input, w[8 - t][cb*nb + j][c0 + c], transposed.
          for (int t = 0; t < 9; ++t) {
            T* const to = w_c + t * kc * nb;
            if (forward) {
              for (int64_t c = 0; c < depth; ++c) {
                const T* const from = w + (t * Cs + c0 + c) * Cd + cb * nb;
                std::copy(from, from + width, to + c * nb);
              }
            } else {
              NoteKernel(transpose);
              TransposeTile(w + ((8 - t) * Cd + cb * nb) * Cs + c0, Cs, width, depth, to, nb,
                            transpose);
            }
          }
          // Their transformed filter: u[xi][c][j], zero past the block's width.
          NoteKernel(filter_fn);
          for (int64_t c = 0; c < depth; ++c) {
            const void* taps[9];
            for (int t = 0; t < 9; ++t) taps[t] = w_c + (t * kc + c) * nb;
            float* const out = u + c * nb;
            filter_fn(taps, width, out, u_plane);
            if (width < nb) {
              for (int xi = 0; xi < kPoints; ++xi) {
                std::fill(out + xi * u_plane + width, out + xi * u_plane + nb, 0.0f);
              }
            }
          }
          NoteKernel(gemm);
          for (int xi = 0; xi < kPoints; ++xi) {
            const void* a = v + xi * v_plane + q0 * Cs + c0;
            const float* b = u + xi * u_plane;
            gemm(t1 - t0, 1, &a, Cs, &b, depth, m + xi * m_plane + q0 * nb, nb,
                 /*accumulate=*/c0 > 0);
          }
        }
        WriteTiles(p, grid, output_fn, m + q0 * nb, m_plane, nb, width, first + q0, q1 - q0,
                   cb * nb, y, dst);
      }
    });
  }
}

}  // namespace

template <typename T>
void WinogradNhwc(const WinogradPlan& plan, const ConvGeometry& g, bool forward, const T* w, const T* src, T* dst,
                  const ParallelFor& parallel_for) {
  constexpr int kind = KindOf<T>();
  const Problem p = MakeProblem(g, forward);
  const KernelTable& table = Kernels();
  const WinogradKernel& wk = table.winograd;
  const GemmKernel& gk = table.gemm[plan.gemm];
  const int mr = gk.mr, nb = gk.nb;
  const int64_t G = p.groups, Cs = p.src_group, Cd = p.dst_group;
  const int64_t blocks = CeilDiv(Cd, nb);
  const int64_t K = g.out_depth, FI = g.filter_in_depth, Kg = g.out_depth_per_group();
  Note(forward ? Path::kForwardWinograd : Path::kInputWinograd);
  if (blocks > 1) Note(Path::kWinogradColumnBlocks);

  if (plan.fused) return WinogradFused(plan, g, p, forward, w, src, dst, parallel_for);
  // Backprop input transforms from w_t[t][k][ci].
  const DirectedFilter<T> directed(w, forward, 9, FI, K, parallel_for);
  const T* const filter = directed.data();
  // The transformed filter: u[((grp * blocks + cb) * 36 + xi) * Cs + c][j], j < nb (zero past
  // the group's columns), in the gemm micro-kernels' panel layout.
  const int64_t panel = Cs * nb;
  Workspace u_space(FilterPanelsFloats(p, nb) * sizeof(float));
  float* const u = u_space.data<float>();
  const WinogradFilterFn filter_fn = wk.filter[kind];
  NoteKernel(filter_fn);
  parallel_for(G * blocks * Cs, 9 * 36 * nb, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t grp = unit / (blocks * Cs), cb = unit / Cs % blocks, c = unit % Cs;
      const int64_t width = std::min<int64_t>(nb, Cd - cb * nb);
      const void* taps[9];
      for (int t = 0; t < 9; ++t) {
        // Forward: f[t][c][j] = w[t][c][grp*Kg + cb*nb + j]. Backprop input: f[t][c][j] =
        // w[8 - t][cb*nb + j][grp*Kg + c] = w_t[8 - t][grp*Kg + c][cb*nb + j].
        taps[t] = forward ? filter + (t * FI + c) * K + grp * Kg + cb * nb
                          : filter + ((8 - t) * K + grp * Kg + c) * FI + cb * nb;
      }
      float* const out = u + (grp * blocks + cb) * kPoints * panel + c * nb;
      filter_fn(taps, width, out, panel);
      if (width < nb) {
        for (int xi = 0; xi < kPoints; ++xi) std::fill(out + xi * panel + width, out + xi * panel + nb, 0.0f);
      }
    }
  });

  // A unit transforms a block of `tb` tiles of its groups and runs the 36 GEMMs and the
  // output transform per group and column block (of its part of the column blocks); a tile
  // block's units are consecutive, so that its pixels stay in cache.
  const TileGrid grid(p);
  const int64_t tiles = grid.tiles;
  const WinogradTileBlocking& tbk = plan.tiles;
  const bool all = tbk.all, streamed = tbk.streamed;
  const int64_t Ct = tbk.Ct, ug = tbk.ug, tb = tbk.tb, tile_blocks = tbk.tile_blocks, parts = tbk.parts;
  if (all) Note(Path::kWinogradAllGroups);
  if (streamed) Note(Path::kWinogradStreamedFilter);
  if (parts > 1) Note(Path::kWinogradColumnHalves);
  const GemmAffineFn gemm = streamed ? gk.affine_ahead : gk.affine[kElemF32];
  const WinogradInputFn input_fn = wk.input[kind];
  const WinogradOutputFn output_fn = wk.output;
  const double unit_ops =
      (2.0 * kPoints * tb * Cs * Cd / parts + 200.0 * tb * (Cs + Cd)) * (G / ug);
  parallel_for(ug * tile_blocks * parts, Cost(unit_ops), [&](int64_t begin, int64_t end) {
    const int64_t v_plane = tb * Ct + kPlaneSkew, m_plane = tb * nb + kPlaneSkew;
    float* const v = Scratch<float, 30>(kPoints * v_plane);
    float* const m = Scratch<float, 31>(kPoints * m_plane);
    float* const y = Scratch<float, 32>(kOut * kOut * nb);  // results not written in place
    const float* const zeros = Scratch<float, 33>(Ct);  // never written: zero in every kind
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t g0 = all ? 0 : unit % G, part = unit / ug % parts;
      const int64_t first = unit / ug / parts * tb;
      const int64_t count = std::min(tb, tiles - first);
      const int64_t rows = CeilDiv(count, mr) * mr;  // GEMM rows: whole micro-kernel tiles
      // Input transform: v[xi][tile][c].
      TransformTiles(p, grid, input_fn, src, first, count, rows, g0 * Cs, Ct, zeros, v, v_plane);
      for (int64_t grp = g0; grp < g0 + G / ug; ++grp) {
        for (int64_t cb = part * blocks / parts; cb < (part + 1) * blocks / parts; ++cb) {
          const int64_t width = std::min<int64_t>(nb, Cd - cb * nb);
          const float* const panels = u + (grp * blocks + cb) * kPoints * panel;
          NoteKernel(gemm);
          for (int xi = 0; xi < kPoints; ++xi) {
            const void* a = v + xi * v_plane + (grp - g0) * Cs;
            const float* b = panels + xi * panel;
            gemm(rows / mr, 1, &a, Ct, &b, Cs, m + xi * m_plane, nb, /*accumulate=*/false);
          }
          WriteTiles(p, grid, output_fn, m, m_plane, nb, width, first, count, grp * Cd + cb * nb, y,
                     dst);
        }
      }
    }
  });
}

namespace {
// Tiles per chunk of the filter gradient: at least kFilterChunkTiles, so that the 36 GEMMs'
// sums (read and written once per chunk) cost little next to the chunk's multiplies; beyond
// that as many as fit kFilterChunkFloats of transformed input and output gradient (4 MiB,
// which stays in the last-level cache between the transforms and the GEMMs), and never past
// kFilterMaxChunkFloats (16 MiB).
constexpr int64_t kFilterChunkTiles = 256;
constexpr int64_t kFilterChunkFloats = int64_t{1} << 20;
constexpr int64_t kFilterMaxChunkFloats = int64_t{4} << 20;
// Sums of the 36 GEMMs of at most this many floats (1 MiB) stay in a core's cache next to a
// block of transformed tiles: the tiles are then cut into slices, each transformed block by
// block and reduced at once into sums of its own by one thread (the transformed data never
// leaves the cache), the slices' sums added in slice order at the end.
constexpr int64_t kSlicedMaxFloats = int64_t{256} << 10;
// Slices: one per kSliceTiles tiles, at most kMaxSlices (their sums cost memory and a final
// addition); as many whatever the number of threads.
constexpr int64_t kSliceTiles = 128;
constexpr int64_t kMaxSlices = 8;
// Floats of transformed input and output gradient a sliced block holds (36 x tiles x
// channels): 1 MiB.
constexpr int64_t kSliceBlockFloats = int64_t{256} << 10;

// The sides of the filter gradient's sums for one group and point: in-depth rounded up to
// whole micro-kernel rows (cp), out-depth per group to whole columns (kgp).
struct SumsSides {
  // gk: the float GEMM tile of the sums (SumsGemm).
  SumsSides(const GemmKernel& tile, const ConvGeometry& g) : gk(tile) {
    cp = CeilDiv(g.filter_in_depth, gk.strided[0].mr) * gk.strided[0].mr;
    kgp = CeilDiv(g.out_depth_per_group(), gk.nb) * gk.nb;
  }
  const GemmKernel& gk;
  int64_t cp, kgp;
};

// The float GEMM tile of the filter gradient's sums in `table`.
const GemmKernel& SumsGemm(const KernelTable& table, const ConvGeometry& g) {
  return PickGemm(table, g.out_depth_per_group(), kElemF32);
}

// The number of slices of the filter gradient over g (1: not sliced).
int64_t FilterSlices(const SumsSides& sides, const ConvGeometry& g) {
  if (g.groups * kPoints * sides.cp * sides.kgp > kSlicedMaxFloats) return 1;
  const int64_t tiles = g.batch * CeilDiv(g.out_rows, kOut) * CeilDiv(g.out_cols, kOut);
  return std::clamp<int64_t>(CeilDiv(tiles, kSliceTiles), 1, kMaxSlices);
}

// The row length of the transformed output gradient e in the filter gradient: K, longer where a
// group's columns are not whole tiles (a column tile of the last group reads past K; zero
// there).
int64_t FilterGradientRow(const ConvGeometry& g, int64_t nb) {
  return g.out_depth_per_group() % nb == 0 ? g.out_depth : g.out_depth + nb;
}

// Floats of one tile's transforms in the filter gradient: v's and e's rows.
int64_t FilterTileFloats(const ConvGeometry& g, int64_t nb) {
  return kPoints * (g.in_depth + FilterGradientRow(g, nb));
}

// The planes (one per point, skewed) of the transformed input v and output gradient e of
// `count` tiles of the filter gradient.
struct FilterPlanes {
  FilterPlanes(const ConvGeometry& g, int64_t nb, int64_t count)
      : v_plane(count * g.in_depth + kPlaneSkew), e_plane(count * FilterGradientRow(g, nb) + kPlaneSkew) {}
  int64_t Bytes() const { return kPoints * (v_plane + e_plane) * static_cast<int64_t>(sizeof(float)); }
  int64_t v_plane, e_plane;
};

// Tiles per chunk of the unfused, unsliced filter gradient (kFilterChunkTiles).
int64_t FilterChunkTiles(int64_t tiles, int64_t tile_floats) {
  return std::max<int64_t>(1, std::min({tiles, std::max(kFilterChunkTiles, kFilterChunkFloats / tile_floats),
                                        kFilterMaxChunkFloats / tile_floats}));
}

// Whether the filter gradient runs fused: one group, sums too large to slice, and every
// call's tiles transformed at once (at most kFilterMaxChunkFloats). Each unit then reduces
// the sums of one tile of input channels in a buffer of its own and transforms them back at
// once into dw (the first call writes it, later calls add to it): the sums (36 x FI x K
// floats) are never zeroed, written and read back whole, which beats both the direct pass
// below kFilterLargeSumsMinTiles and the unfused pass from there. Past 16 MiB of sums it
// starts at kFusedFilterMinPixels output pixels: below that the direct pass is faster.
constexpr int64_t kFusedFilterMinPixels = 64;
bool FilterFused(const SumsSides& sides, const ConvGeometry& g) {
  return g.groups == 1 && kPoints * sides.cp * sides.kgp > kSlicedMaxFloats &&
         Tiles(g, true) * FilterTileFloats(g, sides.gk.nb) <= kFilterMaxChunkFloats;
}
}  // namespace

template <typename T>
bool WinogradFilterApplies(const KernelTable& table, const ConvGeometry& g) {
  // The filter gradient's GEMMs have the forward pass's sides: in-depth by out-depth per group.
  if (!WinogradShape<T>(g, /*forward=*/true)) return false;
  // Its transforms cost in proportion to in-depth + out-depth per tile, its GEMMs save in
  // proportion to their product: in float32 the direct pass wins while the product is at most
  // kFilterMaxDirectProduct (see there). The 16-bit kinds' direct passes are slower.
  if (std::is_same_v<T, float> &&
      g.filter_in_depth * g.out_depth_per_group() <= kFilterMaxDirectProduct) {
    return false;
  }
  // Sums past kLargeFilterFloats go through memory, unless fused; the direct pass wins until
  // the tiles pay for that (kFilterLargeSumsMinTiles; fused, kFusedFilterMinPixels output
  // pixels; twice as many where bfloat16's direct pass runs on pairs).
  if (TransformedFilterFloats(g) <= kLargeFilterFloats) return true;
  const int64_t times = DirectOnPairs<T>(table) ? 2 : 1;
  if (FilterFused(SumsSides(SumsGemm(table, g), g), g)) {
    return g.batch * g.out_rows * g.out_cols >= times * kFusedFilterMinPixels;
  }
  return Tiles(g, true) >= times * kFilterLargeSumsMinTiles;
}

template <typename T>
struct WinogradFilter<T>::State {
  WinogradFilterPlan plan;
  ConvGeometry g;
  ParallelFor parallel_for;
  int mr = 0, nb = 0;
  GemmStridedFn strided = nullptr;
  // Sums of the 36 GEMMs: m[((grp * 36 + xi) * cp + c) * kgp + k], c < cp (in-depth rounded up
  // to whole micro-kernel rows), k < kgp (out-depth per group rounded up to whole columns).
  int64_t cp = 0, kgp = 0;
  // Sliced (kSlicedMaxFloats): `slices` sets of sums, m_floats apart; slice 0's hold the total
  // after Finish. Otherwise one set, and the chunks' transforms go through memory; fused
  // (FilterFused), none.
  int64_t slices = 1, m_floats = 0;
  std::unique_ptr<Workspace> m_space;
  float* m = nullptr;
  bool fused = false;
  float* dw = nullptr;
  // Fused: whether a call has written dw (later calls add to it).
  bool written = false;
};

template <typename T>
WinogradFilter<T>::WinogradFilter(const WinogradFilterPlan& plan, const ConvGeometry& g, float* dw,
                                  const ParallelFor& parallel_for)
    : state_(new State) {
  State& s = *state_;
  s.plan = plan;
  s.g = g;
  s.parallel_for = parallel_for;
  s.dw = dw;
  const GemmKernel& gk = Kernels().gemm[plan.gemm];
  s.mr = gk.strided[0].mr, s.nb = gk.nb, s.strided = gk.strided[0].fn;
  const SumsSides sides(gk, g);
  s.cp = sides.cp, s.kgp = sides.kgp;
  Note(Path::kFilterWinograd);
  s.fused = plan.fused;
  if (s.fused) {
    Note(Path::kWinogradFilterFused);
    return;
  }
  s.m_floats = g.groups * kPoints * s.cp * s.kgp;
  s.slices = plan.slices;
  const int64_t floats = s.slices * s.m_floats;
  s.m_space = std::make_unique<Workspace>(floats * sizeof(float));
  s.m = s.m_space->template data<float>();
  parallel_for(s.slices * g.groups * kPoints, s.cp * s.kgp, [&](int64_t begin, int64_t end) {
    std::fill(s.m + begin * s.cp * s.kgp, s.m + end * s.cp * s.kgp, 0.0f);
  });
}

template <typename T>
WinogradFilter<T>::~WinogradFilter() = default;

namespace {
// One call of WinogradFilter::Accumulate over a chunk of images gc: the transforms of its
// tiles and the GEMMs of their sums.
template <typename T>
struct FilterCall {
  const ConvGeometry& g;
  const T* x;
  const T* dy;
  int64_t mr, nb, cp, kgp;
  GemmStridedFn strided;
  int64_t cin = 0, kr = 0;  // row lengths of v and e (FilterGradientRow)
  int64_t tiles_w = 0, per_image = 0, tiles = 0, c_tiles = 0, k_tiles = 0;
  WinogradInputFn input_fn = nullptr, gradient_fn = nullptr;

  FilterCall(const ConvGeometry& gc, const T* x_in, const T* dy_in, int64_t mr_in, int64_t nb_in, int64_t cp_in,
             int64_t kgp_in, GemmStridedFn strided_in)
      : g(gc), x(x_in), dy(dy_in), mr(mr_in), nb(nb_in), cp(cp_in), kgp(kgp_in), strided(strided_in) {
    cin = g.in_depth, kr = FilterGradientRow(g, nb);
    tiles_w = CeilDiv(g.out_cols, kOut), per_image = CeilDiv(g.out_rows, kOut) * tiles_w;
    tiles = g.batch * per_image;
    c_tiles = CeilDiv(g.filter_in_depth, mr), k_tiles = kgp / nb;
    input_fn = Kernels().winograd.input[KindOf<T>()];
    gradient_fn = Kernels().winograd.gradient[KindOf<T>()];
  }

  // Transforms of `count` tiles from tile `first` on: v[xi][q][c] and e[xi][q][k].
  void Transform(int64_t first, int64_t count, float* v, int64_t v_plane, float* e, int64_t e_plane) const {
    const int64_t K = g.out_depth, row = kr;
    const float* const zeros = Scratch<float, 34>(std::max(cin, K));  // never written
    for (int64_t q = 0; q < count; ++q) {
      const int64_t i = first + q, n = i / per_image, th = i % per_image / tiles_w, tw = i % tiles_w;
      const void* patch[kPoints];
      BlockPointers<kAlpha>(x, n, th * kOut - g.pad_top, tw * kOut - g.pad_left, g.in_rows, g.in_cols, cin, 0, zeros,
                            patch);
      input_fn(patch, cin, v + q * cin, v_plane);
      const void* tile[kOut * kOut];
      BlockPointers<kOut>(dy, n, th * kOut, tw * kOut, g.out_rows, g.out_cols, K, 0, zeros, tile);
      gradient_fn(tile, K, e + q * row, e_plane);
      for (int xi = 0; row > K && xi < kPoints; ++xi) {
        float* const padded = e + xi * e_plane + q * row;
        std::fill(padded + K, padded + row, 0.0f);
      }
    }
  }

  // Where the sums m[grp][xi][c][k] of group grp, point xi and input-channel tile ct begin.
  float* SumsAt(float* m, int64_t grp, int xi, int64_t ct) const {
    return m + ((grp * kPoints + xi) * cp + ct * mr) * kgp;
  }

  // The GEMMs of point xi for group grp and the input channels of tile ct, over `count`
  // transformed tiles in order, into the sums at c (rows kgp apart).
  void Reduce(int64_t grp, int xi, int64_t ct, int64_t count, const float* v, int64_t v_plane, const float* e,
              int64_t e_plane, float* c) const {
    const int64_t c0 = ct * mr, FI = g.filter_in_depth;
    const float* const a = v + xi * v_plane + grp * FI + c0;
    const float* const b = e + xi * e_plane + grp * g.out_depth_per_group();
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      strided(1, count, a, 0, cin, std::min<int64_t>(mr, FI - c0), b + kt * nb, 0, kr, c + kt * nb, kgp);
    }
  }
};

// Sliced (kSlicedMaxFloats): slice j of `slices` holds tiles [j * per, (j + 1) * per),
// transformed and reduced block by block into its sums at m + j * m_floats.
template <typename T>
void AccumulateSliced(const FilterCall<T>& call, const WinogradFilterPlan& plan, float* m, int64_t m_floats,
                      const ParallelFor& parallel_for) {
  Note(Path::kWinogradFilterSliced);
  const ConvGeometry& g = call.g;
  const int64_t tiles = call.tiles, cin = call.cin, kr = call.kr, slices = plan.slices;
  const int64_t per = CeilDiv(tiles, slices);
  const int64_t block = plan.slice_block;
  const double cost = 2.0 * per * kPoints * g.filter_in_depth * g.out_depth_per_group() * g.groups +
                      400.0 * per * (cin + g.out_depth);
  parallel_for(slices, Cost(cost), [&](int64_t begin, int64_t end) {
    const int64_t v_plane = block * cin + kPlaneSkew, e_plane = block * kr + kPlaneSkew;
    float* const v = Scratch<float, 35>(kPoints * v_plane);
    float* const e = Scratch<float, 36>(kPoints * e_plane);
    for (int64_t j = begin; j < end; ++j) {
      float* const mj = m + j * m_floats;
      const int64_t stop = std::min(tiles, (j + 1) * per);
      for (int64_t first = j * per; first < stop; first += block) {
        const int64_t count = std::min(block, stop - first);
        call.Transform(first, count, v, v_plane, e, e_plane);
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          for (int xi = 0; xi < kPoints; ++xi) {
            for (int64_t ct = 0; ct < call.c_tiles; ++ct) {
              call.Reduce(grp, xi, ct, count, v, v_plane, e, e_plane, call.SumsAt(mj, grp, xi, ct));
            }
          }
        }
      }
    }
  });
}

// Fused (FilterFused): every tile at once; a unit per tile of input channels reduces its 36
// sets of sums in order and transforms them back into dw (added to it with `add`).
template <typename T>
void AccumulateFused(const FilterCall<T>& call, float* dw, bool add, const ParallelFor& parallel_for) {
  const int64_t tiles = call.tiles, cin = call.cin, kr = call.kr, mr = call.mr, kgp = call.kgp;
  const int64_t FI = call.g.filter_in_depth, K = call.g.out_depth;
  const FilterPlanes planes(call.g, call.nb, tiles);
  const int64_t v_plane = planes.v_plane, e_plane = planes.e_plane;
  Workspace v_space(kPoints * v_plane * sizeof(float)), e_space(kPoints * e_plane * sizeof(float));
  float* const v = v_space.data<float>();
  float* const e = e_space.data<float>();
  parallel_for(tiles, 40 * kPoints * (cin + K), [&](int64_t begin, int64_t end) {
    call.Transform(begin, end - begin, v + begin * cin, v_plane, e + begin * kr, e_plane);
  });
  const WinogradOutputFn back = Kernels().winograd.reduce;
  NoteKernel(back);
  if (add) Note(Path::kWinogradFilterFusedAdded);
  const int64_t plane = mr * kgp;  // a point's sums of one tile of input channels
  parallel_for(call.c_tiles, Cost(2.0 * kPoints * tiles * mr * kgp + 400.0 * mr * K), [&](int64_t begin, int64_t end) {
    float* const m = Scratch<float, 38>(kPoints * plane);
    float* const y = Scratch<float, 39>(9 * K);
    for (int64_t ct = begin; ct < end; ++ct) {
      std::fill(m, m + kPoints * plane, 0.0f);
      for (int xi = 0; xi < kPoints; ++xi) call.Reduce(0, xi, ct, tiles, v, v_plane, e, e_plane, m + xi * plane);
      for (int64_t c = ct * mr; c < std::min(FI, (ct + 1) * mr); ++c) {
        float* out[9];
        for (int t = 0; t < 9; ++t) out[t] = add ? y + t * K : dw + (t * FI + c) * K;
        back(m + (c - ct * mr) * kgp, plane, K, out);
        for (int t = 0; add && t < 9; ++t) {
          float* const row = dw + (t * FI + c) * K;
          for (int64_t k = 0; k < K; ++k) row[k] += y[t * K + k];
        }
      }
    }
  });
}

// Neither: chunks of tiles (the plan's, or the call's tiles where fewer: FilterChunkTiles of
// the call) transformed through memory, and the 36 GEMMs reduced over each chunk's tiles in
// order into m: a unit per (group, xi, tile of mr input channels), through every column tile.
template <typename T>
void AccumulateChunks(const FilterCall<T>& call, const WinogradFilterPlan& plan, float* m,
                      const ParallelFor& parallel_for) {
  const int64_t tiles = call.tiles, cin = call.cin, kr = call.kr, c_tiles = call.c_tiles;
  const int64_t chunk = std::min(plan.chunk_tiles, tiles);
  if (chunk < tiles) Note(Path::kWinogradFilterChunks);
  const FilterPlanes planes(call.g, call.nb, chunk);
  const int64_t v_plane = planes.v_plane, e_plane = planes.e_plane;
  Workspace v_space(kPoints * v_plane * sizeof(float)), e_space(kPoints * e_plane * sizeof(float));
  float* const v = v_space.data<float>();
  float* const e = e_space.data<float>();
  for (int64_t first = 0; first < tiles; first += chunk) {
    const int64_t count = std::min(chunk, tiles - first);
    parallel_for(count, 40 * kPoints * (cin + call.g.out_depth), [&](int64_t begin, int64_t end) {
      call.Transform(first + begin, end - begin, v + begin * cin, v_plane, e + begin * kr, e_plane);
    });
    parallel_for(call.g.groups * kPoints * c_tiles, Cost(2.0 * count * call.mr * call.kgp),
                 [&](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t grp = unit / (kPoints * c_tiles), ct = unit % c_tiles;
        const int xi = static_cast<int>(unit / c_tiles % kPoints);
        call.Reduce(grp, xi, ct, count, v, v_plane, e, e_plane, call.SumsAt(m, grp, xi, ct));
      }
    });
  }
}
}  // namespace

template <typename T>
void WinogradFilter<T>::Accumulate(const ConvGeometry& gc, const T* x, const T* dy) {
  State& s = *state_;
  const FilterCall<T> call(gc, x, dy, s.mr, s.nb, s.cp, s.kgp, s.strided);
  NoteKernel(call.input_fn), NoteKernel(call.gradient_fn), NoteKernel(s.strided);
  if (s.slices > 1) return AccumulateSliced(call, s.plan, s.m, s.m_floats, s.parallel_for);
  if (s.fused) {
    AccumulateFused(call, s.dw, s.written, s.parallel_for);
    s.written = true;
    return;
  }
  AccumulateChunks(call, s.plan, s.m, s.parallel_for);
}

template <typename T>
void WinogradFilter<T>::Finish() {
  State& s = *state_;
  if (s.fused) return;
  float* const dw = s.dw;
  const int64_t G = s.g.groups, FI = s.g.filter_in_depth, K = s.g.out_depth, Kg = s.g.out_depth_per_group();
  const WinogradOutputFn reduce = Kernels().winograd.reduce;
  NoteKernel(reduce);
  // The slices' sums into slice 0's, in slice order.
  if (s.slices > 1) {
    s.parallel_for(s.m_floats, s.slices, [&](int64_t begin, int64_t end) {
      for (int64_t j = 1; j < s.slices; ++j) {
        const float* const mj = s.m + j * s.m_floats;
        for (int64_t i = begin; i < end; ++i) s.m[i] += mj[i];
      }
    });
  }
  s.parallel_for(G * FI, kPoints * 4 * Kg, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t grp = unit / FI, c = unit % FI;
      float* out[9];
      for (int t = 0; t < 9; ++t) out[t] = dw + (t * FI + c) * K + grp * Kg;
      reduce(s.m + (grp * kPoints * s.cp + c) * s.kgp, s.cp * s.kgp, Kg, out);
    }
  });
}

WinogradPlan PlanWinograd(const KernelTable& table, const ConvGeometry& g, bool forward, int64_t element_size) {
  const Problem p = MakeProblem(g, forward);
  const GemmKernel& gk = PickGemm(table, p.dst_group, kElemF32);  // float GEMMs of transformed values
  const int64_t blocks = CeilDiv(p.dst_group, gk.nb);
  WinogradPlan c;
  c.gemm = static_cast<int>(&gk - table.gemm);
  c.fused = Fused(g, forward);
  if (c.fused) {
    c.fused_blocking = PlanFused(p, gk.mr, blocks);
    c.workspace_bytes = kPoints * c.fused_blocking.v_plane * 4;
    c.units = blocks * c.fused_blocking.parts;
    return c;
  }
  c.tiles = PlanTileBlocks(p, gk.mr, gk.nb, blocks);
  // The transposed filter (backprop input) and the transformed one.
  c.workspace_bytes = (forward ? 0 : 9 * g.filter_in_depth * g.out_depth * element_size) +
                      FilterPanelsFloats(p, gk.nb) * 4;
  c.units = c.tiles.ug * c.tiles.tile_blocks * c.tiles.parts;
  return c;
}

WinogradFilterPlan PlanWinogradFilter(const KernelTable& table, const ConvGeometry& g) {
  const SumsSides sides(SumsGemm(table, g), g);
  const int64_t tiles = Tiles(g, true), tile_floats = FilterTileFloats(g, sides.gk.nb);
  WinogradFilterPlan c;
  c.gemm = static_cast<int>(&sides.gk - table.gemm);
  const int64_t c_tiles = CeilDiv(g.filter_in_depth, sides.gk.strided[0].mr);
  c.fused = FilterFused(sides, g);
  if (c.fused) {
    c.workspace_bytes = FilterPlanes(g, sides.gk.nb, tiles).Bytes();
    c.units = c_tiles;
    return c;
  }
  const int64_t m_floats = g.groups * kPoints * sides.cp * sides.kgp;
  c.slices = FilterSlices(sides, g);
  c.workspace_bytes = c.slices * m_floats * 4;
  if (c.slices > 1) {
    c.slice_block = std::max<int64_t>(1, kSliceBlockFloats / tile_floats);
    c.units = c.slices;
    return c;
  }
  c.chunk_tiles = FilterChunkTiles(tiles, tile_floats);
  c.workspace_bytes += FilterPlanes(g, sides.gk.nb, c.chunk_tiles).Bytes();
  c.units = g.groups * kPoints * c_tiles;
  return c;
}

#define TF_OPS_INSTANTIATE(T)                                                         \
  template bool WinogradApplies<T>(const KernelTable&, const ConvGeometry&, bool);     \
  template bool WinogradFilterApplies<T>(const KernelTable&, const ConvGeometry&);     \
  template class WinogradFilter<T>;                                                    \
  template void WinogradNhwc<T>(const WinogradPlan&, const ConvGeometry&, bool, const T*, const T*, \
                                T*, const ParallelFor&);
TF_OPS_INSTANTIATE(float)
TF_OPS_INSTANTIATE(Eigen::half)
TF_OPS_INSTANTIATE(Eigen::bfloat16)
#undef TF_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_ops
