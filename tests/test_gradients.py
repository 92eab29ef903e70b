"""Gradients of every op, checked numerically in float64 with tf.test.compute_gradient;
second derivatives through nested tapes and tf.hessians. Every gradient is made of ops of
the family, so NCHW, dilated, grouped and explicitly padded configurations all work on CPU."""
import numpy as np
import tensorflow as tf

import common
import tf_ops

# compute_gradient's numeric Jacobian uses central differences; in float64 they agree with
# the analytic one to about 1e-9 for these bilinear ops.
GRAD_TOLERANCE = 1e-6
CONFIGS_PER_KIND = 8


def _op(kind, cfg):
    """The op as a function of its two differentiable tensors, and their shapes."""
    lib = tf_ops.load_library()
    a = dict(strides=cfg["strides"], padding=cfg["padding"],
             explicit_paddings=cfg["explicit_paddings"], data_format=cfg["data_format"],
             dilations=cfg["dilations"])
    xs, ws, ys = cfg["x_shape"], cfg["filter_shape"], cfg["y_shape"]
    x_const = tf.zeros(xs, tf.float64)
    w_const = tf.zeros(ws, tf.float64)
    table = {
        "conv2d": (lambda x, w: lib.tf_ops_conv2d(x, w, **a), xs, ws),
        "backprop_input": (lambda w, dy: lib.tf_ops_conv2d_backprop_input(xs, w, dy, **a), ws, ys),
        "backprop_input_v2": (lambda w, dy: lib.tf_ops_conv2d_backprop_input_v2(x_const, w, dy, **a), ws, ys),
        "backprop_filter": (lambda x, dy: lib.tf_ops_conv2d_backprop_filter(x, ws, dy, **a), xs, ys),
        "backprop_filter_v2": (lambda x, dy: lib.tf_ops_conv2d_backprop_filter_v2(x, w_const, dy, **a), xs, ys),
        "depthwise": (lambda x, w: lib.tf_ops_depthwise_conv2d_native(x, w, **a), xs, ws),
        "depthwise_backprop_input":
            (lambda w, dy: lib.tf_ops_depthwise_conv2d_native_backprop_input(xs, w, dy, **a), ws, ys),
        "depthwise_backprop_filter":
            (lambda x, dy: lib.tf_ops_depthwise_conv2d_native_backprop_filter(x, ws, dy, **a), xs, ys),
    }
    return table[kind]


def _max_gradient_error(f, args):
    theoretical, numerical = tf.test.compute_gradient(f, args)
    return max(float(np.max(np.abs(t - n))) if t.size else 0.0
               for t, n in zip(theoretical, numerical))


class FirstDerivativeTest(tf.test.TestCase):

    def _check(self, kind, seed):
        rng = np.random.default_rng(seed)
        worst = 0.0
        for i in range(CONFIGS_PER_KIND):
            cfg = common.random_config(rng, depthwise=common.is_depthwise(kind), max_size=6)
            f, shape_a, shape_b = _op(kind, cfg)
            a = tf.constant(rng.uniform(-1, 1, shape_a))
            b = tf.constant(rng.uniform(-1, 1, shape_b))
            err = _max_gradient_error(f, [a, b])
            worst = max(worst, err)
            self.assertLessEqual(err, GRAD_TOLERANCE, common.describe(kind, cfg, tf.float64))
        return worst

    def test_every_op(self):
        for i, kind in enumerate(common.KINDS):
            with self.subTest(kind=kind):
                self._check(kind, 100 + i)

    def test_every_axis_of_the_matrix(self):
        # One configuration per axis value, so each is covered whatever the random draw.
        cases = [
            common.make_config("NCHW", 2, 5, 6, 4, [3, 2, 2, 4], (2, 1), (1, 2), "EXPLICIT", (1, 0, 2, 1)),
            common.make_config("NHWC", 1, 7, 5, 6, [2, 3, 2, 3], (3, 2), (2, 1), "SAME"),
            common.make_config("NCHW", 1, 6, 7, 3, [3, 3, 3, 2], (1, 2), (2, 2), "VALID"),
            common.make_config("NHWC", 2, 6, 6, 4, [2, 2, 4, 3], (2, 2), (1, 1), "EXPLICIT", (0, 2, 1, 0)),
        ]
        for cfg in cases:
            self.assertIsNotNone(cfg)
            for kind in ("conv2d", "backprop_input", "backprop_filter"):
                with self.subTest(kind=kind, cfg=common.describe(kind, cfg, tf.float64)):
                    f, sa, sb = _op(kind, cfg)
                    args = [tf.constant(np.random.default_rng(0).uniform(-1, 1, s)) for s in (sa, sb)]
                    self.assertLessEqual(_max_gradient_error(f, args), GRAD_TOLERANCE)
        dw = common.make_config("NCHW", 1, 6, 7, 3, [3, 2, 3, 2], (2, 1), (2, 3), "EXPLICIT",
                                (1, 1, 0, 2), depthwise=True)
        for kind in ("depthwise", "depthwise_backprop_input", "depthwise_backprop_filter"):
            with self.subTest(kind=kind):
                f, sa, sb = _op(kind, dw)
                args = [tf.constant(np.random.default_rng(1).uniform(-1, 1, s)) for s in (sa, sb)]
                self.assertLessEqual(_max_gradient_error(f, args), GRAD_TOLERANCE)

    def test_sizes_inputs_get_no_gradient(self):
        w = tf.ones([3, 3, 2, 4], tf.float64)
        dy = tf.ones([1, 4, 4, 4], tf.float64)
        x = tf.ones([1, 4, 4, 2], tf.float64)
        sizes = tf.constant([1, 4, 4, 2])
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([w, dy, x, sizes])
            out = tf_ops.conv2d_backprop_input(sizes, w, dy, [1, 1, 1, 1], "SAME")
            out_v2 = tf_ops.conv2d_backprop_input_v2(x, w, dy, [1, 1, 1, 1], "SAME")
        self.assertIsNone(tape.gradient(out, sizes))
        self.assertIsNone(tape.gradient(out_v2, x))
        self.assertEqual(tape.gradient(out, w).shape, w.shape)
        self.assertEqual(tape.gradient(out_v2, dy).shape, dy.shape)


class SecondDerivativeTest(tf.test.TestCase):

    def test_nested_tape_through_conv2d_transpose_nchw_dilated_grouped_explicit(self):
        # conv2d_transpose into an NCHW output [1, 6, 6, 5] with a 2-group filter
        # [3, 2, 3, 4], strides (1, 2), dilation 2 and explicit padding (1, 2) x (2, 0).
        rng = np.random.default_rng(7)
        cfg = common.make_config("NCHW", 1, 6, 5, 6, [3, 2, 3, 4], (1, 2), (2, 2), "EXPLICIT", (1, 2, 2, 0))
        self.assertIsNotNone(cfg)
        output_shape = cfg["x_shape"]
        padding = [[0, 0], [0, 0], [1, 2], [2, 0]]

        def forward(dy, w):
            return tf_ops.conv2d_transpose(dy, w, output_shape, strides=[1, 2], padding=padding,
                                           data_format="NCHW", dilations=2)

        dy = tf.constant(rng.uniform(-1, 1, cfg["y_shape"]))
        w = tf.constant(rng.uniform(-1, 1, cfg["filter_shape"]))
        u = tf.constant(rng.uniform(-1, 1, output_shape))

        def first_derivatives(dy, w):
            # d/d(dy, w) of <u, y> with y = conv2d_transpose(dy, w): Conv2D and Conv2DBackpropFilter.
            with tf.GradientTape() as inner:
                inner.watch([dy, w])
                y = forward(dy, w)
            g_dy, g_w = inner.gradient(y, [dy, w], output_gradients=u)
            return tf.reduce_sum(g_dy * g_dy) + tf.reduce_sum(g_w * g_w)

        with tf.GradientTape() as outer:
            outer.watch([dy, w])
            value = first_derivatives(dy, w)
        analytic = outer.gradient(value, [dy, w])
        theoretical, numerical = tf.test.compute_gradient(first_derivatives, [dy, w])
        for a, t, n in zip(analytic, theoretical, numerical):
            self.assertAllClose(t, n, atol=1e-6, rtol=1e-6)
            self.assertAllClose(tf.reshape(a, [-1]), t[0], atol=1e-9)

    def test_gradient_of_gradient_every_op(self):
        # The gradient of each op is built from other ops of the family; differentiating it
        # again checks those ops' gradients.
        rng = np.random.default_rng(11)
        for i, kind in enumerate(common.KINDS):
            cfg = common.random_config(rng, depthwise=common.is_depthwise(kind), max_size=5)
            f, sa, sb = _op(kind, cfg)
            a0 = tf.constant(rng.uniform(-1, 1, sa))
            b0 = tf.constant(rng.uniform(-1, 1, sb))
            out_shape = f(a0, b0).shape
            u = tf.constant(rng.uniform(-1, 1, out_shape))

            def grads(a, b):
                with tf.GradientTape() as tape:
                    tape.watch([a, b])
                    y = f(a, b)
                ga, gb = tape.gradient(y, [a, b], output_gradients=u)
                return tf.reduce_sum(tf.sin(ga)) + tf.reduce_sum(tf.sin(gb))

            with self.subTest(kind=kind, cfg=common.describe(kind, cfg, tf.float64)):
                self.assertLessEqual(_max_gradient_error(grads, [a0, b0]), GRAD_TOLERANCE)

    def test_hessians(self):
        # loss = sum(conv2d(x, w)^2) is quadratic in x: its Hessian is 2 J^T J, with J the
        # Jacobian of the convolution, here computed from the float64 reference.
        cfg = common.make_config("NCHW", 1, 4, 3, 4, [2, 2, 2, 2], (1, 2), (2, 1), "EXPLICIT", (1, 0, 0, 1))
        rng = np.random.default_rng(3)
        w = rng.uniform(-1, 1, cfg["filter_shape"])
        a = dict(strides=cfg["strides"], padding=[[0, 0], [0, 0], [1, 0], [0, 1]],
                 data_format="NCHW", dilations=cfg["dilations"])

        @tf.function
        def hessian(x):
            loss = tf.reduce_sum(tf_ops.conv2d(x, tf.constant(w), **a) ** 2)
            return tf.hessians(loss, x)[0]

        x = tf.constant(rng.uniform(-1, 1, cfg["x_shape"]))
        h = hessian(x).numpy().reshape(x.shape.num_elements(), -1)
        from tf_ops import reference
        n = x.shape.num_elements()
        jac = np.stack([reference.conv2d(np.eye(n)[i].reshape(cfg["x_shape"]), w, cfg["strides"], "EXPLICIT",
                                         cfg["explicit_paddings"], cfg["dilations"], "NCHW").ravel()
                        for i in range(n)], axis=1)
        self.assertAllClose(h, 2 * jac.T @ jac, atol=1e-10)


if __name__ == "__main__":
    tf.test.main()
