"""Training a model built from tf_ops.layers on TensorFlow's distribution engine:
MirroredStrategy over two logical CPU devices and MultiWorkerMirroredStrategy across two
worker processes on 127.0.0.1 each end with the weights single-device training gives."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

WORKER = pathlib.Path(__file__).resolve().parent / "distribute_worker.py"


def _loopback_only():
    """A command prefix that runs a process in a network namespace of its own with only the
    loopback device, where the system allows it: TensorFlow's gRPC server listens on every
    interface, and this keeps the multi-worker cluster off the machine's network."""
    if shutil.which("unshare") and shutil.which("ip"):
        prefix = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
        if subprocess.run(prefix + ["true"], capture_output=True).returncode == 0:
            return prefix
    return []


@pytest.mark.exhaustive
class DistributeTest(tf.test.TestCase):

    def _train(self, tmp, mode, *extra, prefix=()):
        out = os.path.join(tmp, f"{mode}{''.join(extra)}.npz")
        run = subprocess.run([*prefix, sys.executable, str(WORKER), mode, out, *extra], cwd=tmp,
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr[-4000:])
        return out

    def _assert_same_training(self, single, other, replicas):
        a, b = np.load(single), np.load(other)
        self.assertEqual(int(b["replicas"]), replicas)
        finals = sorted(k for k in a.files if k.startswith("final_"))
        self.assertEqual(len(finals), 8)
        for key in finals:
            initial = a["initial_" + key.split("_")[1]]
            self.assertAllEqual(b["initial_" + key.split("_")[1]], initial)
            moved = np.abs(a[key] - initial).max()
            self.assertGreater(moved, 1e-5, f"{key} did not train")
            self.assertAllClose(b[key], a[key], rtol=0, atol=1e-3 * moved, msg=key)

    def test_mirrored_two_cpus(self):
        with tempfile.TemporaryDirectory() as tmp:
            single = self._train(tmp, "single")
            self._assert_same_training(single, self._train(tmp, "mirrored"), 2)
            single_fit = self._train(tmp, "single", "fit")
            self._assert_same_training(single_fit, self._train(tmp, "mirrored", "fit"), 2)

    def test_multi_worker_localhost(self):
        with tempfile.TemporaryDirectory() as tmp:
            single = self._train(tmp, "single")
            self._train(tmp, "cluster", prefix=_loopback_only())
            for index in range(2):
                self._assert_same_training(single, os.path.join(tmp, f"cluster{index}.npz"), 2)


if __name__ == "__main__":
    tf.test.main()
