// The roofline of the CPU micro-kernels: for one kernel table, the arithmetic peak of its
// instruction set's vectors (PeakLoop, microkernels.h) and the rate of each of its float GEMM
// tiles on a long reduction, every thread of the run at once. For `python -m tf_ops bench
// --kernels`, which reads it through TfOpsCpuRoofline (conv_kernels.cc): on one machine it
// shows how close each table's tiles come to what its vectors can do, the narrower tables'
// too.
#ifndef TF_OPS_CC_CORE_CPU_ROOFLINE_H_
#define TF_OPS_CC_CORE_CPU_ROOFLINE_H_

#include <functional>
#include <string>
#include <vector>

namespace tf_ops {
namespace cpu {

struct RooflineRow {
  std::string kernel;  // "peak", or the micro-kernel and its tile: "gemm.affine 6x16"
  std::string where;   // the table entries that hold it ("gemm[1,2,3]"), or what the peak loop runs
  double gflops;       // all threads together
};

// The rows for kernel table `isa` (a value of TF_OPS_CPU_ISA), each the best of three runs of
// `seconds` / 3 on `threads` threads at once, the peak first (measured before the tiles and
// after them, the higher kept); or an error where the processor cannot run the table
// (KernelsNamed) or the arguments are out of range.
// Runs body(0), ..., body(threads - 1) each on a thread of its own, all at once, and returns when
// all have returned (the caller's threads: TensorFlow's, in the op library).
using RunTogether = std::function<void(int threads, const std::function<void(int)>& body)>;

std::string Roofline(const std::string& isa, int threads, double seconds, const RunTogether& run_together,
                     std::vector<RooflineRow>* rows);

}  // namespace cpu
}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_CPU_ROOFLINE_H_
