// The CUTLASS convolutions of one element type and float math (cutlass_kernels.cuh): a
// translation unit of their own, so that the build compiles the sets in parallel.
#include "cc/core/gpu/cutlass_kernels.cuh"

TF_OPS_CUTLASS_SET(Tf32x3Entry, Tf32x3Set)
