// The CUDA kernels of conv_gpu.h: one shared-memory tiled implicit GEMM, fed by a "problem"
// per direction that says what row m, reduction index r and column n of the GEMM are (the
// problems of conv_gpu_plan.h, which also plans every launch), one group at a time (the grid's
// z index), every activation read through its layout's strides, so NHWC and NCHW take the same
// code. A reduction too long for the launch's few tiles is split into slices (fixed by the
// geometry), summed in slice order. The GEMM runs on tensor cores for half and bfloat16
// (mma.sync, float sums), on CUDA cores for the other types. A problem whose groups have at
// most kDirectMaxCols columns (depthwise layers have one) runs in a direct kernel instead, one
// thread per output summing over r in order. Every output element is stored once a launch
// (Output<T>).
#include "cc/core/gpu/conv_gpu.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "cc/core/gpu/conv_gpu_plan.h"
#include "cc/core/gpu/cuda_compat.cuh"

namespace tf_ops {
namespace gpu {
namespace {

// Whether T's GEMM runs on tensor cores.
template <typename T>
constexpr bool kTensorCores = std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;

static_assert(Tiling::kThreads == 256, "a 16 x 16 arrangement of threads");
static_assert(Tiling::kTileK * Tiling::kTileM % Tiling::kThreads == 0, "whole loads per thread");
static_assert(Tiling::kTileK * Tiling::kTileN % Tiling::kThreads == 0, "whole loads per thread");

// Element types: what is stored, what sums are carried in.
template <typename T>
struct Elem;
template <>
struct Elem<float> {
  using Acc = float;
  static __device__ __forceinline__ Acc Load(float v) { return v; }
  static __device__ __forceinline__ float Store(Acc a) { return a; }
};
template <>
struct Elem<double> {
  using Acc = double;
  static __device__ __forceinline__ Acc Load(double v) { return v; }
  static __device__ __forceinline__ double Store(Acc a) { return a; }
};
template <>
struct Elem<__half> {
  using Acc = float;
  static __device__ __forceinline__ Acc Load(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half Store(Acc a) { return __float2half_rn(a); }
};
template <>
struct Elem<__nv_bfloat16> {
  using Acc = float;
  static __device__ __forceinline__ Acc Load(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 Store(Acc a) { return __float2bfloat16_rn(a); }
};
template <>
struct Elem<int32_t> {
  using Acc = uint32_t;  // wraps modulo 2**32, as TensorFlow's int32 arithmetic
  static __device__ __forceinline__ Acc Load(int32_t v) { return static_cast<uint32_t>(v); }
  static __device__ __forceinline__ int32_t Store(Acc a) { return static_cast<int32_t>(a); }
};

// Element strides of an activation tensor.
struct Strides {
  int64_t n, h, w, c;
};

Strides ToStrides(const ActivationStrides& s) { return {s.n, s.h, s.w, s.c}; }

// The sizes every problem shares.
struct Sizes {
  int64_t batch, in_rows, in_cols, out_rows, out_cols, filter_rows, filter_cols;
  int64_t fi, k, kg;  // filter in-depth, out-depth, out-depth per group
  int64_t stride_rows, stride_cols, dilation_rows, dilation_cols, pad_top, pad_left;
};

Sizes ToSizes(const ConvGeometry& g) {
  return {g.batch,        g.in_rows,     g.in_cols,       g.out_rows,      g.out_cols,
          g.filter_rows,  g.filter_cols, g.filter_in_depth, g.out_depth,   g.out_depth_per_group(),
          g.stride_rows,  g.stride_cols, g.dilation_rows, g.dilation_cols, g.pad_top,
          g.pad_left};
}

// Output pixel i of the flattened (n, oh, ow), and filter entry i of the flattened
// (kh, kw, ci): the indices of the forward and filter-gradient problems.
struct Pixel {
  int64_t n, oh, ow;
};
struct Tap {
  int64_t kh, kw, ci;
};

__device__ __forceinline__ Pixel PixelOf(const Sizes& s, int64_t i) {
  const int64_t ow = i % s.out_cols, oh = i / s.out_cols % s.out_rows, n = i / (s.out_cols * s.out_rows);
  return {n, oh, ow};
}

__device__ __forceinline__ Tap TapOf(const Sizes& s, int64_t i) {
  const int64_t ci = i % s.fi, kw = i / s.fi % s.filter_cols, kh = i / (s.fi * s.filter_cols);
  return {kh, kw, ci};
}

// The pixel after p, in the order of PixelOf, and the filter entry after t, in TapOf's.
__device__ __forceinline__ void Advance(const Sizes& s, Pixel* p) {
  if (++p->ow == s.out_cols) {
    p->ow = 0;
    if (++p->oh == s.out_rows) p->oh = 0, ++p->n;
  }
}

__device__ __forceinline__ void Advance(const Sizes& s, Tap* t) {
  if (++t->ci == s.fi) {
    t->ci = 0;
    if (++t->kw == s.filter_cols) t->kw = 0, ++t->kh;
  }
}

// What every problem shares: its GEMM is M x N for each of `groups` groups, reducing over R,
// and the reduction is split into `slices` slices of slice_len (fixed by the geometry and the
// kernel): z = slice * groups + group, neighbouring z neighbouring groups. With one slice each
// sum is written where it belongs (the problem's Write); with several, each slice's float (or
// double) sums go to partial[z][m][col], and ReduceSlices adds them in slice order.
template <typename Acc>
struct Reduction {
  int64_t M = 0, N = 0, R = 0;
  int64_t groups = 1, slices = 1, slice_len = 0;
  Output<Acc> partial{nullptr};
  __device__ int64_t Group(int64_t z) const { return z % groups; }
  __device__ int64_t RBegin(int64_t z) const { return z / groups * slice_len; }
  __device__ int64_t REnd(int64_t z) const {
    const int64_t end = (z / groups + 1) * slice_len;
    return end < R ? end : R;
  }
};

// Every problem reads its two GEMM factors through cursors: A's for a row m, B's for a column,
// each at a reduction index r that Next moves to r + 1. A cursor keeps the offset of the
// element it reads, so that most steps add a stride instead of dividing r into its parts (the
// direct sum and both GEMMs' loaders step the same cursors). A cursor may step past the
// reduction's end or sit on a row or column past the matrix's: the callers do not read there.
//
// The input value that tap t of output pixel p reads in group grp (the forward's A and the
// filter gradient's): its offset in x, and whether it lies inside the image (else it is zero).
struct InputCursor {
  Pixel p;
  Tap t;
  int64_t grp, iw, off;
  bool row_in, in;
};

__device__ __forceinline__ void Place(const Sizes& s, const Strides& xs, InputCursor* c) {
  const int64_t ih = c->p.oh * s.stride_rows - s.pad_top + c->t.kh * s.dilation_rows;
  c->iw = c->p.ow * s.stride_cols - s.pad_left + c->t.kw * s.dilation_cols;
  c->row_in = ih >= 0 && ih < s.in_rows;
  c->in = c->row_in && c->iw >= 0 && c->iw < s.in_cols;
  c->off = c->p.n * xs.n + ih * xs.h + c->iw * xs.w + (c->grp * s.fi + c->t.ci) * xs.c;
}

template <typename T>
__device__ __forceinline__ T Zero() {
  return Elem<T>::Store(typename Elem<T>::Acc(0));
}

template <typename T>
__device__ __forceinline__ T InputValue(const T* x, const InputCursor& c) {
  return c.in ? x[c.off] : Zero<T>();
}

template <typename T>
struct ForwardProblem : Reduction<typename Elem<T>::Acc> {
  using Type = T;
  static constexpr Direction kDirection = Direction::kForward;
  using Acc = typename Elem<T>::Acc;
  static constexpr bool kDirectSlices = false;  // see DirectSum
  const T* x;
  const T* w;
  Output<T> y;
  Sizes s;
  Strides xs, ys;
  // A: output pixel m, stepping through the filter entries. B: w's offset.
  using ACursor = InputCursor;
  struct BCursor {
    int64_t off;
  };
  __device__ ACursor AAt(int64_t z, int64_t m, int64_t r) const {
    ACursor c{PixelOf(s, m), TapOf(s, r), this->Group(z), 0, 0, false, false};
    Place(s, xs, &c);
    return c;
  }
  __device__ BCursor BAt(int64_t z, int64_t col, int64_t r) const { return {r * s.k + this->Group(z) * s.kg + col}; }
  __device__ void Next(ACursor* c) const {
    Advance(s, &c->t);
    if (c->t.ci != 0) {
      c->off += xs.c;
    } else {
      Place(s, xs, c);
    }
  }
  __device__ void Next(BCursor* c) const { c->off += s.k; }
  __device__ T A(const ACursor& c) const { return InputValue(x, c); }
  __device__ T B(const BCursor& c) const { return w[c.off]; }
  __device__ void Write(int64_t grp, int64_t m, int64_t col, Acc v) const {
    const Pixel p = PixelOf(s, m);
    y.Store(p.n * ys.n + p.oh * ys.h + p.ow * ys.w + (grp * s.kg + col) * ys.c, Elem<T>::Store(v));
  }
};

template <typename T>
struct InputProblem : Reduction<typename Elem<T>::Acc> {
  using Type = T;
  static constexpr Direction kDirection = Direction::kBackpropInput;
  using Acc = typename Elem<T>::Acc;
  static constexpr bool kDirectSlices = false;  // see DirectSum
  const T* w;
  const T* dy;
  Output<T> dx;
  Sizes s;
  Strides dys, dxs;
  int64_t class_rows, class_cols;  // the class's first input row and column
  int64_t rows, cols;              // members of the class along each dimension
  ClassTaps th, tw;
  // Class member m: image n, row i, column j of the class. Reduction index r: the class's
  // row tap a, column tap b, output-gradient channel k (k fastest).
  struct Member {
    int64_t n, i, j;
  };
  struct Term {
    int64_t a, b, k;
  };
  __device__ Member MemberOf(int64_t m) const {
    const int64_t j = m % cols, i = m / cols % rows, n = m / (cols * rows);
    return {n, i, j};
  }
  __device__ Term TermOf(int64_t r) const {
    if (this->R == 0) return {0, 0, 0};  // a class no tap reaches: its sums are empty
    const int64_t k = r % s.kg, b = r / s.kg % tw.count, a = r / (s.kg * tw.count);
    return {a, b, k};
  }
  // The term after t; false where more than its channel moved.
  __device__ bool Step(Term* t) const {
    if (++t->k < s.kg) return true;
    t->k = 0;
    if (++t->b == tw.count) t->b = 0, ++t->a;
    return false;
  }
  // A: dy of member e under term t (zero outside the output). B: the filter entry of term t
  // for column (input channel) col.
  struct ACursor {
    Member e;
    Term t;
    int64_t grp, off;
    bool in;
  };
  struct BCursor {
    Term t;
    int64_t grp, col, off;
  };
  __device__ void Place(ACursor* c) const {
    const int64_t oh = th.base - c->t.a * th.delta + c->e.i, ow = tw.base - c->t.b * tw.delta + c->e.j;
    c->in = oh >= 0 && oh < s.out_rows && ow >= 0 && ow < s.out_cols;
    c->off = c->e.n * dys.n + oh * dys.h + ow * dys.w + (c->grp * s.kg + c->t.k) * dys.c;
  }
  __device__ void Place(BCursor* c) const {
    const int64_t kh = th.first + c->t.a * th.step, kw = tw.first + c->t.b * tw.step;
    c->off = ((kh * s.filter_cols + kw) * s.fi + c->col) * s.k + c->grp * s.kg + c->t.k;
  }
  __device__ ACursor AAt(int64_t z, int64_t m, int64_t r) const {
    ACursor c{MemberOf(m), TermOf(r), this->Group(z), 0, false};
    Place(&c);
    return c;
  }
  __device__ BCursor BAt(int64_t z, int64_t col, int64_t r) const {
    BCursor c{TermOf(r), this->Group(z), col, 0};
    Place(&c);
    return c;
  }
  __device__ void Next(ACursor* c) const {
    if (Step(&c->t)) {
      c->off += dys.c;
    } else {
      Place(c);
    }
  }
  __device__ void Next(BCursor* c) const {
    if (Step(&c->t)) {
      ++c->off;
    } else {
      Place(c);
    }
  }
  __device__ T A(const ACursor& c) const { return c.in ? dy[c.off] : Zero<T>(); }
  __device__ T B(const BCursor& c) const { return w[c.off]; }
  __device__ void Write(int64_t grp, int64_t m, int64_t col, Acc v) const {
    const Member e = MemberOf(m);
    const int64_t ih = class_rows + e.i * s.stride_rows, iw = class_cols + e.j * s.stride_cols;
    dx.Store(e.n * dxs.n + ih * dxs.h + iw * dxs.w + (grp * s.fi + col) * dxs.c, Elem<T>::Store(v));
  }
};

template <typename T>
struct FilterProblem : Reduction<typename Elem<T>::Acc> {
  using Type = T;
  static constexpr Direction kDirection = Direction::kBackpropFilter;
  using Acc = typename Elem<T>::Acc;
  static constexpr bool kDirectSlices = true;
  const T* x;
  const T* dy;
  Output<T> dw;
  Sizes s;
  Strides xs, dys;
  // A: filter entry m, stepping through the output pixels. B: dy at the pixel, in channel ch.
  using ACursor = InputCursor;
  struct BCursor {
    Pixel p;
    int64_t ch, off;
  };
  __device__ void Place(BCursor* c) const {
    c->off = c->p.n * dys.n + c->p.oh * dys.h + c->p.ow * dys.w + c->ch * dys.c;
  }
  __device__ ACursor AAt(int64_t z, int64_t m, int64_t r) const {
    ACursor c{PixelOf(s, r), TapOf(s, m), this->Group(z), 0, 0, false, false};
    ::tf_ops::gpu::Place(s, xs, &c);
    return c;
  }
  __device__ BCursor BAt(int64_t z, int64_t col, int64_t r) const {
    BCursor c{PixelOf(s, r), this->Group(z) * s.kg + col, 0};
    Place(&c);
    return c;
  }
  __device__ void Next(ACursor* c) const {
    Advance(s, &c->p);
    if (c->p.ow != 0) {
      c->iw += s.stride_cols;
      c->off += s.stride_cols * xs.w;
      c->in = c->row_in && c->iw >= 0 && c->iw < s.in_cols;
    } else {
      ::tf_ops::gpu::Place(s, xs, c);
    }
  }
  __device__ void Next(BCursor* c) const {
    Advance(s, &c->p);
    if (c->p.ow != 0) {
      c->off += dys.w;
    } else {
      Place(c);
    }
  }
  __device__ T A(const ACursor& c) const { return InputValue(x, c); }
  __device__ T B(const BCursor& c) const { return dy[c.off]; }
  __device__ void Write(int64_t grp, int64_t m, int64_t col, Acc v) const {
    dw.Store(m * s.k + grp * s.kg + col, Elem<T>::Store(v));
  }
};

// Output (z, m, col)'s sum over its slice of the reduction: the result, or the slice's part of it.
template <typename Problem>
__device__ __forceinline__ void StoreSum(const Problem& p, int64_t z, int64_t m, int64_t col,
                                         typename Problem::Acc v) {
  if (p.slices == 1) {
    p.Write(z, m, col, v);
  } else {
    p.partial.Store((z * p.M + m) * p.N + col, v);
  }
}

// Block b of a GEMM grid computes tile (b % m_tiles, b / m_tiles % n_tiles) of problem
// z = b / (m_tiles * n_tiles).
struct TileOf {
  int64_t m0, n0, z;
  __device__ TileOf(int64_t m_tiles, int64_t n_tiles, int tile_m, int tile_n) {
    const int64_t block = blockIdx.x;
    m0 = block % m_tiles * tile_m, n0 = block / m_tiles % n_tiles * tile_n, z = block / (m_tiles * n_tiles);
  }
};

// The loaders of both GEMM kernels: thread tid fills row tid % TM of A's tile and column tid % TM
// of B's with the kRun consecutive reduction values from tid / TM * kRun of each step of TK
// values: two cursor chains a thread, interleaved, stepping on past the other loaders' values.
template <typename Problem, int TM, int TK, int kRun>
struct Loader {
  using T = typename Problem::Type;
  const Problem& p;
  int lrow, lk;
  bool a_live, b_live;
  int64_t r_end;
  typename Problem::ACursor ac;
  typename Problem::BCursor bc;
  // For tile `tile`, whose slice of the reduction is [r_begin, slice_end).
  __device__ Loader(const Problem& problem, const TileOf& tile, int tid, int64_t r_begin, int64_t slice_end)
      : p(problem),
        lrow(tid % TM),
        lk(tid / TM * kRun),
        a_live(tile.m0 + lrow < p.M),
        b_live(tile.n0 + lrow < p.N),
        r_end(slice_end),
        ac(p.AAt(tile.z, tile.m0 + lrow, r_begin + lk)),
        bc(p.BAt(tile.z, tile.n0 + lrow, r_begin + lk)) {}
  // Calls take(i, a, b) with the loader's i-th values of A and B in the step from k0 (zero
  // past the reduction's end or the matrix's edge).
  template <typename Take>
  __device__ __forceinline__ void Step(int64_t k0, const Take& take) {
    TF_OPS_UNROLL
    for (int i = 0; i < kRun; ++i, p.Next(&ac), p.Next(&bc)) {
      const bool in_r = k0 + lk + i < r_end;
      take(i, a_live && in_r ? p.A(ac) : Zero<T>(), b_live && in_r ? p.B(bc) : Zero<T>());
    }
    for (int i = kRun; i < TK; ++i) p.Next(&ac), p.Next(&bc);
  }
};

// The GEMM on CUDA cores (float, double, int32). Each output is summed by one thread over r in
// order. At least two blocks a multiprocessor (at most 128 registers a thread): without the
// minimum, nvcc 13 spilled 8 bytes to local memory in the float and int32 forward kernels for
// sm_90.
template <typename Problem>
__global__ void __launch_bounds__(Tiling::kThreads, 2) GemmKernel(Problem p, int64_t m_tiles, int64_t n_tiles) {
  using Acc = typename Problem::Acc;
  using Type = typename Problem::Type;
  using E = Elem<Type>;
  constexpr int TM = Tiling::kTileM, TN = Tiling::kTileN, TK = Tiling::kTileK, NT = Tiling::kThreads;
  constexpr int RM = Tiling::kRowsPerThread, RN = Tiling::kColsPerThread, kRun = TK * TM / NT;
  static_assert(TM == TN && TK * TM % NT == 0, "one row of A and one column of B a loader");
  TF_OPS_SHARED(Acc, a_tile, TK * TM);
  TF_OPS_SHARED(Acc, b_tile, TK * TN);
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const TileOf tile(m_tiles, n_tiles, TM, TN);
  const int64_t z = tile.z, r_begin = p.RBegin(z), r_end = p.REnd(z);
  Loader<Problem, TM, TK, kRun> loader(p, tile, tid, r_begin, r_end);
  Acc acc[RM][RN];
  for (int i = 0; i < RM; ++i) {
    for (int j = 0; j < RN; ++j) acc[i][j] = Acc(0);
  }
  for (int64_t k0 = r_begin; k0 < r_end; k0 += TK) {
    loader.Step(k0, [&](int i, Type a, Type b) {
      a_tile[(loader.lk + i) * TM + loader.lrow] = E::Load(a);
      b_tile[(loader.lk + i) * TN + loader.lrow] = E::Load(b);
    });
    __syncthreads();
    for (int kk = 0; kk < TK; ++kk) {
      Acc a[RM], b[RN];
      for (int i = 0; i < RM; ++i) a[i] = a_tile[kk * TM + ty + 16 * i];
      for (int j = 0; j < RN; ++j) b[j] = b_tile[kk * TN + tx + 16 * j];
      for (int i = 0; i < RM; ++i) {
        for (int j = 0; j < RN; ++j) acc[i][j] += a[i] * b[j];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < RM; ++i) {
    for (int j = 0; j < RN; ++j) {
      const int64_t m = tile.m0 + ty + 16 * i, n = tile.n0 + tx + 16 * j;
      if (m < p.M && n < p.N) StoreSum(p, z, m, n, acc[i][j]);
    }
  }
}

// The GEMM on tensor cores (half, bfloat16; float sums). Warp w computes rows wm..wm + 32 and
// columns wn..wn + 32 of the tile as 2 x 4 products of 16 x 8 (mma.m16n8k16), stepping along
// r 16 at a time in order, so every output's sum has an order fixed by the geometry. The tiles
// hold each row of A and each column of B as pairs of neighbouring reduction values (one 32-bit
// word, the lower r in the low half), kWords words a row (padded: the fragments' reads hit 32
// different banks). The loaders are the other GEMM's (half the threads taking all kTileK values
// of A's rows and the other half B's columns, one cursor chain each, ran layers with unsplit
// reductions slower: ResNet's 1x1 forward, the batch-1 backprop input). The
// next step's values are read from memory while this step's multiply.
template <typename Problem>
__global__ void __launch_bounds__(MmaTiling::kThreads) MmaKernel(Problem p, int64_t m_tiles, int64_t n_tiles) {
  using T = typename Problem::Type;
  constexpr int TM = MmaTiling::kTileM, TN = MmaTiling::kTileN, TK = MmaTiling::kTileK;
  constexpr int NT = MmaTiling::kThreads, W = MmaTiling::kWords, kRun = TK * TM / NT;
  static_assert(TM == TN && TK * TM % NT == 0 && kRun % 2 == 0, "one row of A and one column of B a loader");
  static_assert(TM == 64 && TN == 64 && NT == 128 && TK % 16 == 0, "four warps of 32 x 32");
  TF_OPS_SHARED(uint32_t, a_tile, TM * W);
  TF_OPS_SHARED(uint32_t, b_tile, TN * W);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int wm = warp % 2 * 32, wn = warp / 2 * 32;
  const TileOf tile(m_tiles, n_tiles, TM, TN);
  const int64_t z = tile.z, r_begin = p.RBegin(z), r_end = p.REnd(z);
  Loader<Problem, TM, TK, kRun> loader(p, tile, tid, r_begin, r_end);
  uint32_t a_next[kRun / 2] = {}, b_next[kRun / 2] = {};
  // The loader's values of the step from k0, in pairs (the lower r in the low half).
  const auto fetch = [&](int64_t k0) {
    loader.Step(k0, [&](int i, T a, T b) {
      const int shift = 16 * (i % 2);
      a_next[i / 2] = (i % 2 ? a_next[i / 2] : 0u) | Bits16(a) << shift;
      b_next[i / 2] = (i % 2 ? b_next[i / 2] : 0u) | Bits16(b) << shift;
    });
  };
  float acc[2][4][4];
  TF_OPS_UNROLL
  for (int mi = 0; mi < 2; ++mi) {
    TF_OPS_UNROLL
    for (int ni = 0; ni < 4; ++ni) {
      TF_OPS_UNROLL
      for (int i = 0; i < 4; ++i) acc[mi][ni][i] = 0.0f;
    }
  }
  if (r_begin < r_end) fetch(r_begin);
  for (int64_t k0 = r_begin; k0 < r_end; k0 += TK) {
    __syncthreads();  // the last step's fragments are read
    TF_OPS_UNROLL
    for (int i = 0; i < kRun / 2; ++i) {
      a_tile[loader.lrow * W + loader.lk / 2 + i] = a_next[i];
      b_tile[loader.lrow * W + loader.lk / 2 + i] = b_next[i];
    }
    __syncthreads();
    if (k0 + TK < r_end) fetch(k0 + TK);
    TF_OPS_UNROLL
    for (int ks = 0; ks < TK / 2; ks += 8) {  // 16 reduction values: 8 words
      uint32_t af[2][4], bf[4][2];
      TF_OPS_UNROLL
      for (int mi = 0; mi < 2; ++mi) {
        const int row = wm + 16 * mi + g;
        af[mi][0] = a_tile[row * W + ks + q];
        af[mi][1] = a_tile[(row + 8) * W + ks + q];
        af[mi][2] = a_tile[row * W + ks + 4 + q];
        af[mi][3] = a_tile[(row + 8) * W + ks + 4 + q];
      }
      TF_OPS_UNROLL
      for (int ni = 0; ni < 4; ++ni) {
        const int col = wn + 8 * ni + g;
        bf[ni][0] = b_tile[col * W + ks + q];
        bf[ni][1] = b_tile[col * W + ks + 4 + q];
      }
      TF_OPS_UNROLL
      for (int mi = 0; mi < 2; ++mi) {
        TF_OPS_UNROLL
        for (int ni = 0; ni < 4; ++ni) Mma16816(acc[mi][ni], af[mi], bf[ni], T());
      }
    }
  }
  TF_OPS_UNROLL
  for (int mi = 0; mi < 2; ++mi) {
    TF_OPS_UNROLL
    for (int ni = 0; ni < 4; ++ni) {
      TF_OPS_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int64_t m = tile.m0 + wm + 16 * mi + g + 8 * (i / 2), n = tile.n0 + wn + 8 * ni + 2 * q + i % 2;
        if (m < p.M && n < p.N) StoreSum(p, z, m, n, acc[mi][ni][i]);
      }
    }
  }
}

// Output (z, m, col) of a problem: the sum, in order over r from RBegin(z) to REnd(z), of
// A(z, m, r) * B(z, r, col), as a GEMM thread on CUDA cores sums it.
template <typename Problem>
__device__ typename Problem::Acc DirectSum(const Problem& p, int64_t z, int64_t m, int64_t col) {
  using E = Elem<typename Problem::Type>;
  const int64_t r_begin = p.RBegin(z), r_end = p.REnd(z);
  auto a = p.AAt(z, m, r_begin);
  auto b = p.BAt(z, col, r_begin);
  typename Problem::Acc acc(0);
  for (int64_t r = r_begin; r < r_end; ++r, p.Next(&a), p.Next(&b)) acc += E::Load(p.A(a)) * E::Load(p.B(b));
  return acc;
}

// The direct kernel's sums for forward and backprop input: launched with one slice (Run), so z
// is the group and the sum runs over the whole reduction from its first index; they step the
// reduction's indices alone and place each product's factors anew from them. These kernels
// (depthwise layers, bound by memory) need the occupancy: with two cursors, or dividing a
// slice's first index into its parts, they took more registers a thread and ran MobileNet's
// depthwise forward and backprop input slower.
template <typename T>
__device__ typename Elem<T>::Acc DirectSum(const ForwardProblem<T>& p, int64_t grp, int64_t m, int64_t col) {
  InputCursor a{PixelOf(p.s, m), Tap{0, 0, 0}, grp, 0, 0, false, false};
  typename Elem<T>::Acc acc(0);
  for (int64_t r = 0; r < p.R; ++r, Advance(p.s, &a.t)) {
    Place(p.s, p.xs, &a);
    acc += Elem<T>::Load(p.A(a)) * Elem<T>::Load(p.w[r * p.s.k + grp * p.s.kg + col]);
  }
  return acc;
}

template <typename T>
__device__ typename Elem<T>::Acc DirectSum(const InputProblem<T>& p, int64_t grp, int64_t m, int64_t col) {
  typename InputProblem<T>::ACursor a{p.MemberOf(m), {0, 0, 0}, grp, 0, false};
  typename InputProblem<T>::BCursor b{a.t, grp, col, 0};
  typename Elem<T>::Acc acc(0);
  for (int64_t r = 0; r < p.R; ++r, p.Step(&a.t)) {
    b.t = a.t;
    p.Place(&a), p.Place(&b);
    acc += Elem<T>::Load(p.A(a)) * Elem<T>::Load(p.B(b));
  }
  return acc;
}

// One thread per output (m, z, col) of `p`, col varying fastest and then z, so that
// neighbouring threads touch neighbouring channels; each sums over r in order.
template <typename Problem>
__device__ __forceinline__ void DirectThread(const Problem& p, int64_t zs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDirectThreads + threadIdx.x;
  if (i >= p.M * zs * p.N) return;
  const int64_t col = i % p.N, z = i / p.N % zs, m = i / (p.N * zs);
  StoreSum(p, z, m, col, DirectSum(p, z, m, col));
}

template <typename Problem>
__global__ void __launch_bounds__(kDirectThreads) DirectKernel(Problem p, int64_t zs) {
  DirectThread(p, zs);
}

// The filter gradient's, held to four blocks a multiprocessor (64 registers a thread). Its
// sum keeps more state in registers than the others' (72 unbounded, three blocks); with
// four, its loads wait less, which speeds up MobileNet's large depthwise filter gradients and
// leaves the other rows level. (The other problems keep the compiler's own choice: a block
// minimum of even one changes their register allocation, and slowed depthwise forward passes.)
template <typename T>
__global__ void __launch_bounds__(kDirectThreads, 4) DirectFilterKernel(FilterProblem<T> p, int64_t zs) {
  DirectThread(p, zs);
}

template <typename Problem>
constexpr auto kDirectKernel = DirectKernel<Problem>;
template <typename T>
constexpr auto kDirectKernel<FilterProblem<T>> = DirectFilterKernel<T>;

// Output (grp, m, col) of a sliced problem: the sum over slices s, in order, of
// partial[s * groups + grp][m][col].
template <typename Problem>
__global__ void __launch_bounds__(kReduceThreads) ReduceSlices(Problem p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x;
  if (i >= p.groups * p.M * p.N) return;
  const int64_t col = i % p.N, m = i / p.N % p.M, grp = i / (p.N * p.M);
  const typename Problem::Acc* partial = p.partial.data;
  typename Problem::Acc sum = partial[(grp * p.M + m) * p.N + col];
  for (int64_t s = 1; s < p.slices; ++s) sum += partial[((s * p.groups + grp) * p.M + m) * p.N + col];
  p.Write(grp, m, col, sum);
}

std::string LaunchError(const char* kernel, cudaError_t e) {
  return std::string("tf_ops: launching the CUDA kernel ") + kernel + " failed: " + cudaGetErrorString(e);
}

// Runs `p` (its M, N, R and groups set) as PlanProblem plans it (its reduction in slices
// where a workspace for their sums is had, else in one), then adds the slices.
template <typename Problem>
std::string Run(Problem p, Kernel kernel, bool nchw, Stream stream, const WorkspaceFn& workspace) {
  using Acc = typename Problem::Acc;
  constexpr bool tensor_cores = kTensorCores<typename Problem::Type>;
  if (p.M <= 0 || p.N <= 0 || p.groups <= 0) return "";
  const ProblemSizes sizes{p.M, p.N, p.R, p.groups};
  LaunchPlan plan = PlanProblem(sizes, kernel, tensor_cores, Problem::kDirectSlices);
  const Kind kind = plan.kind;
  const bool direct = kind == Kind::kDirect;
  bool no_workspace = false;
  if (plan.slices > 1) {
    p.partial.data = static_cast<Acc*>(workspace ? workspace(plan.partial_elements(sizes) * sizeof(Acc)) : nullptr);
    if (p.partial.data == nullptr) plan = PlanLaunch(sizes, kind, 1), no_workspace = true;
  }
  p.slices = plan.slices, p.slice_len = plan.slice_len;
  if (plan.blocks > 0x7fffffff) {
    return "tf_ops: the convolution needs " + std::to_string(plan.blocks) +
           " thread blocks, more than a CUDA grid holds (2**31 - 1)";
  }
  NoteLaunch(Problem::kDirection, sizes, plan, nchw, no_workspace);
  const dim3 grid(static_cast<unsigned>(plan.blocks)), block(static_cast<unsigned>(plan.block_threads));
  cudaError_t e;
  if (direct) {
    e = Launch<kDirectKernel<Problem>>(grid, block, 0, stream, p, p.slices * p.groups);
  } else if constexpr (tensor_cores) {
    e = Launch<MmaKernel<Problem>>(grid, block, 0, stream, p, plan.m_tiles, plan.n_tiles);
  } else {
    e = Launch<GemmKernel<Problem>>(grid, block, 0, stream, p, plan.m_tiles, plan.n_tiles);
  }
  if (e != cudaSuccess) return LaunchError(KindName(kind), e);
  if (p.slices == 1) return "";
  const int64_t outputs = p.groups * p.M * p.N;
  e = Launch<ReduceSlices<Problem>>(dim3(static_cast<unsigned>(CeilDiv(outputs, kReduceThreads))),
                                    dim3(kReduceThreads), 0, stream, p);
  return e == cudaSuccess ? "" : LaunchError("ReduceSlices", e);
}

std::string Zero(void* out, int64_t bytes, Stream stream) {
  const cudaError_t e = cudaMemsetAsync(out, 0, static_cast<size_t>(bytes), stream);
  return e == cudaSuccess ? "" : LaunchError("memset", e);
}

// Notes the call's op-level cases; where a tensor is empty (EmptyRule), true, having zero-filled
// the output (`out_bytes` at `out`) where the rule asks for it, and *err that launch's error.
bool DoneIfEmpty(Direction d, const ConvGeometry& g, void* out, int64_t out_bytes, Stream stream, std::string* err) {
  NoteOp(d, g);
  const EmptyCall empty = EmptyRule(d, g);
  if (empty == EmptyCall::kZeros) *err = Zero(out, out_bytes, stream);
  return empty != EmptyCall::kCompute;
}

template <typename T>
std::string Forward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y, Stream stream,
                    const WorkspaceFn& workspace, Kernel kernel) {
  std::string err;
  if (DoneIfEmpty(Direction::kForward, g, y, g.output_elements() * sizeof(T), stream, &err)) return err;
  ForwardProblem<T> p{};
  p.x = x, p.w = w, p.y.data = y, p.s = ToSizes(g);
  p.xs = ToStrides(StridesFor(layout, g.in_rows, g.in_cols, g.in_depth));
  p.ys = ToStrides(StridesFor(layout, g.out_rows, g.out_cols, g.out_depth));
  const ProblemSizes sizes = ForwardSizes(g);
  p.M = sizes.M, p.N = sizes.N, p.R = sizes.R, p.groups = sizes.groups;
  return Run(p, kernel, layout == Layout::kNCHW, stream, workspace);
}

template <typename T>
std::string BackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy, T* dx,
                          Stream stream, const WorkspaceFn& workspace, Kernel kernel) {
  std::string err;
  if (DoneIfEmpty(Direction::kBackpropInput, g, dx, g.input_elements() * sizeof(T), stream, &err)) return err;
  InputProblem<T> p{};
  p.w = w, p.dy = dy, p.dx.data = dx, p.s = ToSizes(g);
  p.dys = ToStrides(StridesFor(layout, g.out_rows, g.out_cols, g.out_depth));
  p.dxs = ToStrides(StridesFor(layout, g.in_rows, g.in_cols, g.in_depth));
  // One launch per residue class of input rows and columns.
  for (const InputClass& c : InputClasses(g)) {
    p.class_rows = c.row, p.class_cols = c.col, p.rows = c.rows, p.cols = c.cols, p.th = c.th, p.tw = c.tw;
    p.M = c.sizes.M, p.N = c.sizes.N, p.R = c.sizes.R, p.groups = c.sizes.groups;
    const std::string err = Run(p, kernel, layout == Layout::kNCHW, stream, workspace);
    if (!err.empty()) return err;
  }
  return "";
}

template <typename T>
std::string BackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy, T* dw,
                           Stream stream, const WorkspaceFn& workspace, Kernel kernel) {
  std::string err;
  if (DoneIfEmpty(Direction::kBackpropFilter, g, dw, g.filter_elements() * sizeof(T), stream, &err)) return err;
  FilterProblem<T> p{};
  p.x = x, p.dy = dy, p.dw.data = dw, p.s = ToSizes(g);
  p.xs = ToStrides(StridesFor(layout, g.in_rows, g.in_cols, g.in_depth));
  p.dys = ToStrides(StridesFor(layout, g.out_rows, g.out_cols, g.out_depth));
  const ProblemSizes sizes = FilterSizes(g);
  p.M = sizes.M, p.N = sizes.N, p.R = sizes.R, p.groups = sizes.groups;
  return Run(p, kernel, layout == Layout::kNCHW, stream, workspace);
}

// The filter layouts of the CUTLASS plans: a thread per filter element, KRSC index i =
// ((k * R + kh) * S + kw) * C + c, HWIO index ((kh * S + kw) * C + c) * K + k.
constexpr int kLayoutThreads = 256;

struct FilterDims {
  int64_t r, s, c, k;
  __device__ int64_t HwioOf(int64_t i) const {
    const int64_t ci = i % c, kw = i / c % s, kh = i / (c * s) % r, ko = i / (c * s * r);
    return ((kh * s + kw) * c + ci) * k + ko;
  }
};

template <typename T>
__global__ void __launch_bounds__(kLayoutThreads) FilterToKrscKernel(FilterDims d, const T* w, Output<T> krsc) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kLayoutThreads + threadIdx.x;
  if (i < d.r * d.s * d.c * d.k) krsc.Store(i, w[d.HwioOf(i)]);
}

template <typename T>
__global__ void __launch_bounds__(kLayoutThreads)
    KrscSumsKernel(FilterDims d, const float* sums, int64_t splits, Output<T> dw) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kLayoutThreads + threadIdx.x;
  const int64_t n = d.r * d.s * d.c * d.k;
  if (i >= n) return;
  float sum = sums[i];
  for (int64_t split = 1; split < splits; ++split) sum += sums[split * n + i];
  dw.Store(d.HwioOf(i), Elem<T>::Store(sum));
}

FilterDims FilterDimsOf(const ConvGeometry& g) { return {g.filter_rows, g.filter_cols, g.filter_in_depth, g.out_depth}; }

dim3 LayoutGrid(const ConvGeometry& g) { return dim3(static_cast<unsigned>(CeilDiv(g.filter_elements(), kLayoutThreads))); }

template <typename T>
struct FilterToKrscFn {
  static std::string Run(const ConvGeometry& g, const void* w, void* krsc, Stream stream) {
    if (g.filter_elements() == 0) return "";
    const cudaError_t e = Launch<FilterToKrscKernel<T>>(LayoutGrid(g), dim3(kLayoutThreads), 0, stream,
                                                       FilterDimsOf(g), static_cast<const T*>(w),
                                                       Output<T>{static_cast<T*>(krsc)});
    return e == cudaSuccess ? "" : LaunchError("FilterToKrsc", e);
  }
};

template <typename T>
struct KrscSumsFn {
  static std::string Run(const ConvGeometry& g, const float* sums, int64_t splits, void* dw, Stream stream) {
    if (g.filter_elements() == 0) return "";
    const cudaError_t e = Launch<KrscSumsKernel<T>>(LayoutGrid(g), dim3(kLayoutThreads), 0, stream, FilterDimsOf(g),
                                                   sums, splits, Output<T>{static_cast<T*>(dw)});
    return e == cudaSuccess ? "" : LaunchError("KrscSumsToFilter", e);
  }
};

template <template <typename> class Fn, typename... Args>
std::string ByDtype(Element dtype, Args&&... args) {
  switch (dtype) {
    case Element::kHalf: return Fn<__half>::Run(std::forward<Args>(args)...);
    case Element::kBFloat16: return Fn<__nv_bfloat16>::Run(std::forward<Args>(args)...);
    case Element::kFloat: return Fn<float>::Run(std::forward<Args>(args)...);
    case Element::kDouble: return Fn<double>::Run(std::forward<Args>(args)...);
    case Element::kInt32: return Fn<int32_t>::Run(std::forward<Args>(args)...);
  }
  return "tf_ops: no CUDA kernel for this element type";
}

template <typename T>
struct ForwardFn {
  static std::string Run(const ConvGeometry& g, Layout layout, const void* x, const void* w, void* y,
                         Stream stream, const WorkspaceFn& workspace, Kernel kernel) {
    return Forward<T>(g, layout, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), stream,
                      workspace, kernel);
  }
};
template <typename T>
struct InputFn {
  static std::string Run(const ConvGeometry& g, Layout layout, const void* w, const void* dy, void* dx,
                         Stream stream, const WorkspaceFn& workspace, Kernel kernel) {
    return BackpropInput<T>(g, layout, static_cast<const T*>(w), static_cast<const T*>(dy), static_cast<T*>(dx),
                            stream, workspace, kernel);
  }
};
template <typename T>
struct FilterFn {
  static std::string Run(const ConvGeometry& g, Layout layout, const void* x, const void* dy, void* dw,
                         Stream stream, const WorkspaceFn& workspace, Kernel kernel) {
    return BackpropFilter<T>(g, layout, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dw),
                             stream, workspace, kernel);
  }
};

}  // namespace

std::string FilterToKrsc(Element dtype, const ConvGeometry& g, const void* w, void* krsc, Stream stream) {
  return ByDtype<FilterToKrscFn>(dtype, g, w, krsc, stream);
}

std::string KrscSumsToFilter(Element dtype, const ConvGeometry& g, const float* sums, int64_t splits, void* dw,
                             Stream stream) {
  return ByDtype<KrscSumsFn>(dtype, g, sums, splits, dw, stream);
}

std::string ConvForward(Element dtype, const ConvGeometry& g, Layout layout, const void* x,
                        const void* w, void* y, Stream stream, const WorkspaceFn& workspace, Kernel kernel) {
  return ByDtype<ForwardFn>(dtype, g, layout, x, w, y, stream, workspace, kernel);
}

std::string ConvBackpropInput(Element dtype, const ConvGeometry& g, Layout layout, const void* w,
                              const void* dy, void* dx, Stream stream, const WorkspaceFn& workspace,
                              Kernel kernel) {
  return ByDtype<InputFn>(dtype, g, layout, w, dy, dx, stream, workspace, kernel);
}

std::string ConvBackpropFilter(Element dtype, const ConvGeometry& g, Layout layout, const void* x,
                               const void* dy, void* dw, Stream stream,
                               const WorkspaceFn& workspace, Kernel kernel) {
  return ByDtype<FilterFn>(dtype, g, layout, x, dy, dw, stream, workspace, kernel);
}

}  // namespace gpu
}  // namespace tf_ops
