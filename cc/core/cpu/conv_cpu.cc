#include "cc/core/cpu/conv_cpu.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <type_traits>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/direct_loops.h"
#include "cc/core/cpu/fast_common.h"
#include "cc/core/cpu/plan.h"
#include "cc/core/switches.h"

namespace tf_ops {
namespace cpu {

void SerialFor(int64_t units, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
  if (units > 0) fn(0, units);
}

namespace {

// Why a call's workspace of `bytes` could not be had: its size, what it holds, and which
// setting needs less. (No other plan is taken instead: what a call computes, to the bit, does
// not depend on the memory free at the time.)
std::string WorkspaceShortage(const Plan& plan, int64_t bytes) {
  std::string what = plan.direction == Direction::kBackpropFilter ? "the filter gradient's float sums"
                     : plan.winograd                                  ? "the transformed filter and tiles"
                                                                      : "the packed filter";
  if (plan.layout == Layout::kNCHW) what += ", NHWC copies of the NCHW operands";
  if (plan.widen) what += ", float copies of the 16-bit operands";
  std::string out = "out of memory: cannot allocate " + std::to_string(bytes) + " bytes of workspace for the " +
                    NameOf(plan.algorithm) + " plan (" + what + "). ";
  if (plan.layout == Layout::kNCHW) out += "Tensors in NHWC need no copies; ";
  return out + "TF_OPS_CPU_KERNELS=direct runs the direct loops, which need no workspace";
}

// The plan a call runs now: PlanConv in this process's exact mode, or the direct loops where
// TF_OPS_CPU_KERNELS says so.
Plan PlanCall(Direction direction, const ConvGeometry& g, Layout layout, Element element) {
  if (DirectKernels()) return DirectPlan(direction, layout, element);
  return PlanConv(direction, g, layout, element, ExactMode());
}

// Runs one call: the plan's executor, or the direct loops `direct` where the plan is theirs.
// Under TF_OPS_VERBOSE=1, prints the plan and the call's time to stderr.
template <typename T, typename Direct>
std::string RunCall(Direction direction, const ConvGeometry& g, Layout layout, const T* a, const T* b, T* out,
                    const ParallelFor& parallel_for, const WorkspaceFn& workspace, const Direct& direct) {
  const bool verbose = Verbose();
  const auto start = std::chrono::steady_clock::now();
  const Plan plan = PlanCall(direction, g, layout, ElementOf<T>());
  switch (RunPlan(plan, g, a, b, out, parallel_for, workspace)) {
    case RunResult::kNoWorkspace:
      return WorkspaceShortage(plan, fast::ArenaBytes(plan.workspace_bytes));
    case RunResult::kDirect:
      direct();
      break;
    case RunResult::kRan:
      break;
  }
  if (verbose) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "tf_ops_verbose cpu %s time_ms=%.3f\n", DescribePlan(plan).c_str(), ms);
  }
  return "";
}
}  // namespace

std::string ExplainCpuCall(Direction direction, Element element, const ConvGeometry& g, Layout layout) {
  return DescribePlan(PlanCall(direction, g, layout, element));
}

template <typename T>
std::string ConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                        const ParallelFor& parallel_for, const WorkspaceFn& workspace) {
  return RunCall(Direction::kForward, g, layout, x, w, y, parallel_for, workspace,
          [&] { DirectConvForward(g, layout, x, w, y, parallel_for); });
}

template <typename T>
std::string ConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy, T* dx,
                              const ParallelFor& parallel_for, const WorkspaceFn& workspace) {
  return RunCall(Direction::kBackpropInput, g, layout, dy, w, dx, parallel_for, workspace,
          [&] { DirectConvBackpropInput(g, layout, w, dy, dx, parallel_for); });
}

template <typename T>
std::string ConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy, T* dw,
                               const ParallelFor& parallel_for, const WorkspaceFn& workspace) {
  return RunCall(Direction::kBackpropFilter, g, layout, x, dy, dw, parallel_for, workspace,
          [&] { DirectConvBackpropFilter(g, layout, x, dy, dw, parallel_for); });
}

#define TF_OPS_INSTANTIATE(T)                                                                    \
  template std::string ConvForward<T>(const ConvGeometry&, Layout, const T*, const T*, T*,       \
                                      const ParallelFor&, const WorkspaceFn&);                   \
  template std::string ConvBackpropInput<T>(const ConvGeometry&, Layout, const T*, const T*, T*, \
                                            const ParallelFor&, const WorkspaceFn&);             \
  template std::string ConvBackpropFilter<T>(const ConvGeometry&, Layout, const T*, const T*, T*, \
                                             const ParallelFor&, const WorkspaceFn&);             \
  template void DirectConvForward<T>(const ConvGeometry&, Layout, const T*, const T*, T*,        \
                                     const ParallelFor&);                                        \
  template void DirectConvBackpropInput<T>(const ConvGeometry&, Layout, const T*, const T*,      \
                                           T*, const ParallelFor&);                              \
  template void DirectConvBackpropFilter<T>(const ConvGeometry&, Layout, const T*,               \
                                            const T*, T*, const ParallelFor&);
TF_OPS_INSTANTIATE(float)
TF_OPS_INSTANTIATE(double)
TF_OPS_INSTANTIATE(Eigen::half)
TF_OPS_INSTANTIATE(Eigen::bfloat16)
TF_OPS_INSTANTIATE(int32_t)
#undef TF_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_ops
