// The words every layer of tf_ops uses, each defined once: the directions of the sum, the
// element types, the layouts, the ops of the family, the CPU planner's algorithms and the GPU
// plan's entries and the rules they refuse by. The CPU and GPU cores, the TensorFlow kernels,
// the XLA lowerings and the test drivers take the enums from here; Python reads the names from
// the library (TfOpsVocabulary), so a name is written in this file and nowhere else.
//
// TF-free: depends on the C++ standard library only.
#ifndef TF_OPS_CC_CORE_VOCABULARY_H_
#define TF_OPS_CC_CORE_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <type_traits>

namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

namespace tf_ops {

// Each list is X(enumerator, name, ...): the enum's members in this order, and NameOf(value)
// giving the name.
#define TF_OPS_DIRECTIONS(X)                 \
  X(kForward, "forward")                     \
  X(kBackpropInput, "backprop_input")        \
  X(kBackpropFilter, "backprop_filter")

// Element types: (enumerator, TensorFlow's dtype name, bytes). The first three are the 16- and
// 32-bit floating types the fast kernels take; their values index the micro-kernel tables.
#define TF_OPS_ELEMENTS(X)        \
  X(kHalf, "float16", 2)          \
  X(kBFloat16, "bfloat16", 2)     \
  X(kFloat, "float32", 4)         \
  X(kDouble, "float64", 8)        \
  X(kInt32, "int32", 4)

// The C++ types of the elements, in TF_OPS_ELEMENTS' order (for explicit instantiations).
#define TF_OPS_ELEMENT_TYPES(X) X(Eigen::half) X(Eigen::bfloat16) X(float) X(double) X(int32_t)

#define TF_OPS_LAYOUTS(X) \
  X(kNHWC, "NHWC")        \
  X(kNCHW, "NCHW")

// The ops of the family, registered as "TfOps>" + name: (name, direction, depthwise).
#define TF_OPS_OPS(X)                                                \
  X(Conv2D, kForward, false)                                         \
  X(Conv2DBackpropInput, kBackpropInput, false)                      \
  X(Conv2DBackpropInputV2, kBackpropInput, false)                    \
  X(Conv2DBackpropFilter, kBackpropFilter, false)                    \
  X(Conv2DBackpropFilterV2, kBackpropFilter, false)                  \
  X(DepthwiseConv2dNative, kForward, true)                           \
  X(DepthwiseConv2dNativeBackpropInput, kBackpropInput, true)        \
  X(DepthwiseConv2dNativeBackpropFilter, kBackpropFilter, true)

// The CPU planner's algorithms (cc/core/cpu/plan.h): (enumerator, name, what it does).
#define TF_OPS_CPU_ALGORITHMS(X)                                                                  \
  X(kDirect, "direct", "the direct loops, one output element at a time (the oracle)")             \
  X(kWinograd, "winograd", "Winograd F(4x4, 3x3)")                                                \
  X(kWinogradSpaceToDepth, "winograd_space_to_depth", "strided, as Winograd over a space-to-depth copy") \
  X(kSpaceToDepth, "space_to_depth", "strided, as a stride-1 pass over a space-to-depth copy")     \
  X(kColumnsMerged, "columns_merged", "backprop input, filter columns merged into GEMM columns")   \
  X(kDepthwiseRows, "depthwise_rows", "depthwise (multiplier 1), a row of pixels per unit")        \
  X(kPointwise, "pointwise", "1x1 at stride 1 without padding: one GEMM over every pixel")         \
  X(kBanded, "banded", "GEMM over bands of rows copied per thread")                                \
  X(kBandedMerged, "banded_merged", "banded, the taps of a filter row merged into one reduction")  \
  X(kIndirect, "indirect", "implicit GEMM through an indirection table")                          \
  X(kIndirectBordered, "indirect_bordered", "indirect, over a copy of dy with bordered columns")   \
  X(kFilterGemm, "filter_gemm", "filter gradient, a GEMM per tap over (batch, rows, columns)")    \
  X(kFilterTiles, "filter_tiles", "filter gradient, bfloat16 tiles over shifted rows")             \
  X(kFilterDepthwise, "filter_depthwise", "filter gradient, depthwise vector products")            \
  X(kFilterWinograd, "filter_winograd", "filter gradient, Winograd F(4x4, 3x3)")

// The rules the CPU planner refuses an algorithm by (the names in a plan's line).
#define TF_OPS_CPU_RULES(X)                                                                       \
  X(kExactMode, "exact_mode", "exact mode: no sums of transformed values")                        \
  X(kElementType, "element_type", "the algorithm's kernels take no operands of this element type")\
  X(kNoAmx, "no_amx", "the kernel table has no AMX tiles")                                        \
  X(kShape, "shape", "the geometry is outside the algorithm's rule (plan.cc: its planner)")       \
  X(kBandCopy, "band_copy", "a band's copy would pass kMaxBandCopy elements")

// The GPU plan's entries (cc/core/gpu/gpu_plan.h), in the order they are tried.
#define TF_OPS_GPU_ENTRIES(X)                                                                      \
  X(kZero, "gpu_zero", "a tensor is empty: the output zero-filled, or nothing to do")              \
  X(kCutlassFprop, "cutlass_fprop", "forward, CUTLASS's implicit GEMM")                            \
  X(kCutlassDgradUnity, "cutlass_dgrad_unity", "backprop input at stride 1, CUTLASS")              \
  X(kCutlassDgradStrided, "cutlass_dgrad_strided", "backprop input at stride > 1, CUTLASS")        \
  X(kCutlassWgrad, "cutlass_wgrad", "backprop filter, CUTLASS, its reduction in fixed splits")     \
  X(kDirect, "gpu_direct", "our direct kernel: groups of few output columns")                      \
  X(kMma, "gpu_mma", "our tiled GEMM on tensor cores (half, bfloat16)")                            \
  X(kGemm, "gpu_gemm", "our tiled GEMM on CUDA cores: every problem")

// The rules GPU entries refuse by (the names in a plan's line).
#define TF_OPS_GPU_RULES(X)                                                                    \
  X(kNotEmpty, "not_empty", "no tensor is empty")                                              \
  X(kNoCutlass, "no_cutlass", "this build holds no CUTLASS kernels")                           \
  X(kElementType, "element_type", "CUTLASS runs half, bfloat16 and float32 only")              \
  X(kLayout, "layout", "NCHW: CUTLASS's tensors are NHWC")                                     \
  X(kGroups, "groups", "grouped or depthwise: CUTLASS's dense operators take one group")      \
  X(kSize, "size", "a tensor of 2**31 bytes or more: CUTLASS indexes with 32-bit ints")       \
  X(kUnaligned, "unaligned", "an operand's address not a multiple of 16: CUTLASS loads 128 bits") \
  X(kStrided, "strided", "a stride above 1: the strided operator's")                          \
  X(kUnitStride, "unit_stride", "stride 1: the unity operator's")                             \
  X(kCanImplement, "can_implement", "CUTLASS's can_implement refuses the problem")            \
  X(kColumns, "columns", "more than kDirectMaxCols output columns a group")                   \
  X(kNotTensorCore, "not_half", "tensor cores in our kernels take half and bfloat16 only")

#define TF_OPS_VOCABULARY_MEMBER(id, ...) id,
#define TF_OPS_VOCABULARY_NAME(id, name, ...) name,
// enum class TYPE of LIST's members, COUNT of them, and NameOf(TYPE).
#define TF_OPS_VOCABULARY_ENUM(TYPE, COUNT, LIST)                                \
  enum class TYPE : int { LIST(TF_OPS_VOCABULARY_MEMBER) };                     \
  inline constexpr const char* k##TYPE##Names[] = {LIST(TF_OPS_VOCABULARY_NAME)}; \
  inline constexpr int COUNT = static_cast<int>(sizeof(k##TYPE##Names) / sizeof(const char*)); \
  inline const char* NameOf(TYPE value) {                                       \
    const int i = static_cast<int>(value);                                      \
    return i >= 0 && i < COUNT ? k##TYPE##Names[i] : "?";                       \
  }
// The same, with a last member kCount (a list's end, or "none" where a value may be missing).
#define TF_OPS_VOCABULARY_ENUM_COUNTED(TYPE, LIST)                              \
  enum class TYPE : int { LIST(TF_OPS_VOCABULARY_MEMBER) kCount };              \
  inline constexpr const char* k##TYPE##Names[] = {LIST(TF_OPS_VOCABULARY_NAME)}; \
  inline const char* NameOf(TYPE value) {                                       \
    const int i = static_cast<int>(value);                                      \
    return i >= 0 && i < static_cast<int>(TYPE::kCount) ? k##TYPE##Names[i] : "?"; \
  }

TF_OPS_VOCABULARY_ENUM(Direction, kDirections, TF_OPS_DIRECTIONS)
TF_OPS_VOCABULARY_ENUM(Element, kElements, TF_OPS_ELEMENTS)
TF_OPS_VOCABULARY_ENUM(Layout, kLayouts, TF_OPS_LAYOUTS)

namespace cpu {
TF_OPS_VOCABULARY_ENUM_COUNTED(Algorithm, TF_OPS_CPU_ALGORITHMS)
TF_OPS_VOCABULARY_ENUM_COUNTED(Rule, TF_OPS_CPU_RULES)
}  // namespace cpu

namespace gpu {
TF_OPS_VOCABULARY_ENUM_COUNTED(Entry, TF_OPS_GPU_ENTRIES)
TF_OPS_VOCABULARY_ENUM_COUNTED(Rule, TF_OPS_GPU_RULES)
}  // namespace gpu

inline int ElementBytes(Element e) {
#define TF_OPS_VOCABULARY_BYTES(id, name, bytes) bytes,
  static const int bytes[] = {TF_OPS_ELEMENTS(TF_OPS_VOCABULARY_BYTES)};
#undef TF_OPS_VOCABULARY_BYTES
  return bytes[static_cast<int>(e)];
}

// The Element of a C++ type.
template <typename T>
constexpr Element ElementOf() {
  if constexpr (std::is_same_v<T, Eigen::half>) {
    return Element::kHalf;
  } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    return Element::kBFloat16;
  } else if constexpr (std::is_same_v<T, float>) {
    return Element::kFloat;
  } else if constexpr (std::is_same_v<T, double>) {
    return Element::kDouble;
  } else {
    static_assert(std::is_same_v<T, int>, "an element type of the family");
    return Element::kInt32;
  }
}

// The fields every plan's line starts with, CPU's and GPU's (tf_ops.explain and TF_OPS_VERBOSE
// read them): "algorithm=... [pass=...] direction=... dtype=... layout=... isa=... accuracy=...
// workspace_bytes=... work_units=..."; `pass` is left out where null.
std::string PlanLineFields(const char* algorithm, const char* pass, Direction direction, Element element,
                           Layout layout, const char* isa, const char* accuracy, int64_t workspace_bytes,
                           int64_t work_units);

// Adds one refusal to a plan's line: " refused=" before the first, ";" between them, each
// "entry:rule" or "entry:rule(detail)" (the detail's spaces as '_').
void AppendRefusal(const char* entry, const char* rule, const std::string& detail, bool first, std::string* line);

// The whole vocabulary as text, a line a word: "<list> <name>" (ops: "op <name> <direction>
// <depthwise 0|1>"); the lists direction, element, layout, op, cpu_algorithm, cpu_rule,
// gpu_entry, gpu_rule, each in its enum's order.
std::string VocabularyText();

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_VOCABULARY_H_
