// The micro-kernels for AVX2 + FMA + F16C (16 ymm registers), built with those flags.
// setup.py compiles this file with -mavx2 -mfma -mf16c; Kernels() calls it only where the
// processor has all three.
#define TF_OPS_ISA_NAME "avx2"
#define TF_OPS_TABLE_FN Avx2Kernels
#define TF_OPS_PEAK_FN Avx2PeakLoop
#define TF_OPS_GEMM_TILES TF_OPS_GEMM_ENTRY(6, 1, 0), TF_OPS_GEMM_ENTRY(3, 2, 0), TF_OPS_GEMM_ENTRY(3, 2, 0), \
  TF_OPS_GEMM_ENTRY(3, 2, 0)
#define TF_OPS_DW_TILES TF_OPS_DW_ENTRY(6, 1), TF_OPS_DW_ENTRY(3, 2), TF_OPS_DW_ENTRY(3, 2)
#include "cc/core/cpu/microkernels.inc"
