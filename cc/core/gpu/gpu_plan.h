// The GPU plan of one call, made before anything is launched: an ordered list of
// implementations (entries), each with a stable name and its rules; the first entry whose every
// rule passes runs the call, and the plan keeps every earlier entry's refusal (which rule, and
// why), its workspace and its launches. The op asks TensorFlow for the plan's workspace once and
// runs the plan (RunGpuPlan); tf_ops.explain(device="gpu") and TF_OPS_VERBOSE=1 print the plan's
// own line (DescribeGpuPlan). The executor is gpu_run.h's: it takes a plan and plans nothing.
//
// Entries, in the order they are tried:
//   gpu_zero               a tensor is empty: the output zero-filled, or nothing to do
//   cutlass_fprop          forward, CUTLASS's implicit GEMM (cutlass_conv.h)
//   cutlass_dgrad_unity    backprop input at stride 1
//   cutlass_dgrad_strided  backprop input at stride > 1
//   cutlass_wgrad          backprop filter, its reduction split in a fixed number of splits
//   gpu_direct             our direct kernel: groups of at most kDirectMaxCols output columns
//   gpu_mma                our tiled GEMM on tensor cores (half, bfloat16)
//   gpu_gemm               our tiled GEMM on CUDA cores: every problem
// (each direction lists only its own CUTLASS entry or entries). A CUTLASS entry's rules are the
// build's (it holds CUTLASS's kernels), the element type, NHWC, one group, sizes CUTLASS indexes
// with 32-bit ints, 16-byte aligned addresses, its stride rule, and last CUTLASS's own
// can_implement.
//
// Host code, TF-free and free of CUDA headers.
#ifndef TF_OPS_CC_CORE_GPU_GPU_PLAN_H_
#define TF_OPS_CC_CORE_GPU_GPU_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/conv_geometry.h"
#include "cc/core/gpu/conv_gpu.h"
#include "cc/core/gpu/conv_gpu_plan.h"
#include "cc/core/gpu/cutlass_conv.h"

namespace tf_ops {
namespace gpu {

// Entry and Rule, and their names: cc/core/vocabulary.h.
constexpr int kEntries = static_cast<int>(Entry::kCount);
constexpr int kRules = static_cast<int>(Rule::kCount);

// One call as the planner reads it.
struct GpuCall {
  Direction direction = Direction::kForward;
  Element dtype = Element::kFloat;
  ConvGeometry g;
  Layout layout = Layout::kNHWC;
  FloatMath float_math = FloatMath::kTf32x3;  // for float32 on tensor cores
  bool aligned = true;  // every operand's and the output's address a multiple of 16 bytes
};

// An entry that did not run the call: the rule that refused it, with CUTLASS's status for
// can_implement.
struct Refusal {
  Entry entry = Entry::kGemm;
  Rule rule = Rule::kNotEmpty;
  std::string detail;
};

// The split of the filter gradient's reduction (its N * P * Q values) for CUTLASS: as many
// splits as bring the launch near kWgradTargetTiles tiles of kWgradTile x kWgradTile outputs,
// at most one per kWgradSplitMin values and at most kWgradMaxSplits.
constexpr int64_t kWgradTile = 128, kWgradTargetTiles = 256, kWgradSplitMin = 2048, kWgradMaxSplits = 16;

// Bytes of each block carved from a plan's workspace, rounded up to this.
constexpr int64_t kWorkspaceAlign = 256;

struct GpuPlan {
  GpuCall call;
  Entry entry = Entry::kGemm;
  std::vector<Refusal> refused;  // the entries tried before `entry`, in order
  int64_t workspace_bytes = 0;   // asked of the op once, before the launches
  // A CUTLASS entry's operator and problem.
  CutlassOp op = CutlassOp::kFprop;
  CutlassShape shape;
  const CutlassKernels* cutlass = nullptr;
  // Our kernels' launches (gpu_direct, gpu_mma, gpu_gemm), as conv_gpu.cu makes them, and the
  // kernel they are forced to.
  Kernel kernel = Kernel::kAuto;
  std::vector<LaunchPlan> launches;
};

// The plan of `call`; `cutlass` is the build's CUTLASS kernels, or null in a build without.
GpuPlan PlanGpu(const GpuCall& call, const CutlassKernels* cutlass);

// `bytes` rounded up to a whole number of kWorkspaceAlign.
int64_t Aligned(int64_t bytes);

// Whether CUTLASS runs the entry.
bool IsCutlass(Entry entry);

// The plan as one line of key=value fields (the CPU plan's fields, device=gpu, and
// refused=entry:rule;... naming each earlier entry's refusal; CUTLASS's status after the rule
// as can_implement(Status_Text)).
std::string DescribeGpuPlan(const GpuPlan& plan);

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_GPU_PLAN_H_
