// The GPU planner (gpu_plan.h).
#include "cc/core/gpu/gpu_plan.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace tf_ops {
namespace gpu {

namespace {

// The GEMM problems our kernels run for the call, in order (conv_gpu.cu's): none where a
// tensor is empty.
std::vector<ProblemSizes> OurProblems(const GpuCall& c) {
  if (EmptyRule(c.direction, c.g) != EmptyCall::kCompute) return {};
  if (c.direction == Direction::kForward) return {ForwardSizes(c.g)};
  if (c.direction == Direction::kBackpropFilter) return {FilterSizes(c.g)};
  std::vector<ProblemSizes> problems;
  for (const InputClass& ic : InputClasses(c.g)) problems.push_back(ic.sizes);
  return problems;
}

// Output columns a group, as our kernels' problems have them.
int64_t ColumnsOf(const GpuCall& c) {
  return c.direction == Direction::kBackpropInput ? c.g.filter_in_depth : c.g.out_depth_per_group();
}

bool TensorCoreType(Element dtype) { return dtype == Element::kHalf || dtype == Element::kBFloat16; }

// The CUTLASS operator of an entry.
CutlassOp OpOf(Entry entry) {
  switch (entry) {
    case Entry::kCutlassDgradUnity: return CutlassOp::kDgradUnity;
    case Entry::kCutlassDgradStrided: return CutlassOp::kDgradStrided;
    case Entry::kCutlassWgrad: return CutlassOp::kWgrad;
    default: return CutlassOp::kFprop;
  }
}

int64_t WgradSplits(const ConvGeometry& g) {
  const int64_t tiles = CeilDiv(g.out_depth, kWgradTile) * CeilDiv(g.filter_rows * g.filter_cols * g.in_depth, kWgradTile);
  const int64_t reduction = g.batch * g.out_rows * g.out_cols;
  int64_t splits = std::min({kWgradMaxSplits, std::max<int64_t>(1, kWgradTargetTiles / tiles),
                             std::max<int64_t>(1, reduction / kWgradSplitMin)});
  return std::max<int64_t>(1, splits);
}

// The entries of a direction, in the order they are tried.
std::vector<Entry> EntriesOf(Direction d) {
  switch (d) {
    case Direction::kForward: return {Entry::kZero, Entry::kCutlassFprop, Entry::kDirect, Entry::kMma, Entry::kGemm};
    case Direction::kBackpropInput:
      return {Entry::kZero, Entry::kCutlassDgradUnity, Entry::kCutlassDgradStrided, Entry::kDirect, Entry::kMma,
              Entry::kGemm};
    case Direction::kBackpropFilter: return {Entry::kZero, Entry::kCutlassWgrad, Entry::kDirect, Entry::kMma, Entry::kGemm};
  }
  return {Entry::kGemm};
}

// The first rule of `entry` that refuses `c`, or none (rule kCount).
Refusal Check(Entry entry, const GpuCall& c, const CutlassKernels* cutlass) {
  Refusal r;
  r.entry = entry;
  r.rule = Rule::kCount;
  auto refuse = [&](Rule rule, std::string detail = "") {
    r.rule = rule, r.detail = std::move(detail);
    return r;
  };
  const ConvGeometry& g = c.g;
  if (entry == Entry::kZero) return EmptyRule(c.direction, g) != EmptyCall::kCompute ? r : refuse(Rule::kNotEmpty);
  if (IsCutlass(entry)) {
    if (cutlass == nullptr) return refuse(Rule::kNoCutlass);
    if (!TensorCoreType(c.dtype) && c.dtype != Element::kFloat) return refuse(Rule::kElementType);
    if (c.layout != Layout::kNHWC) return refuse(Rule::kLayout);
    if (g.groups != 1) return refuse(Rule::kGroups);
    constexpr int64_t kLimit = int64_t{1} << 31;
    const int64_t bytes = ElementBytes(c.dtype);
    if (g.input_elements() >= kLimit / bytes || g.output_elements() >= kLimit / bytes ||
        g.filter_elements() >= kLimit / 4) {
      return refuse(Rule::kSize);
    }
    if (!c.aligned) return refuse(Rule::kUnaligned);
    const bool strided = g.stride_rows > 1 || g.stride_cols > 1;
    if (entry == Entry::kCutlassDgradUnity && strided) return refuse(Rule::kStrided);
    if (entry == Entry::kCutlassDgradStrided && !strided) return refuse(Rule::kUnitStride);
    const int64_t splits = entry == Entry::kCutlassWgrad ? WgradSplits(g) : 1;
    const std::string status = cutlass->refusal(OpOf(entry), c.dtype, c.float_math, CutlassShapeOf(g, splits));
    return status.empty() ? r : refuse(Rule::kCanImplement, status);
  }
  if (entry == Entry::kDirect) return ColumnsOf(c) <= kDirectMaxCols ? r : refuse(Rule::kColumns);
  if (entry == Entry::kMma) return TensorCoreType(c.dtype) ? r : refuse(Rule::kNotTensorCore);
  return r;  // gpu_gemm: every problem
}

}  // namespace

int64_t Aligned(int64_t bytes) { return CeilDiv(bytes, kWorkspaceAlign) * kWorkspaceAlign; }

bool IsCutlass(Entry entry) {
  return entry == Entry::kCutlassFprop || entry == Entry::kCutlassDgradUnity ||
         entry == Entry::kCutlassDgradStrided || entry == Entry::kCutlassWgrad;
}

GpuPlan PlanGpu(const GpuCall& call, const CutlassKernels* cutlass) {
  GpuPlan plan;
  plan.call = call;
  for (const Entry entry : EntriesOf(call.direction)) {
    Refusal r = Check(entry, call, cutlass);
    if (r.rule != Rule::kCount) {
      plan.refused.push_back(std::move(r));
      continue;
    }
    plan.entry = entry;
    break;
  }
  const ConvGeometry& g = call.g;
  if (IsCutlass(plan.entry)) {
    plan.cutlass = cutlass;
    plan.op = OpOf(plan.entry);
    if (plan.entry == Entry::kCutlassWgrad) {
      plan.shape = CutlassShapeOf(g, WgradSplits(g));
      plan.workspace_bytes = Aligned(plan.shape.split_k * g.filter_elements() * 4);
    } else {
      plan.shape = CutlassShapeOf(g);
      plan.workspace_bytes = Aligned(g.filter_elements() * ElementBytes(call.dtype));
    }
    return plan;
  }
  if (plan.entry == Entry::kZero) return plan;
  plan.kernel = plan.entry == Entry::kDirect ? Kernel::kDirect : Kernel::kGemm;
  const int64_t acc_bytes = call.dtype == Element::kDouble ? 8 : 4;  // half and bfloat16 sum in float
  for (const ProblemSizes& p : OurProblems(call)) {
    if (p.M <= 0 || p.N <= 0 || p.groups <= 0) continue;
    const LaunchPlan launch =
        PlanProblem(p, plan.kernel, TensorCoreType(call.dtype), /*direct_slices=*/call.direction == Direction::kBackpropFilter);
    plan.launches.push_back(launch);
    plan.workspace_bytes += Aligned(launch.partial_elements(p) * acc_bytes);
  }
  return plan;
}

std::string DescribeGpuPlan(const GpuPlan& plan) {
  const GpuCall& c = plan.call;
  const bool cutlass = IsCutlass(plan.entry);
  const char* accuracy = cutlass && c.dtype == Element::kFloat
                             ? (c.float_math == FloatMath::kTf32 ? "tf32" : "tf32x3")
                             : "direct";
  int64_t blocks = 0, slices = 1;
  for (const LaunchPlan& l : plan.launches) blocks += l.blocks, slices = std::max(slices, l.slices);
  std::string line = PlanLineFields(NameOf(plan.entry), nullptr, c.direction, c.dtype, c.layout, "cuda", accuracy,
                                    plan.workspace_bytes, blocks) +
                     " device=gpu";
  if (cutlass) {
    line += " blocking=split_k:" + std::to_string(plan.shape.split_k);
  } else if (!plan.launches.empty()) {
    const std::string tile = plan.entry == Entry::kDirect
                                 ? "thread_per_output"
                                 : std::to_string(Tiling::kTileM) + "x" + std::to_string(Tiling::kTileN);
    line += " blocking=tile:" + tile + ",launches:" + std::to_string(plan.launches.size()) +
            ",slices:" + std::to_string(slices);
  }
  for (size_t i = 0; i < plan.refused.size(); ++i) {
    const Refusal& r = plan.refused[i];
    AppendRefusal(NameOf(r.entry), NameOf(r.rule), r.detail, i == 0, &line);
  }
  return line;
}

}  // namespace gpu
}  // namespace tf_ops
