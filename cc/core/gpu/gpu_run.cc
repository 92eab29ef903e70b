// The GPU plan's executor (gpu_run.h).
#include "cc/core/gpu/gpu_run.h"

#include <string>

#include "cc/core/gpu/conv_gpu.h"
#include "cc/core/gpu/cutlass_conv.h"

namespace tf_ops {
namespace gpu {

std::string RunGpuPlan(const GpuPlan& plan, const void* a, const void* b, void* out, void* workspace,
                       Stream stream) {
  const GpuCall& c = plan.call;
  if (IsCutlass(plan.entry)) {
    if (workspace == nullptr) return "no workspace for the CUTLASS plan";
    std::string err;
    if (plan.entry == Entry::kCutlassWgrad) {  // a = x, b = dy: CUTLASS's A is dy, its B x
      err = plan.cutlass->run(plan.op, c.dtype, c.float_math, plan.shape, b, a, workspace, stream);
      if (err.empty()) err = KrscSumsToFilter(c.dtype, c.g, static_cast<const float*>(workspace), plan.shape.split_k,
                                              out, stream);
      return err;
    }
    // Forward: a = x, b = w; backprop input: a = w, b = dy. CUTLASS takes the activation first.
    const void* w = c.direction == Direction::kForward ? b : a;
    const void* activation = c.direction == Direction::kForward ? a : b;
    err = FilterToKrsc(c.dtype, c.g, w, workspace, stream);
    if (err.empty()) err = plan.cutlass->run(plan.op, c.dtype, c.float_math, plan.shape, activation, workspace, out, stream);
    return err;
  }
  // Our kernels: the launches' slices carved from the block in launch order.
  char* next = static_cast<char*>(workspace);
  char* const end = next + (workspace == nullptr ? 0 : plan.workspace_bytes);
  const WorkspaceFn carve = [&next, end](int64_t bytes) -> void* {
    if (next == nullptr || Aligned(bytes) > end - next) return nullptr;  // beyond the plan: none
    void* block = next;
    next += Aligned(bytes);
    return block;
  };
  const Kernel kernel = plan.entry == Entry::kZero ? Kernel::kAuto : plan.kernel;
  switch (c.direction) {
    case Direction::kForward: return ConvForward(c.dtype, c.g, c.layout, a, b, out, stream, carve, kernel);
    case Direction::kBackpropInput: return ConvBackpropInput(c.dtype, c.g, c.layout, a, b, out, stream, carve, kernel);
    case Direction::kBackpropFilter: return ConvBackpropFilter(c.dtype, c.g, c.layout, a, b, out, stream, carve, kernel);
  }
  return "no such direction";
}

}  // namespace gpu
}  // namespace tf_ops
