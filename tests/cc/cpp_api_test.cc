// Checks tf_ops' C++ API (cc/ops/tf_ops_ops.h, cc/ops/tf_ops_gradients.cc) in a program
// linked against TensorFlow's C++ libraries and tf_ops' op library:
// - every op class, with its Attrs (NCHW, unequal strides, dilations, explicit padding,
//   groups), against TensorFlow's built-in ops on random data. Where TensorFlow's CPU
//   kernels lack a feature, the reference is a composition of built-ins: NCHW through
//   transposes, dilations through a filter with zeros inserted between its taps (and a
//   strided slice of the filter gradient), groups through split and concat, the V2 ops
//   through the V1 op on the shape of the tensor;
// - the static shape that shape inference through the scope gives each op's output, fully and
//   partially known;
// - that bad attributes and inputs give a non-OK status with a message naming the problem,
//   at graph construction or at run time;
// - AddSymbolicGradients through every op against the same references (the graphs that
//   TensorFlow's Python gradients build), and against AddSymbolicGradients through
//   TensorFlow's built-in op where its C++ gradient registry has one.
// Run with "--without-library PATH" when linked without tf_ops' op library: the missing ops
// are reported with the way to link it, and loading PATH with TF_LoadLibrary registers them.
// Prints one line per check ("ok" or "FAIL") and a summary; exits 1 on any failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/ops/tf_ops_ops.h"
#include "tensorflow/c/c_api.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope_internal.h"
#include "tensorflow/cc/ops/standard_ops.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/public/session.h"

namespace {

namespace ops = ::tensorflow::ops;
namespace tfo = ::tf_ops::ops;
using ::tensorflow::DT_FLOAT;
using ::tensorflow::DT_INT32;
using ::tensorflow::Output;
using ::tensorflow::Scope;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// ---------------------------------------------------------------------------------------
// Checks and data.

int checks = 0;
int failures = 0;

bool Check(bool ok, const std::string& what, const std::string& detail = "") {
  ++checks;
  if (!ok) ++failures;
  std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(), detail.empty() ? "" : ": ",
              detail.c_str());
  return ok;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The node's type, name, or attribute, also for an Output without a node (an op whose
// construction failed), so that a failing check never dereferences a null node.
std::string TypeOf(const Output& o) {
  return o.node() == nullptr ? "<no node>" : o.node()->type_string();
}
std::string NameOf(const Output& o) {
  return o.node() == nullptr ? "<no node>" : o.node()->name();
}
const tensorflow::AttrValue* AttrOf(const Output& o, const char* name) {
  return o.node() == nullptr ? nullptr : o.node()->attrs().Find(name);
}
std::string AttrString(const Output& o, const char* name) {
  const tensorflow::AttrValue* a = AttrOf(o, name);
  return a == nullptr ? "<missing>" : tensorflow::SummarizeAttrValue(*a);
}

std::mt19937 rng(20250101);

Tensor Random(const TensorShape& shape) {
  Tensor t(DT_FLOAT, shape);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto flat = t.flat<float>();
  for (int64_t i = 0; i < flat.size(); ++i) flat(i) = uniform(rng);
  return t;
}

// `ours` and `ref` have the same shape and agree to `tol` relative to max(1, max |ref|);
// `ref` is not all zeros (so the comparison could fail).
void ExpectClose(const std::string& what, const Tensor& ours, const Tensor& ref,
                 double tol = 1e-4) {
  if (!Check(ours.shape() == ref.shape(), what + " shape",
             ours.shape().DebugString() + " vs " + ref.shape().DebugString())) {
    return;
  }
  double err = 0, scale = 0;
  for (int64_t i = 0; i < ref.NumElements(); ++i) {
    const double r = ref.flat<float>()(i), o = ours.flat<float>()(i);
    const double diff = std::fabs(o - r);
    if (std::isnan(diff) || diff > err) err = diff;  // a NaN sticks and fails the check
    scale = std::max(scale, std::fabs(r));
  }
  const double rel = err / std::max(1.0, scale);
  Check(scale > 0 && rel <= tol, what,
        absl::StrCat("max |diff| ", err, " (relative ", rel, "), max |ref| ", scale));
}

// A graph with its own shape refiner and a scope that builds into both, so that the static
// shapes the scope's shape inference gives each node can be read back.
struct ShapedGraph {
  tensorflow::Graph graph{tensorflow::OpRegistry::Global()};
  tensorflow::ShapeRefiner refiner{graph.versions(), graph.op_registry()};
  absl::Status status;
  Scope scope = tensorflow::NewInternalScope(&graph, &status, &refiner);

  std::string StaticShape(const Output& o) const {
    if (o.node() == nullptr) return "<no node>";
    tensorflow::shape_inference::InferenceContext* c = refiner.GetContext(o.node());
    return c == nullptr ? "<no shape>" : c->DebugString(c->output(o.index()));
  }
};

absl::Status Run(const tensorflow::GraphDef& graph, const std::vector<Output>& fetches,
                 std::vector<Tensor>* out) {
  std::vector<std::string> names;
  for (const Output& f : fetches) {
    if (f.node() == nullptr) return absl::InvalidArgumentError("a fetch has no node");
    names.push_back(f.name());
  }
  std::unique_ptr<tensorflow::Session> session(
      tensorflow::NewSession(tensorflow::SessionOptions()));
  TF_RETURN_IF_ERROR(session->Create(graph));
  return session->Run({}, names, {}, out);
}

// ---------------------------------------------------------------------------------------
// Geometry of a test convolution, and references built from TensorFlow's built-in ops.

struct Dims {
  int64_t n, h, w, c;
};

struct Geometry {
  std::string format = "NHWC";
  int stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  std::string padding = "SAME";
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;

  bool nchw() const { return format == "NCHW"; }
  std::vector<int> Spatial(int h, int w) const {
    return nchw() ? std::vector<int>{1, 1, h, w} : std::vector<int>{1, h, w, 1};
  }
  std::vector<int> Strides() const { return Spatial(stride_h, stride_w); }
  std::vector<int> Dilations() const { return Spatial(dilation_h, dilation_w); }
  std::vector<int> ExplicitPaddings() const {
    if (padding != "EXPLICIT") return {};
    return nchw() ? std::vector<int>{0, 0, 0, 0, pad_top, pad_bottom, pad_left, pad_right}
                  : std::vector<int>{0, 0, pad_top, pad_bottom, pad_left, pad_right, 0, 0};
  }
  tfo::ConvAttrs Attrs() const {
    return tfo::ConvAttrs().DataFormat(format).Dilations(Dilations()).ExplicitPaddings(
        ExplicitPaddings());
  }
  tfo::DepthwiseConvAttrs DepthwiseAttrs() const {
    return tfo::DepthwiseConvAttrs().DataFormat(format).Dilations(Dilations()).ExplicitPaddings(
        ExplicitPaddings());
  }
  TensorShape Shape(const Dims& d) const {
    return nchw() ? TensorShape({d.n, d.c, d.h, d.w}) : TensorShape({d.n, d.h, d.w, d.c});
  }
  // The int32 sizes input for a tensor of logical dims `d`.
  Tensor Sizes(const Dims& d) const {
    Tensor t(DT_INT32, TensorShape({4}));
    const TensorShape s = Shape(d);
    for (int i = 0; i < 4; ++i) t.flat<int32_t>()(i) = static_cast<int32_t>(s.dim_size(i));
    return t;
  }
  int64_t OutSize(int64_t in, int64_t k, int stride, int dilation, int before,
                  int after) const {
    if (padding == "SAME") return (in + stride - 1) / stride;
    if (padding == "VALID") before = after = 0;
    return (in + before + after - ((k - 1) * dilation + 1)) / stride + 1;
  }
  // The output dims of a convolution of `x` with a filter [kh, kw, ., out_c].
  Dims Out(const Dims& x, int64_t kh, int64_t kw, int64_t out_c) const {
    return {x.n, OutSize(x.h, kh, stride_h, dilation_h, pad_top, pad_bottom),
            OutSize(x.w, kw, stride_w, dilation_w, pad_left, pad_right), out_c};
  }
  // As TensorFlow's CPU kernels run it: NHWC, no dilation (the filter is dilated instead).
  Geometry Plain() const {
    Geometry g = *this;
    g.format = "NHWC";
    g.dilation_h = g.dilation_w = 1;
    return g;
  }
  std::string Name() const {
    const std::string pads =
        padding != "EXPLICIT"
            ? ""
            : absl::StrCat(" (", pad_top, ",", pad_bottom, ",", pad_left, ",", pad_right, ")");
    return absl::StrCat(format, " strides ", stride_h, "x", stride_w, " dilations ", dilation_h,
                        "x", dilation_w, " ", padding, pads);
  }
};

Geometry MakeGeometry(const std::string& format, int stride_h, int stride_w, int dilation_h,
                      int dilation_w, const std::string& padding,
                      std::vector<int> pads = {0, 0, 0, 0}) {
  Geometry g;
  g.format = format;
  g.stride_h = stride_h, g.stride_w = stride_w;
  g.dilation_h = dilation_h, g.dilation_w = dilation_w;
  g.padding = padding;
  g.pad_top = pads[0], g.pad_bottom = pads[1], g.pad_left = pads[2], g.pad_right = pads[3];
  return g;
}

// A filter [kh, kw, i, o] with dh - 1 (dw - 1) zero rows (columns) between its taps: a
// dilated convolution with `w` is an undilated one with this filter.
Tensor DilateFilter(const Tensor& w, int dh, int dw) {
  const int64_t kh = w.dim_size(0), kw = w.dim_size(1), ci = w.dim_size(2), co = w.dim_size(3);
  const int64_t dkh = (kh - 1) * dh + 1, dkw = (kw - 1) * dw + 1;
  Tensor out(DT_FLOAT, TensorShape({dkh, dkw, ci, co}));
  out.flat<float>().setZero();
  auto src = w.tensor<float, 4>();
  auto dst = out.tensor<float, 4>();
  for (int64_t a = 0; a < kh; ++a)
    for (int64_t b = 0; b < kw; ++b)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t o = 0; o < co; ++o) dst(a * dh, b * dw, i, o) = src(a, b, i, o);
  return out;
}

Output ToNhwc(const Scope& s, const Geometry& g, const Output& t) {
  return g.nchw() ? Output(ops::Transpose(s, t, {0, 2, 3, 1})) : t;
}

Output FromNhwc(const Scope& s, const Geometry& g, const Output& t) {
  return g.nchw() ? Output(ops::Transpose(s, t, {0, 3, 1, 2})) : t;
}

Output NhwcSizes(const Scope& s, const Dims& d) {
  return ops::Const(s, {static_cast<int32_t>(d.n), static_cast<int32_t>(d.h),
                        static_cast<int32_t>(d.w), static_cast<int32_t>(d.c)});
}

// A grouped convolution as `groups` ungrouped ones: each NHWC tensor of `tensors` split
// into `groups` along its last dimension, `op` applied to the i-th parts, the results
// concatenated along the last dimension. (TensorFlow's CPU kernels run grouped convolutions
// only through oneDNN, and its gradients not at all.)
Output Grouped(const Scope& s, int64_t groups, const std::vector<Output>& tensors,
               const std::function<Output(const std::vector<Output>&)>& op) {
  if (groups == 1) return op(tensors);
  std::vector<ops::Split> splits;
  for (const Output& t : tensors) splits.push_back(ops::Split(s, 3, t, groups));
  if (!s.ok()) return Output();  // the splits have no outputs to index
  std::vector<Output> results;
  for (int64_t i = 0; i < groups; ++i) {
    std::vector<Output> parts;
    for (const ops::Split& split : splits) parts.push_back(split.output[i]);
    results.push_back(op(parts));
  }
  return ops::Concat(s, results, 3);
}

// Conv2D or DepthwiseConv2dNative of `x` (in g.format, `x_channels` channels) with the
// filter `w`; a Conv2D filter whose in_channels divide x's channels is a grouped one.
Output RefForward(const Scope& s, const Geometry& g, bool depthwise, const Output& x,
                  const Tensor& w, int64_t x_channels) {
  const Geometry p = g.Plain();
  const std::vector<int> strides = p.Strides(), pads = p.ExplicitPaddings();
  const Output wd = ops::Const(s, DilateFilter(w, g.dilation_h, g.dilation_w));
  const Output xn = ToNhwc(s, g, x);
  if (depthwise) {
    return FromNhwc(s, g,
                    ops::DepthwiseConv2dNative(s, xn, wd, strides, p.padding,
                                               ops::DepthwiseConv2dNative::ExplicitPaddings(pads)));
  }
  return FromNhwc(s, g, Grouped(s, x_channels / w.dim_size(2), {xn, wd}, [&](const auto& t) {
                    return ops::Conv2D(s, t[0], t[1], strides, p.padding,
                                       ops::Conv2D::ExplicitPaddings(pads));
                  }));
}

// The gradient with respect to the input, of logical dims `x`.
Output RefBackpropInput(const Scope& s, const Geometry& g, bool depthwise, const Dims& x,
                        const Tensor& w, const Output& dy) {
  const Geometry p = g.Plain();
  const std::vector<int> strides = p.Strides(), pads = p.ExplicitPaddings();
  const Output wd = ops::Const(s, DilateFilter(w, g.dilation_h, g.dilation_w));
  const Output dyn = ToNhwc(s, g, dy);
  if (depthwise) {
    return FromNhwc(s, g,
                    ops::DepthwiseConv2dNativeBackpropInput(
                        s, NhwcSizes(s, x), wd, dyn, strides, p.padding,
                        ops::DepthwiseConv2dNativeBackpropInput::ExplicitPaddings(pads)));
  }
  const int64_t groups = x.c / w.dim_size(2);
  const Output sizes = NhwcSizes(s, {x.n, x.h, x.w, x.c / groups});
  return FromNhwc(s, g, Grouped(s, groups, {wd, dyn}, [&](const auto& t) {
                    return ops::Conv2DBackpropInput(
                        s, sizes, t[0], t[1], strides, p.padding,
                        ops::Conv2DBackpropInput::ExplicitPaddings(pads));
                  }));
}

// The gradient with respect to a filter of dims [kh, kw, ci, co] of an input with
// `x_channels` channels: the gradient of the dilated filter, at the dilated filter's taps.
Output RefBackpropFilter(const Scope& s, const Geometry& g, bool depthwise, const Output& x,
                         int64_t x_channels, const std::vector<int>& filter_dims,
                         const Output& dy) {
  const Geometry p = g.Plain();
  const std::vector<int> strides = p.Strides(), pads = p.ExplicitPaddings();
  const int dkh = (filter_dims[0] - 1) * g.dilation_h + 1;
  const int dkw = (filter_dims[1] - 1) * g.dilation_w + 1;
  const Output xn = ToNhwc(s, g, x), dyn = ToNhwc(s, g, dy);
  Output dw;
  if (depthwise) {
    dw = ops::DepthwiseConv2dNativeBackpropFilter(
        s, xn, ops::Const(s, {dkh, dkw, filter_dims[2], filter_dims[3]}), dyn, strides,
        p.padding, ops::DepthwiseConv2dNativeBackpropFilter::ExplicitPaddings(pads));
  } else {
    const int groups = static_cast<int>(x_channels / filter_dims[2]);
    const Output sizes = ops::Const(s, {dkh, dkw, filter_dims[2], filter_dims[3] / groups});
    dw = Grouped(s, groups, {xn, dyn}, [&](const auto& t) {
      return ops::Conv2DBackpropFilter(s, t[0], sizes, t[1], strides, p.padding,
                                       ops::Conv2DBackpropFilter::ExplicitPaddings(pads));
    });
  }
  return ops::StridedSlice(s, dw, {0, 0, 0, 0}, {dkh, dkw, filter_dims[2], filter_dims[3]},
                           {g.dilation_h, g.dilation_w, 1, 1});
}

std::vector<int> DimsOf(const Tensor& t) {
  std::vector<int> d;
  for (int i = 0; i < t.dims(); ++i) d.push_back(static_cast<int>(t.dim_size(i)));
  return d;
}

// ---------------------------------------------------------------------------------------
// One test case: an op of the family on random data, with everything needed to build it,
// its reference, and its gradients' references.

enum class Kind {
  kConv2D,
  kBackpropInput,
  kBackpropInputV2,
  kBackpropFilter,
  kBackpropFilterV2,
  kDepthwise,
  kDepthwiseBackpropInput,
  kDepthwiseBackpropFilter,
};

const char* OpName(Kind k) {
  switch (k) {
    case Kind::kConv2D: return "Conv2D";
    case Kind::kBackpropInput: return "Conv2DBackpropInput";
    case Kind::kBackpropInputV2: return "Conv2DBackpropInputV2";
    case Kind::kBackpropFilter: return "Conv2DBackpropFilter";
    case Kind::kBackpropFilterV2: return "Conv2DBackpropFilterV2";
    case Kind::kDepthwise: return "DepthwiseConv2dNative";
    case Kind::kDepthwiseBackpropInput: return "DepthwiseConv2dNativeBackpropInput";
    case Kind::kDepthwiseBackpropFilter: return "DepthwiseConv2dNativeBackpropFilter";
  }
  return "?";
}

bool IsDepthwise(Kind k) {
  return k == Kind::kDepthwise || k == Kind::kDepthwiseBackpropInput ||
         k == Kind::kDepthwiseBackpropFilter;
}
bool IsForward(Kind k) { return k == Kind::kConv2D || k == Kind::kDepthwise; }
bool IsBackpropInput(Kind k) {
  return k == Kind::kBackpropInput || k == Kind::kBackpropInputV2 ||
         k == Kind::kDepthwiseBackpropInput;
}

struct Case {
  Kind kind;
  Geometry g;
  Dims x;                      // logical input dims
  std::vector<int64_t> filter;  // [kh, kw, ci, co or multiplier]
  bool use_cudnn_on_gpu = true;

  std::string Name() const {
    const int64_t groups = IsDepthwise(kind) ? 1 : x.c / filter[2];
    return absl::StrCat(OpName(kind), " ", g.Name(),
                        groups > 1 ? absl::StrCat(" groups ", groups) : "");
  }
  int64_t OutChannels() const {
    return IsDepthwise(kind) ? filter[2] * filter[3] : filter[3];
  }
  Dims Y() const { return g.Out(x, filter[0], filter[1], OutChannels()); }
};

Output BuildOurs(const Scope& s, const Case& c, const Output& x, const Output& w,
                 const Output& dy) {
  const std::vector<int> strides = c.g.Strides();
  const std::string& pad = c.g.padding;
  const tfo::ConvAttrs a = c.g.Attrs().UseCudnnOnGpu(c.use_cudnn_on_gpu);
  const tfo::DepthwiseConvAttrs da = c.g.DepthwiseAttrs();
  const Output x_sizes = ops::Const(s, c.g.Sizes(c.x));
  const Output w_sizes = ops::Shape(s, w);
  switch (c.kind) {
    case Kind::kConv2D: return tfo::Conv2D(s, x, w, strides, pad, a);
    case Kind::kBackpropInput:
      return tfo::Conv2DBackpropInput(s, x_sizes, w, dy, strides, pad, a);
    case Kind::kBackpropInputV2:
      return tfo::Conv2DBackpropInputV2(s, x, w, dy, strides, pad, a);
    case Kind::kBackpropFilter:
      return tfo::Conv2DBackpropFilter(s, x, w_sizes, dy, strides, pad, a);
    case Kind::kBackpropFilterV2:
      return tfo::Conv2DBackpropFilterV2(s, x, w, dy, strides, pad, a);
    case Kind::kDepthwise: return tfo::DepthwiseConv2dNative(s, x, w, strides, pad, da);
    case Kind::kDepthwiseBackpropInput:
      return tfo::DepthwiseConv2dNativeBackpropInput(s, x_sizes, w, dy, strides, pad, da);
    case Kind::kDepthwiseBackpropFilter:
      return tfo::DepthwiseConv2dNativeBackpropFilter(s, x, w_sizes, dy, strides, pad, da);
  }
  return Output();
}

// The built-in reference of the op of case `c` on tensors x, w, dy.
Output BuildRef(const Scope& s, const Case& c, const Output& x, const Tensor& w,
                const Output& dy) {
  const bool dw = IsDepthwise(c.kind);
  if (IsForward(c.kind)) return RefForward(s, c.g, dw, x, w, c.x.c);
  if (IsBackpropInput(c.kind)) return RefBackpropInput(s, c.g, dw, c.x, w, dy);
  return RefBackpropFilter(s, c.g, dw, x, c.x.c, DimsOf(w), dy);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&](Kind kind, Geometry g, Dims x, std::vector<int64_t> filter,
                 bool cudnn = true) {
    cases.push_back(Case{kind, g, x, filter, cudnn});
  };
  Geometry g;
  // Conv2D: NCHW, unequal strides, dilation, asymmetric explicit padding, use_cudnn_on_gpu.
  g = MakeGeometry("NCHW", 2, 1, 1, 2, "EXPLICIT", {1, 0, 2, 1});
  add(Kind::kConv2D, g, {2, 9, 8, 3}, {3, 2, 3, 4}, false);
  // Conv2D: two groups.
  add(Kind::kConv2D, MakeGeometry("NHWC", 2, 2, 1, 1, "SAME"), {1, 7, 7, 4}, {3, 3, 2, 6});
  // conv2d_transpose as TensorFlow's CPU kernel runs it, then NCHW + dilation + explicit.
  add(Kind::kBackpropInput, MakeGeometry("NHWC", 2, 2, 1, 1, "SAME"), {2, 8, 7, 3},
      {3, 3, 3, 4});
  g = MakeGeometry("NCHW", 2, 2, 2, 1, "EXPLICIT", {1, 2, 0, 1});
  add(Kind::kBackpropInput, g, {2, 10, 9, 3}, {3, 3, 3, 4});
  add(Kind::kBackpropInputV2, MakeGeometry("NHWC", 2, 1, 1, 2, "VALID"), {1, 8, 9, 2},
      {2, 3, 2, 3}, false);
  g = MakeGeometry("NCHW", 1, 2, 2, 2, "EXPLICIT", {0, 2, 1, 1});
  add(Kind::kBackpropFilter, g, {2, 8, 9, 3}, {2, 3, 3, 5});
  add(Kind::kBackpropFilterV2, MakeGeometry("NHWC", 2, 2, 2, 1, "SAME"), {2, 9, 7, 2},
      {3, 2, 2, 3});
  // Depthwise: TensorFlow's kernels need equal strides, and ignore dilations (the
  // references use dilated filters).
  g = MakeGeometry("NCHW", 2, 2, 2, 2, "EXPLICIT", {1, 1, 0, 2});
  add(Kind::kDepthwise, g, {2, 9, 9, 3}, {3, 3, 3, 2});
  add(Kind::kDepthwiseBackpropInput, MakeGeometry("NHWC", 2, 2, 1, 2, "SAME"), {1, 8, 7, 2},
      {3, 2, 2, 3});
  g = MakeGeometry("NCHW", 1, 1, 2, 1, "VALID");
  add(Kind::kDepthwiseBackpropFilter, g, {2, 7, 8, 3}, {2, 3, 3, 2});
  return cases;
}

// ---------------------------------------------------------------------------------------
// The tests.

// Every op against its reference, and the static shape of its output.
void TestOpsAgainstBuiltins() {
  ShapedGraph sg;
  const Scope& s = sg.scope;
  std::vector<Case> cases = Cases();
  std::vector<Output> fetches;
  std::vector<std::string> static_shapes;
  for (const Case& c : cases) {
    const Tensor x = Random(c.g.Shape(c.x));
    const Tensor w = Random(TensorShape(c.filter));
    const Tensor dy = Random(c.g.Shape(c.Y()));
    const Output xc = ops::Const(s, x), wc = ops::Const(s, w), dyc = ops::Const(s, dy);
    const Output ours = BuildOurs(s, c, xc, wc, dyc);
    fetches.push_back(ours);
    fetches.push_back(BuildRef(s, c, xc, w, dyc));
    static_shapes.push_back(sg.StaticShape(ours));
    Check(TypeOf(ours) == absl::StrCat("TfOps>", OpName(c.kind)), c.Name() + ": node type",
          TypeOf(ours));
  }
  if (!Check(s.ok(), "built the comparison graph", s.status().ToString())) return;
  tensorflow::GraphDef graph;
  sg.graph.ToGraphDef(&graph);
  std::vector<Tensor> out;
  const absl::Status run = Run(graph, fetches, &out);
  if (!Check(run.ok(), "ran the comparison graph", run.ToString())) return;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    ExpectClose(c.Name() + " vs TensorFlow", out[2 * i], out[2 * i + 1]);
    // The static shape from shape inference is the full shape of the result.
    std::vector<std::string> dims;
    for (int d = 0; d < out[2 * i].dims(); ++d) {
      dims.push_back(absl::StrCat(out[2 * i].dim_size(d)));
    }
    const std::string want = "[" + absl::StrJoin(dims, ",") + "]";
    Check(static_shapes[i] == want, c.Name() + ": static shape " + static_shapes[i],
          "expected " + want);
  }
}

// Shape inference with partly unknown inputs.
void TestPartialShapes() {
  ShapedGraph sg;
  const Scope& s = sg.scope;
  const auto w = ops::Const(s, Random({3, 2, 3, 4}));
  const auto x = ops::Placeholder(s, DT_FLOAT, ops::Placeholder::Shape({-1, 3, 9, 8}));
  const Geometry g = MakeGeometry("NCHW", 2, 1, 1, 2, "EXPLICIT", {1, 0, 2, 1});
  auto conv = tfo::Conv2D(s, x, w, g.Strides(), g.padding, g.Attrs());
  Check(sg.StaticShape(conv) == "[?,4,4,9]",
        "Conv2D NCHW, unknown batch: static shape " + sg.StaticShape(conv),
        "expected [?,4,4,9]");

  const auto sizes = ops::Placeholder(s, DT_INT32, ops::Placeholder::Shape({4}));
  const auto dy = ops::Placeholder(s, DT_FLOAT, ops::Placeholder::Shape({-1, 4, 4, 4}));
  auto bi = tfo::Conv2DBackpropInput(s, sizes, w, dy, {1, 2, 2, 1}, "SAME");
  Check(sg.StaticShape(bi) == "[?,?,?,?]",
        "Conv2DBackpropInput, sizes fed at run time: static shape " + sg.StaticShape(bi),
        "expected [?,?,?,?]");

  const auto xv2 = ops::Placeholder(s, DT_FLOAT, ops::Placeholder::Shape({-1, 8, -1, 3}));
  const auto dy_known_batch =
      ops::Placeholder(s, DT_FLOAT, ops::Placeholder::Shape({5, 4, 4, 4}));
  auto v2 = tfo::Conv2DBackpropInputV2(s, xv2, w, dy_known_batch, {1, 2, 2, 1}, "SAME");
  Check(sg.StaticShape(v2) == "[5,8,?,3]",
        "Conv2DBackpropInputV2, batch from out_backprop: static shape " + sg.StaticShape(v2),
        "expected [5,8,?,3]");

  auto dw = tfo::DepthwiseConv2dNative(s, xv2, ops::Const(s, Random({3, 3, 3, 2})),
                                       {1, 2, 2, 1}, "VALID",
                                       tfo::DepthwiseConv2dNative::Dilations({1, 2, 1, 1}));
  Check(sg.StaticShape(dw) == "[?,2,?,6]",
        "DepthwiseConv2dNative, dilated: static shape " + sg.StaticShape(dw),
        "expected [?,2,?,6]");
  Check(s.ok(), "partial-shape graph built", s.status().ToString());
}

// The status of building `build` into a fresh scope.
template <typename Fn>
absl::Status BuildStatus(Fn build) {
  Scope s = Scope::NewRootScope();
  build(s);
  return s.status();
}

void ExpectError(const std::string& what, const absl::Status& status,
                 const std::vector<std::string>& parts) {
  bool ok = !status.ok();
  for (const std::string& p : parts) ok = ok && Contains(std::string(status.message()), p);
  Check(ok, "error: " + what, status.ToString());
}

void TestErrors() {
  const Tensor x = Random({1, 6, 6, 3}), w = Random({3, 3, 3, 2});

  ExpectError("unknown data_format is refused at construction",
              BuildStatus([&](const Scope& s) {
                tfo::Conv2D(s, ops::Const(s, x), ops::Const(s, w), {1, 1, 1, 1}, "SAME",
                            tfo::Conv2D::DataFormat("NCWH"));
              }),
              {"data_format", "NCWH"});
  ExpectError("unknown padding is refused at construction",
              BuildStatus([&](const Scope& s) {
                tfo::DepthwiseConv2dNative(s, ops::Const(s, x), ops::Const(s, w), {1, 1, 1, 1},
                                           "SAMEE");
              }),
              {"padding", "SAMEE"});
  ExpectError("int32 depthwise (no such kernel type) is refused at construction",
              BuildStatus([&](const Scope& s) {
                tfo::DepthwiseConv2dNative(s, ops::Const(s, 1, TensorShape({1, 6, 6, 3})),
                                           ops::Const(s, 1, TensorShape({3, 3, 3, 2})),
                                           {1, 1, 1, 1}, "SAME");
              }),
              {"attr 'T'", "int32"});
  ExpectError("a rank-3 filter fails shape inference",
              BuildStatus([&](const Scope& s) {
                tfo::Conv2DBackpropInput(s, {1, 6, 6, 3}, ops::Const(s, Random({3, 3, 3})),
                                         ops::Const(s, Random({1, 6, 6, 2})), {1, 1, 1, 1},
                                         "SAME");
              }),
              {"Shape must be rank 4 but is rank 3"});
  ExpectError("input depth not a multiple of the filter's fails shape inference",
              BuildStatus([&](const Scope& s) {
                tfo::Conv2D(s, ops::Const(s, x), ops::Const(s, Random({3, 3, 2, 2})),
                            {1, 1, 1, 1}, "SAME");
              }),
              {"Depth of input (3) is not a multiple of input depth of filter (2)"});
  ExpectError("strides of length 3 fail shape inference of Conv2D",
              BuildStatus([&](const Scope& s) {
                tfo::Conv2D(s, ops::Const(s, x), ops::Const(s, w), {1, 2, 2}, "SAME");
              }),
              {"stride", "4 values", "3"});
  ExpectError("V2 out_backprop depth differing from the filter's fails shape inference",
              BuildStatus([&](const Scope& s) {
                tfo::Conv2DBackpropFilterV2(s, ops::Const(s, x), ops::Const(s, w),
                                            ops::Const(s, Random({1, 6, 6, 5})), {1, 1, 1, 1},
                                            "SAME");
              }),
              {"Dimensions must be equal", "5", "2"});

  // After an error the scope refuses further ops quietly: no node, the first error kept.
  {
    Scope s = Scope::NewRootScope();
    tfo::Conv2D(s, ops::Const(s, x), ops::Const(s, w), {1, 1, 1, 1}, "SAME",
                tfo::Conv2D::DataFormat("NCWH"));
    auto next = tfo::Conv2D(s, ops::Const(s, x), ops::Const(s, w), {1, 1, 1, 1}, "SAME");
    Check(next.node() == nullptr && Contains(std::string(s.status().message()), "NCWH"),
          "an op built after an error adds nothing and keeps the first error",
          s.status().ToString());
  }

  // Attribute values only the kernel checks, and sizes only known at run time: Run fails.
  auto run_status = [](const std::function<Output(const Scope&)>& build) {
    Scope s = Scope::NewRootScope();
    const Output y = build(s);
    if (!s.ok()) return s.status();
    tensorflow::GraphDef graph;
    TF_RETURN_IF_ERROR(s.ToGraphDef(&graph));
    std::vector<Tensor> out;
    return Run(graph, {y}, &out);
  };
  ExpectError("strides of length 3 fail at run time (Conv2DBackpropInput)",
              run_status([&](const Scope& s) {
                return tfo::Conv2DBackpropInput(s, {1, 6, 6, 3}, ops::Const(s, w),
                                                ops::Const(s, Random({1, 3, 3, 2})), {1, 2, 2},
                                                "SAME");
              }),
              {"strides field must specify 4 dimensions", "[1, 2, 2]"});
  ExpectError("explicit_paddings of the wrong length fail at run time",
              run_status([&](const Scope& s) {
                return tfo::Conv2DBackpropFilter(
                    s, ops::Const(s, x), {3, 3, 3, 2}, ops::Const(s, Random({1, 6, 6, 2})),
                    {1, 1, 1, 1}, "EXPLICIT",
                    tfo::Conv2DBackpropFilter::ExplicitPaddings({1, 1}));
              }),
              {"explicit_paddings", "8 values"});
  ExpectError("out_backprop of the wrong spatial size fails at run time",
              run_status([&](const Scope& s) {
                return tfo::Conv2DBackpropFilter(s, ops::Const(s, x), {3, 3, 3, 2},
                                                 ops::Const(s, Random({1, 5, 6, 2})),
                                                 {1, 1, 1, 1}, "SAME");
              }),
              {"out_backprop"});
  ExpectError("a batch stride fails at run time (depthwise)",
              run_status([&](const Scope& s) {
                return tfo::DepthwiseConv2dNativeBackpropInput(
                    s, {1, 6, 6, 3}, ops::Const(s, w), ops::Const(s, Random({1, 6, 6, 6})),
                    {2, 1, 1, 1}, "SAME");
              }),
              {"strides in the batch and depth dimensions"});
}

// Gradients through every op against the references of the same graphs.
void TestGradients() {
  Scope s = Scope::NewRootScope();
  std::vector<Case> cases = Cases();
  std::vector<Output> fetches;
  std::vector<std::string> names;
  for (const Case& c : cases) {
    const Tensor x = Random(c.g.Shape(c.x));
    const Tensor w = Random(TensorShape(c.filter));
    const Tensor dy = Random(c.g.Shape(c.Y()));
    const Output xc = ops::Const(s, x), wc = ops::Const(s, w), dyc = ops::Const(s, dy);
    const Output ours = BuildOurs(s, c, xc, wc, dyc);
    // The gradient seed: a random tensor shaped like the op's output.
    Tensor seed;
    std::vector<Output> wrt;
    std::vector<Output> refs;
    std::vector<std::string> wrt_names;
    const bool dw = IsDepthwise(c.kind);
    if (IsForward(c.kind)) {
      seed = Random(c.g.Shape(c.Y()));
      wrt = {xc, wc};
      wrt_names = {"input", "filter"};
      refs = {RefBackpropInput(s, c.g, dw, c.x, w, ops::Const(s, seed)),
              RefBackpropFilter(s, c.g, dw, xc, c.x.c, DimsOf(w), ops::Const(s, seed))};
    } else if (IsBackpropInput(c.kind)) {
      seed = Random(c.g.Shape(c.x));
      wrt = {wc, dyc};
      wrt_names = {"filter", "out_backprop"};
      refs = {RefBackpropFilter(s, c.g, dw, ops::Const(s, seed), c.x.c, DimsOf(w), dyc),
              RefForward(s, c.g, dw, ops::Const(s, seed), w, c.x.c)};
    } else {
      seed = Random(TensorShape(c.filter));
      wrt = {xc, dyc};
      wrt_names = {"input", "out_backprop"};
      refs = {RefBackpropInput(s, c.g, dw, c.x, seed, dyc),
              RefForward(s, c.g, dw, xc, seed, c.x.c)};
    }
    if (!Check(s.ok(), c.Name() + ": built with its references", s.status().ToString())) return;
    std::vector<Output> grads;
    const absl::Status st =
        tensorflow::AddSymbolicGradients(s, {ours}, wrt, {ops::Const(s, seed)}, &grads);
    if (!Check(st.ok() && grads.size() == 2, c.Name() + ": AddSymbolicGradients",
               st.ToString())) {
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      const std::string type = TypeOf(grads[i]);
      Check(type.rfind("TfOps>", 0) == 0, c.Name() + ": gradient " + std::to_string(i) +
                                              " is built from TfOps> ops (" + type + ")");
      fetches.push_back(grads[i]);
      fetches.push_back(refs[i]);
      names.push_back(absl::StrCat(c.Name(), ": gradient d/", wrt_names[i], " vs TensorFlow"));
    }
  }

  // Where TensorFlow's C++ gradient registry has the built-in op's gradient: the same
  // AddSymbolicGradients through tf_ops and through TensorFlow (NHWC, no dilation or
  // explicit padding, which TensorFlow's C++ gradients do not pass on).
  {
    const Tensor x = Random({2, 7, 6, 3}), w = Random({3, 2, 3, 4}), dy = Random({2, 4, 3, 4});
    const Tensor dw_w = Random({3, 3, 3, 2}), dw_dy = Random({2, 5, 4, 6});
    const auto xc = ops::Const(s, x), wc = ops::Const(s, w), dyc = ops::Const(s, dy);
    const auto dwc = ops::Const(s, dw_w);
    const auto sizes = ops::Const(s, {2, 7, 6, 3});
    const std::vector<int> s2 = {1, 2, 2, 1}, s1 = {1, 1, 1, 1};
    struct Pair {
      std::string name;
      Output ours, theirs;
      std::vector<Output> wrt;
      Tensor seed;
    };
    const Pair pairs[] = {
        {"Conv2D", tfo::Conv2D(s, xc, wc, s2, "SAME"), ops::Conv2D(s, xc, wc, s2, "SAME"),
         {xc, wc}, dy},
        {"Conv2DBackpropInput", tfo::Conv2DBackpropInput(s, sizes, wc, dyc, s2, "SAME"),
         ops::Conv2DBackpropInput(s, sizes, wc, dyc, s2, "SAME"), {wc, dyc}, x},
        {"Conv2DBackpropInputV2", tfo::Conv2DBackpropInputV2(s, xc, wc, dyc, s2, "SAME"),
         ops::Conv2DBackpropInput(s, ops::Shape(s, xc), wc, dyc, s2, "SAME"), {wc, dyc}, x},
        {"DepthwiseConv2dNative", tfo::DepthwiseConv2dNative(s, xc, dwc, s1, "VALID"),
         ops::DepthwiseConv2dNative(s, xc, dwc, s1, "VALID"), {xc, dwc}, dw_dy},
    };
    if (!Check(s.ok(), "built the ops to differentiate through both", s.status().ToString())) {
      return;
    }
    for (const Pair& p : pairs) {
      std::vector<Output> ours, theirs;
      const auto seed = ops::Const(s, p.seed);
      absl::Status a = tensorflow::AddSymbolicGradients(s, {p.ours}, p.wrt, {seed}, &ours);
      absl::Status b = tensorflow::AddSymbolicGradients(s, {p.theirs}, p.wrt, {seed}, &theirs);
      if (!Check(a.ok() && b.ok(), p.name + ": AddSymbolicGradients through both",
                 a.ToString() + " / " + b.ToString())) {
        continue;
      }
      for (int i = 0; i < 2; ++i) {
        fetches.push_back(ours[i]);
        fetches.push_back(theirs[i]);
        names.push_back(absl::StrCat(p.name, " NHWC: gradient ", i,
                                     " vs TensorFlow's C++ gradient"));
      }
    }
  }

  if (!Check(s.ok(), "built the gradient graph", s.status().ToString())) return;
  tensorflow::GraphDef graph;
  if (!Check(s.ToGraphDef(&graph).ok(), "gradient graph to GraphDef")) return;
  std::vector<Tensor> out;
  const absl::Status run = Run(graph, fetches, &out);
  if (!Check(run.ok(), "ran the gradient graph", run.ToString())) return;
  for (size_t i = 0; i < names.size(); ++i) ExpectClose(names[i], out[2 * i], out[2 * i + 1]);
}

// The gradient of an op passes every attribute of the op on unchanged.
void TestGradientAttrs() {
  Scope s = Scope::NewRootScope();
  const Geometry g = MakeGeometry("NCHW", 2, 1, 1, 2, "EXPLICIT", {1, 0, 2, 1});
  const auto x = ops::Const(s, Random(g.Shape({2, 9, 8, 3})));
  const auto w = ops::Const(s, Random({3, 2, 3, 4}));
  auto y = tfo::Conv2D(s, x, w, g.Strides(), g.padding, g.Attrs().UseCudnnOnGpu(false));
  if (!Check(s.ok(), "Conv2D with every attribute set built", s.status().ToString())) return;
  std::vector<Output> grads;
  const absl::Status st = tensorflow::AddSymbolicGradients(s, {y}, {x, w}, &grads);
  if (!Check(st.ok(), "Conv2D gradient with every attribute set", st.ToString())) return;
  for (const Output& grad : grads) {
    for (const char* attr : {"strides", "padding", "explicit_paddings", "data_format",
                             "dilations", "use_cudnn_on_gpu"}) {
      const tensorflow::AttrValue* a = AttrOf(grad, attr);
      const tensorflow::AttrValue* b = AttrOf(y, attr);
      Check(a != nullptr && b != nullptr && tensorflow::AreAttrValuesEqual(*a, *b),
            TypeOf(grad) + " of the gradient has the op's " + attr, AttrString(grad, attr));
    }
  }
}

// The ops are registered, with their kernels, before main() (the library is linked), and
// the Attrs setters and node naming behave as documented.
void TestRegistrationAndApi() {
  const absl::Status reg = tfo::CheckOpsRegistered();
  Check(reg.ok(), "all 8 TfOps> ops registered before main()", reg.ToString());

  Scope s = Scope::NewRootScope();
  const auto x = ops::Const(s, Random({1, 5, 5, 2}));
  const auto w = ops::Const(s, Random({3, 3, 2, 2}));
  auto a = tfo::Conv2D(s, x, w, {1, 1, 1, 1}, "SAME");
  auto b = tfo::Conv2D(s, x, w, {1, 1, 1, 1}, "SAME");
  auto named = tfo::Conv2D(s.WithOpName("my_conv"), x, w, {1, 1, 1, 1}, "SAME");
  Check(NameOf(a) == "TfOps>Conv2D" && NameOf(b) == "TfOps>Conv2D_1" &&
            NameOf(named) == "my_conv",
        "node names: default from the op type, made unique; WithOpName honoured",
        NameOf(a) + ", " + NameOf(b) + ", " + NameOf(named));
  // Attrs own their values: built from temporaries, stored, then used.
  tfo::Conv2D::Attrs stored;
  {
    std::vector<int> dil = {1, 2, 2, 1};
    stored = tfo::Conv2D::Dilations(dil).DataFormat(std::string("NHWC")).UseCudnnOnGpu(false);
    dil.assign(4, 7);
  }
  auto d = tfo::Conv2D(s, x, w, {1, 1, 1, 1}, "SAME", stored);
  Check(AttrString(d, "dilations") == "[1, 2, 2, 1]" &&
            AttrString(d, "use_cudnn_on_gpu") == "false",
        "stored Attrs keep their values",
        AttrString(d, "dilations") + ", use_cudnn_on_gpu " + AttrString(d, "use_cudnn_on_gpu"));
  // Implicit conversions to Output and Input.
  const Output as_output = a;
  auto sum = ops::Add(s, a, b);
  Check(s.ok() && as_output.node() == a.node() && sum.node() != nullptr,
        "op classes convert to Output and Input", s.status().ToString());
}

// For the program linked without tf_ops' op library: the ops are missing, and both
// CheckOpsRegistered() and a constructor say how to link the library; then loading it at
// run time with TF_LoadLibrary registers the ops and kernels.
void TestWithoutLibrary(const char* library_path) {
  const absl::Status reg = tfo::CheckOpsRegistered();
  Check(absl::IsNotFound(reg) && Contains(std::string(reg.message()), "TfOps>Conv2D") &&
            Contains(std::string(reg.message()), "--no-as-needed -l:_tf_ops.so"),
        "unlinked: CheckOpsRegistered names the missing ops and the link flags",
        reg.ToString());
  {
    Scope s = Scope::NewRootScope();
    const auto x = ops::Const(s, Random({1, 4, 4, 1}));
    auto y = tfo::Conv2D(s, x, x, {1, 1, 1, 1}, "VALID");
    Check(absl::IsNotFound(s.status()) && y.node() == nullptr &&
              Contains(std::string(s.status().message()), "TfOps>Conv2D") &&
              Contains(std::string(s.status().message()), "-l:_tf_ops.so"),
          "unlinked: a constructor reports the missing op with the link flags",
          s.status().ToString());
  }
  TF_Status* status = TF_NewStatus();
  TF_Library* library = TF_LoadLibrary(library_path, status);
  Check(TF_GetCode(status) == TF_OK, "TF_LoadLibrary of tf_ops' op library",
        TF_Message(status));
  TF_DeleteStatus(status);
  if (library == nullptr) return;
  TF_DeleteLibraryHandle(library);  // frees the handle; the library stays loaded
  const absl::Status loaded = tfo::CheckOpsRegistered();
  Check(loaded.ok(), "loaded at run time: all 8 ops registered", loaded.ToString());
  Scope s = Scope::NewRootScope();
  const Tensor x = Random({1, 6, 5, 2}), w = Random({3, 3, 2, 3});
  const auto xc = ops::Const(s, x), wc = ops::Const(s, w);
  auto ours = tfo::Conv2D(s, xc, wc, {1, 1, 1, 1}, "SAME");
  auto theirs = ops::Conv2D(s, xc, wc, {1, 1, 1, 1}, "SAME");
  if (!Check(s.ok(), "loaded at run time: Conv2D built", s.status().ToString())) return;
  std::vector<Output> grads;
  const absl::Status grad_status = tensorflow::AddSymbolicGradients(s, {ours}, {xc}, &grads);
  auto ref_grad = ops::Conv2DBackpropInput(s, ops::Shape(s, xc), wc, ops::OnesLike(s, ours),
                                           {1, 1, 1, 1}, "SAME");
  tensorflow::GraphDef graph;
  std::vector<Tensor> out;
  absl::Status run = s.status();
  if (run.ok() && grad_status.ok()) run = s.ToGraphDef(&graph);
  if (run.ok() && grad_status.ok()) run = Run(graph, {ours, theirs, grads[0], ref_grad}, &out);
  if (Check(run.ok() && grad_status.ok(), "loaded at run time: graph built and run",
            run.ToString() + " / " + grad_status.ToString())) {
    ExpectClose("loaded at run time: Conv2D vs TensorFlow", out[0], out[1]);
    ExpectClose("loaded at run time: Conv2D gradient vs TensorFlow", out[2], out[3]);
  }
}

}  // namespace

// With no argument: every test, in a program linked against tf_ops' op library. With
// "--without-library PATH": the tests of a program linked without it (PATH: the library).
int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every finished line survives a crash
  if (argc == 3 && std::string(argv[1]) == "--without-library") {
    TestWithoutLibrary(argv[2]);
  } else {
    TestRegistrationAndApi();
    TestOpsAgainstBuiltins();
    TestPartialShapes();
    TestErrors();
    TestGradients();
    TestGradientAttrs();
  }
  std::printf("cpp_api_test: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
