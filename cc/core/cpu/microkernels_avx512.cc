// The micro-kernels for AVX-512 (F, VL, BW, DQ) with FMA and F16C (32 zmm registers), built
// with those flags. setup.py compiles this file with -mavx512f -mavx512vl -mavx512bw
// -mavx512dq -mfma -mf16c; Kernels() calls it only where the processor and OS support them.
#define TF_OPS_ISA_NAME "avx512"
#define TF_OPS_TABLE_FN Avx512Kernels
#define TF_OPS_PEAK_FN Avx512PeakLoop
#define TF_OPS_GEMM_TILES TF_OPS_GEMM_ENTRY(14, 1, 24), TF_OPS_GEMM_ENTRY(12, 2, 0), \
  TF_OPS_GEMM_ENTRY(6, 4, 0), TF_OPS_GEMM_ENTRY(8, 3, 0)
#define TF_OPS_DW_TILES TF_OPS_DW_ENTRY(12, 1), TF_OPS_DW_ENTRY(12, 2), TF_OPS_DW_ENTRY(6, 4)
#define TF_OPS_DW_ROWS 1
#include "cc/core/cpu/microkernels.inc"
