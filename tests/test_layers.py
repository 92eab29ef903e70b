"""tf_ops.layers: the Keras layers against Keras's own (same weights, same outputs) where
Keras runs the case on CPU and against the float64 reference everywhere; shapes, gradients,
configs and .keras files, training with fit/evaluate/predict, XLA fallback, mixed precision,
and the error under another Keras backend."""
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import warnings
from unittest import mock

import keras
import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import layers, reference
from tf_ops._selfcheck import onednn_enabled

HERE = pathlib.Path(__file__).resolve().parent


def _nchw(layer):
    return layer.data_format == "channels_first"


def _four(layer, pair):
    return [1, 1, *pair] if _nchw(layer) else [1, *pair, 1]


def _with_bias(layer, y):
    if not layer.use_bias:
        return y
    b = layer.bias.numpy().astype(np.float64)
    return y + (b.reshape(1, -1, 1, 1) if _nchw(layer) else b)


def expected(layer, x):
    """The float64 reference output of a built layer for x (numpy)."""
    w = layer.kernel.numpy().astype(np.float64)
    padding = layer.padding.upper()
    strides, dilations = _four(layer, layer.strides), _four(layer, layer.dilation_rate)
    fmt = "NCHW" if _nchw(layer) else "NHWC"
    out_shape = layer.compute_output_shape(x.shape)
    if isinstance(layer, layers.Conv2D):
        y = reference.conv2d(x, w, strides, padding, dilations=dilations, data_format=fmt)
    elif isinstance(layer, layers.DepthwiseConv2D):
        y = reference.conv2d(x, w, strides, padding, dilations=dilations, data_format=fmt,
                             depthwise=True)
    elif isinstance(layer, layers.Conv2DTranspose):
        y = reference.conv2d_backprop_input(out_shape, w, x, strides, padding,
                                            dilations=dilations, data_format=fmt)
    else:
        # Depthwise transpose, channel by channel: output c*M + m is input c transposed
        # through kernel[:, :, c, m].
        axis = 1 if _nchw(layer) else 3
        m = layer.depth_multiplier
        single = list(out_shape)
        single[axis] = 1
        y = np.zeros(out_shape)
        for c in range(x.shape[axis]):
            for j in range(m):
                xc = np.take(x, [c], axis=axis)
                yc = reference.conv2d_backprop_input(single, w[:, :, c:c + 1, j:j + 1], xc,
                                                     strides, padding, dilations=dilations,
                                                     data_format=fmt)
                index = [slice(None)] * 4
                index[axis] = slice(c * m + j, c * m + j + 1)
                y[tuple(index)] = yc
    return np.asarray(layer.activation(tf.constant(_with_bias(layer, y))))


# Keras's counterpart of each layer, for the cases Keras runs on CPU.
KERAS = {
    layers.Conv2D: keras.layers.Conv2D,
    layers.Conv2DTranspose: keras.layers.Conv2DTranspose,
    layers.DepthwiseConv2D: keras.layers.DepthwiseConv2D,
}

# Keras's layer runs the case on CPU only where TensorFlow runs oneDNN (NCHW, dilated transposes):
# with TF_ENABLE_ONEDNN_OPTS unset, on processors with AVX-512 (VNNI, BF16) or AMX.
ONEDNN = "with oneDNN"

# (layer class, arguments, input shape, whether Keras's layer runs it on CPU: True, False or ONEDNN).
CASES = [
    (layers.Conv2D, dict(filters=6, kernel_size=3, padding="same"), (2, 9, 9, 4), True),
    (layers.Conv2D, dict(filters=5, kernel_size=(3, 2), strides=(2, 1)), (2, 9, 8, 3), True),
    (layers.Conv2D, dict(filters=4, kernel_size=3, dilation_rate=2, padding="same"), (1, 9, 9, 3), True),
    (layers.Conv2D, dict(filters=6, kernel_size=3, groups=2, padding="same"), (2, 8, 8, 4), True),
    (layers.Conv2D, dict(filters=4, kernel_size=3, strides=2, data_format="channels_first"), (2, 3, 9, 8), ONEDNN),
    (layers.Conv2D, dict(filters=6, kernel_size=3, strides=2, dilation_rate=2, groups=3,
                         padding="same", data_format="channels_first"), (2, 6, 9, 9), False),
    (layers.Conv2DTranspose, dict(filters=6, kernel_size=3, strides=2, padding="same"), (2, 5, 5, 4), True),
    (layers.Conv2DTranspose, dict(filters=3, kernel_size=5, strides=2, padding="same",
                                  output_padding=1), (2, 4, 4, 8), True),
    (layers.Conv2DTranspose, dict(filters=4, kernel_size=3, strides=3, output_padding=2,
                                  use_bias=False), (1, 4, 5, 2), True),
    (layers.Conv2DTranspose, dict(filters=4, kernel_size=(2, 3), strides=(2, 1),
                                  activation="relu"), (2, 5, 4, 3), True),
    (layers.Conv2DTranspose, dict(filters=4, kernel_size=3, dilation_rate=2, padding="same"), (2, 6, 6, 3), ONEDNN),
    (layers.Conv2DTranspose, dict(filters=6, kernel_size=3, strides=2, groups=2, padding="same"), (2, 5, 5, 4), False),
    (layers.Conv2DTranspose, dict(filters=4, kernel_size=3, strides=2, padding="same",
                                  data_format="channels_first"), (2, 3, 5, 4), ONEDNN),
    (layers.Conv2DTranspose, dict(filters=4, kernel_size=3, strides=2, dilation_rate=2,
                                  padding="same", data_format="channels_first"), (2, 3, 5, 6), False),
    (layers.DepthwiseConv2D, dict(kernel_size=3, padding="same", depth_multiplier=2), (2, 8, 8, 3), True),
    (layers.DepthwiseConv2D, dict(kernel_size=3, strides=2, dilation_rate=2, padding="same"), (2, 9, 9, 4), True),
    (layers.DepthwiseConv2D, dict(kernel_size=3, strides=(1, 2), depth_multiplier=3,
                                  data_format="channels_first"), (2, 2, 7, 8), ONEDNN),
    (layers.DepthwiseConv2DTranspose, dict(kernel_size=3, strides=2, padding="same"), (2, 4, 5, 3), False),
    (layers.DepthwiseConv2DTranspose, dict(kernel_size=4, strides=2, depth_multiplier=3,
                                           output_padding=1), (2, 4, 4, 2), False),
    (layers.DepthwiseConv2DTranspose, dict(kernel_size=3, dilation_rate=2, depth_multiplier=2,
                                           padding="same", data_format="channels_first"), (1, 3, 5, 5), False),
]


def _random_weights(layer, rng):
    layer.set_weights([rng.standard_normal(w.shape).astype("float32") for w in layer.get_weights()])


class ParityTest(tf.test.TestCase):

    def test_outputs_against_reference_and_keras(self):
        rng = np.random.default_rng(0)
        for cls, kwargs, shape, keras_runs in CASES:
            keras_runs = keras_runs is True or (keras_runs == ONEDNN and onednn_enabled())
            with self.subTest(layer=cls.__name__, **{k: str(v) for k, v in kwargs.items()}):
                x = rng.standard_normal(shape).astype("float32")
                ours = cls(**kwargs)
                y = ours(x)
                _random_weights(ours, rng)  # non-zero bias too
                y = ours(x).numpy()
                self.assertEqual(y.shape, tuple(ours.compute_output_shape(shape)))
                self.assertAllClose(y, expected(ours, x.astype(np.float64)), rtol=1e-4, atol=1e-4)
                if keras_runs:
                    theirs = KERAS[cls](**kwargs)
                    theirs.build(shape)
                    theirs.set_weights(ours.get_weights())
                    self.assertAllClose(y, theirs(x).numpy(), rtol=1e-5, atol=1e-5)
                    self.assertEqual(tuple(theirs.compute_output_shape(shape)),
                                     tuple(ours.compute_output_shape(shape)))
                    self.assertEqual([w.shape for w in theirs.weights], [w.shape for w in ours.weights])

    def test_gradients_match_keras(self):
        rng = np.random.default_rng(1)
        for cls, kwargs, shape, keras_runs in CASES:
            keras_runs = keras_runs is True or (keras_runs == ONEDNN and onednn_enabled())
            if not keras_runs:
                continue
            with self.subTest(layer=cls.__name__, **{k: str(v) for k, v in kwargs.items()}):
                x = tf.constant(rng.standard_normal(shape).astype("float32"))
                ours, theirs = cls(**kwargs), KERAS[cls](**kwargs)
                ours.build(shape)
                theirs.build(shape)
                _random_weights(ours, rng)
                theirs.set_weights(ours.get_weights())
                probe = tf.constant(rng.standard_normal(ours.compute_output_shape(shape)).astype("float32"))
                grads = []
                for layer in (ours, theirs):
                    with tf.GradientTape() as tape:
                        tape.watch(x)
                        loss = tf.reduce_sum(layer(x) * probe)
                    grads.append(tape.gradient(loss, [x] + layer.trainable_weights))
                for g_ours, g_theirs in zip(*grads):
                    self.assertAllClose(g_ours, g_theirs, rtol=1e-4, atol=1e-4)

    def test_unknown_spatial_sizes(self):
        """A model with unknown height and width runs on inputs of several sizes, and each
        layer's output shape is the one compute_output_shape gives."""
        inputs = keras.Input((None, None, 4))
        t = layers.Conv2DTranspose(6, 3, strides=2, padding="same")(inputs)
        t = layers.DepthwiseConv2DTranspose(3, strides=2, depth_multiplier=2, output_padding=1)(t)
        t = layers.DepthwiseConv2D(3, strides=2, padding="same")(t)
        model = keras.Model(inputs, layers.Conv2D(2, 3, groups=2)(t))
        for size in ((5, 7), (8, 3)):
            x = np.random.default_rng(2).standard_normal((2, *size, 4)).astype("float32")
            self.assertEqual(model.predict(x, verbose=0).shape,
                             tuple(model.compute_output_shape((2, *size, 4))))


class ValidationTest(tf.test.TestCase):

    def test_bad_arguments_raise(self):
        cases = [
            (lambda: layers.Conv2DTranspose(5, 3, groups=2),
             "number of filters must be evenly divisible by the number of groups"),
            (lambda: layers.Conv2DTranspose(4, 3, strides=2, output_padding=2), "output_padding"),
            (lambda: layers.Conv2D(4, 0), "kernel_size"),
            (lambda: layers.Conv2D(4, 3, padding="causal"), "padding"),
            (lambda: layers.DepthwiseConv2D(3, depth_multiplier=0), "depth_multiplier"),
            (lambda: layers.Conv2D(4, 3, data_format="NHWC"), "data_format"),
            (lambda: layers.Conv2D(4, 3, groups=4)(np.zeros((1, 5, 5, 6), "float32")),
             "input channels"),
        ]
        for make, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(ValueError, message):
                    make()

    def test_output_of_no_pixels_is_refused(self):
        # A "valid" kernel larger than the input gives no output pixels: a ValueError from
        # build, compute_output_shape, symbolic and eager calls (as Keras's layers), never an
        # empty tensor.
        message = "Computed output size would be zero or negative"
        for fmt, shape in (("channels_last", (2, 4, 6, 3)), ("channels_first", (2, 3, 4, 6))):
            for make in (lambda: layers.Conv2D(2, 5, data_format=fmt),
                         lambda: layers.DepthwiseConv2D((3, 7), data_format=fmt),
                         lambda: layers.Conv2D(2, 3, dilation_rate=(1, 3), data_format=fmt)):
                with self.subTest(fmt=fmt, layer=make().name):
                    with self.assertRaisesRegex(ValueError, message):
                        make().build(shape)
                    with self.assertRaisesRegex(ValueError, message):
                        make().compute_output_shape(shape)
                    with self.assertRaisesRegex(ValueError, message):
                        make()(np.zeros(shape, "float32"))
                    with self.assertRaisesRegex(ValueError, message):
                        make()(keras.Input(shape[1:]))
                    # Built for unknown sizes, then called on a too small input.
                    layer = make()
                    unknown = (None, None, 3) if fmt == "channels_last" else (3, None, None)
                    layer(keras.Input(unknown))
                    with self.assertRaisesRegex(ValueError, message):
                        layer(np.zeros(shape, "float32"))

    def test_wrong_rank_is_refused(self):
        with self.assertRaisesRegex(ValueError, "ndim=4"):
            layers.Conv2DTranspose(4, 3)(np.zeros((1, 5, 5, 2, 1), "float32"))


class SerializationTest(tf.test.TestCase):

    def test_config_round_trip(self):
        rng = np.random.default_rng(3)
        for cls, kwargs, shape, _ in CASES:
            with self.subTest(layer=cls.__name__, **{k: str(v) for k, v in kwargs.items()}):
                ours = cls(**kwargs)
                x = rng.standard_normal(shape).astype("float32")
                ours.build(shape)
                _random_weights(ours, rng)
                again = keras.layers.deserialize(keras.layers.serialize(ours))
                self.assertIsInstance(again, cls)
                self.assertEqual(again.get_config(), ours.get_config())
                if not again.built:
                    again.build(shape)
                again.set_weights(ours.get_weights())
                self.assertAllEqual(again(x), ours(x))

    def test_config_matches_keras_keys(self):
        """Every argument Keras's layer serializes, ours serializes too (plus our extras)."""
        for ours, theirs, extra in ((layers.Conv2D(4, 3), keras.layers.Conv2D(4, 3), set()),
                                    (layers.Conv2DTranspose(4, 3), keras.layers.Conv2DTranspose(4, 3),
                                     {"groups"}),
                                    (layers.DepthwiseConv2D(3), keras.layers.DepthwiseConv2D(3), set())):
            with self.subTest(layer=type(ours).__name__):
                keras_keys = set(theirs.get_config()) - {"lora_rank", "lora_alpha"}
                self.assertEqual(set(ours.get_config()), keras_keys | extra)

    def test_keras_file_loads_in_fresh_process(self):
        rng = np.random.default_rng(4)
        inputs = keras.Input((6, 6, 4))
        t = layers.Conv2D(8, 3, padding="same", groups=2, activation="relu")(inputs)
        t = layers.DepthwiseConv2D(3, strides=2, dilation_rate=2, padding="same")(t)
        t = layers.Conv2DTranspose(6, 3, strides=2, padding="same", groups=2)(t)
        t = layers.DepthwiseConv2DTranspose(3, strides=2, depth_multiplier=2, output_padding=1)(t)
        model = keras.Model(inputs, t)
        x = rng.standard_normal((2, 6, 6, 4)).astype("float32")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            with warnings.catch_warnings():
                # model.save reads each variable with np.array, which NumPy 2 warns about for
                # every TensorFlow variable (Keras's own layers alike): Keras's warning, not ours.
                warnings.filterwarnings("ignore", "__array__ implementation doesn't accept a copy",
                                        DeprecationWarning)
                model.save(path)
            np.save(os.path.join(tmp, "x.npy"), x)
            code = textwrap.dedent(f"""
                import numpy as np, keras, tf_ops
                model = keras.models.load_model({path!r})
                print(sorted({{type(l).__module__ + "." + type(l).__name__ for l in model.layers[1:]}}))
                np.save({os.path.join(tmp, "y.npy")!r}, model.predict(np.load({os.path.join(tmp, "x.npy")!r}), verbose=0))
            """)
            out = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True,
                                 text=True, timeout=300)
            self.assertEqual(out.returncode, 0, out.stderr[-3000:])
            self.assertIn("tf_ops.layers.Conv2DTranspose", out.stdout)
            self.assertIn("tf_ops.layers.DepthwiseConv2DTranspose", out.stdout)
            self.assertAllEqual(np.load(os.path.join(tmp, "y.npy")), model.predict(x, verbose=0))


def _small_model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4, 4, 8))
    t = layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(inputs)
    t = layers.DepthwiseConv2DTranspose(3, strides=2, padding="same")(t)
    t = layers.DepthwiseConv2D(3, padding="same")(t)
    return keras.Model(inputs, layers.Conv2D(3, 3, padding="same")(t))


def _data(seed=0, n=32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 4, 4, 8)).astype("float32"),
            rng.standard_normal((n, 16, 16, 3)).astype("float32"))


class TrainingTest(tf.test.TestCase):

    def test_fit_evaluate_predict(self):
        model = _small_model()
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
        self.assertFalse(model.jit_compile)
        x, y = _data()
        history = model.fit(x, y, batch_size=8, epochs=4, verbose=0).history["loss"]
        self.assertLess(history[-1], history[0])
        self.assertAllClose(model.evaluate(x, y, verbose=0), np.mean((model.predict(x, verbose=0) - y) ** 2),
                            rtol=1e-4)
        self.assertEqual(model.predict(x[:3], verbose=0).shape, (3, 16, 16, 3))

    def test_jit_compile_trains_as_without_xla(self):
        # Every layer has an XLA lowering: jit_compile=True keeps XLA for the whole model,
        # "auto" compiles too (or not, as Keras decides for the machine), and each training
        # run ends with the weights of the run without XLA.
        x, y = _data(n=16)
        weights = {}
        for jit in (False, True, "auto"):
            model = _small_model(seed=3)
            self.assertTrue(all(layer.supports_jit for layer in model.layers[1:]))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=jit)
            self.assertFalse(any("jit_compile" in str(w.message) for w in caught), [str(w.message) for w in caught])
            if jit is True:
                self.assertTrue(model.jit_compile)
            model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
            weights[jit] = model.get_weights()
        for jit in (True, "auto"):
            for got, want in zip(weights[jit], weights[False]):
                self.assertAllClose(got, want, rtol=1e-4, atol=1e-5, msg=f"jit_compile={jit}")

    def test_mixed_precision(self):
        x, y = _data(n=16)
        reference_model = _small_model(seed=5)
        want = reference_model.predict(x, verbose=0)
        for policy, dtype, tol in (("mixed_float16", "float16", 2e-2), ("mixed_bfloat16", "bfloat16", 1e-1)):
            with self.subTest(policy=policy):
                keras.mixed_precision.set_global_policy(policy)
                try:
                    model = _small_model(seed=5)
                    model.set_weights(reference_model.get_weights())
                    self.assertEqual(model.layers[1].kernel.dtype, "float32")
                    out = model(x)
                    self.assertEqual(out.dtype, dtype)
                    scale = np.abs(want).max()
                    self.assertAllClose(tf.cast(out, tf.float32) / scale, want / scale, atol=tol)
                    model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
                    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0).history["loss"]
                    self.assertTrue(np.all(np.isfinite(history)))
                finally:
                    keras.mixed_precision.set_global_policy("float32")


class BackendTest(tf.test.TestCase):

    def test_other_backend_raises(self):
        """Under another Keras backend (only TensorFlow's is installed here, so the backend
        Keras reports is patched) constructing a layer raises, saying why."""
        for cls, args in ((layers.Conv2DTranspose, (4, 3)), (layers.DepthwiseConv2D, (3,))):
            with self.subTest(layer=cls.__name__):
                with mock.patch.object(keras.backend, "backend", return_value="jax"):
                    with self.assertRaisesRegex(
                            RuntimeError, f"{cls.__name__} runs TensorFlow ops, so it needs Keras's "
                            "TensorFlow backend; the active Keras backend is 'jax'"):
                        cls(*args)


if __name__ == "__main__":
    tf.test.main()
