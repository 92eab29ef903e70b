// The plan of one call of the CUDA kernels, as one line of key=value fields (the fields of
// the CPU plan's line, cc/core/cpu/plan.h DescribePlan, and device=gpu), for tf_ops.explain:
// the launches conv_gpu.cu makes for the geometry (PlanProblem of each of the direction's
// problems), where a workspace for their slices is had.
//
// Host code, TF-free and free of CUDA headers.
#ifndef TF_OPS_CC_CORE_GPU_GPU_EXPLAIN_H_
#define TF_OPS_CC_CORE_GPU_GPU_EXPLAIN_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/gpu/conv_gpu_plan.h"

namespace tf_ops {
namespace gpu {

// The GEMM problems a direction (0 forward, 1 backprop input, 2 backprop filter) runs over g, in
// order; none where a tensor is empty (the output is then filled with zeros, or is empty).
inline std::vector<ProblemSizes> DirectionProblems(int direction, const ConvGeometry& g) {
  if (g.input_elements() == 0 || g.filter_elements() == 0 || g.output_elements() == 0) return {};
  if (direction == 0) return {ForwardSizes(g)};
  if (direction == 2) return {FilterSizes(g)};
  std::vector<ProblemSizes> problems;
  for (const InputClass& c : InputClasses(g)) problems.push_back(c.sizes);
  return problems;
}

// dtype as tf_ops.explain numbers it: 0 half, 1 bfloat16, 2 float, 3 double, 4 int32.
inline std::string ExplainGpuCall(int direction, int dtype, const ConvGeometry& g, Layout layout) {
  static const char* const kDirections[] = {"forward", "backprop_input", "backprop_filter"};
  static const char* const kDtypes[] = {"float16", "bfloat16", "float32", "float64", "int32"};
  const bool tensor_cores = dtype <= 1;
  const int64_t acc_bytes = dtype == 3 ? 8 : 4;  // half and bfloat16 accumulate in float
  int64_t launches = 0, blocks = 0, workspace = 0, slices = 1;
  Kind kind = Kind::kDirect;
  for (const ProblemSizes& p : DirectionProblems(direction, g)) {
    if (p.M <= 0 || p.N <= 0 || p.groups <= 0) continue;
    const LaunchPlan plan = PlanProblem(p, Kernel::kAuto, tensor_cores, /*direct_slices=*/direction == 2);
    kind = plan.kind;
    ++launches, blocks += plan.blocks;
    slices = std::max(slices, plan.slices);
    workspace += plan.partial_elements(p) * acc_bytes;  // each launch's its own, held for the call
  }
  const char* algorithm = launches == 0      ? "gpu_zero"
                          : kind == Kind::kMma ? "gpu_mma"
                          : kind == Kind::kGemm ? "gpu_gemm"
                                                : "gpu_direct";
  std::string line = std::string("algorithm=") + algorithm + " direction=" + kDirections[direction] +
                     " dtype=" + kDtypes[dtype] + " layout=" + (layout == Layout::kNCHW ? "NCHW" : "NHWC") +
                     " isa=cuda accuracy=direct workspace_bytes=" + std::to_string(workspace) +
                     " work_units=" + std::to_string(blocks) + " device=gpu";
  if (launches > 0) {
    const std::string tile = kind == Kind::kDirect ? "thread_per_output"
                                                   : std::to_string(Tiling::kTileM) + "x" + std::to_string(Tiling::kTileN);
    line += " blocking=tile:" + tile + ",launches:" + std::to_string(launches) + ",slices:" + std::to_string(slices);
  }
  return line;
}

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_GPU_EXPLAIN_H_
