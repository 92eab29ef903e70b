// The micro-kernels for any x86-64 (or other) processor, built with the baseline flags.
#define TF_OPS_ISA_NAME "generic"
#define TF_OPS_TABLE_FN GenericKernels
#define TF_OPS_PEAK_FN GenericPeakLoop
// Tiles for 16 vector registers of 4 floats without fused multiply-add (SSE2): a 3 x 16 tile's
// 12 accumulators, its row of b a vector at a time and the product's temporary fit, where
// 4 x 16's 16 accumulators spilled (`bench --kernels` shows each tile against the peak loop).
#define TF_OPS_GEMM_TILES TF_OPS_GEMM_ENTRY(3, 1, 0), TF_OPS_GEMM_ENTRY(2, 2, 0), TF_OPS_GEMM_ENTRY(2, 2, 0), \
  TF_OPS_GEMM_ENTRY(2, 2, 0)
#define TF_OPS_DW_TILES TF_OPS_DW_ENTRY(2, 1), TF_OPS_DW_ENTRY(1, 2), TF_OPS_DW_ENTRY(1, 2)
#include "cc/core/cpu/microkernels.inc"
