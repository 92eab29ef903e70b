// The GPU plan's executor: runs what PlanGpu (gpu_plan.h) decided, deciding nothing.
//
// Host code, TF-free and free of CUDA headers.
#ifndef TF_OPS_CC_CORE_GPU_GPU_RUN_H_
#define TF_OPS_CC_CORE_GPU_GPU_RUN_H_

#include <string>

#include "cc/core/gpu/gpu_plan.h"

namespace tf_ops {
namespace gpu {

// Runs the plan on `stream`: a and b are the direction's operands as conv_gpu.h's functions take
// them (forward x, w; backprop input w, dy; backprop filter x, dy), out its output, workspace
// plan.workspace_bytes of device memory (null where none could be had: our kernels then sum
// each output in one slice; a CUTLASS entry fails). "" or an error.
std::string RunGpuPlan(const GpuPlan& plan, const void* a, const void* b, void* out, void* workspace, Stream stream);

}  // namespace gpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_GPU_GPU_RUN_H_
