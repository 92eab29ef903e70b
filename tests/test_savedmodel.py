"""Models and graphs using tf_ops ops leave the process that built them: SavedModels (a
tf.Module, a Keras model's export), GraphDefs from tf.function and from TF1 graphs. Each is
loaded and run in a fresh process after `import tf_ops` and gives the same outputs; without
the import, loading fails with an error naming the missing op. The four are saved first, then
loaded by two fresh processes, one with the import and one without."""
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


def _save_module(path, x):
    module = _Module()
    tf.saved_model.save(module, path)
    return module.run(x).numpy(), None


def _save_keras_export(path, x):
    keras.utils.set_random_seed(2)
    inputs = keras.Input(X_SHAPE[1:])
    t = layers.Conv2D(8, 3, padding="same", groups=2, activation="relu")(inputs)
    t = layers.Conv2DTranspose(6, 3, strides=2, padding="same")(t)
    t = layers.DepthwiseConv2DTranspose(3, strides=2, depth_multiplier=2)(t)
    model = keras.Model(inputs, layers.DepthwiseConv2D(3, dilation_rate=2)(t))
    model.export(path, verbose=False)
    return model(x).numpy(), None


def _save_tf_function_graphdef(path, x):
    w = _weights()

    @tf.function(input_signature=[tf.TensorSpec(X_SHAPE, tf.float32, name="x")])
    def f(t):
        return tf.identity(_chain(t, {k: tf.constant(v) for k, v in w.items()}), name="y")

    graph_def = f.get_concrete_function().graph.as_graph_def()
    pathlib.Path(path).write_bytes(graph_def.SerializeToString())
    return f(tf.constant(x)).numpy(), graph_def


def _save_tf1_session_graphdef(path, x):
    w = _weights()
    with tf.Graph().as_default() as graph:
        placeholder = tf.compat.v1.placeholder(tf.float32, X_SHAPE, name="x")
        y = tf.identity(_chain(placeholder, {k: tf.constant(v) for k, v in w.items()}), name="y")
        with tf.compat.v1.Session(graph=graph) as session:
            want = session.run(y, feed_dict={placeholder: x})
    graph_def = graph.as_graph_def()
    pathlib.Path(path).write_bytes(graph_def.SerializeToString())
    return want, (graph_def, y.shape.as_list())


SAVERS = {"savedmodel": _save_module, "keras_export": _save_keras_export,
          "graphdef": _save_tf_function_graphdef, "session": _save_tf1_session_graphdef}


class SavedGraphTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        x = np.random.default_rng(1).standard_normal(X_SHAPE).astype("float32")
        cls.want, cls.saved = {}, {}
        for kind, save in SAVERS.items():
            directory = os.path.join(cls._tmp.name, kind)
            os.makedirs(directory)
            np.save(os.path.join(directory, "x.npy"), x)
            cls.want[kind], cls.saved[kind] = save(os.path.join(directory, "artifact"), x)
        cls.runs = [subprocess.run([sys.executable, str(WORKER), cls._tmp.name, *SAVERS, *flags],
                                   cwd=cls._tmp.name, capture_output=True, text=True, timeout=600)
                    for flags in ([], ["--no-import"])]

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def _assert_round_trip(self, kind):
        """The fresh process with tf_ops gave the same outputs; the one without failed to load,
        naming the op."""
        directory = pathlib.Path(self._tmp.name, kind)
        for run in self.runs:
            self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        error = directory / "error.txt"
        self.assertFalse(error.exists(), error.read_text() if error.exists() else "")
        self.assertAllEqual(np.load(directory / "y.npy"), self.want[kind])
        self.assertFalse((directory / "y_no_import.npy").exists())
        self.assertRegex((directory / "error_no_import.txt").read_text(), r"Op type not registered 'TfOps>\w+'")

    def test_module_savedmodel(self):
        self._assert_round_trip("savedmodel")

    def test_keras_model_export(self):
        self._assert_round_trip("keras_export")

    def test_tf_function_graphdef(self):
        graph_def = self.saved["graphdef"]
        self.assertTrue({"TfOps>Conv2DBackpropFilter", "TfOps>DepthwiseConv2dNativeBackpropInput"}
                        <= {node.op for node in graph_def.node} | {
                            node.op for fn in graph_def.library.function for node in fn.node_def})
        self._assert_round_trip("graphdef")

    def test_tf1_session_graphdef(self):
        graph_def, shape = self.saved["session"]
        self.assertEqual(shape, [sum(np.prod(s) for s in (
            (2, 12, 12, 8), X_SHAPE, (3, 3, 2, 6), (3, 3, 4, 6), (3, 3, 4, 2)))])
        ops = {node.op for node in graph_def.node}
        self.assertTrue({name for name in tf_ops.OP_NAMES.values() if "V2" not in name} <= ops, ops)
        self._assert_round_trip("session")


if __name__ == "__main__":
    tf.test.main()
