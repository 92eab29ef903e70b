"""Models and graphs using tf_ops ops leave the process that built them: SavedModels (a
tf.Module, a Keras model's export), GraphDefs from tf.function and from TF1 graphs. Each is
loaded and run in a fresh process after `import tf_ops` and gives the same outputs; without
the import, loading fails with an error naming the missing op."""
import os
import pathlib
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import layers

WORKER = pathlib.Path(__file__).resolve().parent / "saved_graph_worker.py"
X_SHAPE = (2, 6, 6, 4)


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype("float32") for name, shape in
            (("conv", (3, 3, 2, 6)), ("up", (3, 3, 4, 6)), ("dw", (3, 3, 4, 2)))}


def _chain(x, w):
    """Grouped Conv2D, a strided transpose, dilated depthwise and its input gradient, and the
    gradients of all of it for the filters: every op of the family appears in the graph."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, *w.values()])
        t = tf_ops.conv2d(x, w["conv"], 1, "SAME")                          # 4 -> 6 channels, 2 groups
        t = tf_ops.conv2d_transpose(t, w["up"], tf.stack([tf.shape(x)[0], 12, 12, 4]), 2)
        t = tf_ops.depthwise_conv2d_native(t, w["dw"], [1, 1, 1, 1], "SAME", dilations=[1, 2, 2, 1])
        loss = tf.reduce_sum(t * t)
    parts = [t, *tape.gradient(loss, [x, w["conv"], w["up"], w["dw"]])]
    return tf.concat([tf.reshape(p, [-1]) for p in parts], axis=0)


class _Module(tf.Module):

    def __init__(self):
        super().__init__()
        self.w = {k: tf.Variable(v) for k, v in _weights().items()}

    @tf.function(input_signature=[tf.TensorSpec([None, *X_SHAPE[1:]], tf.float32)])
    def run(self, x):
        return _chain(x, self.w)


class SavedGraphTest(tf.test.TestCase):

    def _load(self, kind, directory, with_import=True):
        args = [sys.executable, str(WORKER), kind, directory] + ([] if with_import else ["--no-import"])
        return subprocess.run(args, cwd=directory, capture_output=True, text=True, timeout=300)

    def _round_trip(self, kind, save, x, want):
        """save(path) writes the artifact; a fresh process loads it with and without tf_ops."""
        with tempfile.TemporaryDirectory() as tmp:
            save(os.path.join(tmp, "artifact"))
            np.save(os.path.join(tmp, "x.npy"), x)
            out = self._load(kind, tmp)
            self.assertEqual(out.returncode, 0, out.stderr[-3000:])
            self.assertAllEqual(np.load(os.path.join(tmp, "y_loaded.npy")), want)
            missing = self._load(kind, tmp, with_import=False)
            self.assertNotEqual(missing.returncode, 0)
            self.assertRegex(missing.stderr, r"Op type not registered 'TfOps>\w+'")

    def _x(self):
        return np.random.default_rng(1).standard_normal(X_SHAPE).astype("float32")

    def test_module_savedmodel(self):
        module, x = _Module(), self._x()
        self._round_trip("savedmodel", lambda path: tf.saved_model.save(module, path), x,
                         module.run(x).numpy())

    def test_keras_model_export(self):
        keras.utils.set_random_seed(2)
        inputs = keras.Input(X_SHAPE[1:])
        t = layers.Conv2D(8, 3, padding="same", groups=2, activation="relu")(inputs)
        t = layers.Conv2DTranspose(6, 3, strides=2, padding="same")(t)
        t = layers.DepthwiseConv2DTranspose(3, strides=2, depth_multiplier=2)(t)
        model = keras.Model(inputs, layers.DepthwiseConv2D(3, dilation_rate=2)(t))
        x = self._x()
        self._round_trip("keras_export", lambda path: model.export(path, verbose=False), x,
                         model(x).numpy())

    def test_tf_function_graphdef(self):
        w, x = _weights(), self._x()

        @tf.function(input_signature=[tf.TensorSpec(X_SHAPE, tf.float32, name="x")])
        def f(t):
            return tf.identity(_chain(t, {k: tf.constant(v) for k, v in w.items()}), name="y")

        graph_def = f.get_concrete_function().graph.as_graph_def()
        self.assertTrue({"TfOps>Conv2DBackpropFilter", "TfOps>DepthwiseConv2dNativeBackpropInput"}
                        <= {node.op for node in graph_def.node} | {
                            node.op for fn in graph_def.library.function for node in fn.node_def})
        self._round_trip("graphdef", lambda path: pathlib.Path(path).write_bytes(
            graph_def.SerializeToString()), x, f(tf.constant(x)).numpy())

    def test_tf1_session_graphdef(self):
        w, x = _weights(), self._x()
        with tf.Graph().as_default() as graph:
            placeholder = tf.compat.v1.placeholder(tf.float32, X_SHAPE, name="x")
            y = tf.identity(_chain(placeholder, {k: tf.constant(v) for k, v in w.items()}), name="y")
            self.assertEqual(y.shape.as_list(), [sum(np.prod(s) for s in (
                (2, 12, 12, 8), X_SHAPE, (3, 3, 2, 6), (3, 3, 4, 6), (3, 3, 4, 2)))])
            with tf.compat.v1.Session(graph=graph) as session:
                want = session.run(y, feed_dict={placeholder: x})
        ops = {node.op for node in graph.as_graph_def().node}
        self.assertTrue({name for name in tf_ops.OP_NAMES.values() if "V2" not in name} <= ops, ops)
        self._round_trip("session", lambda path: pathlib.Path(path).write_bytes(
            graph.as_graph_def().SerializeToString()), x, want)


if __name__ == "__main__":
    tf.test.main()
