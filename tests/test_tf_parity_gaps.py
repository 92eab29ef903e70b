"""Where TensorFlow's own convolution tests found our behaviour differing from TensorFlow's:
extra batch dimensions, graph-time shape checks, and empty operands."""
import re

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
    others' kernels take rank 4 (and accept rank 5 without an error, most returning wrongly
    shaped results), so ours reject other ranks with an InvalidArgumentError."""

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


def _graph_error(fn, shapes, **attrs):
    """The message fn raises while a graph is built from placeholders of `shapes` (None: an
    unknown rank), without its node description; None where it builds."""
    with tf.Graph().as_default():
        inputs = [tf1.placeholder(tf.float32, shape) for shape in shapes]
        try:
            fn(*inputs, **attrs)
        except ValueError as e:
            return str(e).split(" for '")[0]
    return None


def _graph_shape(fn, shapes, **attrs):
    with tf.Graph().as_default():
        out = fn(*[tf1.placeholder(tf.float32, shape) for shape in shapes], **attrs)
        return None if out.shape.rank is None else out.shape.as_list()


_LIB = tf.load_op_library(tf_ops.library_path())
FORWARD = {
    "Conv2D": (lambda x, w, **a: tf.raw_ops.Conv2D(input=x, filter=w, **a),
               lambda x, w, **a: _LIB.tf_ops_conv2d(input=x, filter=w, **a)),
    "DepthwiseConv2dNative": (lambda x, w, **a: tf.raw_ops.DepthwiseConv2dNative(input=x, filter=w, **a),
                              lambda x, w, **a: _LIB.tf_ops_depthwise_conv2d_native(input=x, filter=w, **a)),
}


class GraphShapeTest(tf.test.TestCase):
    """In a graph, the forward ops reject at construction what TensorFlow's reject, with
    TensorFlow's message, and infer the same shapes from partially known ones. The backprop
    ops' shape functions were TensorFlow's already; the V2 ops check what the V1 ops check."""

    def test_rejects_what_tensorflow_rejects(self):
        base = dict(strides=[1, 1, 1, 1], padding="VALID", dilations=[1, 1, 1, 1])
        x, unknown_hw = [2, 8, 8, 4], [2, None, None, 4]
        cases = [
            ("strides of 3 values", x, None, dict(base, strides=[1, 1, 1])),
            ("dilations of 3 values", x, None, dict(base, dilations=[1, 1, 1])),
            ("6 explicit paddings", x, None, dict(base, padding="EXPLICIT", explicit_paddings=[0] * 6)),
            ("negative batch padding", x, None,
             dict(base, padding="EXPLICIT", explicit_paddings=[-1, 0, 0, 0, 0, 0, 0, 0])),
            ("depth padding", x, None, dict(base, padding="EXPLICIT", explicit_paddings=[0, 0, 0, 0, 0, 0, 1, 0])),
            ("explicit paddings with SAME", x, None, dict(base, padding="SAME", explicit_paddings=[0] * 8)),
            ("a window larger than the input", [2, 4, 4, 4], [5, 5], base),
            ("stride 0, unknown spatial dims", unknown_hw, None, dict(base, strides=[1, 0, 1, 1])),
            ("dilation 0, unknown spatial dims", unknown_hw, None, dict(base, dilations=[1, 1, 0, 1])),
        ]
        conv_only = [
            ("input depth 3, filter depth 2", [32, 20, 20, 3], [4, 4, 2, 2], base),
            ("output depth 3 in 2 groups", [2, 8, 8, 4], [3, 3, 2, 3], base),
            ("filter depth 0", [2, 8, 8, 4], [3, 3, 0, 4], base),
        ]
        depthwise_only = [("input depth 4, filter depth 3", [2, 8, 8, 4], [3, 3, 3, 1], base)]
        checked = 0
        for op, (theirs, ours) in FORWARD.items():
            extra = conv_only if op == "Conv2D" else depthwise_only
            for name, x_shape, window, attrs in cases + extra:
                w_shape = window if window is None or len(window) == 4 else window + [4, 2]
                if w_shape is None:
                    w_shape = [3, 3, 4, 2] if op == "Conv2D" else [3, 3, 4, 1]
                with self.subTest(op=op, case=name):
                    expected = _graph_error(theirs, [x_shape, w_shape], **attrs)
                    self.assertIsNotNone(expected, "TensorFlow accepts this case")
                    self.assertEqual(_graph_error(ours, [x_shape, w_shape], **attrs), expected)
                    checked += 1
        self.assertEqual(checked, 2 * len(cases) + len(conv_only) + len(depthwise_only))

    def test_partially_known_shapes_infer_what_tensorflow_infers(self):
        attrs = dict(strides=[1, 2, 1, 1], padding="SAME", dilations=[1, 1, 2, 1])
        for op, (theirs, ours) in FORWARD.items():
            w = [3, 3, 4, 2] if op == "Conv2D" else [3, 3, 4, 1]
            for x_shape, w_shape in (([None, 9, None, 4], w), ([2, None, 9, None], w), (None, w),
                                     ([2, 9, 9, 4], None), ([2, 9, 9, 4], [None, 3, None, None])):
                with self.subTest(op=op, x=x_shape, w=w_shape):
                    self.assertEqual(_graph_shape(ours, [x_shape, w_shape], **attrs),
                                     _graph_shape(theirs, [x_shape, w_shape], **attrs))
        # Groups and dilations, which the inference honours like TensorFlow's.
        self.assertEqual(_graph_shape(FORWARD["Conv2D"][1], [[2, 8, 12, 12], [3, 3, 4, 6]],
                                      strides=[1, 1, 2, 1], padding="EXPLICIT", data_format="NCHW",
                                      explicit_paddings=[0, 0, 0, 0, 1, 2, 0, 1], dilations=[1, 1, 1, 2]),
                         [2, 6, 7, 9])

    def test_v2_ops_check_what_the_v1_ops_check(self):
        ops = {
            "input_v2": lambda x, w, dy: _LIB.tf_ops_conv2d_backprop_input_v2(
                input=x, filter=w, out_backprop=dy, strides=[1, 1, 1, 1], padding="SAME"),
            "filter_v2": lambda x, w, dy: _LIB.tf_ops_conv2d_backprop_filter_v2(
                input=x, filter=w, out_backprop=dy, strides=[1, 1, 1, 1], padding="SAME"),
        }
        bad = {
            "filter rank 3": ([2, 8, 8, 4], [3, 3, 4], [2, 8, 8, 6], "rank 4"),
            "out_backprop rank 3": ([2, 8, 8, 4], [3, 3, 4, 6], [2, 8, 8], "rank 4"),
            "out_backprop depth 5, filter out depth 6": ([2, 8, 8, 4], [3, 3, 4, 6], [2, 8, 8, 5],
                                                         "Dimensions must be equal, but are 5 and 6"),
            "batch 3 against 2": ([3, 8, 8, 4], [3, 3, 4, 6], [2, 8, 8, 6], "Dimensions must be equal"),
        }
        for op, fn in ops.items():
            for name, (x, w, dy, message) in bad.items():
                with self.subTest(op=op, case=name):
                    self.assertIn(message, _graph_error(fn, [x, w, dy]) or "(built)")
            self.assertEqual(_graph_shape(fn, [[None, 8, 8, 4], [3, 3, 4, None], [2, 8, 8, 6]]),
                             [2, 8, 8, 4] if op == "input_v2" else [3, 3, 4, 6])


class EmptyOperandTest(tf.test.TestCase):
    """What an empty operand does, per op (float32, NHWC, stride 1, VALID unless said; the
    base case is input [1, 4, 4, 2], filter [2, 2, 2, 3] or depthwise [2, 2, 2, 1]), measured
    on TensorFlow 2.21 with its native kernels (oneDNN off) and with oneDNN (the default):

    op                      empty operand                 TF native        TF oneDNN          tf_ops
    Conv2D                  filter rows or cols 0         error (1)        error (1)          error (1)
                            filter in-depth 0             error            error (1)          error
                            filter out-depth 0            empty [1,3,3,0]  error (1)          empty
                            input batch 0                 empty [0,3,3,3]  [0,4,4,2] (2)      empty [0,3,3,3]
                            input rows 0, SAME            empty [1,0,4,3]  [1,0,4,2] (2)      empty [1,0,4,3]
                            input rows 0, VALID           error (3)        error (3)          error (3)
                            input rows 1 < filter rows 2  empty [1,0,3,3]  garbage (2)        empty [1,0,3,3]
    DepthwiseConv2dNative   filter rows or cols 0         zeros            error (1)          zeros
                            multiplier 0                  empty            error (1)          empty
                            input batch 0, rows 0 SAME    empty            empty, wrong dims  empty
                            input rows 1 < filter rows 2  empty            garbage (2)        empty
    Conv2DBackpropInput,    filter rows, cols or out-     zeros            zeros              zeros
    DepthwiseConv2dNative-  depth 0; out_backprop empty
    BackpropInput           by the geometry
                            multiplier 0 (depthwise)      garbage (2)      zeros              zeros
                            input_sizes batch 0           empty            empty              empty
    Conv2DBackpropFilter,   filter_sizes with a 0         empty            empty              empty
    DepthwiseConv2dNative-  input batch 0                 zeros; depthwise zeros              zeros
    BackpropFilter                                        garbage (2)
                            input rows 0 SAME, or an      garbage (2)      zeros              zeros
                            out_backprop empty by the
                            geometry (rows 1 < filter 2)
    (1) "filter must not have zero elements (i.e. all dimensions must be non-zero)"
    (2) nonzero values or a wrongly shaped result where the answer is empty or zeros
    (3) "Computed output size would be negative"
    Where an empty operand also breaks a consistency rule (out_backprop's batch or depth
    against the input's or filter's), every kernel but oneDNN's reports it, as ours do. The V2
    ops (no TensorFlow kernel) behave as their V1 forms. So the one change was Conv2D's empty
    filter, now refused as TensorFlow refuses it; elsewhere ours keep TensorFlow's native
    results, and zeros where TensorFlow returns garbage."""

    def setUp(self):
        self.rng = np.random.default_rng(5)

    def rand(self, shape):
        return tf.constant(self.rng.uniform(-1, 1, size=shape).astype(np.float32))

    def assert_zeros(self, t, shape):
        self.assertEqual(t.shape.as_list(), shape)
        self.assertAllEqual(t, np.zeros(shape, np.float32))

    def test_conv2d_refuses_an_empty_filter_as_tensorflow_does(self):
        x = self.rand([1, 4, 4, 2])
        for w_shape in ([0, 2, 2, 3], [2, 0, 2, 3]):
            with self.subTest(filter=w_shape):
                w = tf.zeros(w_shape)
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            r"filter must not have zero elements \(i.e. all dimensions "
                                            r"must be non-zero\)"):
                    tf.raw_ops.Conv2D(input=x, filter=w, strides=[1, 1, 1, 1], padding="VALID")
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            r"filter must not have zero elements .* got filter shape "
                                            + re.escape(str(w_shape).replace(" ", ""))):
                    tf_ops.conv2d(x, w, 1, "VALID")
        # With an empty output there is nothing to refuse: TensorFlow's native kernel returns
        # it too.
        self.assertEqual(tf_ops.conv2d(x, tf.zeros([2, 2, 2, 0]), 1, "VALID").shape.as_list(),
                         [1, 3, 3, 0])
        self.assertEqual(tf_ops.conv2d(tf.zeros([0, 4, 4, 2]), tf.zeros([0, 2, 2, 3]), 1, "SAME")
                         .shape.as_list(), [0, 4, 4, 3])

    def test_other_empty_operands(self):
        x, w, wd = self.rand([1, 4, 4, 2]), self.rand([2, 2, 2, 3]), self.rand([2, 2, 2, 1])
        s = [1, 1, 1, 1]
        self.assertEqual(tf_ops.conv2d(tf.zeros([0, 4, 4, 2]), w, s, "VALID").shape.as_list(), [0, 3, 3, 3])
        self.assertEqual(tf_ops.conv2d(tf.zeros([1, 0, 4, 2]), w, s, "SAME").shape.as_list(), [1, 0, 4, 3])
        self.assertEqual(tf_ops.conv2d(self.rand([1, 1, 4, 2]), w, s, "VALID").shape.as_list(), [1, 0, 3, 3])
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "Computed output size would be negative"):
            tf_ops.conv2d(tf.zeros([1, 0, 4, 2]), w, s, "VALID")
        self.assert_zeros(tf_ops.depthwise_conv2d_native(x, tf.zeros([0, 2, 2, 1]), s, "VALID"), [1, 5, 3, 2])
        self.assertEqual(tf_ops.depthwise_conv2d_native(x, tf.zeros([2, 2, 2, 0]), s, "VALID").shape.as_list(),
                         [1, 3, 3, 0])
        self.assertEqual(tf_ops.depthwise_conv2d_native(self.rand([1, 1, 4, 2]), wd, s, "VALID")
                         .shape.as_list(), [1, 0, 3, 2])
        for f_shape in ([0, 2, 2, 3], [2, 0, 2, 3], [2, 2, 2, 0]):
            dy = self.rand([1, 5 if f_shape[0] == 0 else 3, 5 if f_shape[1] == 0 else 3, f_shape[3]])
            self.assert_zeros(tf_ops.conv2d_backprop_input([1, 4, 4, 2], tf.zeros(f_shape), dy, s, "VALID"),
                              [1, 4, 4, 2])
        self.assert_zeros(tf_ops.depthwise_conv2d_backprop_input([1, 4, 4, 2], tf.zeros([2, 2, 2, 0]),
                                                                 tf.zeros([1, 3, 3, 0]), s, "VALID"), [1, 4, 4, 2])
        self.assert_zeros(tf_ops.conv2d_backprop_input([1, 1, 4, 2], w, tf.zeros([1, 0, 3, 3]), s, "VALID"),
                          [1, 1, 4, 2])
        for fn, f_shape in ((tf_ops.conv2d_backprop_filter, [2, 2, 2, 3]),
                            (tf_ops.depthwise_conv2d_backprop_filter, [2, 2, 2, 1])):
            k = f_shape[2] * f_shape[3] if fn is tf_ops.depthwise_conv2d_backprop_filter else f_shape[3]
            with self.subTest(fn=fn.__name__):
                self.assert_zeros(fn(tf.zeros([0, 4, 4, 2]), f_shape, tf.zeros([0, 3, 3, k]), s, "VALID"), f_shape)
                self.assert_zeros(fn(tf.zeros([1, 0, 4, 2]), f_shape, tf.zeros([1, 0, 4, k]), s, "SAME"), f_shape)
                self.assert_zeros(fn(self.rand([1, 1, 4, 2]), f_shape, tf.zeros([1, 0, 3, k]), s, "VALID"), f_shape)
                self.assertEqual(fn(x, [0] + f_shape[1:], tf.zeros([1, 5, 3, k]), s, "VALID").shape.as_list(),
                                 [0] + f_shape[1:])
        # The V2 ops behave as their V1 forms.
        self.assert_zeros(tf_ops.conv2d_backprop_input_v2(x, tf.zeros([0, 2, 2, 3]), self.rand([1, 5, 3, 3]),
                                                          s, "VALID"), [1, 4, 4, 2])
        self.assert_zeros(tf_ops.conv2d_backprop_filter_v2(tf.zeros([0, 4, 4, 2]), w, tf.zeros([0, 3, 3, 3]),
                                                           s, "VALID"), [2, 2, 2, 3])


if __name__ == "__main__":
    tf.test.main()
