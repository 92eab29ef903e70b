// The attributes of a geometry of the emulated sweep (sweep_geometries.inc), for the programs that
// read its SPEC lines: the sweep itself (gpu_sweep.cc) and the CUTLASS mapping test
// (tests/cutlass/mapping.cu).
#ifndef TF_OPS_TESTS_CUDA_EMU_SWEEP_ATTRS_H_
#define TF_OPS_TESTS_CUDA_EMU_SWEEP_ATTRS_H_

#include <cstdint>

#include "cc/core/conv_geometry.h"

namespace tf_ops {

inline ConvAttrs Attrs(int64_t sh, int64_t sw, int64_t dh, int64_t dw, Padding padding, int64_t pt = 0,
                       int64_t pb = 0, int64_t pl = 0, int64_t pr = 0) {
  ConvAttrs a;
  a.stride_rows = sh, a.stride_cols = sw, a.dilation_rows = dh, a.dilation_cols = dw;
  a.padding = padding, a.pad_top = pt, a.pad_bottom = pb, a.pad_left = pl, a.pad_right = pr;
  return a;
}

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_CUDA_EMU_SWEEP_ATTRS_H_
