// Kernels of the TfOps> convolution family: attribute parsing, input validation and shape
// bookkeeping, shared by every device (ConvOp::Prepare), then a launch per device: the CPU
// thread pool, or, in a build with CUDA (TF_OPS_WITH_CUDA), the op's CUDA stream. The arithmetic
// lives in cc/core.
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/conv_geometry.h"
#include "cc/core/cpu/conv_cpu.h"
#include "cc/core/cpu/conv_fast.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/public/version.h"

#if TF_OPS_WITH_CUDA
#include <cstdio>

#include "cc/core/gpu/conv_gpu.h"
#include "cc/core/gpu/gpu_support.h"
#include "xla/stream_executor/stream.h"
#endif

namespace tf_ops {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

enum class Direction { kForward, kBackpropInput, kBackpropFilter };

// Where the shape of the tensor a backprop op computes comes from.
enum class SizesFrom {
  kNone,       // forward ops
  kTensor,     // an int32 vector input (input_sizes / filter_sizes)
  kShapeOf,    // the shape of an input (the V2 ops)
};

// What distinguishes the ops of the family from one another.
struct OpSpec {
  const char* label;
  Direction direction;
  bool depthwise;
  SizesFrom sizes_from;
  // Batch or depth strides and dilations are Unimplemented in TensorFlow's Conv2D and
  // Conv2DBackpropInput and InvalidArgument in its other ops; we keep the same classes.
  bool batch_depth_unimplemented;
};

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

template <typename... Args>
absl::Status InvalidArgument(const Args&... args) {
  return absl::InvalidArgumentError(Cat(args...));
}

template <typename... Args>
absl::Status Unimplemented(const Args&... args) {
  return absl::UnimplementedError(Cat(args...));
}

// Adaptive sharding of `cost`-cycle units over the op's thread pool. TensorFlow 2.20 added
// SchedulingParams::Adaptive and deprecated the constructor, the only way before it.
tsl::thread::ThreadPool::SchedulingParams AdaptiveScheduling(int64_t cost) {
  using Params = tsl::thread::ThreadPool::SchedulingParams;
#if TF_MAJOR_VERSION == 2 && TF_MINOR_VERSION < 20
  return Params(tsl::thread::ThreadPool::SchedulingStrategy::kAdaptive, cost, {});
#else
  return Params::Adaptive(cost);
#endif
}

std::string ListString(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

// Attributes common to every op, parsed and checked once, in the constructor.
struct ParsedAttrs {
  Layout layout = Layout::kNHWC;
  int row_dim = 1, col_dim = 2, depth_dim = 3;
  ConvAttrs conv;
};

absl::Status ParseAttrs(OpKernelConstruction* ctx, const OpSpec& spec, ParsedAttrs* out) {
  std::string format, padding;
  std::vector<int64_t> strides, dilations, explicit_paddings;
  TF_RETURN_IF_ERROR(ctx->GetAttr("data_format", &format));
  TF_RETURN_IF_ERROR(ctx->GetAttr("padding", &padding));
  TF_RETURN_IF_ERROR(ctx->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(ctx->GetAttr("dilations", &dilations));
  TF_RETURN_IF_ERROR(ctx->GetAttr("explicit_paddings", &explicit_paddings));

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

// OP_REQUIRES and OP_REQUIRES_OK for a function that returns whether it succeeded.
#define TF_OPS_REQUIRES(ctx, cond, status) \
  do {                                       \
    if (!(cond)) {                           \
      (ctx)->CtxFailure(status);             \
      return false;                          \
    }                                        \
  } while (0)
#define TF_OPS_REQUIRES_OK(ctx, expr)          \
  do {                                         \
    const absl::Status tf_ops_status_ = (expr); \
    if (!tf_ops_status_.ok()) {                \
      (ctx)->CtxFailure(tf_ops_status_);       \
      return false;                            \
    }                                          \
  } while (0)

// What Prepare hands a device's launch: the geometry, the operands (those the direction reads)
// and the allocated, non-empty output.
struct Prepared {
  ConvGeometry g;
  Layout layout = Layout::kNHWC;
  const Tensor* x = nullptr;
  const Tensor* w = nullptr;
  const Tensor* dy = nullptr;
  Tensor* out = nullptr;
};

struct CpuDevice {};
struct GpuDevice {};

template <typename Device, typename T>
class ConvOp : public OpKernel {
 public:
  ConvOp(OpKernelConstruction* ctx, const OpSpec& spec) : OpKernel(ctx), spec_(spec) {
    OP_REQUIRES_OK(ctx, ParseAttrs(ctx, spec_, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    Prepared p;
    if (Prepare(ctx, &p)) Launch(ctx, p, Device());
  }

 private:
  // Everything up to the output's allocation, the same on every device: ranks, sizes, the
  // geometry, every check and message. False when the op failed or its output is empty.
  bool Prepare(OpKernelContext* ctx, Prepared* p) {
    const char* label = spec_.label;
    const Direction dir = spec_.direction;
    // Shapes of x (input), w (filter) and dy (out_backprop); one of them is what the op
    // computes and may come from a sizes vector or another tensor's shape.
    TensorShape x_shape, w_shape, dy_shape;
    const Tensor* x = nullptr;
    const Tensor* w = nullptr;
    const Tensor* dy = nullptr;
    if (dir == Direction::kForward) {
      x = &ctx->input(0);
      w = &ctx->input(1);
    } else {
      dy = &ctx->input(2);
      TF_OPS_REQUIRES_OK(ctx, CheckRank4(label, "out_backprop", dy->shape()));
      dy_shape = dy->shape();
      if (dir == Direction::kBackpropInput) {
        w = &ctx->input(1);
      } else {
        x = &ctx->input(0);
      }
    }
    if (x != nullptr) {
      TF_OPS_REQUIRES_OK(ctx, CheckRank4(label, "input", x->shape()));
      x_shape = x->shape();
    }
    if (w != nullptr) {
      TF_OPS_REQUIRES_OK(ctx, CheckRank4(label, "filter", w->shape()));
      w_shape = w->shape();
    }

    if (dir == Direction::kBackpropInput) {
      const Tensor& sizes = ctx->input(0);
      if (spec_.sizes_from == SizesFrom::kShapeOf) {
        TF_OPS_REQUIRES_OK(ctx, CheckRank4(label, "input", sizes.shape()));
        x_shape = sizes.shape();
      } else {
        const int64_t batch = dy_shape.dim_size(0);
        TF_OPS_REQUIRES_OK(ctx, ShapeFromSizes(label, "input_sizes", sizes,
                                           /*allow_two=*/!spec_.depthwise, attrs_, batch,
                                           w_shape.dim_size(2), &x_shape));
      }
    } else if (dir == Direction::kBackpropFilter) {
      const Tensor& sizes = ctx->input(1);
      if (spec_.sizes_from == SizesFrom::kShapeOf) {
        TF_OPS_REQUIRES_OK(ctx, CheckRank4(label, "filter", sizes.shape()));
        w_shape = sizes.shape();
      } else {
        TF_OPS_REQUIRES_OK(ctx, ShapeFromSizes(label, "filter_sizes", sizes, /*allow_two=*/false,
                                           attrs_, 0, 0, &w_shape));
      }
    }

    const Dims4 xd = ActivationDims(x_shape, attrs_);
    int64_t filter_in_depth = w_shape.dim_size(2), out_depth = w_shape.dim_size(3);
    if (spec_.depthwise) {
      TF_OPS_REQUIRES(ctx, w_shape.dim_size(2) == xd.c,
                  InvalidArgument(label, ": input and filter must have the same depth: ",
                                          xd.c, " vs ", w_shape.dim_size(2), " (input shape ",
                                          x_shape.DebugString(), ", filter shape ",
                                          w_shape.DebugString(), ")"));
      TF_OPS_REQUIRES(ctx,
                  CheckedMul(w_shape.dim_size(2), w_shape.dim_size(3), &out_depth),
                  InvalidArgument(label, ": depthwise output depth overflows, filter shape ",
                                          w_shape.DebugString()));
      filter_in_depth = 1;
    }
    ConvGeometry g;
    std::string err = MakeConvGeometry(xd.n, xd.h, xd.w, xd.c, w_shape.dim_size(0),
                                       w_shape.dim_size(1), filter_in_depth, out_depth,
                                       attrs_.conv, &g);
    TF_OPS_REQUIRES(ctx, err.empty(),
                InvalidArgument(label, ": ", err, " (input shape ",
                                        x_shape.DebugString(), ", filter shape ",
                                        w_shape.DebugString(), ")"));
    if (dy != nullptr) {
      const Dims4 dd = ActivationDims(dy_shape, attrs_);
      if (spec_.depthwise && dd.c != g.out_depth) {
        ctx->CtxFailure(InvalidArgument(
            label, ": depth_multiplier * in_depth not equal to out_depth: ",
            w_shape.dim_size(3), " * ", xd.c, " != ", dd.c));
        return false;
      }
      err = CheckOutputShape(g, dd.n, dd.h, dd.w, dd.c, attrs_.row_dim, attrs_.col_dim);
      TF_OPS_REQUIRES(ctx, err.empty(),
                  InvalidArgument(label, ": ", err, " (out_backprop shape ",
                                          dy_shape.DebugString(), ")"));
    }

    TensorShape out_shape;
    switch (dir) {
      case Direction::kForward:
        TF_OPS_REQUIRES_OK(ctx, ActivationShape({g.batch, g.out_rows, g.out_cols, g.out_depth},
                                            attrs_, &out_shape));
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
    TF_OPS_REQUIRES(ctx, dir != Direction::kForward || spec_.depthwise ||
                         out_shape.num_elements() == 0 || w_shape.num_elements() > 0,
                InvalidArgument(label, ": filter must not have zero elements (i.e. all "
                                       "dimensions must be non-zero), got filter shape ",
                                w_shape.DebugString()));
    TF_OPS_REQUIRES(ctx, out_shape.num_elements() <=
                         std::numeric_limits<int64_t>::max() / static_cast<int64_t>(sizeof(T)),
                InvalidArgument(label, ": output of shape ", out_shape.DebugString(),
                                        " is too large to allocate"));
    TF_OPS_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &p->out));
    p->g = g;
    p->layout = attrs_.layout;
    p->x = x, p->w = w, p->dy = dy;
    return out_shape.num_elements() > 0;
  }

  void Launch(OpKernelContext* ctx, const Prepared& p, CpuDevice) {
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    const cpu::ParallelFor parallel_for =
        [pool](int64_t units, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
          pool->ParallelFor(units, AdaptiveScheduling(cost), fn);
        };
    T* o = p.out->flat<T>().data();
    switch (spec_.direction) {
      case Direction::kForward:
        cpu::ConvForward<T>(p.g, p.layout, p.x->flat<T>().data(), p.w->flat<T>().data(), o,
                            parallel_for);
        break;
      case Direction::kBackpropInput:
        cpu::ConvBackpropInput<T>(p.g, p.layout, p.w->flat<T>().data(), p.dy->flat<T>().data(),
                                  o, parallel_for);
        break;
      case Direction::kBackpropFilter:
        cpu::ConvBackpropFilter<T>(p.g, p.layout, p.x->flat<T>().data(),
                                   p.dy->flat<T>().data(), o, parallel_for);
        break;
    }
  }

#if TF_OPS_WITH_CUDA
  void Launch(OpKernelContext* ctx, const Prepared& p, GpuDevice) {
    auto* stream = static_cast<CUstream_st*>(
        ctx->op_device_context()->stream()->platform_specific_handle().stream);
    // Temporaries from TensorFlow's allocator, held until the launch is queued: later users of
    // the memory run on the same stream, after it.
    std::vector<Tensor> temps;
    const gpu::WorkspaceFn workspace = [ctx, &temps](int64_t bytes) -> void* {
      Tensor t;
      if (!ctx->allocate_temp(::tensorflow::DT_INT8, TensorShape({bytes}), &t).ok()) return nullptr;
      temps.push_back(t);
      return t.flat<int8_t>().data();
    };
    const gpu::Dtype dtype = GpuDtype();
    void* o = p.out->data();
    std::string err;
    switch (spec_.direction) {
      case Direction::kForward:
        err = gpu::ConvForward(dtype, p.g, p.layout, p.x->data(), p.w->data(), o, stream, workspace);
        break;
      case Direction::kBackpropInput:
        err = gpu::ConvBackpropInput(dtype, p.g, p.layout, p.w->data(), p.dy->data(), o, stream, workspace);
        break;
      case Direction::kBackpropFilter:
        err = gpu::ConvBackpropFilter(dtype, p.g, p.layout, p.x->data(), p.dy->data(), o, stream, workspace);
        break;
    }
    OP_REQUIRES(ctx, err.empty(), absl::InternalError(Cat(spec_.label, ": ", err)));
  }

  static gpu::Dtype GpuDtype() {
    if constexpr (std::is_same_v<T, Eigen::half>) return gpu::Dtype::kHalf;
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) return gpu::Dtype::kBFloat16;
    if constexpr (std::is_same_v<T, float>) return gpu::Dtype::kFloat;
    if constexpr (std::is_same_v<T, double>) return gpu::Dtype::kDouble;
    return gpu::Dtype::kInt32;
  }
#endif

  const OpSpec spec_;
  ParsedAttrs attrs_;
};

constexpr OpSpec kConv2D{"Conv2D", Direction::kForward, false, SizesFrom::kNone, true};
constexpr OpSpec kConv2DBackpropInput{"Conv2DBackpropInput", Direction::kBackpropInput, false,
                                      SizesFrom::kTensor, true};
constexpr OpSpec kConv2DBackpropInputV2{"Conv2DBackpropInputV2", Direction::kBackpropInput,
                                        false, SizesFrom::kShapeOf, true};
constexpr OpSpec kConv2DBackpropFilter{"Conv2DBackpropFilter", Direction::kBackpropFilter,
                                       false, SizesFrom::kTensor, false};
constexpr OpSpec kConv2DBackpropFilterV2{"Conv2DBackpropFilterV2",
                                         Direction::kBackpropFilter, false,
                                         SizesFrom::kShapeOf, false};
constexpr OpSpec kDepthwise{"DepthwiseConv2dNative", Direction::kForward, true,
                            SizesFrom::kNone, false};
constexpr OpSpec kDepthwiseBackpropInput{"DepthwiseConv2dNativeBackpropInput",
                                         Direction::kBackpropInput, true, SizesFrom::kTensor,
                                         false};
constexpr OpSpec kDepthwiseBackpropFilter{"DepthwiseConv2dNativeBackpropFilter",
                                          Direction::kBackpropFilter, true,
                                          SizesFrom::kTensor, false};

// One kernel class per op, so that REGISTER_KERNEL_BUILDER sees a one-argument constructor.
template <typename Device, typename T, const OpSpec& kSpec>
class Kernel : public ConvOp<Device, T> {
 public:
  explicit Kernel(OpKernelConstruction* ctx) : ConvOp<Device, T>(ctx, kSpec) {}
};

#define TF_OPS_REGISTER_CPU(op, spec, T)                                                 \
  REGISTER_KERNEL_BUILDER(                                                               \
      Name("TfOps>" op).Device(DEVICE_CPU).TypeConstraint<T>("T"), Kernel<CpuDevice, T, spec>);

#if TF_OPS_WITH_CUDA
// Whether to register the GPU kernels: not where a driver is present that cannot run them
// (said once, in one sentence); TensorFlow then places the ops on the CPU.
bool RegisterGpuKernels() {
  static const bool ok = [] {
    const gpu::GpuSupport& s = gpu::CheckGpuSupport();
    if (!s.message.empty()) std::fprintf(stderr, "%s\n", s.message.c_str());
    return s.register_kernels;
  }();
  return ok;
}

// The sizes vectors of the V1 backprop ops are read on the host.
template <const OpSpec& kSpec>
::tensorflow::KernelDefBuilder& HostSizes(::tensorflow::KernelDefBuilder& b) {
  if (kSpec.sizes_from != SizesFrom::kTensor) return b;
  return b.HostMemory(kSpec.direction == Direction::kBackpropInput ? "input_sizes" : "filter_sizes");
}

#define TF_OPS_REGISTER_GPU_UNIQ(ctr, op, spec, T)                                       \
  static ::tensorflow::kernel_factory::OpKernelRegistrar tf_ops_gpu_registrar_##ctr(     \
      RegisterGpuKernels()                                                               \
          ? HostSizes<spec>(::tensorflow::register_kernel::Name("TfOps>" op)             \
                                .Device(DEVICE_GPU)                                      \
                                .TypeConstraint<T>("T"))                                 \
                .Build()                                                                 \
          : nullptr,                                                                     \
      "Kernel<GpuDevice, " #T ", " #spec ">",                                            \
      [](::tensorflow::OpKernelConstruction* c) -> OpKernel* {                           \
        return new Kernel<GpuDevice, T, spec>(c);                                        \
      });
#define TF_OPS_REGISTER_GPU_N(ctr, op, spec, T) TF_OPS_REGISTER_GPU_UNIQ(ctr, op, spec, T)
#define TF_OPS_REGISTER(op, spec, T)                                                     \
  TF_OPS_REGISTER_CPU(op, spec, T)                                                       \
  TF_OPS_REGISTER_GPU_N(__COUNTER__, op, spec, T)
#else
#define TF_OPS_REGISTER(op, spec, T) TF_OPS_REGISTER_CPU(op, spec, T)
#endif

#define TF_OPS_REGISTER_WITH_INT32(T)                                                    \
  TF_OPS_REGISTER("Conv2D", kConv2D, T)                                                  \
  TF_OPS_REGISTER("Conv2DBackpropInput", kConv2DBackpropInput, T)                        \
  TF_OPS_REGISTER("Conv2DBackpropInputV2", kConv2DBackpropInputV2, T)

#define TF_OPS_REGISTER_FLOATING(T)                                                      \
  TF_OPS_REGISTER_WITH_INT32(T)                                                          \
  TF_OPS_REGISTER("Conv2DBackpropFilter", kConv2DBackpropFilter, T)                      \
  TF_OPS_REGISTER("Conv2DBackpropFilterV2", kConv2DBackpropFilterV2, T)                  \
  TF_OPS_REGISTER("DepthwiseConv2dNative", kDepthwise, T)                                \
  TF_OPS_REGISTER("DepthwiseConv2dNativeBackpropInput", kDepthwiseBackpropInput, T)      \
  TF_OPS_REGISTER("DepthwiseConv2dNativeBackpropFilter", kDepthwiseBackpropFilter, T)

TF_OPS_REGISTER_FLOATING(Eigen::half)
TF_OPS_REGISTER_FLOATING(Eigen::bfloat16)
TF_OPS_REGISTER_FLOATING(float)
TF_OPS_REGISTER_FLOATING(double)
TF_OPS_REGISTER_WITH_INT32(int32_t)

#undef TF_OPS_REGISTER_FLOATING
#undef TF_OPS_REGISTER_WITH_INT32
#undef TF_OPS_REGISTER
#undef TF_OPS_REGISTER_CPU

}  // namespace
}  // namespace tf_ops

// The instruction set of the CPU micro-kernels chosen at run time ("avx512_bf16", "avx512",
// "avx2" or "generic"), for tf_ops.cpu_kernel_isa() (through ctypes).
extern "C" __attribute__((visibility("default"))) const char* TfOpsCpuKernelIsa() {
  return tf_ops::cpu::FastKernelIsa();
}

#if TF_OPS_WITH_CUDA
// Why the GPU kernels are not registered in this process, or "", for tf_ops.gpu_support().
extern "C" __attribute__((visibility("default"))) const char* TfOpsGpuSupport() {
  return tf_ops::gpu::CheckGpuSupport().message.c_str();
}
#endif
