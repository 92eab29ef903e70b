#include "cc/core/cpu/conv_cpu.h"

#include <cstdlib>
#include <cstring>

#include "Eigen/Core"  // Eigen::half and Eigen::bfloat16
#include "cc/core/cpu/conv_fast.h"
#include "cc/core/cpu/direct_loops.h"

namespace tf_ops {
namespace cpu {

void SerialFor(int64_t units, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
  if (units > 0) fn(0, units);
}

namespace {
bool DirectKernelsForced() {
  const char* v = std::getenv("TF_OPS_CPU_KERNELS");
  return v != nullptr && std::strcmp(v, "direct") == 0;
}
}  // namespace

template <typename T>
void ConvForward(const ConvGeometry& g, Layout layout, const T* x, const T* w, T* y,
                 const ParallelFor& parallel_for) {
  if (DirectKernelsForced() || !FastConvForward(g, layout, x, w, y, parallel_for)) {
    DirectConvForward(g, layout, x, w, y, parallel_for);
  }
}

template <typename T>
void ConvBackpropInput(const ConvGeometry& g, Layout layout, const T* w, const T* dy, T* dx,
                       const ParallelFor& parallel_for) {
  if (DirectKernelsForced() || !FastConvBackpropInput(g, layout, w, dy, dx, parallel_for)) {
    DirectConvBackpropInput(g, layout, w, dy, dx, parallel_for);
  }
}

template <typename T>
void ConvBackpropFilter(const ConvGeometry& g, Layout layout, const T* x, const T* dy, T* dw,
                        const ParallelFor& parallel_for) {
  if (DirectKernelsForced() || !FastConvBackpropFilter(g, layout, x, dy, dw, parallel_for)) {
    DirectConvBackpropFilter(g, layout, x, dy, dw, parallel_for);
  }
}

#define TF_OPS_INSTANTIATE(T)                                                              \
  template void ConvForward<T>(const ConvGeometry&, Layout, const T*, const T*, T*,        \
                               const ParallelFor&);                                        \
  template void ConvBackpropInput<T>(const ConvGeometry&, Layout, const T*, const T*, T*,  \
                                     const ParallelFor&);                                  \
  template void ConvBackpropFilter<T>(const ConvGeometry&, Layout, const T*, const T*, T*, \
                                      const ParallelFor&);                                  \
  template void DirectConvForward<T>(const ConvGeometry&, Layout, const T*, const T*, T*,  \
                                     const ParallelFor&);                                  \
  template void DirectConvBackpropInput<T>(const ConvGeometry&, Layout, const T*, const T*, \
                                           T*, const ParallelFor&);                        \
  template void DirectConvBackpropFilter<T>(const ConvGeometry&, Layout, const T*,         \
                                            const T*, T*, const ParallelFor&);
TF_OPS_INSTANTIATE(float)
TF_OPS_INSTANTIATE(double)
TF_OPS_INSTANTIATE(Eigen::half)
TF_OPS_INSTANTIATE(Eigen::bfloat16)
TF_OPS_INSTANTIATE(int32_t)
#undef TF_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_ops
