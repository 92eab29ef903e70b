"""Graph-mode shape inference, with fully and partially known shapes."""
import numpy as np
import tensorflow as tf

import tf_ops

tf1 = tf.compat.v1


def _shape(t):
    return t.shape.as_list() if t.shape.rank is not None else None


class ShapeInferenceTest(tf.test.TestCase):

    def _graph(self):
        return tf.Graph().as_default()

    def test_backprop_input_four_values(self):
        with self._graph():
            w = tf1.placeholder(tf.float32, [3, 3, 3, 2])
            dy = tf1.placeholder(tf.float32, [None, 5, 5, 2])
            out = tf_ops.conv2d_backprop_input([1, 5, 5, 3], w, dy, [1, 1, 1, 1], "SAME")
            # The batch comes from out_backprop, as in TensorFlow.
            self.assertEqual(_shape(out), [None, 5, 5, 3])

    def test_backprop_input_two_values(self):
        with self._graph():
            w = tf1.placeholder(tf.float32, [3, 3, 3, 2])
            dy = tf1.placeholder(tf.float32, [None, 9, 9, 2])
            out = tf_ops.conv2d_backprop_input([9, 9], w, dy, [1, 1, 1, 1], "SAME")
            self.assertEqual(_shape(out), [None, 9, 9, 3])
            dy_nchw = tf1.placeholder(tf.float32, [None, 2, 9, 9])
            out = tf_ops.conv2d_backprop_input([9, 9], w, dy_nchw, [1, 1, 1, 1], "SAME",
                                               data_format="NCHW")
            self.assertEqual(_shape(out), [None, 3, 9, 9])

    def test_backprop_input_unknown_sizes(self):
        with self._graph():
            w = tf1.placeholder(tf.float32, [3, 3, 3, 2])
            dy = tf1.placeholder(tf.float32, [None, 9, 9, 2])
            sizes4 = tf1.placeholder(tf.int32, [4])
            self.assertEqual(_shape(tf_ops.conv2d_backprop_input(sizes4, w, dy, [1, 1, 1, 1], "SAME")),
                             [None, None, None, None])
            sizes2 = tf1.placeholder(tf.int32, [2])
            self.assertEqual(_shape(tf_ops.conv2d_backprop_input(sizes2, w, dy, [1, 1, 1, 1], "SAME")),
                             [None, None, None, 3])

    def test_backprop_input_shape_errors(self):
        with self._graph():
            w = tf1.placeholder(tf.float32, [3, 3, 3, 2])
            with self.assertRaisesRegex(ValueError, "Dimensions must be equal, but are 7 and 2"):
                tf_ops.conv2d_backprop_input([1, 5, 5, 3], w, tf1.placeholder(tf.float32, [1, 5, 5, 7]),
                                             [1, 1, 1, 1], "SAME")
            with self.assertRaisesRegex(ValueError, "must be rank 4"):
                tf_ops.conv2d_backprop_input([1, 5, 5, 3], w, tf1.placeholder(tf.float32, [5, 5, 2]),
                                             [1, 1, 1, 1], "SAME")
            with self.assertRaisesRegex(ValueError, "4 values or 2 values, but got: 3"):
                tf_ops.conv2d_backprop_input([1, 5, 5], w, tf1.placeholder(tf.float32, [1, 5, 5, 2]),
                                             [1, 1, 1, 1], "SAME")
            with self.assertRaisesRegex(ValueError, "Dimensions must be equal, but are 4 and 2"):
                tf_ops.conv2d_backprop_input([4, 5, 5, 3], w, tf1.placeholder(tf.float32, [2, 5, 5, 2]),
                                             [1, 1, 1, 1], "SAME")

    def test_v2_ops_take_the_shape_of_their_input(self):
        with self._graph():
            x = tf1.placeholder(tf.float32, [None, 6, None, 4])
            w = tf1.placeholder(tf.float32, [3, 3, 2, 6])
            dy = tf1.placeholder(tf.float32, [None, 3, None, 6])
            self.assertEqual(_shape(tf_ops.conv2d_backprop_input_v2(x, w, dy, [1, 2, 2, 1], "SAME")),
                             [None, 6, None, 4])
            self.assertEqual(_shape(tf_ops.conv2d_backprop_filter_v2(x, w, dy, [1, 2, 2, 1], "SAME")),
                             [3, 3, 2, 6])

    def test_sizes_input_ops(self):
        with self._graph():
            w = tf1.placeholder(tf.float32, [3, 3, 4, 2])
            dy = tf1.placeholder(tf.float32, [None, 4, 4, 8])
            x = tf1.placeholder(tf.float32, [None, 8, 8, 4])
            self.assertEqual(_shape(tf_ops.depthwise_conv2d_backprop_input(
                [2, 8, 8, 4], w, dy, [1, 2, 2, 1], "SAME")), [2, 8, 8, 4])
            self.assertEqual(_shape(tf_ops.depthwise_conv2d_backprop_filter(
                x, [3, 3, 4, 2], dy, [1, 2, 2, 1], "SAME")), [3, 3, 4, 2])
            self.assertEqual(_shape(tf_ops.conv2d_backprop_filter(
                x, [3, 3, 4, 8], dy, [1, 2, 2, 1], "SAME")), [3, 3, 4, 8])
            with self.assertRaisesRegex(ValueError, "must be rank 4"):
                tf_ops.depthwise_conv2d_backprop_input([8, 8], w, dy, [1, 2, 2, 1], "SAME")

    def test_forward_shapes_honour_dilation_groups_and_padding(self):
        with self._graph():
            x = tf1.placeholder(tf.float32, [None, 4, 11, 13])  # NCHW
            w = tf1.placeholder(tf.float32, [3, 3, 2, 6])         # 2 groups
            y = tf_ops.conv2d(x, w, strides=[1, 2], padding=[[0, 0], [0, 0], [1, 2], [0, 1]],
                              data_format="NCHW", dilations=[2, 3])
            # rows: (11 + 3 - 5 + 1) // 1 = 10; cols: (13 + 1 - 7 + 2) // 2 = 4
            self.assertEqual(_shape(y), [None, 6, 10, 4])
            xd = tf1.placeholder(tf.float32, [2, 9, 9, 3])
            wd = tf1.placeholder(tf.float32, [3, 3, 3, 2])
            yd = tf_ops.depthwise_conv2d_native(xd, wd, [1, 1, 2, 1], "VALID", dilations=[1, 2, 1, 1])
            # rows: 9 - 5 + 1 = 5; cols: (9 - 3 + 2) // 2 = 4; depth 3 * 2
            self.assertEqual(_shape(yd), [2, 5, 4, 6])

    def test_inferred_shapes_match_computed_shapes(self):
        # Run the graph: the static shape must equal the shape of the value.
        with self._graph():
            x = tf1.placeholder(tf.float32, [None, 4, 11, 13])
            w = tf.ones([3, 3, 2, 6])
            y = tf_ops.conv2d(x, w, strides=[1, 2], padding=[[0, 0], [0, 0], [1, 2], [0, 1]],
                              data_format="NCHW", dilations=[2, 3])
            with tf1.Session() as sess:
                value = sess.run(y, {x: np.zeros([2, 4, 11, 13], np.float32)})
            self.assertEqual(list(value.shape), [2] + _shape(y)[1:])


if __name__ == "__main__":
    tf.test.main()
