// One convolution geometry shared by every op of the family: forward convolution,
// backprop-input and backprop-filter, plain, grouped and depthwise.
//
// TF-free: depends on the C++ standard library only. Functions that can fail return an
// error message ("" on success) and never abort. All size arithmetic is 64-bit and checked
// for overflow, so hostile shapes and attributes produce an error, not undefined behaviour.
#ifndef TF_OPS_CC_CORE_CONV_GEOMETRY_H_
#define TF_OPS_CC_CORE_CONV_GEOMETRY_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>

#include "cc/core/vocabulary.h"

namespace tf_ops {

// Its arguments printed one after another: the text of every error message. The stream is
// constructed with an explicit mode, not by the default constructor, which libstdc++ exports
// only from 9 on (cc/compat/libstdcxx_compat.cc).
template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream s(std::ios_base::out);
  (s << ... << args);
  return s.str();
}

enum class Padding { kSame, kValid, kExplicit };

// Output size and padding of one spatial dimension, with TensorFlow's rules:
//   eff = (k - 1) * dilation + 1
//   VALID:    out = (in - eff + stride) / stride, no padding
//   EXPLICIT: out = (in + pad_before + pad_after - eff + stride) / stride
//   SAME:     out = ceil(in / stride); the padding needed is split with the odd
//             element after (bottom/right).
// Division truncates toward zero, as in TensorFlow. For EXPLICIT, *pad_before and
// *pad_after are inputs; otherwise they are outputs.
std::string WindowedOutputSize(int64_t in, int64_t k, int64_t dilation, int64_t stride,
                               Padding padding, int64_t* pad_before, int64_t* pad_after,
                               int64_t* out);

// What the attributes of an op say, spatial values in (rows, cols) order.
struct ConvAttrs {
  int64_t stride_rows = 1, stride_cols = 1;
  int64_t dilation_rows = 1, dilation_cols = 1;
  Padding padding = Padding::kValid;
  // Only read for EXPLICIT padding.
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

// A 2-D convolution  y[N, OH, OW, K] = conv(x[N, H, W, C], w[KH, KW, FI, K])
// with groups = C / FI; output channel k belongs to group k / (K / groups) and reads
// input channels [group * FI, (group + 1) * FI). Depthwise convolution with depth
// multiplier M is the case FI = 1, groups = C, K = C * M: its [KH, KW, C, M] filter has
// the memory layout of a [KH, KW, 1, C * M] one.
struct ConvGeometry {
  int64_t batch = 0, in_rows = 0, in_cols = 0, in_depth = 0;
  int64_t filter_rows = 0, filter_cols = 0, filter_in_depth = 0, out_depth = 0;
  int64_t out_rows = 0, out_cols = 0;
  int64_t stride_rows = 1, stride_cols = 1, dilation_rows = 1, dilation_cols = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t groups = 0;  // 0 only when in_depth is 0

  int64_t out_depth_per_group() const { return groups > 0 ? out_depth / groups : 0; }
  int64_t input_elements() const { return batch * in_rows * in_cols * in_depth; }
  int64_t filter_elements() const {
    return filter_rows * filter_cols * filter_in_depth * out_depth;
  }
  int64_t output_elements() const { return batch * out_rows * out_cols * out_depth; }
};

inline bool operator==(const ConvGeometry& a, const ConvGeometry& b) {
  const auto fields = [](const ConvGeometry& g) {
    return std::make_tuple(g.batch, g.in_rows, g.in_cols, g.in_depth, g.filter_rows, g.filter_cols, g.filter_in_depth,
                           g.out_depth, g.out_rows, g.out_cols, g.stride_rows, g.stride_cols, g.dilation_rows,
                           g.dilation_cols, g.pad_top, g.pad_bottom, g.pad_left, g.pad_right, g.groups);
  };
  return fields(a) == fields(b);
}

// Builds the geometry from the input shape (N, H, W, C), the filter shape
// (KH, KW, FI, K) and the attributes. Checks every size for sign and overflow, that FI
// divides C, and that K is a multiple of the group count.
std::string MakeConvGeometry(int64_t batch, int64_t in_rows, int64_t in_cols,
                             int64_t in_depth, int64_t filter_rows, int64_t filter_cols,
                             int64_t filter_in_depth, int64_t out_depth,
                             const ConvAttrs& attrs, ConvGeometry* geometry);

// Checks that a given output tensor (out_backprop) has the geometry's output shape.
// `row_dim` and `col_dim` are the tensor dimension indices named in the message.
std::string CheckOutputShape(const ConvGeometry& g, int64_t batch, int64_t rows,
                             int64_t cols, int64_t depth, int row_dim, int col_dim);

// Element strides of a 4-D activation tensor (x, y, dx or dy) in a given layout.
struct ActivationStrides {
  int64_t n, h, w, c;
};
ActivationStrides StridesFor(Layout layout, int64_t rows, int64_t cols, int64_t depth);

// What a call does where a tensor is empty, on every device: computes (no tensor is empty);
// writes nothing (its output is empty); or writes zeros (its output is not empty but an operand
// is: every sum is of nothing).
enum class EmptyCall { kCompute, kNothing, kZeros };
EmptyCall EmptyRule(Direction direction, const ConvGeometry& g);

// Ceiling of a / b for a >= 0, b > 0.
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Floor and ceiling of a / b for b > 0 and any sign of a, for every such pair (no sum that could
// overflow: a stride may be as large as int64_t holds).
inline int64_t FloorDivSigned(int64_t a, int64_t b) { return a / b - (a % b < 0 ? 1 : 0); }
inline int64_t CeilDivSigned(int64_t a, int64_t b) { return a / b + (a % b > 0 ? 1 : 0); }

// Backprop input's taps by stride-residue class, for one spatial dimension: input index i of
// class `cls` (i = cls + stride * j) is reached through tap kh where kh * dilation = i + pad -
// stride * o for an output index o. The taps that reach the class are first + a * step for
// a < count (step = stride / gcd(stride, dilation)), and tap a reads output index
// base - a * delta + j for the class's j-th member. Every device enumerates taps with this.
struct ClassTaps {
  int64_t first = 0, step = 1, count = 0, base = 0, delta = 0;
};

inline ClassTaps TapsOfClass(int64_t cls, int64_t taps, int64_t stride, int64_t dilation, int64_t pad) {
  ClassTaps t;
  const int64_t period = stride / std::gcd(stride, dilation);
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

// Checked 64-bit arithmetic: false on overflow.
bool CheckedMul(int64_t a, int64_t b, int64_t* out);
bool CheckedAdd(int64_t a, int64_t b, int64_t* out);

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CONV_GEOMETRY_H_
