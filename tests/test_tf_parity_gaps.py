"""Where TensorFlow's own convolution tests found our behaviour differing from TensorFlow's:
extra batch dimensions, graph-time shape checks, and empty operands."""
import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import reference

tf1 = tf.compat.v1


def folded_reference(x, w, strides, padding, data_format="NHWC"):
    """The float64 reference of conv2d over leading batch dimensions, folded by hand."""
    x = np.asarray(x, np.float64)
    flat = x.reshape((-1,) + x.shape[-3:])
    out = reference.conv2d(flat, np.asarray(w, np.float64), strides, padding, data_format=data_format)
    return out.reshape(x.shape[:-3] + out.shape[1:])


class BatchDimsTest(tf.test.TestCase):
    """tf.nn.conv2d takes inputs of rank 5 and more: every dimension before the last three
    is a batch dimension. Of TensorFlow 2.21's functions of the family only conv2d does; the
    others' kernels take rank 4 (and return wrongly shaped results for rank 5 instead of an
    error), so ours reject other ranks with an InvalidArgumentError."""

    def setUp(self):
        self.rng = np.random.default_rng(11)

    def rand(self, shape):
        return tf.constant(self.rng.uniform(-1, 1, size=shape).astype(np.float32))

    def test_matches_tensorflow_and_reference_eagerly(self):
        cases = [([2, 5, 7, 6, 3], [3, 3, 3, 4], [1, 1, 1, 1], "SAME", "NHWC"),
                 ([2, 5, 2, 3, 3], [1, 1, 3, 3], [1, 1, 1, 1], "VALID", "NHWC"),
                 ([3, 1, 2, 9, 8, 2], [2, 3, 2, 5], [1, 2, 1, 1], "SAME", "NHWC"),
                 ([2, 3, 4, 9, 8], [3, 3, 4, 2], [1, 1, 2, 2], "VALID", "NCHW")]
        for x_shape, w_shape, strides, padding, fmt in cases:
            with self.subTest(x=x_shape, fmt=fmt):
                x, w = self.rand(x_shape), self.rand(w_shape)
                ours = tf_ops.conv2d(x, w, strides, padding, data_format=fmt)
                expected = folded_reference(x, w, strides, padding, fmt)
                self.assertEqual(ours.shape, expected.shape)
                self.assertAllClose(ours, expected, atol=1e-4, rtol=1e-4)
                if fmt == "NHWC":  # TensorFlow's CPU Conv2D refuses NCHW
                    self.assertAllClose(ours, tf.nn.conv2d(x, w, strides, padding), atol=1e-5, rtol=1e-5)

    def test_unknown_batch_dims_in_tf_function_and_graph(self):
        w = self.rand([3, 3, 3, 4])
        x = self.rand([2, 5, 6, 6, 3])
        expected = folded_reference(x, w, [1, 1, 1, 1], "SAME")

        @tf.function(input_signature=[tf.TensorSpec([None, None, 6, 6, 3])])
        def fn(t):
            return tf_ops.conv2d(t, w, 1, "SAME")

        self.assertEqual(fn.get_concrete_function().structured_outputs.shape.as_list(),
                         [None, None, 6, 6, 4])
        self.assertAllClose(fn(x), expected, atol=1e-4, rtol=1e-4)
        with tf.Graph().as_default():
            p = tf1.placeholder(tf.float32, [None, 5, None, 6, 3])
            y = tf_ops.conv2d(p, w.numpy(), [1, 1, 1, 1], "SAME")
            self.assertEqual(y.shape.as_list(), [None, 5, None, 6, 4])
            with tf1.Session() as sess:
                self.assertAllClose(sess.run(y, {p: x.numpy()}), expected, atol=1e-4, rtol=1e-4)

    def test_unknown_rank_goes_to_the_op(self):
        w = self.rand([3, 3, 3, 4])

        @tf.function(input_signature=[tf.TensorSpec(None)])
        def fn(t):
            return tf_ops.conv2d(t, w, 1, "SAME")

        x = self.rand([2, 6, 6, 3])
        self.assertAllClose(fn(x), folded_reference(x, w, [1, 1, 1, 1], "SAME"), atol=1e-4, rtol=1e-4)

    def test_empty_batch_and_inner_dims(self):
        w = self.rand([3, 3, 3, 4])
        for shape, out in (([2, 0, 6, 6, 3], [2, 0, 6, 6, 4]), ([2, 5, 0, 6, 3], [2, 5, 0, 6, 4])):
            with self.subTest(shape=shape):
                y = tf_ops.conv2d(tf.zeros(shape), w, 1, "SAME")
                self.assertEqual(y.shape.as_list(), out)

    def test_gradients_match_tensorflow(self):
        x, w = self.rand([2, 3, 6, 5, 3]), self.rand([3, 3, 3, 4])
        grads = []
        for fn in (tf_ops.conv2d, tf.nn.conv2d):
            with tf.GradientTape() as tape:
                tape.watch([x, w])
                loss = tf.reduce_sum(fn(x, w, 2, "SAME") ** 2)
            grads.append(tape.gradient(loss, [x, w]))
        for ours, theirs in zip(*grads):
            self.assertAllClose(ours, theirs, atol=1e-3, rtol=1e-4)

    def test_lower_ranks_and_other_functions_reject_with_an_error(self):
        w = self.rand([3, 3, 3, 4])
        # TensorFlow's Conv2D aborts the process on a rank-3 input (a CHECK in
        # tensor_format.h); ours raises.
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "input must be 4-dimensional"):
            tf_ops.conv2d(self.rand([6, 6, 3]), w, 1, "SAME")
        x5, dy5 = self.rand([2, 5, 6, 6, 3]), self.rand([2, 5, 6, 6, 4])
        calls = {
            "conv2d_transpose": lambda: tf_ops.conv2d_transpose(dy5, w, [2, 5, 6, 6, 3], 1),
            "conv2d_backprop_filter": lambda: tf_ops.conv2d_backprop_filter(
                x5, [3, 3, 3, 4], dy5, [1, 1, 1, 1], "SAME"),
            "depthwise_conv2d_native": lambda: tf_ops.depthwise_conv2d_native(
                x5, self.rand([3, 3, 3, 1]), [1, 1, 1, 1], "SAME"),
        }
        for name, call in calls.items():
            with self.subTest(fn=name):
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "4-dimensional|4 values|4 elements"):
                    call()


if __name__ == "__main__":
    tf.test.main()
