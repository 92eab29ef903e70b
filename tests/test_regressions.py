"""One test per TensorFlow security advisory and crash issue about these ops
(tf-semantics.md, section 8), plus two TensorFlow 2.21 bugs found while building tf_ops.

Each test runs the reported input through OUR op and asserts the correct outcome: the
result (zeros or an empty tensor where the gradient is empty, checked against numpy or
tf_ops.reference) or a clean TensorFlow error naming the offending value. TensorFlow's own
ops are never called here: several of these inputs crash or corrupt the process in
TensorFlow 2.21.
"""
import numpy as np
import tensorflow as tf

import common
import tf_ops
from tf_ops import reference

IAE = tf.errors.InvalidArgumentError
_lib = tf_ops.load_library()


def _uniform(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(dtype)


class SecurityAdvisoriesTest(tf.test.TestCase):

    def test_cve_2021_29525_backprop_input_empty_filter(self):
        # Division by zero (work_unit_size = 0) in Conv2DBackpropInput: input_sizes
        # [52, 1, 1, 5], filter [0, 1, 5, 0], out_backprop [52, 1, 1, 0], SAME. There is
        # nothing to propagate: the gradient is all zeros of the input's shape.
        for dtype in common.KINDS["backprop_input"]:
            out = _lib.tf_ops_conv2d_backprop_input(
                input_sizes=tf.constant([52, 1, 1, 5], tf.int32),
                filter=tf.zeros([0, 1, 5, 0], dtype),
                out_backprop=tf.zeros([52, 1, 1, 0], dtype),
                strides=[1, 1, 1, 1], padding="SAME")
            self.assertEqual(out.dtype, dtype)
            self.assertAllEqual(out, np.zeros([52, 1, 1, 5]))
            # V2 and the depthwise op on the same shapes (depthwise: multiplier 0).
            v2 = _lib.tf_ops_conv2d_backprop_input_v2(
                tf.zeros([52, 1, 1, 5], dtype), tf.zeros([0, 1, 5, 0], dtype),
                tf.zeros([52, 1, 1, 0], dtype), strides=[1, 1, 1, 1], padding="SAME")
            self.assertAllEqual(v2, np.zeros([52, 1, 1, 5]))
        dw = _lib.tf_ops_depthwise_conv2d_native_backprop_input(
            [52, 1, 1, 5], tf.zeros([0, 1, 5, 0]), tf.zeros([52, 1, 1, 0]),
            strides=[1, 1, 1, 1], padding="SAME")
        self.assertAllEqual(dw, np.zeros([52, 1, 1, 5]))

    def test_ghsa_r4pj_74mg_8868_backprop_filter_zero_filter_depth(self):
        # Division by zero from `in_depth % filter_depth` in Conv2DBackpropFilter with a
        # caller-controlled filter depth of 0 (the fix added "filter depth must be strictly
        # greater than zero"). The reference gives no exact input; these are the triggers.
        cases = [
            ([1, 2, 2, 3], [1, 1, 0, 1], [1, 2, 2, 1]),
            ([1, 2, 2, 0], [1, 1, 0, 1], [1, 2, 2, 1]),
            ([0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 1, 0]),
        ]
        for x_shape, filter_sizes, dy_shape in cases:
            for dtype in common.KINDS["backprop_filter"]:
                with self.assertRaisesRegex(
                        IAE, r"Conv2DBackpropFilter: filter depth must be strictly greater than "
                             r"zero, but got 0"):
                    _lib.tf_ops_conv2d_backprop_filter(
                        tf.zeros(x_shape, dtype), tf.constant(filter_sizes, tf.int32),
                        tf.zeros(dy_shape, dtype), strides=[1, 1, 1, 1], padding="SAME")
                with self.assertRaisesRegex(
                        IAE, r"Conv2DBackpropFilterV2: filter depth must be strictly greater "
                             r"than zero, but got 0"):
                    _lib.tf_ops_conv2d_backprop_filter_v2(
                        tf.zeros(x_shape, dtype), tf.zeros(filter_sizes, dtype),
                        tf.zeros(dy_shape, dtype), strides=[1, 1, 1, 1], padding="SAME")
        # The forward op and backprop input guard the same modulus.
        with self.assertRaisesRegex(IAE, r"Conv2D: filter depth must be strictly greater than "
                                         r"zero, but got 0"):
            _lib.tf_ops_conv2d(tf.zeros([1, 2, 2, 3]), tf.zeros([1, 1, 0, 1]),
                               strides=[1, 1, 1, 1], padding="SAME")
        with self.assertRaisesRegex(IAE, r"Conv2DBackpropInput: filter depth must be strictly "
                                         r"greater than zero, but got 0"):
            _lib.tf_ops_conv2d_backprop_input([1, 2, 2, 3], tf.zeros([1, 1, 0, 1]),
                                              tf.zeros([1, 2, 2, 1]), strides=[1, 1, 1, 1],
                                              padding="SAME")

    def test_cve_2021_29538_backprop_filter_all_empty_shapes(self):
        # Division by zero in Conv2DBackpropFilter with all-empty shapes: input [0, 0, 0, 0],
        # filter_sizes [0, 0, 0, 0], out_backprop [0, 0, 0, 0]. A filter depth of 0 is
        # refused by name.
        for dtype in common.KINDS["backprop_filter"]:
            with self.assertRaisesRegex(
                    IAE, r"Conv2DBackpropFilter: filter depth must be strictly greater than "
                         r"zero, but got 0 \(input shape \[0,0,0,0\], filter shape \[0,0,0,0\]\)"):
                _lib.tf_ops_conv2d_backprop_filter(
                    tf.zeros([0, 0, 0, 0], dtype), tf.constant([0, 0, 0, 0], tf.int32),
                    tf.zeros([0, 0, 0, 0], dtype), strides=[1, 1, 1, 1], padding="SAME")
            # With a filter depth of 1 the same empty shapes are valid: an empty gradient.
            out = _lib.tf_ops_conv2d_backprop_filter(
                tf.zeros([0, 0, 0, 0], dtype), tf.constant([0, 0, 1, 0], tf.int32),
                tf.zeros([0, 0, 0, 0], dtype), strides=[1, 1, 1, 1], padding="SAME")
            self.assertEqual(out.shape, (0, 0, 1, 0))
        # And the depthwise filter op on all-empty shapes.
        out = _lib.tf_ops_depthwise_conv2d_native_backprop_filter(
            tf.zeros([0, 0, 0, 0]), [0, 0, 0, 0], tf.zeros([0, 0, 0, 0]),
            strides=[1, 1, 1, 1], padding="SAME")
        self.assertEqual(out.shape, (0, 0, 0, 0))

    def test_cve_2021_29540_strides_66_49(self):
        # Heap overflow in Conv2DBackpropFilter when filter_sizes did not match the computed
        # filter: input [1, 1, 1, 2], filter_sizes [1, 1, 1, 1], out_backprop [1, 1, 1, 1],
        # strides [1, 66, 49, 1], VALID. A filter depth of 1 makes 2 groups, which do not
        # divide the output depth 1: refused.
        x = tf.constant([386.078431372549, 386.07843139643234], tf.float32, [1, 1, 1, 2])
        dy = tf.constant([386.078431372549], tf.float32, [1, 1, 1, 1])
        with self.assertRaisesRegex(
                IAE, r"Conv2DBackpropFilter: output depth must be evenly divisible by number "
                     r"of groups: 1 vs 2"):
            _lib.tf_ops_conv2d_backprop_filter(x, tf.constant([1, 1, 1, 1], tf.int32), dy,
                                               strides=[1, 66, 49, 1], padding="VALID")
        # With a consistent filter_sizes the huge strides give the exact gradient x * dy.
        for dtype in (tf.float32, tf.float64):
            xd, dyd = tf.cast(x, dtype), tf.cast(dy, dtype)
            out = _lib.tf_ops_conv2d_backprop_filter(xd, tf.constant([1, 1, 2, 1], tf.int32),
                                                     dyd, strides=[1, 66, 49, 1],
                                                     padding="VALID")
            ref = reference.conv2d_backprop_filter(xd.numpy(), [1, 1, 2, 1], dyd.numpy(),
                                                   [1, 66, 49, 1], "VALID")
            self.assertAllClose(out, ref, rtol=common.TOLERANCE[dtype], atol=0)
            self.assertAllClose(out, (xd.numpy() * dyd.numpy()).reshape(1, 1, 2, 1),
                                rtol=common.TOLERANCE[dtype], atol=0)

    def test_cve_2021_29540_empty_input(self):
        # Empty input [0, 1, 1, 5] with filter_sizes [3, 8, 1, 1]: filter depth 1 makes 5
        # groups, which do not divide the output depth 1.
        with self.assertRaisesRegex(
                IAE, r"Conv2DBackpropFilter: output depth must be evenly divisible by number "
                     r"of groups: 1 vs 5 \(input shape \[0,1,1,5\], filter shape \[3,8,1,1\]\)"):
            _lib.tf_ops_conv2d_backprop_filter(tf.zeros([0, 1, 1, 5]), [3, 8, 1, 1],
                                               tf.zeros([0, 1, 1, 1]), strides=[1, 1, 1, 1],
                                               padding="SAME")
        # An empty input with consistent sizes: all-zero filter gradient, every element
        # written (nothing is left uninitialized).
        for dtype in common.KINDS["backprop_filter"]:
            for filter_sizes, dy_depth in (([3, 8, 5, 1], 1), ([3, 8, 1, 5], 5)):
                out = _lib.tf_ops_conv2d_backprop_filter(
                    tf.zeros([0, 1, 1, 5], dtype), filter_sizes,
                    tf.zeros([0, 1, 1, dy_depth], dtype), strides=[1, 1, 1, 1], padding="SAME")
                self.assertAllEqual(out, np.zeros(filter_sizes))

    def test_ghsa_37jf_mjv6_xfqw_backprop_input_empty_out_backprop(self):
        # CHECK failure with an empty out_backprop [3, 1, 0, 3]: input_sizes [3, 1, 1, 2],
        # filter [1, 3, 2, 3], strides [1, 1, 2, 1], VALID. The gradient is all zeros.
        for dtype in common.KINDS["backprop_input"]:
            out = _lib.tf_ops_conv2d_backprop_input(
                tf.constant([3, 1, 1, 2], tf.int32), tf.ones([1, 3, 2, 3], dtype),
                tf.ones([3, 1, 0, 3], dtype), strides=[1, 1, 2, 1], padding="VALID")
            self.assertAllEqual(out, np.zeros([3, 1, 1, 2]))
            out = tf_ops.conv2d_transpose(tf.ones([3, 1, 0, 3], dtype),
                                          tf.ones([1, 3, 2, 3], dtype), [3, 1, 1, 2],
                                          strides=[1, 2], padding="VALID")
            self.assertAllEqual(out, np.zeros([3, 1, 1, 2]))


class CrashIssuesTest(tf.test.TestCase):

    def test_issue_78428_huge_input_sizes(self):
        # input_sizes [1, 5, 5, huge] (the report's 999999999999 is not an int32; the largest
        # int32 is used), filter 3s [3, 3, 3, 2], out_backprop 5s [1, 5, 5, 2], SAME.
        big = 2**31 - 1
        f = tf.constant(3, tf.float32, [3, 3, 3, 2])
        dy = tf.constant(5, tf.float32, [1, 5, 5, 2])
        with self.assertRaisesRegex(IAE, f"input depth must be evenly divisible by filter "
                                         f"depth: {big} vs 3"):
            _lib.tf_ops_conv2d_backprop_input(tf.constant([1, 5, 5, big], tf.int32), f, dy,
                                              strides=[1, 1, 1, 1], padding="SAME")
        # Sizes whose product overflows int64.
        for sizes in ([big] * 4, [1, big, big, big]):
            with self.assertRaisesRegex(IAE, r"invalid input_sizes \[" + ", ".join(map(str, sizes))
                                        + r"\]: .*overflow"):
                _lib.tf_ops_conv2d_backprop_input(tf.constant(sizes, tf.int32), f, dy,
                                                  strides=[1, 1, 1, 1], padding="SAME")
        # Representable but inconsistent with out_backprop.
        with self.assertRaisesRegex(IAE, f"actual = 5, computed = {big}"):
            _lib.tf_ops_conv2d_backprop_input(tf.constant([1, big, 5, 3], tf.int32), f, dy,
                                              strides=[1, 1, 1, 1], padding="SAME")

    def test_issue_78428_two_value_input_sizes_with_rank1_filter(self):
        # input_sizes of shape [2] (value 1), filter of shape [1], out_backprop [1, 5, 5, 2]:
        # TensorFlow reads filter.dim_size(2) before checking the rank and aborts.
        with self.assertRaisesRegex(IAE, r"Conv2DBackpropInput: filter must be 4-dimensional, "
                                         r"got shape \[1\]"):
            _lib.tf_ops_conv2d_backprop_input(
                input_sizes=tf.constant(1, tf.int32, [2]), filter=tf.constant(2, tf.float32, [1]),
                out_backprop=tf.constant(5, tf.float32, [1, 5, 5, 2]), strides=[1, 1, 1, 1],
                padding="SAME")

    def test_issue_125506_conv2d_transpose_scalar_filter(self):
        # tf.nn.conv2d_transpose(output_image [1, 3, 3, 8], 8, (2, 2), strides=(2, 2)):
        # "Check failed: d < dims() (2 vs. 0)" in TensorFlow.
        image = tf.random.stateless_normal([1, 3, 3, 8], seed=[1, 2])
        for padding in ("SAME", "VALID"):
            with self.assertRaisesRegex(IAE, r"Conv2DBackpropInput: filter must be "
                                             r"4-dimensional, got shape \[\]"):
                tf_ops.conv2d_transpose(image, 8, (2, 2), strides=(2, 2), padding=padding)
        # The raw op with a scalar filter and 4 input sizes, too.
        with self.assertRaisesRegex(IAE, r"filter must be 4-dimensional, got shape \[\]"):
            _lib.tf_ops_conv2d_backprop_input([1, 6, 6, 8], tf.constant(8.0), image,
                                              strides=[1, 2, 2, 1], padding="SAME")

    def test_issue_125511_three_element_output_shape(self):
        # conv2d_transpose with a 3-element output_shape aborts TensorFlow's oneDNN kernel.
        # The PR #127293 reproducer: input_sizes [8, 8, 3], filter [3, 3, 3, 3],
        # out_backprop [1, 4, 4, 3], strides [1, 2, 2, 1], SAME.
        w = tf.random.stateless_normal([3, 3, 3, 3], seed=[3, 4])
        dy = tf.random.stateless_normal([1, 4, 4, 3], seed=[5, 6])
        regex = (r"Conv2DBackpropInput requires input_sizes to contain 4 values or 2 values, "
                 r"but got: 3 \(\[8, 8, 3\]\)")
        with self.assertRaisesRegex(IAE, regex):
            tf_ops.conv2d_transpose(dy, w, [8, 8, 3], strides=2, padding="SAME")
        with self.assertRaisesRegex(IAE, regex):
            _lib.tf_ops_conv2d_backprop_input([8, 8, 3], w, dy, strides=[1, 2, 2, 1],
                                              padding="SAME")
        # A rank-0 input_sizes aborts there too.
        with self.assertRaisesRegex(IAE, r"input_sizes input must be 1-dim, not 0"):
            _lib.tf_ops_conv2d_backprop_input(tf.constant(8, tf.int32), w, dy,
                                              strides=[1, 2, 2, 1], padding="SAME")
        # The 2-element output_shape is the valid short form: [1, 8, 8, 3].
        out = tf_ops.conv2d_transpose(dy, w, [8, 8], strides=2, padding="SAME")
        ref = reference.conv2d_backprop_input([1, 8, 8, 3], w.numpy(), dy.numpy(), [1, 2, 2, 1],
                                              "SAME")
        self.assertLessEqual(common.max_error(out, ref), common.TOLERANCE[tf.float32])

    def test_issue_57715_negative_output_shape(self):
        # tf.nn.conv2d_transpose(input=np.ones((1,1,1,1)), filters=np.ones((1,1,1,1)),
        # output_shape=[2, -2], strides=[1]).
        with self.assertRaisesRegex(IAE, r"invalid input_sizes \[1, 2, -2, 1\]: .*-2"):
            tf_ops.conv2d_transpose(input=np.ones((1, 1, 1, 1)), filters=np.ones((1, 1, 1, 1)),
                                    output_shape=[2, -2], strides=[1])
        with self.assertRaisesRegex(IAE, r"invalid input_sizes \[1, -1, 1, 1\]: .*-1"):
            tf_ops.conv2d_transpose(input=np.ones((1, 1, 1, 1)), filters=np.ones((1, 1, 1, 1)),
                                    output_shape=[1, -1, 1, 1], strides=[1])

    def test_issue_57958_huge_output_shape(self):
        # tf.nn.conv2d_transpose(input=np.ones((2,2,2,2)), output_shape=[114078056, 179835296],
        # strides=[10], filters=1).
        with self.assertRaisesRegex(IAE, r"filter must be 4-dimensional, got shape \[\]"):
            tf_ops.conv2d_transpose(input=np.ones((2, 2, 2, 2)),
                                    output_shape=[114078056, 179835296], strides=[10], filters=1)
        # With a real filter the huge shape is representable (8.2e16 elements) but does not
        # match the 2x2 input: refused before any allocation.
        with self.assertRaisesRegex(IAE, r"Size of out_backprop doesn't match computed: "
                                         r"actual = 2, computed = 11407806"):
            tf_ops.conv2d_transpose(input=np.ones((2, 2, 2, 2)),
                                    output_shape=[114078056, 179835296], strides=[10],
                                    filters=np.ones((1, 1, 2, 2)))

    def test_issue_57709_keras_negative_output_shape(self):
        # tf.keras.backend.conv2d_transpose(x=np.ones((2,1,1,1)), kernel=1,
        # output_shape=np.array([-3697127975084027074, 1], np.int32)), which wraps to
        # [-470478018, 1]; strides (1, 1), VALID.
        shape = np.array([-470478018, 1], np.int32)
        with self.assertRaisesRegex(IAE, r"filter must be 4-dimensional, got shape \[\]"):
            tf_ops.conv2d_transpose(np.ones((2, 1, 1, 1)), 1, shape, strides=1, padding="VALID")
        with self.assertRaisesRegex(IAE, r"invalid input_sizes \[2, -470478018, 1, 1\]"):
            tf_ops.conv2d_transpose(np.ones((2, 1, 1, 1)), np.ones((1, 1, 1, 1)), shape,
                                    strides=1, padding="VALID")

    def test_issue_104881_depthwise_rank1_filter_and_out_backprop(self):
        # input_sizes [1, 2, 2, 1], filter [1.0], out_backprop [1.0], strides [1, 1], SAME.
        sizes = tf.constant([1, 2, 2, 1], tf.int32)
        f = tf.constant([1.0])
        dy = tf.constant([1.0])
        with self.assertRaisesRegex(IAE, r"Sliding window strides field must specify 4 "
                                         r"dimensions, got strides=\[1, 1\]"):
            _lib.tf_ops_depthwise_conv2d_native_backprop_input(sizes, f, dy, strides=[1, 1],
                                                               padding="SAME")
        # With valid strides, the rank errors, each naming the shape.
        with self.assertRaisesRegex(IAE, r"DepthwiseConv2dNativeBackpropInput: out_backprop "
                                         r"must be 4-dimensional, got shape \[1\]"):
            _lib.tf_ops_depthwise_conv2d_native_backprop_input(sizes, f, dy, strides=[1, 1, 1, 1],
                                                               padding="SAME")
        with self.assertRaisesRegex(IAE, r"DepthwiseConv2dNativeBackpropInput: filter must be "
                                         r"4-dimensional, got shape \[1\]"):
            _lib.tf_ops_depthwise_conv2d_native_backprop_input(
                sizes, f, tf.ones([1, 2, 2, 1]), strides=[1, 1, 1, 1], padding="SAME")
        with self.assertRaisesRegex(IAE, r"DepthwiseConv2dNativeBackpropFilter: input must be "
                                         r"4-dimensional, got shape \[1\]"):
            _lib.tf_ops_depthwise_conv2d_native_backprop_filter(
                tf.constant([1.0]), tf.constant([1, 1, 1, 1], tf.int32), tf.ones([1, 2, 2, 1]),
                strides=[1, 1, 1, 1], padding="SAME")
        # The same input made consistent works: [1, 2, 2, 1] input, 1x1x1x1 filter.
        out = _lib.tf_ops_depthwise_conv2d_native_backprop_input(
            sizes, tf.constant(2.0, shape=[1, 1, 1, 1]),
            tf.constant([1.0, 2, 3, 4], shape=[1, 2, 2, 1]),
            strides=[1, 1, 1, 1], padding="SAME")
        self.assertAllEqual(out, np.array([2.0, 4, 6, 8]).reshape(1, 2, 2, 1))

    def test_issue_89853_depthwise_strides_of_length_2(self):
        # tf.nn.depthwise_conv2d_backprop_input([1, 4, 4, 1], [[1.0]], [[1.0]], strides=[1, 1],
        # padding='VALID').
        regex = r"Sliding window strides field must specify 4 dimensions, got strides=\[1, 1\]"
        with self.assertRaisesRegex(IAE, regex):
            tf_ops.depthwise_conv2d_backprop_input(tf.constant([1, 4, 4, 1]), tf.constant([[1.0]]),
                                                   tf.constant([[1.0]]), strides=[1, 1],
                                                   padding="VALID")
        with self.assertRaisesRegex(IAE, regex):
            tf_ops.depthwise_conv2d_backprop_filter(tf.ones([1, 4, 4, 1]), [1, 1, 1, 1],
                                                    tf.ones([1, 4, 4, 1]), strides=[1, 1],
                                                    padding="VALID")
        with self.assertRaisesRegex(IAE, regex):
            tf_ops.depthwise_conv2d_native(tf.ones([1, 4, 4, 1]), tf.ones([1, 1, 1, 1]),
                                           strides=[1, 1], padding="VALID")

    def test_issues_56498_19992_depthwise_dilations_honoured(self):
        # TensorFlow's depthwise kernels ignore `dilations`; ours apply them in all three
        # directions: they match the reference, and differ from the undilated result.
        for fmt in ("NHWC", "NCHW"):
            for padding in ("SAME", "VALID"):
                cfg = common.make_config(fmt, 2, 9, 8, 3, [3, 2, 3, 2], (1, 1), (2, 3), padding,
                                         depthwise=True)
                arrays = common.make_inputs(np.random.default_rng(7), cfg, tf.float64)
                for kind in ("depthwise", "depthwise_backprop_input", "depthwise_backprop_filter"):
                    what = f"{kind} {fmt} {padding}"
                    ours = common.run_ours(kind, cfg, arrays, tf.float64)
                    ref = common.run_reference(kind, cfg, arrays)
                    self.assertLessEqual(common.max_error(ours, ref), common.TOLERANCE[tf.float64],
                                         what)
                    if padding == "SAME":
                        # SAME keeps every shape, so the undilated op is defined on the same
                        # arrays: it must give something else.
                        undilated = dict(cfg, dilations=[1, 1, 1, 1])
                        plain = common.run_reference(kind, undilated, arrays)
                        self.assertEqual(plain.shape, ours.shape, what)
                        self.assertGreater(float(np.max(np.abs(ours - plain))), 1e-3, what)
                    else:
                        # VALID: the dilated output is smaller than the undilated one.
                        hw = cfg["y_shape"][1:3] if fmt == "NHWC" else cfg["y_shape"][2:]
                        self.assertEqual(hw, [9 - 4, 8 - 3], what)
        # A 2x1 filter with dilation 3 reads rows r and r + 3.
        x = np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1)
        w = np.array([1.0, 10.0], np.float32).reshape(2, 1, 1, 1)
        y = tf_ops.depthwise_conv2d_native(x, w, [1, 1, 1, 1], "VALID", dilations=[1, 3, 1, 1])
        self.assertAllEqual(np.asarray(y).ravel(), x.ravel()[:5] + 10 * x.ravel()[3:8])

    def test_pr_126484_depthwise_backprop_filter_empty_out_backprop(self):
        # TensorFlow returns the filter gradient uninitialized when out_backprop is empty.
        # Ours must be exactly zero every time, even when freed memory holds garbage.
        cases = [
            # VALID output size (1 - 4 + 2) / 2 truncates to 0 rows.
            ([1, 1, 1, 2], [4, 1, 2, 1], [1, 0, 1, 2], [1, 2, 2, 1], "VALID"),
            # An empty batch.
            ([0, 5, 5, 3], [3, 3, 3, 2], [0, 5, 5, 6], [1, 1, 1, 1], "SAME"),
            # Empty spatial input.
            ([2, 0, 4, 3], [2, 2, 3, 4], [2, 0, 4, 12], [1, 1, 1, 1], "SAME"),
        ]
        for dtype in common.KINDS["depthwise_backprop_filter"]:
            for i in range(5):
                for x_shape, filter_sizes, dy_shape, strides, padding in cases:
                    # Fill and free same-sized buffers with non-zero values first.
                    junk = tf.fill([int(np.prod(filter_sizes)) * 4 + 64], tf.constant(7.5, dtype))
                    del junk
                    out = _lib.tf_ops_depthwise_conv2d_native_backprop_filter(
                        tf.ones(x_shape, dtype), tf.constant(filter_sizes, tf.int32),
                        tf.ones(dy_shape, dtype), strides=strides, padding=padding)
                    self.assertEqual(out.shape, tuple(filter_sizes))
                    self.assertAllEqual(out, np.zeros(filter_sizes), f"{dtype.name} {x_shape}")

    def test_issue_59059_depthwise_backprop_filter_huge_filter_sizes(self):
        # input [4, 5, 5, 48], out_backprop [4, 5, 5, 96], strides 1, filter_sizes drawn
        # uniformly below 1879048192 (seeded here).
        x = tf.random.stateless_uniform([4, 5, 5, 48], seed=[5, 9])
        dy = tf.random.stateless_uniform([4, 5, 5, 96], seed=[0, 59])
        drawn = [int(v) for v in np.random.default_rng(59059).integers(0, 1879048192, 4)]
        big = 1879048191
        for padding in ("SAME", "VALID"):
            # Each one is refused, naming the sizes.
            for sizes, regex in (
                    (drawn, r"invalid filter_sizes \[" + ", ".join(map(str, drawn)) + r"\]: "
                            r".*overflow"),
                    ([big, big, 48, 2],
                     f"invalid filter_sizes \\[{big}, {big}, 48, 2\\]: .*overflow"),
                    ([3, 3, big, 2], f"input and filter must have the same depth: 48 vs {big}"),
                    ([3, 3, 48, big], f"depth_multiplier \\* in_depth not equal to out_depth: "
                                      f"{big} \\* 48 != 96"),
            ):
                with self.assertRaisesRegex(IAE, regex, msg=f"{sizes} {padding}"):
                    _lib.tf_ops_depthwise_conv2d_native_backprop_filter(
                        x, tf.constant(sizes, tf.int32), dy, strides=[1, 1, 1, 1], padding=padding)
        with self.assertRaisesRegex(IAE, r"Computed output size would be negative: .*"
                                         f"effective_filter_size: {big}"):
            _lib.tf_ops_depthwise_conv2d_native_backprop_filter(
                x, tf.constant([big, 1, 48, 2], tf.int32), dy, strides=[1, 1, 1, 1],
                padding="VALID")
        # The same tensors with valid filter_sizes give the reference gradient.
        out = _lib.tf_ops_depthwise_conv2d_native_backprop_filter(
            x, tf.constant([3, 3, 48, 2], tf.int32), dy, strides=[1, 1, 1, 1], padding="SAME")
        ref = reference.conv2d_backprop_filter(x.numpy(), [3, 3, 48, 2], dy.numpy(),
                                               [1, 1, 1, 1], "SAME", depthwise=True)
        self.assertLessEqual(common.max_error(out, ref), common.TOLERANCE[tf.float32])


class TensorFlowBugsTest(tf.test.TestCase):
    """Two TensorFlow 2.21 CPU bugs, found while building tf_ops. TensorFlow's ops are not
    run on these inputs: the first one kills the process."""

    def test_backprop_filter_empty_out_backprop_segfaults_in_tf(self):
        # tf.raw_ops.Conv2DBackpropFilter segfaults: input [1, 10, 1, 1], filter_sizes
        # [1, 2, 1, 2], out_backprop [1, 5, 0, 2], strides [1, 2, 2, 1], VALID (the output
        # has 0 columns: (1 - 2 + 2) / 2 = 0). The gradient is zeros of shape [1, 2, 1, 2].
        for dtype in common.KINDS["backprop_filter"]:
            x = tf.constant(np.arange(10).reshape(1, 10, 1, 1), dtype)
            dy = tf.zeros([1, 5, 0, 2], dtype)
            out = _lib.tf_ops_conv2d_backprop_filter(
                x, tf.constant([1, 2, 1, 2], tf.int32), dy, strides=[1, 2, 2, 1], padding="VALID")
            self.assertAllEqual(out, np.zeros([1, 2, 1, 2]))
            out = _lib.tf_ops_conv2d_backprop_filter_v2(
                x, tf.ones([1, 2, 1, 2], dtype), dy, strides=[1, 2, 2, 1], padding="VALID")
            self.assertAllEqual(out, np.zeros([1, 2, 1, 2]))
            ref = reference.conv2d_backprop_filter(x.numpy(), [1, 2, 1, 2], dy.numpy(),
                                                   [1, 2, 2, 1], "VALID")
            self.assertAllEqual(out, ref)
            # The same geometry in NCHW and through the gradient of conv2d.
            out = _lib.tf_ops_conv2d_backprop_filter(
                tf.transpose(x, [0, 3, 1, 2]), tf.constant([1, 2, 1, 2], tf.int32),
                tf.zeros([1, 2, 5, 0], dtype), strides=[1, 1, 2, 2], padding="VALID",
                data_format="NCHW")
            self.assertAllEqual(out, np.zeros([1, 2, 1, 2]))

    def test_half_backprop_filter_explicit_padding_garbage_in_tf(self):
        # TensorFlow's float16/bfloat16 Conv2DBackpropFilter returns garbage with EXPLICIT
        # padding: input [2, 1, 5, 3], filter_sizes [3, 1, 3, 1], strides 1,
        # explicit_paddings [0, 0, 0, 1, 0, 1, 0, 0], NHWC. The padded input has 2 rows, so
        # out_backprop is [2, 0, 6, 1] and the gradient is zero; a 2-row filter variant has
        # a non-empty gradient. Both must match tf_ops.reference.
        pads = [0, 0, 0, 1, 0, 1, 0, 0]
        for filter_sizes in ([3, 1, 3, 1], [2, 1, 3, 1], [1, 2, 3, 1]):
            g = reference.Geometry([2, 1, 5, 3], filter_sizes, [1, 1, 1, 1], "EXPLICIT", pads,
                                   [1, 1, 1, 1])
            dy_shape = [2, g.oh, g.ow, 1]
            if filter_sizes == [3, 1, 3, 1]:
                self.assertEqual(dy_shape, [2, 0, 6, 1])
            x = _uniform([2, 1, 5, 3], 11)
            dy = _uniform(dy_shape, 12)
            for dtype in common.FLOAT_DTYPES:
                xt, dyt = tf.constant(x, dtype), tf.constant(dy, dtype)
                ref = reference.conv2d_backprop_filter(
                    xt.numpy().astype(np.float64), filter_sizes,
                    dyt.numpy().astype(np.float64), [1, 1, 1, 1], "EXPLICIT", pads)
                for out in (
                        _lib.tf_ops_conv2d_backprop_filter(
                            xt, tf.constant(filter_sizes, tf.int32), dyt, strides=[1, 1, 1, 1],
                            padding="EXPLICIT", explicit_paddings=pads),
                        tf_ops.conv2d_backprop_filter(xt, filter_sizes, dyt, [1, 1, 1, 1],
                                                      [[0, 0], [0, 1], [0, 1], [0, 0]])):
                    self.assertEqual(out.dtype, dtype)
                    err = common.max_error(out.numpy().astype(np.float64), ref)
                    self.assertLessEqual(err, common.TOLERANCE[dtype],
                                         f"{dtype.name} filter_sizes={filter_sizes}")
                if g.oh == 0:
                    self.assertAllEqual(out, np.zeros(filter_sizes))
                else:
                    self.assertGreater(float(np.max(np.abs(ref))), 0.0)

    def test_bfloat16_backprop_filter_one_column_strided_unstable_in_tf(self):
        # TensorFlow's bfloat16 Conv2DBackpropFilter returns values that change from call to
        # call (errors up to 1e37 against the reference: it reads uninitialized memory) for
        # an input one column wide with a column stride above 1, e.g. input [2, 7, 1, 9],
        # filter_sizes [2, 2, 3, 3] (3 groups), strides [1, 3, 2, 1], SAME. Ours must match
        # the reference on every call.
        for x_shape, filter_sizes, strides in (([2, 7, 1, 9], [2, 2, 3, 3], [1, 3, 2, 1]),
                                               ([2, 7, 1, 3], [1, 2, 3, 3], [1, 1, 2, 1])):
            g = reference.Geometry(x_shape, filter_sizes, strides, "SAME", [], [1, 1, 1, 1])
            xt = tf.constant(_uniform(x_shape, 21), tf.bfloat16)
            dyt = tf.constant(_uniform([x_shape[0], g.oh, g.ow, g.k], 22), tf.bfloat16)
            ref = reference.conv2d_backprop_filter(
                xt.numpy().astype(np.float64), filter_sizes, dyt.numpy().astype(np.float64),
                strides, "SAME")
            first = None
            for _ in range(3):
                out = tf_ops.conv2d_backprop_filter(xt, filter_sizes, dyt, strides, "SAME")
                err = common.max_error(out.numpy().astype(np.float64), ref)
                self.assertLessEqual(err, common.TOLERANCE[tf.bfloat16], f"{x_shape} {filter_sizes}")
                if first is None:
                    first = out.numpy().tobytes()
                self.assertEqual(out.numpy().tobytes(), first)


if __name__ == "__main__":
    tf.test.main()


class EmptyOperandWithHugeDimsTest(tf.test.TestCase):
    """Found by fuzzing tf_ops: an empty operand whose other dimensions are huge (it exists
    only because it has no elements) must give zeros at once, not iterate over the huge
    dimension. Before the fix these calls hung."""

    def test_filter_gradient_with_an_empty_out_backprop_of_2_61_rows(self):
        # Explicit bottom padding 2**62, stride 2: out_backprop has about 2**61 rows, and
        # no columns, so it is empty.
        pad = 2**62
        attrs = dict(strides=[1, 2, 1, 1], padding="EXPLICIT",
                     explicit_paddings=[0, 0, 0, pad, 0, 0, 0, 0])
        x = tf.ones([1, 3, 0, 2])
        rows = (3 + pad - 3) // 2 + 1
        dy = tf.zeros([1, rows, 0, 4])
        self.assertAllEqual(_lib.tf_ops_conv2d_backprop_filter(x, [3, 1, 2, 4], dy, **attrs),
                            np.zeros([3, 1, 2, 4]))
        self.assertAllEqual(_lib.tf_ops_depthwise_conv2d_native_backprop_filter(
            x, [3, 1, 2, 2], dy, **attrs), np.zeros([3, 1, 2, 2]))

    def test_empty_filter_with_2_40_rows(self):
        # filter [2**40, 1, 2, 0]: empty; VALID needs an input of >= 2**40 rows, so use
        # EXPLICIT padding to make the geometry valid with a small input.
        pad = 2**40
        attrs = dict(strides=[1, 1, 1, 1], padding="EXPLICIT",
                     explicit_paddings=[0, 0, pad, 0, 0, 0, 0, 0])
        w = tf.zeros([2**40, 1, 2, 0])
        dy = tf.zeros([1, 4, 3, 0])
        out = _lib.tf_ops_conv2d_backprop_input([1, 3, 3, 2], w, dy, **attrs)
        self.assertAllEqual(out, np.zeros([1, 3, 3, 2]))
        y = _lib.tf_ops_conv2d(tf.ones([1, 3, 3, 2]), tf.zeros([2**40, 1, 2, 0]), **attrs)
        self.assertEqual(y.shape, (1, 4, 3, 0))


class UnrepresentableOutputShapeTest(tf.test.TestCase):
    """Found by fuzzing tf_ops: TensorFlow's TensorShape aborts the process (CHECK) when the
    running product of its dimensions overflows int64, even if a later dimension is 0. An
    NCHW forward output [1, 2, 2**62 + 1, 0] has no elements but cannot be represented; it
    must be an InvalidArgumentError, not an abort."""

    def test_forward_output_with_an_overflowing_partial_product(self):
        attrs = dict(strides=[1, 1, 1, 1], padding="EXPLICIT", data_format="NCHW",
                     explicit_paddings=[0, 0, 0, 0, 2**62, 0, 0, 0])
        x = tf.zeros([1, 1, 1, 0])
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"output shape \[1, 2, 4611686018427387905, 0\] cannot be represented"):
            _lib.tf_ops_conv2d(x, tf.zeros([1, 1, 1, 2]), **attrs)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"output shape \[1, 2, 4611686018427387905, 0\] cannot be represented"):
            _lib.tf_ops_depthwise_conv2d_native(x, tf.zeros([1, 1, 1, 2]), **attrs)
        # The same output in NHWC, [1, 2**62 + 1, 0, 2], is representable: an empty result.
        nhwc = dict(attrs, data_format="NHWC", explicit_paddings=[0, 0, 2**62, 0, 0, 0, 0, 0])
        y = _lib.tf_ops_conv2d(tf.zeros([1, 1, 0, 1]), tf.zeros([1, 1, 1, 2]), **nhwc)
        self.assertEqual(y.shape, (1, 2**62 + 1, 0, 2))


class MergedColumnsBackpropInputTest(tf.test.TestCase):
    """Conv2DBackpropInput returned wrong values (errors the size of the values) in float32,
    float16 and bfloat16 wherever its merged-columns pass (filter in-depth <= 8, one group,
    filter wider than 1) needed several column blocks for filter width x in-depth columns
    (33-48 or more than 64 on AVX-512) and out_backprop had 2 or more channels: the filter
    panel held the rows of all column blocks side by side, while the micro-kernels read each
    block's rows 16, 32 or 64 floats apart. The shapes below are the ones reported."""

    # (filter width, input channels): the reported shapes, and ones just outside the band.
    SHAPES = [(5, 8), (6, 6), (6, 7), (6, 8), (7, 5), (7, 6), (8, 5), (8, 6), (9, 4), (9, 5),
              (9, 8), (4, 8), (3, 8), (9, 7), (9, 3)]

    def test_reported_example(self):
        r = np.random.default_rng(0)
        w = tf.constant(r.standard_normal((7, 7, 6, 2)), tf.float32)
        dy = tf.constant(r.standard_normal((1, 2, 2, 2)), tf.float32)
        ours = tf_ops.conv2d_backprop_input([1, 8, 8, 6], w, dy, [1, 1, 1, 1], "VALID")
        builtin = tf.raw_ops.Conv2DBackpropInput(input_sizes=[1, 8, 8, 6], filter=w, out_backprop=dy,
                                                 strides=[1, 1, 1, 1], padding="VALID")
        exact = reference.conv2d_backprop_input([1, 8, 8, 6], w.numpy().astype(np.float64),
                                                dy.numpy().astype(np.float64), [1, 1, 1, 1], "VALID")
        self.assertAllClose(ours, exact, rtol=0, atol=1e-5)
        self.assertAllClose(ours, builtin, rtol=0, atol=1e-4)

    def test_reported_shapes(self):
        rng = np.random.default_rng(21)
        for kw, c in self.SHAPES:
            for fmt in ("NHWC", "NCHW"):
                for strides, padding in (((1, 1), "VALID"), ((2, 2), "SAME"), ((1, 3), "SAME")):
                    for k in (2, 3, 17):
                        cfg = common.make_config(fmt, 2, 8, 8 + kw, c, [3, kw, c, k], strides, (1, 1),
                                                 padding)
                        for dtype in (tf.float32, tf.float16, tf.bfloat16):
                            what = common.describe("backprop_input", cfg, dtype)
                            arrays = common.make_inputs(rng, cfg, dtype)
                            ours = common.run_ours("backprop_input", cfg, arrays, dtype)
                            exact = common.run_reference("backprop_input", cfg, arrays)
                            self.assertLessEqual(common.max_error(ours, exact), common.TOLERANCE[dtype], what)
                            if fmt == "NHWC" and dtype == tf.float32:
                                builtin = common.run_builtin("backprop_input", cfg, arrays, dtype)
                                self.assertLessEqual(common.max_error(ours, builtin),
                                                     common.BUILTIN_TOLERANCE[dtype], what)

    def test_layer_input_gradient(self):
        # tf_ops.layers.Conv2D(4, 7) on a 6-channel input: its input gradient is backprop input
        # with a 7x7x6x4 filter (42 merged columns).
        import keras
        x = tf.constant(np.random.default_rng(1).uniform(-1, 1, (2, 12, 12, 6)), tf.float32)
        ours, theirs = tf_ops.layers.Conv2D(4, 7), keras.layers.Conv2D(4, 7)
        ours.build(x.shape), theirs.build(x.shape)
        theirs.set_weights(ours.get_weights())
        grads = []
        for layer in (ours, theirs):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(tf.sin(layer(x)))
            grads.append(tape.gradient(loss, x))
        self.assertAllClose(grads[0], grads[1], rtol=1e-5, atol=1e-5)

    def test_conv2d_transpose_to_8_channels_5x5(self):
        rng = np.random.default_rng(2)
        dy = rng.uniform(-1, 1, (2, 6, 6, 3)).astype(np.float32)
        w = rng.uniform(-1, 1, (5, 5, 8, 3)).astype(np.float32)
        ours = tf_ops.conv2d_transpose(dy, w, [2, 12, 12, 8], strides=2, padding="SAME")
        builtin = tf.nn.conv2d_transpose(dy, w, [2, 12, 12, 8], strides=2, padding="SAME")
        exact = reference.conv2d_backprop_input([2, 12, 12, 8], w.astype(np.float64),
                                                dy.astype(np.float64), [1, 2, 2, 1], "SAME")
        self.assertAllClose(ours, exact, rtol=0, atol=1e-5)
        self.assertAllClose(ours, builtin, rtol=0, atol=1e-4)


class LargestStrideTest(tf.test.TestCase):
    """A column stride of 2**63 - 1 (found by fuzzing, under UndefinedBehaviorSanitizer): the
    fast kernels' floor division of a tap's first column overflowed (-a + b - 1). Every pixel
    still has its one output column."""

    def test_backprop_input_with_the_largest_stride(self):
        rng = np.random.default_rng(448)
        w = rng.uniform(-1, 1, (2, 3, 1, 3))
        dy = rng.uniform(-1, 1, (3, 3, 3, 1))
        strides = [1, 1, 1, 2**63 - 1]
        for sizes in ([3, 1, 3, 2], [3, 2]):
            dx = tf_ops.conv2d_backprop_input(sizes, tf.constant(w, tf.float32), tf.constant(dy, tf.float32),
                                              strides=strides, padding="SAME", data_format="NCHW")
            want = reference.conv2d_backprop_input([3, 1, 3, 2], w, dy, strides, "SAME", data_format="NCHW")
            self.assertAllClose(dx, want, rtol=1e-5, atol=1e-6)


class ExactModeBfloat16Test(tf.test.TestCase):
    """bfloat16 in exact mode on a processor without AVX-512 (an AMD EPYC with AVX2 only) ran
    AVX-512 code and died of SIGILL: the check for AMX tiles built the AMX kernels' table, whose
    initializer the compiler writes with AVX-512 stores. Fails (by crashing) on such processors
    only; elsewhere it checks exact mode's bfloat16 results."""

    def test_bfloat16_in_exact_mode(self):
        rng = np.random.default_rng(3)
        x = rng.uniform(-1, 1, (1, 8, 8, 16)).astype(np.float32)
        w = rng.uniform(-1, 1, (3, 3, 16, 16)).astype(np.float32)
        as_bf16 = lambda a: tf.cast(tf.constant(a), tf.bfloat16)  # noqa: E731
        exact_x = tf.cast(as_bf16(x), tf.float64).numpy()
        exact_w = tf.cast(as_bf16(w), tf.float64).numpy()
        was = tf_ops.exact_mode()
        tf_ops.set_exact_mode(True)
        try:
            y = tf_ops.conv2d(as_bf16(x), as_bf16(w), strides=1, padding="SAME")
            dx = tf_ops.conv2d_backprop_input([1, 8, 8, 16], as_bf16(w), y, strides=[1, 1, 1, 1], padding="SAME")
        finally:
            tf_ops.set_exact_mode(was)
        want = reference.conv2d(exact_x, exact_w, [1, 1, 1, 1], "SAME")
        # One bfloat16 rounding of sums carried in float: within 2**-8 of each value.
        self.assertAllClose(tf.cast(y, tf.float64), want, rtol=2**-8, atol=1e-6)
        want_dx = reference.conv2d_backprop_input([1, 8, 8, 16], exact_w, tf.cast(y, tf.float64).numpy(),
                                                  [1, 1, 1, 1], "SAME")
        self.assertAllClose(tf.cast(dx, tf.float64), want_dx, rtol=2**-8, atol=1e-6)
