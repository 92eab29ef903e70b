// The mapping from TensorFlow's convolutions to CUTLASS's, proven on the host (no GPU): for every
// plan the GPU planner (cc/core/gpu/gpu_plan.h) makes over the emulated sweep's geometries and
// geometries generated around the CUTLASS entries' thresholds (channel alignment, few channels,
// stride against filter, dilation with stride, groups, split-K, sizes past 2**31 bytes), in every
// element type and float math:
//   - where the plan runs CUTLASS, the problem and tensor references the dispatcher builds
//     (cutlass_kernels.cuh: ProblemOf, RefOf over CutlassShapeOf) have TensorFlow's tensor
//     shapes, and CUTLASS's host reference convolution (cutlass::reference::host::Conv2dFprop /
//     Dgrad / Wgrad, float64) over them equals this file's own float64 loops of TensorFlow's
//     semantics; CUTLASS's can_implement accepts the problem;
//   - every entry of every direction is chosen somewhere, and every rule that can refuse an
//     entry refuses it somewhere (the plan's own refusals, counted).
// Built with -DTF_OPS_PLANT_CUTLASS_MAPPING=1 or 2 (the padding after instead of before; the
// output size from CUTLASS's formula) it must fail: tests/test_cutlass.py builds all three.
//
// Usage: mapping [--verbose]. Exit status 0 when every check held.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/gpu/cutlass_kernels.cuh"
#include "cc/core/gpu/gpu_plan.h"
#include "cutlass/util/reference/host/convolution.h"
#include "tests/cuda_emu/sweep_attrs.h"

// The sets' entry points as the library's table (cutlass_conv.cu) reads them: can_implement
// only. Nothing here launches a kernel, so no kernel is instantiated.
namespace tf_ops {
namespace gpu {
namespace cutlass_conv {
SetEntry HalfEntry() { return {&SetRefusal<HalfSet>, nullptr}; }
SetEntry BFloat16Entry() { return {&SetRefusal<BFloat16Set>, nullptr}; }
SetEntry Tf32Entry() { return {&SetRefusal<Tf32Set>, nullptr}; }
SetEntry Tf32x3Entry() { return {&SetRefusal<Tf32x3Set>, nullptr}; }
}  // namespace cutlass_conv
}  // namespace gpu
}  // namespace tf_ops

namespace {

using namespace tf_ops;
using gpu::Entry;
using gpu::Rule;

int failures = 0;
bool verbose = false;

void Fail(const std::string& what) {
  if (++failures <= 30) std::printf("FAIL %s\n", what.c_str());
}

struct Case {
  std::string what;
  Layout layout;
  ConvGeometry g;
  bool reference = true;  // false: planned only (too large to compute)
};

void Add(std::vector<Case>* cases, const std::string& what, Layout layout, int64_t n, int64_t h, int64_t w, int64_t c,
         int64_t kh, int64_t kw, int64_t fi, int64_t k, const ConvAttrs& attrs, bool reference = true) {
  Case cs{what, layout, {}, reference};
  const std::string err = MakeConvGeometry(n, h, w, c, kh, kw, fi, k, attrs, &cs.g);
  if (!err.empty()) return;  // a generated combination TensorFlow refuses (a window past the input)
  cases->push_back(cs);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
#define SPEC(what, layout, n, h, w, c, kh, kw, fi, ko, sh, sw, dh, dw, padding, pt, pb, pl, pr) \
  Add(&cases, what, Layout::k##layout, n, h, w, c, kh, kw, fi, ko, Attrs(sh, sw, dh, dw, Padding::k##padding, pt, pb, pl, pr));
#include "tests/cuda_emu/sweep_geometries.inc"
#undef SPEC
  // Around the CUTLASS entries' thresholds: channels on and off 128-bit alignment (4 floats, 8
  // halves), an RGB-like 3, filters below, at and above the stride (a patch embedding: stride =
  // filter), dilation with and without stride, every padding, odd SAME padding.
  struct Window {
    int64_t kh, kw, sh, sw, dh, dw;
  };
  const Window windows[] = {{1, 1, 1, 1, 1, 1}, {3, 3, 1, 1, 1, 1}, {3, 3, 1, 1, 2, 2}, {3, 3, 2, 2, 1, 1},
                            {2, 2, 2, 2, 1, 1}, {4, 4, 4, 4, 1, 1}, {1, 1, 2, 2, 1, 1}, {3, 2, 2, 3, 1, 1},
                            {3, 3, 2, 2, 2, 1}, {5, 5, 3, 3, 1, 1}};
  const ConvAttrs paddings[] = {Attrs(1, 1, 1, 1, Padding::kSame), Attrs(1, 1, 1, 1, Padding::kValid),
                                Attrs(1, 1, 1, 1, Padding::kExplicit, 1, 2, 0, 1)};
  for (const int64_t c : {3, 4, 8, 16}) {
    for (const int64_t k : {4, 8, 24}) {
      for (const Window& win : windows) {
        for (ConvAttrs a : paddings) {
          a.stride_rows = win.sh, a.stride_cols = win.sw, a.dilation_rows = win.dh, a.dilation_cols = win.dw;
          Add(&cases, "generated", Layout::kNHWC, 2, 8, 9, c, win.kh, win.kw, c, k, a);
        }
      }
    }
  }
  // The filter gradient's split-K: N * P * Q of 4,096 and 8,192 values.
  Add(&cases, "split-K 2", Layout::kNHWC, 4, 32, 32, 8, 3, 3, 8, 8, Attrs(1, 1, 1, 1, Padding::kSame));
  Add(&cases, "split-K 4, stride 2", Layout::kNHWC, 8, 64, 64, 8, 3, 3, 8, 16, Attrs(2, 2, 1, 1, Padding::kSame));
  // Grouped and depthwise, NHWC and aligned: refused by CUTLASS's dense operators.
  Add(&cases, "2 groups, aligned", Layout::kNHWC, 1, 6, 6, 16, 3, 3, 8, 16, Attrs(1, 1, 1, 1, Padding::kSame));
  // 2**31 bytes and more: planned only.
  Add(&cases, "2 GiB input", Layout::kNHWC, 1024, 256, 256, 16, 1, 1, 16, 8, Attrs(1, 1, 1, 1, Padding::kValid), false);
  return cases;
}

// TensorFlow's convolution in float64: y[n, oh, ow, k] = sum over (kh, kw, c) of
// x[n, oh * sh - pad_top + kh * dh, ow * sw - pad_left + kw * dw, c] * w[kh, kw, c, k] (HWIO, one
// group), pixels outside the input reading zero. `fn` gets each product's (x, w, y) offsets.
template <typename Fn>
void ForEachProduct(const ConvGeometry& g, const Fn& fn) {
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oh = 0; oh < g.out_rows; ++oh)
      for (int64_t ow = 0; ow < g.out_cols; ++ow)
        for (int64_t kh = 0; kh < g.filter_rows; ++kh)
          for (int64_t kw = 0; kw < g.filter_cols; ++kw) {
            const int64_t ih = oh * g.stride_rows - g.pad_top + kh * g.dilation_rows;
            const int64_t iw = ow * g.stride_cols - g.pad_left + kw * g.dilation_cols;
            if (ih < 0 || ih >= g.in_rows || iw < 0 || iw >= g.in_cols) continue;
            for (int64_t c = 0; c < g.in_depth; ++c)
              for (int64_t k = 0; k < g.out_depth; ++k)
                fn(((n * g.in_rows + ih) * g.in_cols + iw) * g.in_depth + c,
                   ((kh * g.filter_cols + kw) * g.in_depth + c) * g.out_depth + k,
                   ((n * g.out_rows + oh) * g.out_cols + ow) * g.out_depth + k);
          }
}

// The KRSC offset of HWIO offset i.
int64_t KrscOf(const ConvGeometry& g, int64_t i) {
  const int64_t k = i % g.out_depth, c = i / g.out_depth % g.in_depth, kw = i / (g.out_depth * g.in_depth) % g.filter_cols,
                kh = i / (g.out_depth * g.in_depth * g.filter_cols);
  return ((k * g.filter_rows + kh) * g.filter_cols + kw) * g.in_depth + c;
}

std::vector<double> Random(int64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = u(*rng);
  return v;
}

using Ref = cutlass::TensorRef<double, cutlass::layout::TensorNHWC>;

// The extent CUTLASS reads operand `which` of `op` with, as four sizes.
std::vector<int64_t> Extent(cutlass::conv::Operator op, const cutlass::conv::Conv2dProblemSize& p, int which) {
  const cutlass::Tensor4DCoord e = which == 0   ? cutlass::conv::implicit_gemm_tensor_a_extent(op, p)
                                   : which == 1 ? cutlass::conv::implicit_gemm_tensor_b_extent(op, p)
                                                : cutlass::conv::implicit_gemm_tensor_c_extent(op, p);
  return {e.n(), e.h(), e.w(), e.c()};
}

std::string Sizes(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

// Runs CUTLASS's host reference of `op` over the problem and references the dispatcher builds
// and compares it with TensorFlow's semantics in float64. "" or what differs.
std::string CheckReference(gpu::CutlassOp op, const ConvGeometry& g, const gpu::CutlassShape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<double> x = Random(g.input_elements(), &rng), w = Random(g.filter_elements(), &rng),
                            dy = Random(g.output_elements(), &rng);
  std::vector<double> w_krsc(w.size());
  for (int64_t i = 0; i < g.filter_elements(); ++i) w_krsc[KrscOf(g, i)] = w[i];
  const std::vector<int64_t> x_shape{g.batch, g.in_rows, g.in_cols, g.in_depth},
      y_shape{g.batch, g.out_rows, g.out_cols, g.out_depth},
      w_shape{g.out_depth, g.filter_rows, g.filter_cols, g.in_depth};
  const cutlass::conv::Conv2dProblemSize problem = gpu::cutlass_conv::ProblemOf(shape);
  using cutlass::conv::Operator;
  const Operator cop = op == gpu::CutlassOp::kFprop   ? Operator::kFprop
                       : op == gpu::CutlassOp::kWgrad ? Operator::kWgrad
                                                      : Operator::kDgrad;
  // CUTLASS's operands: forward x, w -> y; backprop input dy, w -> dx; backprop filter dy, x -> dw.
  const std::vector<int64_t>& a_shape = cop == Operator::kFprop ? x_shape : y_shape;
  const std::vector<int64_t>& b_shape = cop == Operator::kWgrad ? x_shape : w_shape;
  const std::vector<int64_t>& c_shape = cop == Operator::kFprop ? y_shape : cop == Operator::kDgrad ? x_shape : w_shape;
  const std::vector<int64_t> shapes[] = {a_shape, b_shape, c_shape};
  for (int which = 0; which < 3; ++which) {
    if (Extent(cop, problem, which) != shapes[which]) {
      return "operand " + std::to_string(which) + " of CUTLASS's problem is " + Sizes(Extent(cop, problem, which)) +
             ", TensorFlow's tensor " + Sizes(shapes[which]);
    }
  }
  const std::vector<double>& a = cop == Operator::kFprop ? x : dy;
  const std::vector<double>& b = cop == Operator::kWgrad ? x : w_krsc;
  std::vector<double> got(cop == Operator::kFprop ? g.output_elements()
                          : cop == Operator::kDgrad ? g.input_elements()
                                                    : g.filter_elements());
  const Ref ra = gpu::cutlass_conv::RefOf<double>(cop, problem, 0, a.data());
  const Ref rb = gpu::cutlass_conv::RefOf<double>(cop, problem, 1, b.data());
  const Ref rc = gpu::cutlass_conv::RefOf<double>(cop, problem, 2, got.data());
  using Layout4 = cutlass::layout::TensorNHWC;
  if (cop == Operator::kFprop) {
    cutlass::reference::host::Conv2dFprop<double, Layout4, double, Layout4, double, Layout4, double>(problem, ra, rb, rc,
                                                                                                     rc, 1.0, 0.0);
  } else if (cop == Operator::kDgrad) {
    cutlass::reference::host::Conv2dDgrad<double, Layout4, double, Layout4, double, Layout4, double>(problem, ra, rb, rc,
                                                                                                     rc, 1.0, 0.0);
  } else {
    cutlass::reference::host::Conv2dWgrad<double, Layout4, double, Layout4, double, Layout4, double>(problem, ra, rb, rc,
                                                                                                     rc, 1.0, 0.0);
  }
  // TensorFlow's semantics, and each output's sum of |products| for the bound.
  std::vector<double> want(got.size()), mag(got.size());
  ForEachProduct(g, [&](int64_t xi, int64_t wi, int64_t yi) {
    if (cop == Operator::kFprop) {
      want[yi] += x[xi] * w[wi], mag[yi] += std::fabs(x[xi] * w[wi]);
    } else if (cop == Operator::kDgrad) {
      want[xi] += dy[yi] * w[wi], mag[xi] += std::fabs(dy[yi] * w[wi]);
    } else {
      const int64_t ki = KrscOf(g, wi);
      want[ki] += x[xi] * dy[yi], mag[ki] += std::fabs(x[xi] * dy[yi]);
    }
  });
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-12 * (mag[i] + 1))) {
      return "element " + std::to_string(i) + ": CUTLASS's reference " + std::to_string(got[i]) + ", TensorFlow's " +
             std::to_string(want[i]);
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) verbose = verbose || std::strcmp(argv[i], "--verbose") == 0;
  const gpu::CutlassKernels& kernels = gpu::BuiltCutlassKernels();
  struct Math {
    Element dtype;
    gpu::FloatMath math;
    const char* name;
  };
  const Math maths[] = {{Element::kHalf, gpu::FloatMath::kTf32x3, "float16"},
                        {Element::kBFloat16, gpu::FloatMath::kTf32x3, "bfloat16"},
                        {Element::kFloat, gpu::FloatMath::kTf32, "float32/tf32"},
                        {Element::kFloat, gpu::FloatMath::kTf32x3, "float32/tf32x3"},
                        {Element::kDouble, gpu::FloatMath::kTf32x3, "float64"},
                        {Element::kInt32, gpu::FloatMath::kTf32x3, "int32"}};
  std::set<std::pair<int, int>> chosen;               // (direction, entry)
  std::set<std::pair<int, int>> refused;              // (entry, rule)
  std::set<std::tuple<int, std::string>> checked;     // (op, shape) references run
  int plans = 0, references = 0;
  const std::vector<Case> cases = Cases();
  for (const Case& cs : cases) {
    for (const Math& m : maths) {
      for (const Direction d : {Direction::kForward, Direction::kBackpropInput, Direction::kBackpropFilter}) {
        gpu::GpuCall call;
        call.direction = d, call.dtype = m.dtype, call.g = cs.g, call.layout = cs.layout, call.float_math = m.math;
        const gpu::GpuPlan plan = gpu::PlanGpu(call, &kernels);
        ++plans;
        chosen.insert({static_cast<int>(d), static_cast<int>(plan.entry)});
        for (const gpu::Refusal& r : plan.refused) refused.insert({static_cast<int>(r.entry), static_cast<int>(r.rule)});
        if (verbose) std::printf("%s %s %s\n", cs.what.c_str(), m.name, gpu::DescribeGpuPlan(plan).c_str());
        if (!gpu::IsCutlass(plan.entry)) continue;
        const std::string where = cs.what + " (" + m.name + ", " + gpu::NameOf(plan.entry) + ")";
        const std::string refusal = kernels.refusal(plan.op, m.dtype, m.math, plan.shape);
        if (!refusal.empty()) Fail(where + ": can_implement refuses the planned problem: " + refusal);
        if (!cs.reference) continue;
        const gpu::CutlassShape& s = plan.shape;
        const std::string key = std::to_string(s.n) + "," + std::to_string(s.h) + "," + std::to_string(s.w) + "," +
                                std::to_string(s.c) + "," + std::to_string(s.k) + "," + std::to_string(s.r) + "," +
                                std::to_string(s.s) + "," + std::to_string(s.p) + "," + std::to_string(s.q) + "," +
                                std::to_string(s.pad_h) + "," + std::to_string(s.pad_w) + "," +
                                std::to_string(s.stride_h) + "," + std::to_string(s.stride_w) + "," +
                                std::to_string(s.dilation_h) + "," + std::to_string(s.dilation_w) + "/" +
                                std::to_string(cs.g.pad_bottom) + "," + std::to_string(cs.g.pad_right);
        if (!checked.insert({static_cast<int>(plan.op), key}).second) continue;
        ++references;
        const std::string err = CheckReference(plan.op, cs.g, plan.shape, static_cast<uint32_t>(references));
        if (!err.empty()) Fail(where + ": " + err);
      }
    }
  }
  // A build without CUTLASS's kernels, and operands at addresses not 16-byte aligned: every
  // CUTLASS entry refused for them.
  for (const bool built : {false, true}) {
    gpu::GpuCall call;
    call.g = cases.front().g;
    call.aligned = false;
    for (const Direction d : {Direction::kForward, Direction::kBackpropInput, Direction::kBackpropFilter}) {
      call.direction = d;
      for (const gpu::Refusal& r : gpu::PlanGpu(call, built ? &kernels : nullptr).refused) {
        refused.insert({static_cast<int>(r.entry), static_cast<int>(r.rule)});
      }
    }
  }
  // Every entry of every direction chosen somewhere.
  const std::vector<std::pair<Direction, std::vector<Entry>>> entries = {
      {Direction::kForward, {Entry::kZero, Entry::kCutlassFprop, Entry::kDirect, Entry::kMma, Entry::kGemm}},
      {Direction::kBackpropInput,
       {Entry::kZero, Entry::kCutlassDgradUnity, Entry::kCutlassDgradStrided, Entry::kDirect, Entry::kMma,
        Entry::kGemm}},
      {Direction::kBackpropFilter, {Entry::kZero, Entry::kCutlassWgrad, Entry::kDirect, Entry::kMma, Entry::kGemm}}};
  for (const auto& [d, list] : entries) {
    for (const Entry e : list) {
      if (!chosen.count({static_cast<int>(d), static_cast<int>(e)})) {
        Fail(std::string("no case chose ") + gpu::NameOf(e) + " for " + NameOf(d));
      }
    }
  }
  // Every rule refusing each entry it can refuse, somewhere.
  std::vector<std::pair<Entry, Rule>> rules = {{Entry::kZero, Rule::kNotEmpty},
                                               {Entry::kDirect, Rule::kColumns},
                                               {Entry::kMma, Rule::kNotTensorCore},
                                               {Entry::kCutlassDgradUnity, Rule::kStrided},
                                               {Entry::kCutlassDgradStrided, Rule::kUnitStride}};
  for (const Entry e : {Entry::kCutlassFprop, Entry::kCutlassDgradUnity, Entry::kCutlassDgradStrided,
                        Entry::kCutlassWgrad}) {
    for (const Rule r : {Rule::kNoCutlass, Rule::kElementType, Rule::kLayout, Rule::kGroups, Rule::kSize,
                         Rule::kUnaligned, Rule::kCanImplement}) {
      rules.push_back({e, r});
    }
  }
  for (const auto& [e, r] : rules) {
    if (!refused.count({static_cast<int>(e), static_cast<int>(r)})) {
      Fail(std::string("no case had ") + gpu::NameOf(e) + " refused by " + gpu::NameOf(r));
    }
  }
  std::printf("mapping: %zu geometries, %d plans, %d CUTLASS problems run through CUTLASS's host reference, "
              "%zu (direction, entry) chosen, %zu (entry, rule) refusals, %d failures\n",
              cases.size(), plans, references, chosen.size(), refused.size(), failures);
  return failures == 0 ? 0 : 1;
}
