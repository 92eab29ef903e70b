// The CUDA kernels of conv_gpu.h: one shared-memory tiled implicit GEMM, fed by a "problem"
// per direction that says what row m, reduction index r and column n of the GEMM are.
//
//   forward:          C[m = (n, oh, ow)][col = k]   = sum_{r = (kh, kw, ci)} x[..] w[..]
//   backprop input:   per stride-residue class (ch, cw) of input pixels,
//                     C[m = (n, i, j)][col = ci]     = sum_{r = (tap a, tap b, k)} dy[..] w[..]
//                     over the taps (kh, kw) that reach the class, so no inserted zero is read
//   backprop filter:  C[m = (kh, kw, ci)][col = k]  = sum_{r = (n, oh, ow)} x[..] dy[..],
//                     the reduction split into slices summed in order
// one group at a time (the grid's z index), every activation read through its layout's
// strides, so NHWC and NCHW take the same code. A problem whose groups have at most
// kDirectMaxCols columns (depthwise layers have one) runs in a direct kernel instead, one
// thread per output summing over r in the same order.
#include "cc/core/gpu/conv_gpu.h"

#include <algorithm>
#include <string>

#include "cc/core/gpu/cuda_compat.cuh"

namespace tf_ops {
namespace gpu {
namespace {

// The tiling of the GEMM kernel, in one place: a block of kThreads threads computes a
// kTileM x kTileN tile of C, taking the reduction kTileK steps at a time through shared
// memory; thread (tx, ty) of a 16 x 16 arrangement holds rows ty + 16 i and columns
// tx + 16 j of the tile.
struct Tiling {
  static constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kThreads = 256;
  static constexpr int kRowsPerThread = kTileM / 16, kColsPerThread = kTileN / 16;
};
static_assert(Tiling::kThreads == 256, "a 16 x 16 arrangement of threads");
static_assert(Tiling::kTileK * Tiling::kTileM % Tiling::kThreads == 0, "whole loads per thread");
static_assert(Tiling::kTileK * Tiling::kTileN % Tiling::kThreads == 0, "whole loads per thread");

// The filter gradient's reduction is split into slices of at least this many output pixels
// while the launch has fewer than kFilterTargetThreads threads.
constexpr int64_t kFilterSliceMin = 1024;
constexpr int64_t kFilterTargetThreads = 512 * Tiling::kThreads;
constexpr int kReduceThreads = 256;

// Groups with at most this many GEMM columns would fill at most an eighth of a tile's: those
// problems run in the direct kernel, kDirectThreads threads a block.
constexpr int64_t kDirectMaxCols = Tiling::kTileN / 8;
constexpr int kDirectThreads = 256;

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

// The input value tap t of output pixel p reads in group grp's channel t.ci, or zero in the
// padding: the factor of x that the forward and filter-gradient problems multiply.
template <typename T>
__device__ __forceinline__ typename Elem<T>::Acc InputAt(const T* x, const Sizes& s, const Strides& xs,
                                                         const Pixel& p, const Tap& t, int64_t grp) {
  const int64_t c = grp * s.fi + t.ci;
  const int64_t ih = p.oh * s.stride_rows - s.pad_top + t.kh * s.dilation_rows;
  const int64_t iw = p.ow * s.stride_cols - s.pad_left + t.kw * s.dilation_cols;
  if (ih < 0 || ih >= s.in_rows || iw < 0 || iw >= s.in_cols) return typename Elem<T>::Acc(0);
  return Elem<T>::Load(x[p.n * xs.n + ih * xs.h + iw * xs.w + c * xs.c]);
}

template <typename T>
struct ForwardProblem {
  using Acc = typename Elem<T>::Acc;
  const T* x;
  const T* w;
  T* y;
  Sizes s;
  Strides xs, ys;
  int64_t M, N, R;
  __device__ int64_t RBegin(int64_t) const { return 0; }
  __device__ int64_t REnd(int64_t) const { return R; }
  __device__ Acc A(int64_t grp, int64_t m, int64_t r) const {
    const Pixel p = PixelOf(s, m);
    const Tap t = TapOf(s, r);
    return InputAt(x, s, xs, p, t, grp);
  }
  __device__ Acc B(int64_t grp, int64_t r, int64_t col) const {
    return Elem<T>::Load(w[r * s.k + grp * s.kg + col]);
  }
  __device__ void Store(int64_t grp, int64_t m, int64_t col, Acc v) const {
    const Pixel p = PixelOf(s, m);
    y[p.n * ys.n + p.oh * ys.h + p.ow * ys.w + (grp * s.kg + col) * ys.c] = Elem<T>::Store(v);
  }
};

// The filter taps of one dimension that reach a stride-residue class of input indices: tap
// kh0 + a * step for a < count, reading output index base - a * delta + i for the class's
// i-th member (kh * dilation = class + pad - stride * output index).
struct ClassTaps {
  int64_t first = 0, step = 1, count = 0, base = 0, delta = 0;
};

ClassTaps TapsOfClass(int64_t cls, int64_t taps, int64_t stride, int64_t dilation, int64_t pad) {
  ClassTaps t;
  const int64_t period = stride / std::__gcd(stride, dilation);
  t.step = period;
  for (int64_t kh = 0; kh < std::min(taps, period); ++kh) {
    const int64_t num = cls + pad - kh * dilation;
    if (((num % stride) + stride) % stride == 0) {
      t.first = kh;
      t.count = (taps - kh + period - 1) / period;
      // num is a multiple of stride; floor division of a possibly negative multiple is exact.
      t.base = num >= 0 ? num / stride : -((-num) / stride);
      t.delta = period * dilation / stride;
      return t;
    }
  }
  return t;
}

template <typename T>
struct InputProblem {
  using Acc = typename Elem<T>::Acc;
  const T* w;
  const T* dy;
  T* dx;
  Sizes s;
  Strides dys, dxs;
  int64_t class_rows, class_cols;  // the class's first input row and column
  int64_t rows, cols;              // members of the class along each dimension
  ClassTaps th, tw;
  int64_t M, N, R;
  __device__ int64_t RBegin(int64_t) const { return 0; }
  __device__ int64_t REnd(int64_t) const { return R; }
  // Class member m: image n, row i, column j of the class. Reduction index r: the class's
  // row tap a, column tap b, output-gradient channel k (k fastest), and the one after it.
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
    const int64_t k = r % s.kg, b = r / s.kg % tw.count, a = r / (s.kg * tw.count);
    return {a, b, k};
  }
  __device__ void Advance(Term* t) const {
    if (++t->k == s.kg) {
      t->k = 0;
      if (++t->b == tw.count) t->b = 0, ++t->a;
    }
  }
  // The two factors of one product of group grp: dy, and the filter entry for column col.
  __device__ Acc Dy(int64_t grp, const Member& e, const Term& t) const {
    const int64_t oh = th.base - t.a * th.delta + e.i, ow = tw.base - t.b * tw.delta + e.j;
    if (oh < 0 || oh >= s.out_rows || ow < 0 || ow >= s.out_cols) return Acc(0);
    return Elem<T>::Load(dy[e.n * dys.n + oh * dys.h + ow * dys.w + (grp * s.kg + t.k) * dys.c]);
  }
  __device__ Acc W(int64_t grp, const Term& t, int64_t col) const {
    const int64_t kh = th.first + t.a * th.step, kw = tw.first + t.b * tw.step;
    return Elem<T>::Load(w[((kh * s.filter_cols + kw) * s.fi + col) * s.k + grp * s.kg + t.k]);
  }
  __device__ Acc A(int64_t grp, int64_t m, int64_t r) const {
    const Member e = MemberOf(m);
    const Term t = TermOf(r);
    return Dy(grp, e, t);
  }
  __device__ Acc B(int64_t grp, int64_t r, int64_t col) const { return W(grp, TermOf(r), col); }
  __device__ void Store(int64_t grp, int64_t m, int64_t col, Acc v) const {
    const Member e = MemberOf(m);
    const int64_t ih = class_rows + e.i * s.stride_rows, iw = class_cols + e.j * s.stride_cols;
    dx[e.n * dxs.n + ih * dxs.h + iw * dxs.w + (grp * s.fi + col) * dxs.c] = Elem<T>::Store(v);
  }
};

// z = slice * groups + group (neighbouring z, neighbouring channels). With one slice the
// result goes to dw; with several, each slice's float (or double) sums go to
// partial[z][m][col] for ReduceSlices.
template <typename T>
struct FilterProblem {
  using Acc = typename Elem<T>::Acc;
  const T* x;
  const T* dy;
  T* dw;
  Acc* partial;
  Sizes s;
  Strides xs, dys;
  int64_t groups, slices, slice_len;
  int64_t M, N, R;
  __device__ int64_t RBegin(int64_t z) const { return z / groups * slice_len; }
  __device__ int64_t REnd(int64_t z) const {
    const int64_t end = (z / groups + 1) * slice_len;
    return end < R ? end : R;
  }
  // dy at pixel p for column col of group grp: the factor that multiplies InputAt's.
  __device__ Acc Dy(int64_t grp, int64_t col, const Pixel& p) const {
    return Elem<T>::Load(dy[p.n * dys.n + p.oh * dys.h + p.ow * dys.w + (grp * s.kg + col) * dys.c]);
  }
  __device__ Acc A(int64_t z, int64_t m, int64_t r) const {
    const int64_t grp = z % groups;
    const Tap t = TapOf(s, m);
    return InputAt(x, s, xs, PixelOf(s, r), t, grp);
  }
  __device__ Acc B(int64_t z, int64_t r, int64_t col) const {
    const int64_t grp = z % groups;
    return Dy(grp, col, PixelOf(s, r));
  }
  __device__ void Store(int64_t z, int64_t m, int64_t col, Acc v) const {
    if (slices == 1) {
      dw[m * s.k + z * s.kg + col] = Elem<T>::Store(v);
    } else {
      partial[(z * M + m) * N + col] = v;
    }
  }
};

// The GEMM: block b of the grid computes tile (b % m_tiles, b / m_tiles % n_tiles) of
// problem z = b / (m_tiles * n_tiles). Each output is summed by one thread over r in order.
template <typename Problem>
__global__ void __launch_bounds__(Tiling::kThreads) GemmKernel(Problem p, int64_t m_tiles, int64_t n_tiles) {
  using Acc = typename Problem::Acc;
  constexpr int TM = Tiling::kTileM, TN = Tiling::kTileN, TK = Tiling::kTileK, NT = Tiling::kThreads;
  constexpr int RM = Tiling::kRowsPerThread, RN = Tiling::kColsPerThread;
  TF_OPS_SHARED(Acc, a_tile, TK * TM);
  TF_OPS_SHARED(Acc, b_tile, TK * TN);
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int64_t block = blockIdx.x;
  const int64_t m0 = block % m_tiles * TM, n0 = block / m_tiles % n_tiles * TN;
  const int64_t z = block / (m_tiles * n_tiles);
  Acc acc[RM][RN];
  for (int i = 0; i < RM; ++i) {
    for (int j = 0; j < RN; ++j) acc[i][j] = Acc(0);
  }
  const int64_t r_begin = p.RBegin(z), r_end = p.REnd(z);
  for (int64_t k0 = r_begin; k0 < r_end; k0 += TK) {
    for (int l = 0; l < TK * TM / NT; ++l) {
      const int idx = tid + l * NT, kk = idx / TM, mm = idx % TM;
      const int64_t m = m0 + mm, r = k0 + kk;
      a_tile[kk * TM + mm] = m < p.M && r < r_end ? p.A(z, m, r) : Acc(0);
    }
    for (int l = 0; l < TK * TN / NT; ++l) {
      const int idx = tid + l * NT, kk = idx / TN, nn = idx % TN;
      const int64_t n = n0 + nn, r = k0 + kk;
      b_tile[kk * TN + nn] = n < p.N && r < r_end ? p.B(z, r, n) : Acc(0);
    }
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
      const int64_t m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < p.M && n < p.N) p.Store(z, m, n, acc[i][j]);
    }
  }
}

// Output (z, m, col) of a problem: the sum, in order over r from RBegin(z) to REnd(z), of
// A(z, m, r) * B(z, r, col), as a GEMM thread sums it. Each problem's overload steps the
// parts of r along (the filter entry forward, the taps and channel backprop input, the pixel
// for the filter gradient) instead of dividing them out of r at every step.
template <typename T>
__device__ typename Elem<T>::Acc DirectSum(const ForwardProblem<T>& p, int64_t grp, int64_t m, int64_t col) {
  const Pixel px = PixelOf(p.s, m);
  Tap t = {0, 0, 0};
  typename Elem<T>::Acc acc(0);
  for (int64_t r = 0; r < p.R; ++r, Advance(p.s, &t)) {
    acc += InputAt(p.x, p.s, p.xs, px, t, grp) * p.B(grp, r, col);
  }
  return acc;
}

template <typename T>
__device__ typename Elem<T>::Acc DirectSum(const InputProblem<T>& p, int64_t grp, int64_t m, int64_t col) {
  const typename InputProblem<T>::Member e = p.MemberOf(m);
  typename InputProblem<T>::Term t = {0, 0, 0};
  typename Elem<T>::Acc acc(0);
  for (int64_t r = 0; r < p.R; ++r, p.Advance(&t)) acc += p.Dy(grp, e, t) * p.W(grp, t, col);
  return acc;
}

template <typename T>
__device__ typename Elem<T>::Acc DirectSum(const FilterProblem<T>& p, int64_t z, int64_t m, int64_t col) {
  const int64_t grp = z % p.groups;
  const Tap t = TapOf(p.s, m);
  const int64_t r_begin = p.RBegin(z), r_end = p.REnd(z);
  Pixel px = PixelOf(p.s, r_begin);
  typename Elem<T>::Acc acc(0);
  for (int64_t r = r_begin; r < r_end; ++r, Advance(p.s, &px)) {
    acc += InputAt(p.x, p.s, p.xs, px, t, grp) * p.Dy(grp, col, px);
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
  p.Store(z, m, col, DirectSum(p, z, m, col));
}

template <typename Problem>
__global__ void __launch_bounds__(kDirectThreads) DirectKernel(Problem p, int64_t zs) {
  DirectThread(p, zs);
}

// The filter gradient's, held to four blocks a multiprocessor (64 registers a thread). Its
// sum keeps more state in registers than the others' (72 unbounded, three blocks); with
// four, its loads wait less. On an H200 that made MobileNet's 32 x 56 x 56 x 128 depthwise
// filter gradient 2.1x faster in 16-bit types and 1.3x in float32, and left the other rows
// within 3%. (The other problems keep the compiler's own choice: a block minimum of even
// one changes their register allocation, and made depthwise forward passes 3% slower.)
template <typename T>
__global__ void __launch_bounds__(kDirectThreads, 4) DirectFilterKernel(FilterProblem<T> p, int64_t zs) {
  DirectThread(p, zs);
}

template <typename Problem>
auto DirectKernelFor(const Problem&) {
  return DirectKernel<Problem>;
}

template <typename T>
auto DirectKernelFor(const FilterProblem<T>&) {
  return DirectFilterKernel<T>;
}

// dw[m][grp * kg + col] = the sum over slices s, in order, of partial[s][grp][m][col].
template <typename T>
__global__ void __launch_bounds__(kReduceThreads) ReduceSlices(const typename Elem<T>::Acc* partial, T* dw,
                                                               int64_t groups, int64_t slices, int64_t M,
                                                               int64_t kg) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x;
  if (i >= groups * M * kg) return;
  const int64_t col = i % kg, m = i / kg % M, grp = i / (kg * M);
  typename Elem<T>::Acc sum = partial[(grp * M + m) * kg + col];
  for (int64_t s = 1; s < slices; ++s) sum += partial[((s * groups + grp) * M + m) * kg + col];
  dw[m * kg * groups + grp * kg + col] = Elem<T>::Store(sum);
}

std::string LaunchError(const char* kernel, cudaError_t e) {
  return std::string("tf_ops: launching the CUDA kernel ") + kernel + " failed: " + cudaGetErrorString(e);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether a problem with `cols` columns a group runs in the direct kernel.
bool Direct(Kernel kernel, int64_t cols) {
  return kernel == Kernel::kDirect || (kernel == Kernel::kAuto && cols <= kDirectMaxCols);
}

// The launch over `zs` problems of M x N outputs: a thread per output in the direct kernel,
// a block per tile in the GEMM. Read both by Run and by the filter gradient's choice of
// slices.
struct LaunchShape {
  int64_t m_tiles, n_tiles, blocks, block_threads;
  int64_t threads() const { return blocks * block_threads; }
};
LaunchShape ShapeOf(int64_t M, int64_t N, int64_t zs, bool direct) {
  const int64_t m_tiles = CeilDiv(M, Tiling::kTileM), n_tiles = CeilDiv(N, Tiling::kTileN);
  if (direct) return {m_tiles, n_tiles, CeilDiv(M * zs * N, kDirectThreads), kDirectThreads};
  return {m_tiles, n_tiles, m_tiles * n_tiles * zs, Tiling::kThreads};
}

// Runs `p` over `zs` problems (groups, or slices x groups), in the direct kernel or the GEMM.
template <typename Problem>
std::string Run(const Problem& p, int64_t zs, bool direct, Stream stream) {
  if (p.M <= 0 || p.N <= 0 || zs <= 0) return "";
  const LaunchShape shape = ShapeOf(p.M, p.N, zs, direct);
  if (shape.blocks > 0x7fffffff) {
    return "tf_ops: the convolution needs " + std::to_string(shape.blocks) +
           " thread blocks, more than a CUDA grid holds (2**31 - 1)";
  }
  const dim3 grid(static_cast<unsigned>(shape.blocks)), block(static_cast<unsigned>(shape.block_threads));
  const char* name = direct ? "DirectKernel" : "GemmKernel";
  const cudaError_t e = direct ? Launch(name, DirectKernelFor(p), grid, block, 0, stream, p, zs)
                               : Launch(name, GemmKernel<Problem>, grid, block, 0, stream, p,
                                        shape.m_tiles, shape.n_tiles);
  return e == cudaSuccess ? "" : LaunchError(name, e);
}

std::string Zero(void* out, int64_t bytes, Stream stream) {
  const cudaError_t e = cudaMemsetAsync(out, 0, static_cast<size_t>(bytes), stream);
  return e == cudaSuccess ? "" : LaunchError("memset", e);
}

template <typename T>
std::string Forward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y, Stream stream,
                    Kernel kernel) {
  if (g.output_elements() == 0) return "";
  if (g.input_elements() == 0 || g.filter_elements() == 0) return Zero(y, g.output_elements() * sizeof(T), stream);
  ForwardProblem<T> p{x, w, y, ToSizes(g),
                      ToStrides(StridesFor(layout, g.in_rows, g.in_cols, g.in_depth)),
                      ToStrides(StridesFor(layout, g.out_rows, g.out_cols, g.out_depth)),
                      g.batch * g.out_rows * g.out_cols, g.out_depth_per_group(),
                      g.filter_rows * g.filter_cols * g.filter_in_depth};
  return Run(p, g.groups, Direct(kernel, p.N), stream);
}

template <typename T>
std::string BackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy, T* dx,
                          Stream stream, Kernel kernel) {
  if (g.input_elements() == 0) return "";
  if (g.output_elements() == 0 || g.filter_elements() == 0) return Zero(dx, g.input_elements() * sizeof(T), stream);
  InputProblem<T> p{};
  p.w = w, p.dy = dy, p.dx = dx, p.s = ToSizes(g);
  p.dys = ToStrides(StridesFor(layout, g.out_rows, g.out_cols, g.out_depth));
  p.dxs = ToStrides(StridesFor(layout, g.in_rows, g.in_cols, g.in_depth));
  p.N = g.filter_in_depth;
  // One launch per residue class of input rows and columns.
  for (int64_t ch = 0; ch < std::min(g.stride_rows, g.in_rows); ++ch) {
    for (int64_t cw = 0; cw < std::min(g.stride_cols, g.in_cols); ++cw) {
      p.class_rows = ch, p.class_cols = cw;
      p.rows = CeilDiv(g.in_rows - ch, g.stride_rows), p.cols = CeilDiv(g.in_cols - cw, g.stride_cols);
      p.th = TapsOfClass(ch, g.filter_rows, g.stride_rows, g.dilation_rows, g.pad_top);
      p.tw = TapsOfClass(cw, g.filter_cols, g.stride_cols, g.dilation_cols, g.pad_left);
      p.M = g.batch * p.rows * p.cols;
      p.R = p.th.count * p.tw.count * g.out_depth_per_group();
      const std::string err = Run(p, g.groups, Direct(kernel, p.N), stream);
      if (!err.empty()) return err;
    }
  }
  return "";
}

template <typename T>
std::string BackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy, T* dw,
                           Stream stream, const WorkspaceFn& workspace, Kernel kernel) {
  using Acc = typename Elem<T>::Acc;
  if (g.filter_elements() == 0) return "";
  if (g.input_elements() == 0 || g.output_elements() == 0) return Zero(dw, g.filter_elements() * sizeof(T), stream);
  FilterProblem<T> p{};
  p.x = x, p.dy = dy, p.dw = dw, p.s = ToSizes(g);
  p.xs = ToStrides(StridesFor(layout, g.in_rows, g.in_cols, g.in_depth));
  p.dys = ToStrides(StridesFor(layout, g.out_rows, g.out_cols, g.out_depth));
  p.M = g.filter_rows * g.filter_cols * g.filter_in_depth;
  p.N = g.out_depth_per_group();
  p.R = g.batch * g.out_rows * g.out_cols;
  p.groups = g.groups;
  // Slices of the reduction, fixed by the geometry and the kernel: enough threads to fill a
  // GPU, each slice at least kFilterSliceMin pixels long.
  const bool direct = Direct(kernel, p.N);
  const int64_t threads = ShapeOf(p.M, p.N, g.groups, direct).threads();  // of one slice
  p.slices = std::max<int64_t>(1, std::min(CeilDiv(p.R, kFilterSliceMin), kFilterTargetThreads / threads));
  if (p.slices > 1) {
    p.partial = static_cast<Acc*>(workspace ? workspace(g.groups * p.slices * p.M * p.N * sizeof(Acc)) : nullptr);
    if (p.partial == nullptr) p.slices = 1;
  }
  p.slice_len = CeilDiv(p.R, p.slices);
  p.slices = CeilDiv(p.R, p.slice_len);  // no empty slice
  std::string err = Run(p, p.slices * g.groups, direct, stream);
  if (!err.empty() || p.slices == 1) return err;
  const int64_t outputs = g.groups * p.M * p.N;
  const cudaError_t e = Launch("ReduceSlices", ReduceSlices<T>, dim3(static_cast<unsigned>(CeilDiv(outputs, kReduceThreads))),
                               dim3(kReduceThreads), 0, stream, p.partial, dw, g.groups, p.slices, p.M, p.N);
  return e == cudaSuccess ? "" : LaunchError("ReduceSlices", e);
}

template <template <typename> class Fn, typename... Args>
std::string ByDtype(Dtype dtype, Args&&... args) {
  switch (dtype) {
    case Dtype::kHalf: return Fn<__half>::Run(std::forward<Args>(args)...);
    case Dtype::kBFloat16: return Fn<__nv_bfloat16>::Run(std::forward<Args>(args)...);
    case Dtype::kFloat: return Fn<float>::Run(std::forward<Args>(args)...);
    case Dtype::kDouble: return Fn<double>::Run(std::forward<Args>(args)...);
    case Dtype::kInt32: return Fn<int32_t>::Run(std::forward<Args>(args)...);
  }
  return "tf_ops: no CUDA kernel for this element type";
}

template <typename T>
struct ForwardFn {
  static std::string Run(const ConvGeometry& g, Layout layout, const void* x, const void* w, void* y,
                         Stream stream, Kernel kernel) {
    return Forward<T>(g, layout, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), stream,
                      kernel);
  }
};
template <typename T>
struct InputFn {
  static std::string Run(const ConvGeometry& g, Layout layout, const void* w, const void* dy, void* dx,
                         Stream stream, Kernel kernel) {
    return BackpropInput<T>(g, layout, static_cast<const T*>(w), static_cast<const T*>(dy), static_cast<T*>(dx),
                            stream, kernel);
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

std::string ConvForward(Dtype dtype, const ConvGeometry& g, Layout layout, const void* x,
                        const void* w, void* y, Stream stream, const WorkspaceFn&, Kernel kernel) {
  return ByDtype<ForwardFn>(dtype, g, layout, x, w, y, stream, kernel);
}

std::string ConvBackpropInput(Dtype dtype, const ConvGeometry& g, Layout layout, const void* w,
                              const void* dy, void* dx, Stream stream, const WorkspaceFn&,
                              Kernel kernel) {
  return ByDtype<InputFn>(dtype, g, layout, w, dy, dx, stream, kernel);
}

std::string ConvBackpropFilter(Dtype dtype, const ConvGeometry& g, Layout layout, const void* x,
                               const void* dy, void* dw, Stream stream,
                               const WorkspaceFn& workspace, Kernel kernel) {
  return ByDtype<FilterFn>(dtype, g, layout, x, dy, dw, stream, workspace, kernel);
}

}  // namespace gpu
}  // namespace tf_ops
