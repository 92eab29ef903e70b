"""The XLA lowerings (cc/kernels/conv_xla.cc): every op under tf.function(jit_compile=True)
against the same function without XLA (our kernels) and the float64 reference, over random
configurations of the feature matrix, edge cases and every dtype; gradients of first and
second order; one convolution and nothing else of substance in each op's HLO; the kernels'
checks and messages at compile time; a jit-compiled SavedModel in a fresh process. (Keras
models with jit_compile: tests/test_layers.py.)"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

import common
from tiers import budget
import tf_ops

CONFIGS_PER_KIND = budget("TF_OPS_XLA_CONFIGS", fast=4, exhaustive=10)
tf.get_logger().setLevel("ERROR")  # one tf.function per case: retracing warnings are expected


def _functions(kind, cfg):
    def fn(x, w, dy):
        return common.run_ours_tensors(kind, cfg, x, w, dy)
    return tf.function(fn), tf.function(fn, jit_compile=True)


def _tensors(arrays, dtype):
    return [tf.constant(arrays[k], dtype=dtype) for k in ("x", "w", "dy")]


# Configurations the random sweep rarely draws: empty operands, explicit padding beyond the
# filter's reach, strides beyond the filter, 1x1 filters, groups with one channel each.
EDGE = [
    ("NHWC", 0, 5, 5, 2, [3, 3, 2, 4], (1, 1), (1, 1), "SAME", None),
    ("NHWC", 2, 5, 5, 2, [3, 3, 2, 0], (2, 2), (1, 1), "SAME", None),
    ("NCHW", 1, 0, 6, 2, [3, 3, 2, 4], (1, 1), (1, 1), "SAME", None),
    ("NHWC", 1, 4, 5, 3, [2, 2, 3, 2], (1, 2), (1, 1), "EXPLICIT", [5, 4, 3, 6]),
    ("NCHW", 2, 7, 6, 4, [3, 2, 2, 6], (2, 3), (2, 1), "EXPLICIT", [0, 4, 3, 0]),
    ("NHWC", 1, 9, 8, 3, [2, 2, 3, 4], (4, 5), (1, 1), "VALID", None),
    ("NHWC", 2, 6, 6, 6, [1, 1, 1, 12], (2, 2), (1, 1), "SAME", None),
    ("NCHW", 1, 1, 1, 2, [1, 1, 2, 3], (3, 3), (1, 1), "SAME", None),
]


class XlaParityTest(tf.test.TestCase):

    def _check(self, kind, cfg, dtype, rng):
        """Compiled with XLA: equal to the kernels' result and the float64 reference, or, where
        the graph refuses the shapes (the shape function, as TensorFlow's own), refused too.
        True where values were compared."""
        what = common.describe(kind, cfg, dtype)
        arrays = common.make_inputs(rng, cfg, dtype)
        tensors = _tensors(arrays, dtype)
        plain, jit = _functions(kind, cfg)
        try:
            want = plain(*tensors).numpy()
        except (ValueError, tf.errors.InvalidArgumentError) as e:
            with self.assertRaises(type(e), msg=what):
                jit(*tensors)
            return False
        got = jit(*tensors).numpy()
        self.assertEqual(got.shape, want.shape, what)
        if min(np.size(arrays[k]) for k in ("x", "w", "dy")) == 0:  # empty sums: zeros
            self.assertFalse(np.any(got), what)
        else:
            self.assertLessEqual(common.max_error(got, common.run_reference(kind, cfg, arrays)),
                                 common.TOLERANCE[dtype], f"vs reference: {what}")
        self.assertLessEqual(common.max_error(got, want), 2 * common.TOLERANCE[dtype], f"vs kernels: {what}")
        return True

    def _sweep(self, kind, seed):
        rng = np.random.default_rng(seed)
        compared = 0
        for i in range(CONFIGS_PER_KIND):
            cfg = common.random_config(rng, depthwise=common.is_depthwise(kind), plain=i % 4 == 0)
            for dtype in common.KINDS[kind]:
                compared += self._check(kind, cfg, dtype, rng)
        for fmt, n, h, w, c, filt, strides, dilations, padding, pads in EDGE:
            if common.is_depthwise(kind):
                filt = [filt[0], filt[1], c, max(filt[3] // max(filt[2], 1), 1) if c else 2]
            cfg = common.make_config(fmt, n, h, w, c, filt, strides, dilations, padding, pads,
                                     common.is_depthwise(kind))
            if cfg is None:
                continue
            for dtype in common.KINDS[kind]:
                compared += self._check(kind, cfg, dtype, rng)
        self.assertGreaterEqual(compared, (CONFIGS_PER_KIND + len(EDGE)) * len(common.KINDS[kind]) // 2)

    def test_conv2d(self):
        self._sweep("conv2d", 11)

    def test_conv2d_backprop_input(self):
        self._sweep("backprop_input", 12)

    def test_conv2d_backprop_input_v2(self):
        self._sweep("backprop_input_v2", 13)

    def test_conv2d_backprop_filter(self):
        self._sweep("backprop_filter", 14)

    def test_conv2d_backprop_filter_v2(self):
        self._sweep("backprop_filter_v2", 15)

    def test_depthwise(self):
        self._sweep("depthwise", 16)

    def test_depthwise_backprop_input(self):
        self._sweep("depthwise_backprop_input", 17)

    def test_depthwise_backprop_filter(self):
        self._sweep("depthwise_backprop_filter", 18)


# One configuration per op with groups (or a depth multiplier), unequal strides, dilation
# and NCHW: what a lowering could get wrong by slicing groups or materializing zeros.
HLO_CASES = {
    "conv2d": ("NCHW", 2, 9, 8, 6, [3, 2, 2, 9], (2, 1), (1, 2), "SAME", None),
    "backprop_input": ("NHWC", 2, 9, 8, 6, [3, 2, 2, 9], (2, 3), (2, 1), "SAME", None),
    "backprop_input_v2": ("NCHW", 1, 7, 7, 4, [3, 3, 2, 6], (2, 2), (1, 1), "EXPLICIT", [1, 0, 2, 1]),
    "backprop_filter": ("NHWC", 2, 9, 8, 6, [3, 2, 3, 4], (2, 1), (1, 2), "VALID", None),
    "backprop_filter_v2": ("NCHW", 2, 8, 9, 4, [2, 3, 2, 6], (1, 2), (2, 1), "SAME", None),
    "depthwise": ("NHWC", 2, 9, 8, 3, [3, 3, 3, 2], (2, 2), (2, 1), "SAME", None),
    "depthwise_backprop_input": ("NCHW", 1, 9, 8, 3, [3, 3, 3, 2], (2, 3), (1, 1), "SAME", None),
    "depthwise_backprop_filter": ("NHWC", 2, 9, 8, 3, [3, 3, 3, 2], (3, 2), (1, 2), "VALID", None),
}


# An HLO instruction line: "[ROOT] %name = SHAPE opcode(operands), attributes", SHAPE a tuple
# "(f32[2]{0}, s32[])" or one array shape.
INSTRUCTION = re.compile(r"\s*(?:ROOT\s+)?%\S+\s*=\s*(?:\(.*?\)|\S+)\s+([a-z][\w-]*)\(")


class XlaHloTest(tf.test.TestCase):

    def test_one_convolution_per_op(self):
        rng = np.random.default_rng(0)
        for kind, (fmt, n, h, w, c, filt, strides, dilations, padding, pads) in HLO_CASES.items():
            with self.subTest(kind=kind):
                cfg = common.make_config(fmt, n, h, w, c, filt, strides, dilations, padding, pads,
                                         common.is_depthwise(kind))
                tensors = _tensors(common.make_inputs(rng, cfg, tf.float32), tf.float32)
                hlo = _functions(kind, cfg)[1].experimental_get_compiler_ir(*tensors)(stage="hlo")
                ops = [m.group(1) for m in map(INSTRUCTION.match, hlo.splitlines()) if m]
                self.assertIn("parameter", ops, hlo)
                self.assertEqual(ops.count("convolution"), 1, hlo)
                # No loop, no per-group slice or concatenation, no zero-inserting pad or scatter.
                for forbidden in ("while", "slice", "dynamic-slice", "concatenate", "pad", "scatter",
                                  "dynamic-update-slice", "call", "custom-call"):
                    self.assertNotIn(forbidden, ops, f"{kind}: {forbidden} in\n{hlo}")


class XlaGradientTest(tf.test.TestCase):

    def test_first_and_second_order(self):
        rng = np.random.default_rng(1)
        cases = [
            ("conv2d NCHW groups dilation", lambda x, w: tf_ops.conv2d(
                x, w, strides=[1, 1, 2, 1], padding="SAME", data_format="NCHW", dilations=[1, 1, 1, 2]),
             [2, 4, 7, 6], [3, 3, 2, 6]),
            ("depthwise stride dilation", lambda x, w: tf_ops.depthwise_conv2d_native(
                x, w, [1, 2, 1, 1], "SAME", dilations=[1, 1, 2, 1]), [2, 7, 6, 3], [3, 2, 3, 2]),
            ("conv2d_transpose groups", lambda dy, w: tf_ops.conv2d_transpose(
                dy, w, [2, 9, 8, 4], strides=[1, 2, 2, 1], padding="SAME"), [2, 5, 4, 6], [3, 3, 2, 6]),
        ]
        for name, op, a_shape, w_shape in cases:
            with self.subTest(case=name):
                a = tf.constant(rng.uniform(-1, 1, a_shape), tf.float64)
                w = tf.constant(rng.uniform(-1, 1, w_shape), tf.float64)

                def grads(a, w):
                    with tf.GradientTape() as outer:
                        outer.watch([a, w])
                        with tf.GradientTape() as inner:
                            inner.watch([a, w])
                            y = op(a, w)
                            loss = tf.reduce_sum(y * y * y)
                        ga, gw = inner.gradient(loss, [a, w])
                        s = tf.reduce_sum(ga * ga) + tf.reduce_sum(gw * gw)
                    return [ga, gw, *outer.gradient(s, [a, w])]

                want = tf.function(grads)(a, w)
                got = tf.function(grads, jit_compile=True)(a, w)
                for g_got, g_want in zip(got, want):
                    self.assertAllClose(g_got, g_want, rtol=1e-9, atol=1e-9)


class XlaErrorsTest(tf.test.TestCase):

    def test_input_sizes_must_be_a_compile_time_constant(self):
        # A sizes argument is specialized on its value; one computed at run time cannot be.
        @tf.function(jit_compile=True)
        def f(w, dy):
            sizes = tf.random.uniform([4], 1, 5, dtype=tf.int32)
            return tf_ops.conv2d_backprop_input(sizes, w, dy, strides=[1, 1, 1, 1], padding="SAME")

        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "compile-time constant"):
            f(tf.ones([3, 3, 2, 3]), tf.ones([1, 4, 4, 3]))
        g = tf.function(lambda sizes, w, dy: tf_ops.conv2d_backprop_input(
            sizes, w, dy, strides=[1, 1, 1, 1], padding="SAME"), jit_compile=True)
        self.assertEqual(g(tf.constant([1, 4, 4, 2]), tf.ones([3, 3, 2, 3]), tf.ones([1, 4, 4, 3])).shape,
                         [1, 4, 4, 2])

    def test_kernel_messages_at_compile_time(self):
        # Inputs of unknown shape leave the shape function nothing to check: the checks run
        # when XLA compiles (the shapes are known then), with the kernels' messages.
        cases = [
            (lambda x, w: tf_ops.conv2d(x, w, strides=[1, 1, 1, 1], padding="VALID"),
             [1, 5, 5, 6], [3, 3, 4, 4], "input depth must be evenly divisible by filter depth"),
            (lambda x, w: tf_ops.depthwise_conv2d_native(x, w, [1, 1, 1, 1], "VALID"),
             [1, 5, 5, 3], [3, 3, 2, 2], "input and filter must have the same depth: 3 vs 2"),
            (lambda x, w: tf_ops.conv2d(x, w, strides=[1, 1, 1, 1], padding="VALID"),
             [1, 5, 5], [3, 3, 5, 4], "input must be 4-dimensional"),
        ]
        for op, x_shape, w_shape, message in cases:
            with self.subTest(message=message):
                x, w = tf.ones(x_shape), tf.ones(w_shape)
                spec = [tf.TensorSpec(None, tf.float32)] * 2
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message) as kernel:
                    op(x, w)
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message) as compiled:
                    tf.function(op, jit_compile=True, input_signature=spec)(x, w)
                said = re.sub(r"^\{\{[^}]*\}\}\s*", "", kernel.exception.message).split(" [Op:")[0]
                self.assertIn(said, compiled.exception.message)


class XlaSavedModelTest(tf.test.TestCase):

    def test_jit_compiled_function_reloads_in_a_fresh_process(self):
        rng = np.random.default_rng(2)
        w = rng.uniform(-1, 1, [3, 3, 4, 6]).astype(np.float32)
        dy = rng.uniform(-1, 1, [2, 4, 4, 6]).astype(np.float32)

        class Decoder(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = tf.Variable(w)

            @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([2, 4, 4, 6], tf.float32)])
            def __call__(self, dy):
                return tf_ops.conv2d_transpose(dy, self.w, [2, 8, 8, 4], strides=2, padding="SAME")

        want = Decoder()(tf.constant(dy)).numpy()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "decoder")
            tf.saved_model.save(Decoder(), path)
            np.save(os.path.join(tmp, "dy.npy"), dy)
            code = ("import numpy as np, tensorflow as tf, tf_ops, sys\n"
                    f"m = tf.saved_model.load({path!r})\n"
                    f"y = m(tf.constant(np.load({os.path.join(tmp, 'dy.npy')!r})))\n"
                    f"np.save({os.path.join(tmp, 'y.npy')!r}, y.numpy())\n")
            proc = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                                  timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            self.assertAllClose(np.load(os.path.join(tmp, "y.npy")), want, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
    tf.test.main()
