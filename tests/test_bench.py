"""python -m tf_ops bench: the harness runs end to end on its --quick shapes (every kind of
baseline: built-in, V1 for V2, compositions for dilated and depthwise-dilated rows), writes a
well-formed table, and switches oneDNN mode by re-running itself. Each run is a fresh
process started in a scratch folder, so it imports the installed package."""
import csv
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest
import tensorflow as tf

import tf_ops._selfcheck


def _bench(cwd, *args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "tf_ops", "bench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


class BenchTest(tf.test.TestCase):

    def _check_outputs(self, proc, out, onednn):
        tail = (proc.stdout + proc.stderr)[-4000:]
        self.assertEqual(proc.returncode, 0, tail)
        stem = out / f"bench_quick_onednn_{onednn}"
        self.assertTrue(stem.with_suffix(".csv").is_file(), tail)
        self.assertTrue(stem.with_suffix(".json").is_file(), tail)
        with open(stem.with_suffix(".csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        self.assertNotEmpty(rows)
        for r in rows:
            where = f"{r['op']} {r['shape']} {r['dtype']}"
            self.assertGreater(float(r["ours_ms"]), 0, where)
            if r["ratio"] == "unavailable":
                self.assertEqual(r["tf_ms"], "", where)
            else:
                self.assertGreater(float(r["tf_ms"]), 0, where)
                self.assertGreater(float(r["ratio"]), 0, where)
        with open(stem.with_suffix(".json")) as f:
            report = json.load(f)
        self.assertEqual(len(report["rows"]), len(rows))
        self.assertEqual(report["onednn"], onednn == "on")
        self.assertGreater(report["peak"]["gflops"], 0)
        self.assertTrue(report["machine"]["processor"])
        self.assertRegex(proc.stdout, r"geomean \w+ +\w+ +\d+\.\d+")
        self.assertIn("total wall time", proc.stdout)
        return rows

    def test_quick_run(self):
        with tempfile.TemporaryDirectory() as cwd:
            out = pathlib.Path(cwd) / "results"
            proc = _bench(cwd, "--quick", "--out", str(out))
            rows = self._check_outputs(proc, out, "on" if self._onednn() else "off")
        ops = {r["op"] for r in rows}
        self.assertLessEqual({"conv2d", "conv2d_backprop_input", "conv2d_backprop_filter",
                              "conv2d_backprop_input_v2", "depthwise_conv2d_native",
                              "depthwise_conv2d_backprop_input", "depthwise_conv2d_backprop_filter"}, ops)
        self.assertEqual({r["dtype"] for r in rows}, {"float32", "bfloat16", "float16"})
        baselines = [r["baseline"] for r in rows if r["shape"].endswith("dilated")]
        self.assertNotEmpty(baselines)
        for b in baselines:
            self.assertTrue(b.startswith("composition:") or b == "unavailable", b)

    @pytest.mark.exhaustive
    def test_onednn_flag_reruns_in_the_other_mode(self):
        # Without --out, into tf_ops_bench/ of the current folder (a run from the checkout's
        # root leaves the committed benchmarks/results alone).
        other = "off" if self._onednn() else "on"
        with tempfile.TemporaryDirectory() as cwd:
            out = pathlib.Path(cwd) / "tf_ops_bench"
            proc = _bench(cwd, "--quick", "--onednn", other, "--filter", "^conv2d tiny(_dilated)? float32")
            rows = self._check_outputs(proc, out, other)
            self.assertEqual(sorted(os.listdir(cwd)), ["tf_ops_bench"])
        self.assertEqual(len(rows), 2)
        self.assertIn(f"oneDNN {other}", proc.stdout)

    @staticmethod
    def _onednn():
        # As TensorFlow decided at import: with TF_ENABLE_ONEDNN_OPTS unset it turns oneDNN on
        # only on processors with AVX-512 (VNNI, BF16) or AMX, not on an AVX2-only one.
        return tf_ops._selfcheck.onednn_enabled()


if __name__ == "__main__":
    tf.test.main()
