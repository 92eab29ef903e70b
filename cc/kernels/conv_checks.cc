// The checks and bookkeeping every TfOps> kernel shares (conv_checks.h).
#include "cc/kernels/conv_checks.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/conv_geometry.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_ops {

using ::tensorflow::OpKernelConstruction;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

template <typename... Args>
absl::Status InvalidArgument(const Args&... args) {
  return absl::InvalidArgumentError(Cat(args...));
}

template <typename... Args>
absl::Status Unimplemented(const Args&... args) {
  return absl::UnimplementedError(Cat(args...));
}

std::string ListString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += Cat(i ? ", " : "", v[i]);
  return s + "]";
}

}  // namespace

absl::Status ParseAttrs(OpKernelConstruction* ctx, const OpSpec& spec, ParsedAttrs* out) {
  // What ctx->GetAttr reads: its node's attributes.
  return ParseAttrs(::tensorflow::AttrSlice(ctx->def()), spec, out);
}

absl::Status ParseAttrs(const ::tensorflow::AttrSlice& attrs, const OpSpec& spec, ParsedAttrs* out) {
  std::string format, padding;
  std::vector<int64_t> strides, dilations, explicit_paddings;
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(attrs, "data_format", &format));
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(attrs, "padding", &padding));
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(attrs, "strides", &strides));
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(attrs, "dilations", &dilations));
  TF_RETURN_IF_ERROR(::tensorflow::GetNodeAttr(attrs, "explicit_paddings", &explicit_paddings));
  return CheckAttrs(spec, format, padding, strides, dilations, explicit_paddings, out);
}

absl::Status CheckAttrs(const OpSpec& spec, const std::string& format, const std::string& padding,
                        const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                        const std::vector<int64_t>& explicit_paddings, ParsedAttrs* out) {
  if (format == "NHWC") {
    out->layout = Layout::kNHWC;
    out->row_dim = 1, out->col_dim = 2, out->depth_dim = 3;
  } else if (format == "NCHW") {
    out->layout = Layout::kNCHW;
    out->row_dim = 2, out->col_dim = 3, out->depth_dim = 1;
  } else {
    return InvalidArgument("Invalid data format: ", format);
  }
  const int n = 0, c = out->depth_dim, h = out->row_dim, w = out->col_dim;
  auto batch_depth_error = [&](const std::string& msg) {
    return spec.batch_depth_unimplemented ? Unimplemented(msg)
                                          : InvalidArgument(msg);
  };

  if (strides.size() != 4) {
    return InvalidArgument(
        "Sliding window strides field must specify 4 dimensions, got strides=",
        ListString(strides));
  }
  if (strides[n] != 1 || strides[c] != 1) {
    return batch_depth_error(
        Cat("Current implementation does not yet support strides in the batch and depth "
            "dimensions, got strides=",
            ListString(strides), " with data_format=", format));
  }
  if (strides[h] <= 0 || strides[w] <= 0) {
    return InvalidArgument("Row and column strides should be larger than 0, got strides=",
                                   ListString(strides));
  }
  if (dilations.size() != 4) {
    return InvalidArgument(
        "Sliding window dilations field must specify 4 dimensions, got dilations=",
        ListString(dilations));
  }
  if (dilations[n] != 1 || dilations[c] != 1) {
    return batch_depth_error(
        Cat("Current implementation does not yet support dilations in the batch and depth "
            "dimensions, got dilations=",
            ListString(dilations), " with data_format=", format));
  }
  if (dilations[h] <= 0 || dilations[w] <= 0) {
    return InvalidArgument("Dilated rates should be larger than 0, got dilations=",
                                   ListString(dilations));
  }

  ConvAttrs& a = out->conv;
  a.stride_rows = strides[h];
  a.stride_cols = strides[w];
  a.dilation_rows = dilations[h];
  a.dilation_cols = dilations[w];
  if (padding == "EXPLICIT") {
    a.padding = Padding::kExplicit;
    if (explicit_paddings.size() != 8) {
      return InvalidArgument(
          "explicit_paddings attribute must contain 8 values, but got: ",
          explicit_paddings.size(), " (", ListString(explicit_paddings), ")");
    }
    for (int64_t p : explicit_paddings) {
      if (p < 0) {
        return InvalidArgument(
            "All elements of explicit_paddings must be nonnegative, got explicit_paddings=",
            ListString(explicit_paddings));
      }
    }
    if (explicit_paddings[2 * n] || explicit_paddings[2 * n + 1] ||
        explicit_paddings[2 * c] || explicit_paddings[2 * c + 1]) {
      return InvalidArgument(
          "Nonzero explicit padding in the batch or depth dimensions is not supported, got "
          "explicit_paddings=",
          ListString(explicit_paddings), " with data_format=", format);
    }
    a.pad_top = explicit_paddings[2 * h];
    a.pad_bottom = explicit_paddings[2 * h + 1];
    a.pad_left = explicit_paddings[2 * w];
    a.pad_right = explicit_paddings[2 * w + 1];
  } else {
    a.padding = padding == "SAME" ? Padding::kSame : Padding::kValid;
    if (!explicit_paddings.empty()) {
      return InvalidArgument(
          "explicit_paddings attribute must be empty if the padding attribute is not "
          "EXPLICIT, got explicit_paddings=",
          ListString(explicit_paddings), " with padding=", padding);
    }
  }
  return absl::OkStatus();
}

namespace {

// A 4-D shape as the four numbers (N, H, W, C) of an activation in `attrs`' layout.
struct Dims4 {
  int64_t n, h, w, c;
};
Dims4 ActivationDims(const TensorShape& s, const ParsedAttrs& attrs) {
  return {s.dim_size(0), s.dim_size(attrs.row_dim), s.dim_size(attrs.col_dim),
          s.dim_size(attrs.depth_dim)};
}
// TensorShape keeps the running product of its dimensions, in their order, and cannot hold a
// shape whose partial product overflows int64 even when a later dimension is 0 (for example
// NCHW [1, 2, 2**62 + 1, 0]); BuildTensorShape reports that instead of aborting.
absl::Status ActivationShape(const Dims4& d, const ParsedAttrs& attrs, TensorShape* out) {
  std::vector<int64_t> dims(4);
  dims[0] = d.n;
  dims[attrs.row_dim] = d.h;
  dims[attrs.col_dim] = d.w;
  dims[attrs.depth_dim] = d.c;
  absl::Status s = TensorShape::BuildTensorShape(dims, out);
  if (!s.ok()) {
    return InvalidArgument("output shape ", ListString(dims), " cannot be represented: ",
                           s.message());
  }
  return absl::OkStatus();
}

absl::Status CheckRank4(const char* label, const char* what, const TensorShape& s) {
  if (s.dims() != 4) {
    return InvalidArgument(label, ": ", what, " must be 4-dimensional, got shape ",
                                   s.DebugString());
  }
  return absl::OkStatus();
}

// The shape named by an int32 sizes vector (input_sizes / filter_sizes).
absl::Status ShapeFromSizes(const char* label, const char* what, const Tensor& sizes,
                      bool allow_two, const ParsedAttrs& attrs, int64_t batch,
                      int64_t depth, TensorShape* out) {
  if (sizes.dims() != 1) {
    return InvalidArgument(label, ": ", what, " input must be 1-dim, not ",
                                   sizes.dims(), " (shape ", sizes.shape().DebugString(),
                                   ")");
  }
  const int64_t count = sizes.NumElements();
  auto v = sizes.vec<int32_t>();
  std::vector<int64_t> values(v.data(), v.data() + count);
  if (count == 2 && allow_two) {
    // [H, W]: batch from out_backprop, depth from the filter.
    values = {batch, values[0], values[1], depth};
    std::vector<int64_t> ordered(4);
    ordered[0] = values[0];
    ordered[attrs.row_dim] = values[1];
    ordered[attrs.col_dim] = values[2];
    ordered[attrs.depth_dim] = values[3];
    values = ordered;
  } else if (count != 4) {
    return InvalidArgument(
        label, " requires ", what, " to contain 4 values", allow_two ? " or 2 values" : "",
        ", but got: ", count, " (", ListString(values), ")");
  }
  absl::Status s = TensorShape::BuildTensorShape(values, out);
  if (!s.ok()) {
    return InvalidArgument(label, ": invalid ", what, " ", ListString(values), ": ",
                                   s.message());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckConv(const OpSpec& spec, const ParsedAttrs& attrs, const ConvOperands& operands,
                       int64_t element_bytes, CheckedConv* checked) {
  const char* label = spec.label;
  const Direction dir = spec.direction;
  // Shapes of x (input), w (filter) and dy (out_backprop); one of them is what the op
  // computes and comes from a sizes vector or another input's shape.
  TensorShape x_shape, w_shape, dy_shape;
  const bool has_dy = dir != Direction::kForward;
  if (dir == Direction::kForward) {
    TF_RETURN_IF_ERROR(CheckRank4(label, "input", operands.in[0]));
    TF_RETURN_IF_ERROR(CheckRank4(label, "filter", operands.in[1]));
    x_shape = operands.in[0], w_shape = operands.in[1];
  } else {
    TF_RETURN_IF_ERROR(CheckRank4(label, "out_backprop", operands.in[2]));
    dy_shape = operands.in[2];
    if (dir == Direction::kBackpropInput) {
      TF_RETURN_IF_ERROR(CheckRank4(label, "filter", operands.in[1]));
      w_shape = operands.in[1];
    } else {
      TF_RETURN_IF_ERROR(CheckRank4(label, "input", operands.in[0]));
      x_shape = operands.in[0];
    }
  }

  if (dir == Direction::kBackpropInput) {
    if (spec.sizes_from == SizesFrom::kShapeOf) {
      TF_RETURN_IF_ERROR(CheckRank4(label, "input", operands.in[0]));
      x_shape = operands.in[0];
    } else {
      TF_RETURN_IF_ERROR(ShapeFromSizes(label, SizesName(spec), *operands.sizes, /*allow_two=*/!spec.depthwise,
                                        attrs, dy_shape.dim_size(0), w_shape.dim_size(2), &x_shape));
    }
  } else if (dir == Direction::kBackpropFilter) {
    if (spec.sizes_from == SizesFrom::kShapeOf) {
      TF_RETURN_IF_ERROR(CheckRank4(label, "filter", operands.in[1]));
      w_shape = operands.in[1];
    } else {
      TF_RETURN_IF_ERROR(ShapeFromSizes(label, SizesName(spec), *operands.sizes, /*allow_two=*/false, attrs, 0,
                                        0, &w_shape));
    }
  }

  const Dims4 xd = ActivationDims(x_shape, attrs);
  int64_t filter_in_depth = w_shape.dim_size(2), out_depth = w_shape.dim_size(3);
  if (spec.depthwise) {
    if (w_shape.dim_size(2) != xd.c) {
      return InvalidArgument(label, ": input and filter must have the same depth: ", xd.c, " vs ",
                             w_shape.dim_size(2), " (input shape ", x_shape.DebugString(), ", filter shape ",
                             w_shape.DebugString(), ")");
    }
    if (!CheckedMul(w_shape.dim_size(2), w_shape.dim_size(3), &out_depth)) {
      return InvalidArgument(label, ": depthwise output depth overflows, filter shape ", w_shape.DebugString());
    }
    filter_in_depth = 1;
  }
  ConvGeometry& g = checked->g;
  std::string err = MakeConvGeometry(xd.n, xd.h, xd.w, xd.c, w_shape.dim_size(0), w_shape.dim_size(1),
                                     filter_in_depth, out_depth, attrs.conv, &g);
  if (!err.empty()) {
    return InvalidArgument(label, ": ", err, " (input shape ", x_shape.DebugString(), ", filter shape ",
                           w_shape.DebugString(), ")");
  }
  if (has_dy) {
    const Dims4 dd = ActivationDims(dy_shape, attrs);
    if (spec.depthwise && dd.c != g.out_depth) {
      return InvalidArgument(label, ": depth_multiplier * in_depth not equal to out_depth: ", w_shape.dim_size(3),
                             " * ", xd.c, " != ", dd.c);
    }
    err = CheckOutputShape(g, dd.n, dd.h, dd.w, dd.c, attrs.row_dim, attrs.col_dim);
    if (!err.empty()) return InvalidArgument(label, ": ", err, " (out_backprop shape ", dy_shape.DebugString(), ")");
  }

  TensorShape& out_shape = checked->out_shape;
  switch (dir) {
    case Direction::kForward:
      TF_RETURN_IF_ERROR(ActivationShape({g.batch, g.out_rows, g.out_cols, g.out_depth}, attrs, &out_shape));
      break;
    case Direction::kBackpropInput:
      out_shape = x_shape;
      break;
    case Direction::kBackpropFilter:
      out_shape = w_shape;
      break;
  }
  // Like TensorFlow's Conv2D: an empty filter is refused unless the output is empty too.
  // (Its depthwise and backprop kernels return the empty sums, zeros, as ours do.)
  if (dir == Direction::kForward && !spec.depthwise && out_shape.num_elements() > 0 &&
      w_shape.num_elements() == 0) {
    return InvalidArgument(label,
                           ": filter must not have zero elements (i.e. all dimensions must be non-zero), got "
                           "filter shape ",
                           w_shape.DebugString());
  }
  if (out_shape.num_elements() > std::numeric_limits<int64_t>::max() / element_bytes) {
    return InvalidArgument(label, ": output of shape ", out_shape.DebugString(), " is too large to allocate");
  }
  return absl::OkStatus();
}

}  // namespace tf_ops
