// The direct loops: the three directions of conv_cpu.h one output element at a time, summed in a
// fixed order, the oracle the fast kernels are tested against. Templates in a header so that a
// test can instantiate them for its own element type (tests/cc/sweep_driver.cc sums the exact
// results and the sums of absolute products of three rounded inputs in one pass); conv_cpu.cc
// runs them for the library's element types. TF-free.
#ifndef TF_OPS_CC_CORE_CPU_DIRECT_LOOPS_H_
#define TF_OPS_CC_CORE_CPU_DIRECT_LOOPS_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"

namespace tf_ops {
namespace cpu {
namespace direct_loops {

// The type sums are carried in: float for the 16-bit floats, uint32 for int32 (wrapping
// arithmetic without signed overflow), the element type otherwise (any type with +=, * and a
// constructor from 0: the tests' oracle sums several float64 results in one pass).
template <typename T>
struct Accumulator {
  using type = T;
};
template <>
struct Accumulator<Eigen::half> {
  using type = float;
};
template <>
struct Accumulator<Eigen::bfloat16> {
  using type = float;
};
template <>
struct Accumulator<int32_t> {
  using type = uint32_t;
};

template <typename Acc, typename T>
Acc ToAcc(T v) {
  return static_cast<Acc>(v);
}
template <>
inline uint32_t ToAcc<uint32_t, int32_t>(int32_t v) {
  return static_cast<uint32_t>(v);
}

template <typename T, typename Acc>
T FromAcc(Acc v) {
  return static_cast<T>(v);
}

// Copies one pixel's `depth` channels (element stride `stride`) into `out`.
template <typename Acc, typename T>
void GatherPixel(const T* p, int64_t depth, int64_t stride, Acc* out) {
  for (int64_t c = 0; c < depth; ++c) out[c] = ToAcc<Acc>(p[c * stride]);
}

// (tap, output index) pairs of one dimension that reach input index `i` in backprop
// input: i = o * stride - pad + tap * dilation, 0 <= o < out_size.
inline void TapsReaching(int64_t i, int64_t pad, int64_t taps, int64_t dilation, int64_t stride,
                  int64_t out_size, std::vector<std::pair<int64_t, int64_t>>* found) {
  found->clear();
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t num = i + pad - t * dilation;
    if (num < 0) break;  // decreases with t
    if (num % stride != 0) continue;
    const int64_t o = num / stride;
    if (o < out_size) found->emplace_back(t, o);
  }
}

// (tap, input index) pairs of one dimension read by output index `o` in the forward and
// filter directions: i = o * stride - pad + tap * dilation, 0 <= i < in_size.
inline void TapsReadBy(int64_t o, int64_t pad, int64_t taps, int64_t dilation, int64_t stride,
                int64_t in_size, std::vector<std::pair<int64_t, int64_t>>* found) {
  found->clear();
  const int64_t base = o * stride - pad;
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t i = base + t * dilation;
    if (i >= in_size) break;  // increases with t
    if (i >= 0) found->emplace_back(t, i);
  }
}

// The thread pool's cost estimate for one work unit. Computed in floating point: products
// of sizes, strides and dilations can exceed int64 even where every tensor is small.
inline int64_t CostEstimate(double ops) {
  return ops < 1 ? 1 : ops > 1e15 ? static_cast<int64_t>(1e15) : static_cast<int64_t>(ops);
}

// If an operand is empty, the result is all zeros: writes them and returns true. The loops
// below may not run in that case, since an empty tensor can have other dimensions that are
// huge (an out_backprop of [0, 2**61, 3, 1] exists) and iterating over them would hang.
template <typename T>
bool ZeroIfAnOperandIsEmpty(int64_t operand_a, int64_t operand_b, T* out, int64_t out_size) {
  if (operand_a > 0 && operand_b > 0) return false;
  using Acc = typename Accumulator<T>::type;
  std::fill(out, out + out_size, FromAcc<T>(Acc(0)));
  return true;
}

}  // namespace direct_loops

template <typename T>
void DirectConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                       const ParallelFor& parallel_for) {
  using namespace direct_loops;
  if (ZeroIfAnOperandIsEmpty(g.input_elements(), g.filter_elements(), y, g.output_elements())) {
    return;
  }
  using Acc = typename Accumulator<T>::type;
  const int64_t G = g.groups, FI = g.filter_in_depth, K = g.out_depth;
  const int64_t Kg = g.out_depth_per_group(), KW = g.filter_cols;
  const ActivationStrides xs = StridesFor(layout, g.in_rows, g.in_cols, g.in_depth);
  const ActivationStrides ys = StridesFor(layout, g.out_rows, g.out_cols, K);
  const std::vector<Acc> wa(w, w + g.filter_elements());  // [KH][KW][FI][K]
  const int64_t cost = CostEstimate(1.0 * g.out_cols * g.filter_rows * KW * FI * K);

  parallel_for(g.batch * g.out_rows, cost, [&](int64_t begin, int64_t end) {
    std::vector<Acc> acc(K), pixel(g.in_depth);
    std::vector<std::pair<int64_t, int64_t>> rows, cols;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / g.out_rows, oh = unit % g.out_rows;
      TapsReadBy(oh, g.pad_top, g.filter_rows, g.dilation_rows, g.stride_rows, g.in_rows,
                 &rows);
      for (int64_t ow = 0; ow < g.out_cols; ++ow) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        TapsReadBy(ow, g.pad_left, KW, g.dilation_cols, g.stride_cols, g.in_cols, &cols);
        for (const auto& [kh, ih] : rows) {
          for (const auto& [kw, iw] : cols) {
            GatherPixel(x + n * xs.n + ih * xs.h + iw * xs.w, g.in_depth, xs.c, pixel.data());
            const Acc* wp = wa.data() + (kh * KW + kw) * FI * K;
            for (int64_t grp = 0; grp < G; ++grp) {
              Acc* a = acc.data() + grp * Kg;
              for (int64_t ci = 0; ci < FI; ++ci) {
                const Acc v = pixel[grp * FI + ci];
                const Acc* wr = wp + ci * K + grp * Kg;
                for (int64_t k = 0; k < Kg; ++k) a[k] += v * wr[k];
              }
            }
          }
        }
        T* out = y + n * ys.n + oh * ys.h + ow * ys.w;
        for (int64_t k = 0; k < K; ++k) out[k * ys.c] = FromAcc<T>(acc[k]);
      }
    }
  });
}

template <typename T>
void DirectConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy,
                             T* dx, const ParallelFor& parallel_for) {
  using namespace direct_loops;
  if (ZeroIfAnOperandIsEmpty(g.filter_elements(), g.output_elements(), dx, g.input_elements())) {
    return;
  }
  using Acc = typename Accumulator<T>::type;
  const int64_t G = g.groups, FI = g.filter_in_depth, K = g.out_depth;
  const int64_t Kg = g.out_depth_per_group(), KW = g.filter_cols;
  const int64_t taps = g.filter_rows * KW;
  const ActivationStrides xs = StridesFor(layout, g.in_rows, g.in_cols, g.in_depth);
  const ActivationStrides ys = StridesFor(layout, g.out_rows, g.out_cols, K);
  // The filter as [KH][KW][K][FI], so the innermost loop runs over contiguous input
  // channels of one group.
  std::vector<Acc> wt(g.filter_elements());
  for (int64_t t = 0; t < taps; ++t) {
    for (int64_t ci = 0; ci < FI; ++ci) {
      for (int64_t k = 0; k < K; ++k) {
        wt[(t * K + k) * FI + ci] = ToAcc<Acc>(w[(t * FI + ci) * K + k]);
      }
    }
  }
  const int64_t cost =
      CostEstimate(1.0 * g.in_cols * taps * FI * K / (1.0 * g.stride_rows * g.stride_cols) +
                   1.0 * g.in_cols * g.in_depth);

  parallel_for(g.batch * g.in_rows, cost, [&](int64_t begin, int64_t end) {
    std::vector<Acc> acc(g.in_depth), pixel(K);
    std::vector<std::pair<int64_t, int64_t>> rows, cols;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / g.in_rows, ih = unit % g.in_rows;
      TapsReaching(ih, g.pad_top, g.filter_rows, g.dilation_rows, g.stride_rows, g.out_rows,
                   &rows);
      for (int64_t iw = 0; iw < g.in_cols; ++iw) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        TapsReaching(iw, g.pad_left, KW, g.dilation_cols, g.stride_cols, g.out_cols, &cols);
        for (const auto& [kh, oh] : rows) {
          for (const auto& [kw, ow] : cols) {
            GatherPixel(dy + n * ys.n + oh * ys.h + ow * ys.w, K, ys.c, pixel.data());
            const Acc* wp = wt.data() + (kh * KW + kw) * K * FI;
            for (int64_t grp = 0; grp < G; ++grp) {
              Acc* a = acc.data() + grp * FI;
              for (int64_t k = grp * Kg; k < (grp + 1) * Kg; ++k) {
                const Acc v = pixel[k];
                const Acc* wr = wp + k * FI;
                for (int64_t ci = 0; ci < FI; ++ci) a[ci] += v * wr[ci];
              }
            }
          }
        }
        T* out = dx + n * xs.n + ih * xs.h + iw * xs.w;
        for (int64_t c = 0; c < g.in_depth; ++c) out[c * xs.c] = FromAcc<T>(acc[c]);
      }
    }
  });
}

template <typename T>
void DirectConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy,
                              T* dw, const ParallelFor& parallel_for) {
  using namespace direct_loops;
  if (ZeroIfAnOperandIsEmpty(g.input_elements(), g.output_elements(), dw, g.filter_elements())) {
    return;
  }
  using Acc = typename Accumulator<T>::type;
  const int64_t G = g.groups, FI = g.filter_in_depth, K = g.out_depth;
  const int64_t Kg = g.out_depth_per_group(), KW = g.filter_cols;
  const int64_t taps = g.filter_rows * KW;
  const ActivationStrides xs = StridesFor(layout, g.in_rows, g.in_cols, g.in_depth);
  const ActivationStrides ys = StridesFor(layout, g.out_rows, g.out_cols, K);
  // A unit is one filter tap and a block of its input channels; it owns those rows of dw
  // and sums over (n, oh, ow) in order. Splitting channels into blocks gives small
  // filters enough units to share out; the block size does not change any sum.
  const int64_t blocks = std::min<int64_t>(FI, taps >= 16 ? 1 : (16 + taps - 1) / std::max<int64_t>(taps, 1));
  const int64_t block = blocks > 0 ? (FI + blocks - 1) / blocks : 0;
  const int64_t cost = CostEstimate(1.0 * g.batch * g.out_rows * g.out_cols * (block * G * Kg + K));

  parallel_for(taps * blocks, cost, [&](int64_t begin, int64_t end) {
    std::vector<Acc> acc(block * K), pixel(g.in_depth), grad(K);
    std::vector<std::pair<int64_t, int64_t>> rows, cols;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t tap = unit / blocks, ci0 = (unit % blocks) * block;
      const int64_t ci1 = std::min(FI, ci0 + block);
      const int64_t kh = tap / KW, kw = tap % KW;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t n = 0; n < g.batch; ++n) {
        for (int64_t oh = 0; oh < g.out_rows; ++oh) {
          const int64_t ih = oh * g.stride_rows - g.pad_top + kh * g.dilation_rows;
          if (ih < 0 || ih >= g.in_rows) continue;
          for (int64_t ow = 0; ow < g.out_cols; ++ow) {
            const int64_t iw = ow * g.stride_cols - g.pad_left + kw * g.dilation_cols;
            if (iw < 0 || iw >= g.in_cols) continue;
            GatherPixel(x + n * xs.n + ih * xs.h + iw * xs.w, g.in_depth, xs.c, pixel.data());
            GatherPixel(dy + n * ys.n + oh * ys.h + ow * ys.w, K, ys.c, grad.data());
            for (int64_t ci = ci0; ci < ci1; ++ci) {
              Acc* a = acc.data() + (ci - ci0) * K;
              for (int64_t grp = 0; grp < G; ++grp) {
                const Acc v = pixel[grp * FI + ci];
                for (int64_t k = grp * Kg; k < (grp + 1) * Kg; ++k) a[k] += v * grad[k];
              }
            }
          }
        }
      }
      for (int64_t ci = ci0; ci < ci1; ++ci) {
        T* out = dw + (tap * FI + ci) * K;
        const Acc* a = acc.data() + (ci - ci0) * K;
        for (int64_t k = 0; k < K; ++k) out[k] = FromAcc<T>(a[k]);
      }
    }
  });
}

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_DIRECT_LOOPS_H_
