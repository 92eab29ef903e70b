// tf_ops from C++: a transposed convolution (Conv2DBackpropInput) built with tf_ops' op
// classes next to TensorFlow's built-in one, the same in NCHW (TensorFlow's native CPU kernel
// takes only NHWC), and gradients through both with AddSymbolicGradients. Runs the graph in
// a tensorflow::Session and checks that the results agree. Exits 1 if they do not.
// Build command: see cc/ops/tf_ops_ops.h.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cc/ops/tf_ops_ops.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/ops/standard_ops.h"
#include "tensorflow/core/public/session.h"

namespace tfo = tf_ops::ops;
using namespace tensorflow;  // NOLINT: an example reads better with short names.

// Largest |a - b| over two tensors of the same shape.
float MaxDiff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  float diff = 0;
  for (int64_t i = 0; i < a.NumElements(); ++i) {
    diff = std::fmax(diff, std::fabs(a.flat<float>()(i) - b.flat<float>()(i)));
  }
  return diff;
}

Tensor Pattern(const TensorShape& shape, float scale) {
  Tensor t(DT_FLOAT, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.flat<float>()(i) = std::sin(scale * i);
  return t;
}

int main() {
  TF_CHECK_OK(tfo::CheckOpsRegistered());
  Scope root = Scope::NewRootScope();

  // Upsample x [1, 4, 4, 3] to [1, 8, 8, 2] with a 3x3 filter and stride 2.
  auto x = ops::Const(root, Pattern({1, 4, 4, 3}, 0.37f));
  auto w = ops::Const(root, Pattern({3, 3, 2, 3}, 0.91f));
  auto sizes = ops::Const(root, {1, 8, 8, 2});
  auto ours = tfo::Conv2DBackpropInput(root, sizes, w, x, {1, 2, 2, 1}, "SAME");
  auto theirs = ops::Conv2DBackpropInput(root, sizes, w, x, {1, 2, 2, 1}, "SAME");

  // The same in NCHW, transposed back to NHWC to compare.
  auto x_nchw = ops::Transpose(root, x, {0, 3, 1, 2});
  auto ours_nchw = tfo::Conv2DBackpropInput(root, {1, 2, 8, 8}, w, x_nchw, {1, 1, 2, 2}, "SAME",
                                            tfo::Conv2DBackpropInput::DataFormat("NCHW"));
  auto ours_nchw_as_nhwc = ops::Transpose(root, ours_nchw, {0, 2, 3, 1});
  TF_CHECK_OK(root.status());

  // d(sum of outputs)/d(filter, x), through tf_ops' gradients and through TensorFlow's.
  std::vector<Output> our_grads, their_grads;
  TF_CHECK_OK(AddSymbolicGradients(root, {ours}, {w, x}, &our_grads));
  TF_CHECK_OK(AddSymbolicGradients(root, {theirs}, {w, x}, &their_grads));

  // Run the graph once, fetching every result to compare.
  const std::vector<Output> fetches = {ours,           theirs,         ours_nchw_as_nhwc,
                                       our_grads[0],   their_grads[0], our_grads[1],
                                       their_grads[1]};
  std::vector<std::string> names;
  for (const Output& f : fetches) names.push_back(f.name());
  GraphDef graph;
  TF_CHECK_OK(root.ToGraphDef(&graph));
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_CHECK_OK(session->Create(graph));
  std::vector<Tensor> out;
  TF_CHECK_OK(session->Run({}, names, {}, &out));

  std::printf("%s -> %s\n", ours.node()->type_string().c_str(),
              out[0].shape().DebugString().c_str());
  const float diffs[] = {MaxDiff(out[0], out[1]), MaxDiff(out[2], out[1]),
                         MaxDiff(out[3], out[4]), MaxDiff(out[5], out[6])};
  const char* what[] = {"tf_ops vs TensorFlow", "tf_ops NCHW vs TensorFlow NHWC",
                        "d/filter tf_ops vs TensorFlow", "d/x tf_ops vs TensorFlow"};
  bool ok = true;
  for (int i = 0; i < 4; ++i) {
    std::printf("%-32s max |diff| = %.2e\n", what[i], diffs[i]);
    ok = ok && diffs[i] <= 1e-4f;
  }
  std::printf(ok ? "tf_ops example: OK\n" : "tf_ops example: MISMATCH\n");
  return ok ? 0 : 1;
}
