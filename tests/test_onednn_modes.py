"""TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at import, and with oneDNN on (the default)
its float CPU ops run different kernels. The parity sweep runs in this process's mode;
this test reruns it in a fresh process in the other mode, so both are always compared."""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import tensorflow as tf

import common

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.exhaustive
class OneDnnModesTest(tf.test.TestCase):

    def test_parity_in_the_other_onednn_mode(self):
        other = "0" if common.ONEDNN else "1"
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=other)
        proc = subprocess.run(
            [sys.executable, "-c", "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))",
             "-q", "-p", "no:cacheprovider", "-n", "0", str(HERE / "test_parity.py")],
            cwd=str(HERE), env=env, capture_output=True,
            text=True, timeout=1800)
        tail = (proc.stdout + proc.stderr)[-3000:]
        self.assertEqual(proc.returncode, 0, f"TF_ENABLE_ONEDNN_OPTS={other}:\n{tail}")
        summary = re.search(r"(\d+) passed", proc.stdout)
        self.assertIsNotNone(summary, tail)
        self.assertGreaterEqual(int(summary.group(1)), 8, tail)
        self.assertNotIn("skipped", proc.stdout.splitlines()[-1], tail)
        self.assertNotIn("failed", proc.stdout.splitlines()[-1], tail)


if __name__ == "__main__":
    tf.test.main()
