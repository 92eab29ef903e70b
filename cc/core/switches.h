// The process-wide switches every call reads, each read from its environment variable once, when
// the library is loaded, and settable at run time (tf_ops.set_exact_mode, the tests' switches);
// a call reads them once, when it starts, and keeps what it read until it returns.
//   exact mode      TF_OPS_EXACT=1: every output element the direct sum of its products (no
//                   Winograd on CPU; no TF32 on the GPU's tensor cores)
//   direct kernels  TF_OPS_CPU_KERNELS=direct: the CPU kernels run the direct loops, the oracle
//   verbose         TF_OPS_VERBOSE=1: each call prints its plan (and on CPU its time) to stderr
//   plan cache      on unless TF_OPS_PLAN_CACHE=0: an op keeps its CPU calls' plans by
//                   geometry (cpu::PlanCache); off, every call plans again
//   rewrite         TF_OPS_ENABLE=1 (tf_ops.enable()): the graph rewrite's optimizer, once
//                   registered (cc/kernels/graph_plugin.cc), moves the graphs TensorFlow optimizes
//                   onto the TfOps> ops; read each time it runs
//
// TF-free.
#ifndef TF_OPS_CC_CORE_SWITCHES_H_
#define TF_OPS_CC_CORE_SWITCHES_H_

namespace tf_ops {

bool ExactMode();
void SetExactMode(bool on);

bool DirectKernels();
void SetDirectKernels(bool on);

bool Verbose();
void SetVerbose(bool on);

bool PlanCacheOn();
void SetPlanCache(bool on);

bool Rewriting();
void SetRewriting(bool on);

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_SWITCHES_H_
