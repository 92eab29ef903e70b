"""The public Python functions: TensorFlow's signatures and argument handling, eager,
tf.function and TF1 graphs, empty tensors, the loader's error, and a training run."""
import inspect
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import common
import tf_ops
from tf_ops import reference

tf1 = tf.compat.v1


class SignatureTest(tf.test.TestCase):

    def test_signatures_match_tensorflow(self):
        pairs = {
            tf_ops.conv2d_backprop_input: tf1.nn.conv2d_backprop_input,
            tf_ops.conv2d_transpose: tf.nn.conv2d_transpose,
            tf_ops.depthwise_conv2d_backprop_input: tf.nn.depthwise_conv2d_backprop_input,
            tf_ops.depthwise_conv2d_backprop_filter: tf.nn.depthwise_conv2d_backprop_filter,
            tf_ops.conv2d_backprop_filter: tf1.nn.conv2d_backprop_filter,
            tf_ops.conv2d: tf.nn.conv2d,
            tf_ops.depthwise_conv2d_native: tf1.nn.depthwise_conv2d_native,
        }
        for ours, theirs in pairs.items():
            with self.subTest(fn=ours.__name__):
                def params(fn):
                    return [(p.name, p.default) for p in inspect.signature(inspect.unwrap(fn)).parameters.values()]
                self.assertEqual(params(ours), params(theirs))


class ModesTest(tf.test.TestCase):
    """Each public function gives the reference result eagerly, in tf.function and in a TF1 graph."""

    def _cases(self):
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, [2, 3, 7, 8])           # NCHW, 3 channels
        w = rng.uniform(-1, 1, [3, 2, 3, 4])
        dy = rng.uniform(-1, 1, [2, 4, 4, 4])          # SAME, strides (2, 2)
        a = dict(strides=[1, 1, 2, 2], padding="SAME", data_format="NCHW", dilations=[1, 1, 1, 2])
        ra = dict(strides=a["strides"], padding="SAME", dilations=a["dilations"], data_format="NCHW")
        wd = rng.uniform(-1, 1, [3, 2, 3, 2])
        dyd = rng.uniform(-1, 1, [2, 6, 7, 4])
        return [
            ("conv2d", lambda x, w: tf_ops.conv2d(x, w, strides=[2, 2], padding="SAME", data_format="NCHW",
                                                  dilations=[1, 2]),
             (x, w), reference.conv2d(x, w, **ra)),
            ("conv2d_backprop_input", lambda w, dy: tf_ops.conv2d_backprop_input([2, 3, 7, 8], w, dy, **a),
             (w, dy), reference.conv2d_backprop_input([2, 3, 7, 8], w, dy, **ra)),
            ("conv2d_backprop_input_2", lambda w, dy: tf_ops.conv2d_backprop_input([7, 8], w, dy, **a),
             (w, dy), reference.conv2d_backprop_input([2, 3, 7, 8], w, dy, **ra)),
            ("conv2d_backprop_input_v2", lambda w, dy: tf_ops.conv2d_backprop_input_v2(tf.zeros([2, 3, 7, 8], tf.float64), w, dy, **a),
             (w, dy), reference.conv2d_backprop_input([2, 3, 7, 8], w, dy, **ra)),
            ("conv2d_transpose", lambda dy, w: tf_ops.conv2d_transpose(dy, w, [2, 3, 7, 8], strides=2, padding="SAME",
                                                                      data_format="NCHW", dilations=[1, 2]),
             (dy, w), reference.conv2d_backprop_input([2, 3, 7, 8], w, dy, **ra)),
            ("conv2d_backprop_filter", lambda x, dy: tf_ops.conv2d_backprop_filter(x, [3, 2, 3, 4], dy, **a),
             (x, dy), reference.conv2d_backprop_filter(x, [3, 2, 3, 4], dy, **ra)),
            ("conv2d_backprop_filter_v2", lambda x, dy: tf_ops.conv2d_backprop_filter_v2(x, tf.zeros([3, 2, 3, 4], tf.float64), dy, **a),
             (x, dy), reference.conv2d_backprop_filter(x, [3, 2, 3, 4], dy, **ra)),
            ("depthwise_conv2d_native", lambda x, w: tf_ops.depthwise_conv2d_native(x, w, [1, 1, 1, 2], "SAME", "NCHW", [1, 1, 2, 1]),
             (x, wd), reference.conv2d(x, wd, [1, 1, 1, 2], "SAME", (), [1, 1, 2, 1], "NCHW", depthwise=True)),
            ("depthwise_conv2d_backprop_input",
             lambda w, dy: tf_ops.depthwise_conv2d_backprop_input([2, 3, 7, 8], w, dy, [1, 1, 1, 2], "SAME", "NCHW", [1, 1, 2, 1]),
             (wd, dyd), reference.conv2d_backprop_input([2, 3, 7, 8], wd, dyd, [1, 1, 1, 2], "SAME", (), [1, 1, 2, 1], "NCHW", True)),
            ("depthwise_conv2d_backprop_filter",
             lambda x, dy: tf_ops.depthwise_conv2d_backprop_filter(x, [3, 2, 3, 2], dy, [1, 1, 1, 2], "SAME", "NCHW", [1, 1, 2, 1]),
             (x, dyd), reference.conv2d_backprop_filter(x, [3, 2, 3, 2], dyd, [1, 1, 1, 2], "SAME", (), [1, 1, 2, 1], "NCHW", True)),
        ]

    def test_eager_function_and_graph(self):
        for name, fn, args, expected in self._cases():
            with self.subTest(fn=name, mode="eager"):
                self.assertAllClose(fn(*[tf.constant(a) for a in args]), expected, atol=1e-10)
            with self.subTest(fn=name, mode="tf.function"):
                self.assertAllClose(tf.function(fn)(*[tf.constant(a) for a in args]), expected, atol=1e-10)
            with self.subTest(fn=name, mode="graph"):
                with tf.Graph().as_default():
                    placeholders = [tf1.placeholder(tf.float64, a.shape) for a in args]
                    out = fn(*placeholders)
                    with tf1.Session() as sess:
                        value = sess.run(out, dict(zip(placeholders, args)))
                self.assertAllClose(value, expected, atol=1e-10)


class ArgumentTest(tf.test.TestCase):

    def test_conv2d_transpose_strides_and_padding_forms(self):
        rng = np.random.default_rng(1)
        dy = tf.constant(rng.uniform(-1, 1, [1, 3, 3, 2]), tf.float32)
        w = tf.constant(rng.uniform(-1, 1, [3, 3, 4, 2]), tf.float32)
        expected = tf.nn.conv2d_transpose(dy, w, [1, 6, 6, 4], strides=2, padding="SAME")
        for strides in (2, [2], [2, 2], [1, 2, 2, 1]):
            with self.subTest(strides=strides):
                self.assertAllClose(tf_ops.conv2d_transpose(dy, w, [1, 6, 6, 4], strides), expected, atol=1e-5)
        self.assertAllClose(tf_ops.conv2d_transpose(dy, w, tf.constant([1, 6, 6, 4]), 2), expected, atol=1e-5)
        explicit = tf_ops.conv2d_transpose(dy, w, [1, 6, 6, 4], 2, padding=[[0, 0], [1, 0], [0, 1], [0, 0]])
        self.assertAllClose(explicit, tf.nn.conv2d_transpose(dy, w, [1, 6, 6, 4], 2,
                                                             padding=[[0, 0], [1, 0], [0, 1], [0, 0]]), atol=1e-5)

    def test_filters_alias(self):
        w = tf.ones([1, 1, 1, 1])
        dy = tf.ones([1, 2, 2, 1])
        self.assertAllEqual(tf_ops.conv2d_backprop_input([1, 2, 2, 1], filters=w, out_backprop=dy,
                                                         strides=[1, 1, 1, 1], padding="VALID"), tf.ones([1, 2, 2, 1]))
        with self.assertRaisesRegex(ValueError, "Cannot specify both 'filters' and 'filter'"):
            tf_ops.conv2d_backprop_input([1, 2, 2, 1], w, dy, [1, 1, 1, 1], "VALID", filters=w)

    def test_acceptance_example(self):
        out = tf_ops.conv2d_backprop_input_v2(tf.zeros([1, 4, 4, 1]), tf.ones([2, 2, 1, 1]),
                                              tf.ones([1, 2, 2, 1]), [1, 2, 2, 1], "VALID")
        self.assertAllEqual(out, tf.ones([1, 4, 4, 1]))


class EmptyTensorTest(tf.test.TestCase):

    def test_empty_outputs_and_zero_gradients(self):
        # Each case: (kind, config) with some dimension 0; the result must equal the
        # reference: an empty tensor, or zeros where only out_backprop/input is empty.
        cases = [
            ("backprop_input", common.make_config("NHWC", 0, 5, 5, 3, [3, 3, 3, 2], (1, 1), (1, 1), "SAME")),
            ("backprop_input", common.make_config("NCHW", 2, 5, 5, 3, [3, 3, 3, 0], (2, 2), (1, 1), "SAME")),
            ("backprop_input", common.make_config("NHWC", 2, 1, 1, 5, [0, 1, 5, 0], (1, 1), (1, 1), "SAME")),
            ("backprop_input", common.make_config("NHWC", 2, 0, 4, 3, [2, 2, 3, 2], (1, 1), (1, 1), "SAME")),
            ("backprop_input", common.make_config("NHWC", 2, 1, 6, 3, [4, 2, 3, 2], (2, 1), (1, 1), "VALID")),
            ("backprop_input_v2", common.make_config("NCHW", 1, 1, 6, 2, [4, 2, 2, 2], (2, 1), (1, 1), "VALID")),
            ("backprop_filter", common.make_config("NHWC", 1, 10, 1, 1, [1, 2, 1, 2], (2, 2), (1, 1), "VALID")),
            ("backprop_filter", common.make_config("NHWC", 0, 4, 4, 2, [3, 3, 2, 2], (1, 1), (1, 1), "SAME")),
            ("backprop_filter_v2", common.make_config("NCHW", 2, 4, 4, 2, [3, 3, 2, 0], (1, 1), (1, 1), "SAME")),
            ("conv2d", common.make_config("NHWC", 1, 2, 2, 2, [3, 3, 2, 2], (1, 1), (1, 1), "VALID")),
            ("conv2d", common.make_config("NCHW", 0, 5, 5, 2, [3, 3, 2, 2], (1, 1), (1, 1), "SAME")),
            ("depthwise", common.make_config("NHWC", 2, 5, 5, 0, [3, 3, 0, 2], (1, 1), (1, 1), "SAME", depthwise=True)),
            ("depthwise_backprop_input", common.make_config("NHWC", 2, 5, 5, 3, [3, 3, 3, 0], (1, 1), (1, 1), "SAME", depthwise=True)),
            ("depthwise_backprop_filter", common.make_config("NHWC", 2, 1, 5, 3, [3, 3, 3, 2], (2, 1), (1, 1), "VALID", depthwise=True)),
            ("depthwise_backprop_filter", common.make_config("NHWC", 0, 5, 5, 3, [3, 3, 3, 2], (1, 1), (1, 1), "SAME", depthwise=True)),
        ]
        rng = np.random.default_rng(2)
        for kind, cfg in cases:
            self.assertIsNotNone(cfg)
            for dtype in common.KINDS[kind]:
                with self.subTest(case=common.describe(kind, cfg, dtype)):
                    arrays = common.make_inputs(rng, cfg, dtype)
                    ours = common.run_ours(kind, cfg, arrays, dtype)
                    expected = common.run_reference(kind, cfg, arrays)
                    self.assertEqual(ours.shape, expected.shape)
                    self.assertFalse(np.any(np.asarray(expected, np.float64)))
                    self.assertFalse(np.any(np.asarray(ours, np.float64)), "must be zeros")


class LoaderTest(tf.test.TestCase):

    def _import_with_version(self, version):
        code = (f"import tensorflow as tf; tf.__version__ = {version!r}\n"
                "try:\n    import tf_ops\nexcept ImportError as e:\n    print('refused:', e)\n"
                "else:\n    print('loaded:', tf_ops.conv2d(tf.ones([1, 3, 3, 1]), tf.ones([2, 2, 1, 1]),\n"
                "                                      1, 'VALID').numpy().ravel().tolist())\n")
        with tempfile.TemporaryDirectory() as cwd:  # not the checkout, whose tf_ops has no library
            return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                                  timeout=300).stdout

    @pytest.mark.exhaustive
    def test_version_mismatch_explains_and_gives_the_rebuild_command(self):
        built = tf_ops.build_info()["tf_version"]  # the running TensorFlow may be another patch release
        major, minor = (int(v) for v in built.split(".")[:2])
        for other in (f"{major}.{minor + 1}.0", f"{major}.{minor - 1}.3", "3.0.0"):
            with self.subTest(running=other):
                out = self._import_with_version(other)
                self.assertIn("refused: tf_ops: TensorFlow version mismatch", out)
                self.assertIn("built for TensorFlow " + built, out)
                self.assertIn(f"TensorFlow {other} is running", out)
                self.assertIn("pip install --no-build-isolation", out)

    @pytest.mark.exhaustive
    def test_any_patch_release_of_the_minor_loads(self):
        # TensorFlow keeps its ABI within a minor series, as the package's requirement
        # (>=2.21,<2.22 for a build on 2.21.x) already says.
        major, minor = (int(v) for v in tf_ops.build_info()["tf_version"].split(".")[:2])
        for patch in (f"{major}.{minor}.0", f"{major}.{minor}.7", f"{major}.{minor}.1rc2"):
            with self.subTest(running=patch):
                self.assertIn("loaded: [4.0, 4.0, 4.0, 4.0]", self._import_with_version(patch))

    def test_source_checkout_shadowing_the_package(self):
        # Run from a checkout's root, Python imports the source folder, which holds no compiled
        # library: said in one sentence, with what to do, both on import and by the main job.
        with tempfile.TemporaryDirectory() as checkout:
            package = pathlib.Path(checkout) / "tf_ops"
            package.mkdir()
            for source in pathlib.Path(tf_ops.__file__).parent.glob("*.py"):
                (package / source.name).write_text(source.read_text())
            (pathlib.Path(checkout) / "setup.py").write_text("")
            for command in (["-c", "import tf_ops"], ["-m", "tf_ops"]):
                with self.subTest(command=command):
                    proc = subprocess.run([sys.executable, *command], cwd=checkout, capture_output=True, text=True,
                                          timeout=300)
                    self.assertNotEqual(proc.returncode, 0)
                    self.assertIn(f"tf_ops: Python imported tf_ops from the source checkout {checkout} (the current "
                                  "folder shadows the installed package), which holds no compiled library: run "
                                  "from another folder.", proc.stderr)
                    self.assertNotIn("--force-reinstall", proc.stderr)
                    if command[0] == "-m":
                        self.assertNotIn("Traceback", proc.stderr)

    def test_load_op_library_by_path(self):
        module = tf.load_op_library(tf_ops.library_path())
        self.assertTrue(hasattr(module, "tf_ops_conv2d_backprop_input_v2"))


class MainJobTest(tf.test.TestCase):

    def test_main_job_passes_and_prints_no_warning_of_ours(self):
        with tempfile.TemporaryDirectory() as cwd:
            proc = subprocess.run([sys.executable, "-m", "tf_ops"], cwd=cwd, capture_output=True, text=True,
                                  timeout=600)
        out = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, out[-3000:])
        self.assertRegex(proc.stdout, r"\n(\d+) passed, 0 failed\n")
        self.assertNotIn("retracing", out)
        # TensorFlow's runtime logs each call its built-ins refuse; the self-check drops those.
        self.assertNotIn("rendezvous", out)
        flags = re.search(r"^compile flags: (.*)$", proc.stdout, re.M).group(1).split()
        for flag, folder in zip(flags, flags[1:]):
            if flag == "-isystem":
                self.assertTrue(os.path.isdir(folder) or folder == "<removed-isolated-build>/tensorflow/include",
                                folder)


class TrainingTest(tf.test.TestCase):

    def test_small_model_trains_in_nchw_with_dilation_and_groups(self):
        # encoder: grouped dilated conv2d -> depthwise (dilated, unequal strides);
        # decoder: conv2d_transpose back to the input shape. Built only from tf_ops ops.
        rng = np.random.default_rng(0)
        x = tf.constant(rng.uniform(-1, 1, [4, 4, 12, 12]), tf.float32)
        target = tf.constant(rng.uniform(-1, 1, [4, 2, 12, 12]), tf.float32)
        w1 = tf.Variable(rng.normal(0, 0.3, [3, 3, 2, 8]), dtype=tf.float32)   # 2 groups
        w2 = tf.Variable(rng.normal(0, 0.3, [3, 3, 8, 1]), dtype=tf.float32)   # depthwise
        w3 = tf.Variable(rng.normal(0, 0.3, [3, 3, 2, 8]), dtype=tf.float32)   # transpose

        def model(x):
            h = tf.nn.relu(tf_ops.conv2d(x, w1, strides=1, padding="SAME", data_format="NCHW", dilations=2))
            h = tf_ops.depthwise_conv2d_native(h, w2, [1, 1, 2, 1], [[0, 0], [0, 0], [1, 1], [2, 2]],
                                               "NCHW", [1, 1, 1, 2])
            return tf_ops.conv2d_transpose(h, w3, [4, 2, 12, 12], strides=[2, 1], padding="SAME",
                                           data_format="NCHW")

        opt = tf.keras.optimizers.SGD(0.05)
        losses = []
        for _ in range(15):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - target) ** 2)
            grads = tape.gradient(loss, [w1, w2, w3])
            self.assertTrue(all(g is not None for g in grads))
            opt.apply_gradients(zip(grads, [w1, w2, w3]))
            losses.append(float(loss))
        self.assertLess(losses[-1], 0.9 * losses[0], losses)


if __name__ == "__main__":
    tf.test.main()
