// The table of this build's CUTLASS kernels (cutlass_conv.h): each element type and float math
// to the set of operators instantiated in its own translation unit.
#include "cc/core/gpu/cutlass_kernels.cuh"

namespace tf_ops {
namespace gpu {
namespace {

using cutlass_conv::SetEntry;

// The set of `dtype` (and, for float, `math`); null for the types CUTLASS does not run.
const SetEntry* SetOf(Element dtype, FloatMath math) {
  static const SetEntry half = cutlass_conv::HalfEntry(), bfloat16 = cutlass_conv::BFloat16Entry(),
                        tf32 = cutlass_conv::Tf32Entry(), tf32x3 = cutlass_conv::Tf32x3Entry();
  switch (dtype) {
    case Element::kHalf: return &half;
    case Element::kBFloat16: return &bfloat16;
    case Element::kFloat: return math == FloatMath::kTf32 ? &tf32 : &tf32x3;
    default: return nullptr;
  }
}

std::string Refusal(CutlassOp op, Element dtype, FloatMath math, const CutlassShape& shape) {
  const SetEntry* set = SetOf(dtype, math);
  return set == nullptr ? "no CUTLASS kernels for this element type" : set->refusal(op, shape);
}

std::string Run(CutlassOp op, Element dtype, FloatMath math, const CutlassShape& shape, const void* a, const void* b,
                void* d, CUstream_st* stream) {
  const SetEntry* set = SetOf(dtype, math);
  return set == nullptr ? "no CUTLASS kernels for this element type" : set->run(op, shape, a, b, d, stream);
}

}  // namespace

const CutlassKernels& BuiltCutlassKernels() {
  static const CutlassKernels kernels{&Refusal, &Run};
  return kernels;
}

}  // namespace gpu
}  // namespace tf_ops
