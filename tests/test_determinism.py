"""The same inputs give bitwise the same outputs, whatever the thread count and however
often an op runs."""
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import common

HERE = pathlib.Path(__file__).resolve().parent


class DeterminismTest(tf.test.TestCase):

    @pytest.mark.exhaustive
    def test_bitwise_identical_across_thread_counts(self):
        outputs = {}
        with tempfile.TemporaryDirectory() as tmp:
            for threads in (1, 2, 3):
                path = os.path.join(tmp, f"{threads}.npz")
                proc = subprocess.run([sys.executable, str(HERE / "determinism_worker.py"),
                                       str(threads), path], cwd=str(HERE), capture_output=True,
                                      text=True, timeout=900)
                self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
                with np.load(path) as data:
                    outputs[threads] = {k: data[k] for k in data.files}
        keys = sorted(outputs[1])
        # Eight configurations x 23 (op, dtype) pairs + one depthwise x 12, and the three
        # Winograd ones again in exact mode.
        self.assertEqual(len(keys), 8 * 23 + 12 + 3 * 23)
        for threads in (2, 3):
            self.assertEqual(sorted(outputs[threads]), keys)
            for k in keys:
                self.assertTrue(np.array_equal(outputs[1][k], outputs[threads][k]),
                                f"{k}: {threads} threads differ from 1 thread")

    def test_repeated_calls_are_bitwise_identical(self):
        rng = np.random.default_rng(5)
        cfg = common.make_config("NCHW", 2, 17, 19, 6, [3, 3, 3, 4], (2, 1), (1, 2), "SAME")
        for kind in ("conv2d", "backprop_input", "backprop_filter"):
            arrays = common.make_inputs(rng, cfg, tf.float32)
            first = common.run_ours(kind, cfg, arrays, tf.float32)
            for _ in range(5):
                self.assertEqual(first.tobytes(), common.run_ours(kind, cfg, arrays, tf.float32).tobytes())


if __name__ == "__main__":
    tf.test.main()
