// The rules of tf_ops.enable(): which nodes of a TensorFlow graph become TfOps> ops, and how.
// Pure: a GraphDef in, the same GraphDef rewritten out, with a report of what became what and
// what was left alone and why. TensorFlow's registries are read (op definitions, kernels), no
// session is needed; the plugin optimizer (graph_plugin.cc) runs it over every graph TensorFlow
// optimizes while the switch is on, and the tests run it on GraphDefs directly.
//
// The rules, top to bottom, for each node:
//   1. Its op is one of the family (cc/core/vocabulary.h: TF_OPS_OPS) or a fused form the
//      remapper makes (_FusedConv2D, _FusedDepthwiseConv2dNative); any other node is not looked at.
//   2. Its device names a device type (a node that is not placed is left alone).
//   3. A fused form's fused_ops list is one of kFusedLists, with as many args as the list takes
//      and no host args; it unfolds into the TfOps op followed by the stock ops the list stands
//      for (BiasAdd, AddV2, FusedBatchNormV3, the activation), the last named as the fused node.
//   4. Every node it becomes is valid for its op definition (attributes, their types and allowed
//      values, the number of inputs: TensorFlow's ValidateNodeDef), the convolution's attributes
//      pass the checks its kernel makes when constructed (conv_checks.h: ParseAttrs), and a kernel
//      is registered for each on the node's device type with its dtype (TensorFlow's FindKernelDef).
// A node that fails any rule is left exactly as it was. The rewrite keeps node names, devices and
// control inputs, and is idempotent: TfOps> ops and the stock ops it emits match no rule.
#ifndef TF_OPS_CC_KERNELS_GRAPH_REWRITE_H_
#define TF_OPS_CC_KERNELS_GRAPH_REWRITE_H_

#include <string>
#include <vector>

#include "tensorflow/core/framework/graph.pb.h"

namespace tf_ops {

// What the rewrite did with one node it looked at (rule 1 held).
struct RewriteEntry {
  std::string node;                // the node's name
  std::string op;                  // its op before
  std::vector<std::string> became;  // the ops it became, the TfOps op first; empty where left alone
  std::string rule;                // where left alone: the rule that refused (device, fused_ops, node_def, kernel)
  std::string detail;              // and why, in words
};

struct RewriteReport {
  std::vector<RewriteEntry> entries;
  int rewritten() const;
  // One line an entry: "rewrote NAME OP -> TfOps>Conv2D+BiasAdd+Relu" or
  // "kept NAME OP: RULE (DETAIL)".
  std::string Text() const;
};

// Rewrites `graph` in place (its library's functions are not looked at: TensorFlow optimizes
// each function's graph on its own); returns what it did.
RewriteReport RewriteGraph(::tensorflow::GraphDef* graph);

}  // namespace tf_ops

#endif  // TF_OPS_CC_KERNELS_GRAPH_REWRITE_H_
