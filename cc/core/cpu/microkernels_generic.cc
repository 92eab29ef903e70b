// The micro-kernels for any x86-64 (or other) processor, built with the baseline flags.
#define TF_OPS_ISA_NAME "generic"
#define TF_OPS_TABLE_FN GenericKernels
#define TF_OPS_PEAK_FN GenericPeakLoop
#define TF_OPS_GEMM_TILES TF_OPS_GEMM_ENTRY(4, 1, 0), TF_OPS_GEMM_ENTRY(2, 2, 0), TF_OPS_GEMM_ENTRY(2, 2, 0), \
  TF_OPS_GEMM_ENTRY(2, 2, 0)
#define TF_OPS_DW_TILES TF_OPS_DW_ENTRY(4, 1), TF_OPS_DW_ENTRY(2, 2), TF_OPS_DW_ENTRY(2, 2)
#include "cc/core/cpu/microkernels.inc"
