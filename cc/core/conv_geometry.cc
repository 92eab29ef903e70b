#include "cc/core/conv_geometry.h"

namespace tf_ops {

bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

namespace {

std::string Overflow(int64_t in, int64_t k, int64_t dilation, int64_t stride,
                     int64_t pad_before, int64_t pad_after) {
  return Cat("Convolution sizes overflow 64-bit arithmetic [input_size: ", in,
             ", filter_size: ", k, ", dilation: ", dilation, ", stride: ", stride,
             ", padding: ", pad_before, ", ", pad_after, "]");
}

}  // namespace

std::string WindowedOutputSize(int64_t in, int64_t k, int64_t dilation, int64_t stride,
                               Padding padding, int64_t* pad_before, int64_t* pad_after,
                               int64_t* out) {
  if (stride <= 0) return Cat("Stride must be > 0, but got ", stride);
  if (dilation < 1) return Cat("Dilation rate must be >= 1, but got ", dilation);
  if (in < 0) return Cat("Input size must be >= 0, but got ", in);
  if (k < 0) return Cat("Filter size must be >= 0, but got ", k);
  if (padding != Padding::kExplicit) *pad_before = *pad_after = 0;
  if (*pad_before < 0 || *pad_after < 0) {
    return Cat("Padding must be >= 0, but got ", *pad_before, " and ", *pad_after);
  }
  const std::string overflow = Overflow(in, k, dilation, stride, *pad_before, *pad_after);
  // eff = (k - 1) * dilation + 1; k == 0 gives an empty window, eff <= 0.
  int64_t eff;
  if (!CheckedMul(k - 1, dilation, &eff) || !CheckedAdd(eff, 1, &eff)) return overflow;

  int64_t size;
  if (padding == Padding::kSame) {
    // out = ceil(in / stride), computed without overflowing in + stride - 1.
    size = in / stride + (in % stride != 0 ? 1 : 0);
    // need = max(0, (out - 1) * stride + eff - in). eff is negative for an empty filter
    // with a large dilation, so the subtraction is only done when it is positive.
    int64_t need = 0;
    if (size > 0) {
      int64_t reach;
      if (!CheckedMul(size - 1, stride, &reach) || !CheckedAdd(reach, eff, &reach)) {
        return overflow;
      }
      need = reach > in ? reach - in : 0;
    }
    *pad_before = need / 2;
    *pad_after = need - need / 2;
  } else {
    // (in + pads - eff + stride) / stride, truncating, without forming span + stride
    // where it could overflow: for span >= 0 it is span / stride + 1, and for span < 0
    // the sum of a negative and a positive number cannot overflow.
    int64_t span;
    if (!CheckedAdd(in, *pad_before, &span) || !CheckedAdd(span, *pad_after, &span) ||
        !CheckedAdd(span, -eff, &span)) {
      return overflow;
    }
    if (span >= 0 && !CheckedAdd(span / stride, 1, &size)) return overflow;
    if (span < 0) size = (span + stride) / stride;
  }
  if (size < 0) {
    return Cat("Computed output size would be negative: ", size, " [input_size: ", in,
               ", effective_filter_size: ", eff, ", stride: ", stride, "]");
  }
  *out = size;
  return "";
}

std::string MakeConvGeometry(int64_t batch, int64_t in_rows, int64_t in_cols,
                             int64_t in_depth, int64_t filter_rows, int64_t filter_cols,
                             int64_t filter_in_depth, int64_t out_depth,
                             const ConvAttrs& attrs, ConvGeometry* g) {
  const int64_t dims[] = {batch, in_rows, in_cols, in_depth,
                          filter_rows, filter_cols, filter_in_depth, out_depth};
  for (int64_t d : dims) {
    if (d < 0) return Cat("Dimension sizes must be >= 0, but got ", d);
  }
  if (filter_in_depth <= 0) {
    return Cat("filter depth must be strictly greater than zero, but got ", filter_in_depth);
  }
  if (in_depth % filter_in_depth != 0) {
    return Cat("input depth must be evenly divisible by filter depth: ", in_depth, " vs ",
               filter_in_depth);
  }
  const int64_t groups = in_depth / filter_in_depth;
  if (groups > 0 && out_depth % groups != 0) {
    return Cat("output depth must be evenly divisible by number of groups: ", out_depth,
               " vs ", groups);
  }
  ConvGeometry r;
  r.batch = batch;
  r.in_rows = in_rows;
  r.in_cols = in_cols;
  r.in_depth = in_depth;
  r.filter_rows = filter_rows;
  r.filter_cols = filter_cols;
  r.filter_in_depth = filter_in_depth;
  r.out_depth = out_depth;
  r.groups = groups;
  r.stride_rows = attrs.stride_rows;
  r.stride_cols = attrs.stride_cols;
  r.dilation_rows = attrs.dilation_rows;
  r.dilation_cols = attrs.dilation_cols;
  r.pad_top = attrs.pad_top;
  r.pad_bottom = attrs.pad_bottom;
  r.pad_left = attrs.pad_left;
  r.pad_right = attrs.pad_right;
  std::string err = WindowedOutputSize(in_rows, filter_rows, r.dilation_rows, r.stride_rows,
                                       attrs.padding, &r.pad_top, &r.pad_bottom, &r.out_rows);
  if (err.empty()) {
    err = WindowedOutputSize(in_cols, filter_cols, r.dilation_cols, r.stride_cols,
                             attrs.padding, &r.pad_left, &r.pad_right, &r.out_cols);
  }
  if (!err.empty()) return err;
  // Every tensor of the convolution must have an element count that fits in int64, so
  // that kernels can index with plain 64-bit products.
  int64_t n;
  const int64_t tensors[3][4] = {{batch, in_rows, in_cols, in_depth},
                                 {filter_rows, filter_cols, filter_in_depth, out_depth},
                                 {batch, r.out_rows, r.out_cols, out_depth}};
  for (const auto& t : tensors) {
    if (!CheckedMul(t[0], t[1], &n) || !CheckedMul(n, t[2], &n) || !CheckedMul(n, t[3], &n)) {
      return Cat("Convolution tensor of shape [", t[0], ", ", t[1], ", ", t[2], ", ", t[3],
                 "] would have more than 2**63 - 1 elements");
    }
  }
  *g = r;
  return "";
}

std::string CheckOutputShape(const ConvGeometry& g, int64_t batch, int64_t rows,
                             int64_t cols, int64_t depth, int row_dim, int col_dim) {
  if (batch != g.batch) {
    return Cat("input and out_backprop must have the same batch size. Input batch: ",
               g.batch, ", outbackprop batch: ", batch);
  }
  if (depth != g.out_depth) {
    return Cat("filter and out_backprop must have the same out_depth: filter out_depth ",
               g.out_depth, ", out_backprop depth ", depth);
  }
  struct {
    int64_t actual, computed, in, k, stride, dilation;
    int dim;
  } spatial[2] = {
      {rows, g.out_rows, g.in_rows, g.filter_rows, g.stride_rows, g.dilation_rows, row_dim},
      {cols, g.out_cols, g.in_cols, g.filter_cols, g.stride_cols, g.dilation_cols, col_dim}};
  for (const auto& s : spatial) {
    if (s.actual != s.computed) {
      return Cat("Size of out_backprop doesn't match computed: actual = ", s.actual,
                 ", computed = ", s.computed, " spatial_dim: ", s.dim, " input: ", s.in,
                 " filter: ", s.k, " output: ", s.actual, " stride: ", s.stride,
                 " dilation: ", s.dilation);
    }
  }
  return "";
}

ActivationStrides StridesFor(Layout layout, int64_t rows, int64_t cols, int64_t depth) {
  if (layout == Layout::kNHWC) {
    return {rows * cols * depth, cols * depth, depth, 1};
  }
  return {depth * rows * cols, cols, 1, rows * cols};
}

EmptyCall EmptyRule(Direction direction, const ConvGeometry& g) {
  const int64_t x = g.input_elements(), w = g.filter_elements(), y = g.output_elements();
  const int64_t out = direction == Direction::kForward ? y : direction == Direction::kBackpropInput ? x : w;
  if (out <= 0) return EmptyCall::kNothing;
  return x <= 0 || w <= 0 || y <= 0 ? EmptyCall::kZeros : EmptyCall::kCompute;
}

}  // namespace tf_ops
