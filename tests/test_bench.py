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

import core_build
import tf_ops._selfcheck


def _bench(cwd, *args, **env_vars):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env_vars)
    return subprocess.run([sys.executable, "-m", "tf_ops", "bench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


class BenchTest(tf.test.TestCase):

    def _check_outputs(self, proc, out, onednn, table=""):
        tail = (proc.stdout + proc.stderr)[-4000:]
        self.assertEqual(proc.returncode, 0, tail)
        stem = out / f"bench_quick{'_' + table if table else ''}_onednn_{onednn}"
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
        # root leaves the committed benchmarks/results alone). TF_OPS_CPU_ISA names the kernel
        # table for the rerun too, and joins the files' names.
        other = "off" if self._onednn() else "on"
        table = "avx2" if "avx2" in core_build.available_isas() else "generic"
        with tempfile.TemporaryDirectory() as cwd:
            out = pathlib.Path(cwd) / "tf_ops_bench"
            proc = _bench(cwd, "--quick", "--onednn", other, "--filter", "^conv2d tiny(_dilated)? float32",
                          TF_OPS_CPU_ISA=table)
            rows = self._check_outputs(proc, out, other, table)
            self.assertEqual(sorted(os.listdir(cwd)), ["tf_ops_bench"])
            with open(out / f"bench_quick_{table}_onednn_{other}.json") as f:
                self.assertEqual(json.load(f)["tf_ops"]["cpu_kernel_isa"], table)
        self.assertEqual(len(rows), 2)
        self.assertIn(f"oneDNN {other}", proc.stdout)
        self.assertIn(f"CPU micro-kernels: {table})", proc.stdout)

    def _quick_report(self, flag, name):
        """The process and the JSON report of `bench <flag> --quick`."""
        with tempfile.TemporaryDirectory() as cwd:
            out = pathlib.Path(cwd) / "results"
            proc = _bench(cwd, flag, "--quick", "--out", str(out))
            self.assertEqual(proc.returncode, 0, (proc.stdout + proc.stderr)[-4000:])
            with open(out / name) as f:
                return proc, json.load(f)

    def test_kernels_run(self):
        proc, report = self._quick_report("--kernels", "kernels_quick.json")
        # Every float table this processor runs, narrowest first.
        usable = core_build.available_isas()
        self.assertEqual([t["table"] for t in report["tables"]],
                         [isa for isa in ("generic", "avx2", "avx512") if isa in usable])
        for t in report["tables"]:
            kernels = t["kernels"]
            self.assertEqual(kernels[0]["kernel"], "peak")
            self.assertGreater(t["peak_gflops"], 0)
            names = {k["kernel"].split()[0] for k in kernels[1:]}
            self.assertEqual(names, {"gemm.affine", "gemm.strided"}, t["table"])
            for row in kernels[1:] + t["passes"]:
                self.assertGreater(row["gflops"], 0, (t["table"], row))
                self.assertAlmostEqual(row["peak_fraction"], row["gflops"] / t["peak_gflops"])
            self.assertEqual([p["algorithm"] for p in t["passes"]], ["winograd", "filter_gemm"], t["table"])
            self.assertIn(f"{t['table']:<8} peak", proc.stdout)

    def test_plan_cache_run(self):
        proc, report = self._quick_report("--plan-cache", "plan_cache_quick.json")
        self.assertEqual([r["what"] for r in report["rows"]],
                         [f"{op} {shape}" for shape in ("tiny", "tiny_s2")
                          for op in ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter")])
        for r in report["rows"]:
            self.assertGreater(r["cached_us"], 0, r)
            self.assertGreater(r["uncached_us"], 0, r)
            self.assertAlmostEqual(r["ratio"], r["uncached_us"] / r["cached_us"])
            self.assertGreater(r["explain_us"], 0, r)
            self.assertIn(r["what"], proc.stdout)
        self.assertEqual(report["failures"], 0)

    @pytest.mark.exhaustive
    def test_models_run(self):
        _, report = self._quick_report("--models", f"models_quick_onednn_{'on' if self._onednn() else 'off'}.json")
        rows = {r["model"]: r for r in report["rows"]}
        self.assertEqual(sorted(rows), ["dcgan_generator", "mobilenet_v2"])
        # MobileNetV2 at alpha 0.35: 35 Conv2D and 17 DepthwiseConv2D; the generator: 3 transposed.
        self.assertEqual(rows["mobilenet_v2"]["convolutions_swapped"], 52)
        self.assertEqual(rows["dcgan_generator"]["convolutions_swapped"], 3)
        for r in rows.values():
            self.assertGreater(r["ratio"], 0)
            # Both sides' gradients near the float64 model's, ours within a small factor of Keras's.
            self.assertLess(r["grad_error_keras"], 1e-4, r)
            self.assertLess(r["grad_error_ours"], max(10 * r["grad_error_keras"], 1e-5), r)
        # The unchanged models with tf_ops.enable(): every convolution of the graphs that ran a TfOps> node.
        enabled = {r["model"]: r for r in report["enable_rows"]}
        self.assertEqual(sorted(enabled), ["dcgan_generator", "mobilenet_v2"])
        for r in enabled.values():
            for kind in ("train", "infer"):
                self.assertGreater(r[kind]["tf_ops_nodes"], 0, r)
                self.assertGreater(r[kind]["stock_nodes"], 0, r)
                self.assertGreater(r[kind]["ratio"], 0, r)
        # Training: the forward convolutions and both gradients of each.
        self.assertGreaterEqual(enabled["mobilenet_v2"]["train"]["tf_ops_nodes"], 3 * 52 - 1)

    @staticmethod
    def _onednn():
        # As TensorFlow decided at import: with TF_ENABLE_ONEDNN_OPTS unset it turns oneDNN on
        # only on processors with AVX-512 (VNNI, BF16) or AMX, not on an AVX2-only one.
        return tf_ops._selfcheck.onednn_enabled()


if __name__ == "__main__":
    tf.test.main()
