"""tf_ops.enable() end to end, each scenario in a fresh process (tests/enable_worker.py), with
oneDNN on and off: a stock Keras model trained with fit and run with predict, a tf.function
GradientTape step over tf.nn calls, a SavedModel written without tf_ops and loaded with it, a
tf.compat.v1 session. For each, the graphs that ran (TensorFlow's graph collection) hold TfOps>
ops for every convolution, forward and backward, and no stock or oneDNN convolution, and the
results, gradients and weights after the steps agree with the same run with tf_ops off. Also:
disable(), the use_plugin_optimizers option, enable() twice, jit_compile=True, another plugin
optimizer already holding the CPU (a Python error, not an abort), `python -m tf_ops run` and
TF_OPS_VERBOSE's lines.

The fast tier runs the scenarios with oneDNN on, the exhaustive tier with oneDNN on and off; the
scenarios of one setting share a process (each starts with the rewrite off)."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest
import tensorflow as tf

from tiers import EXHAUSTIVE

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "enable_worker.py"
FAMILY = {"TfOps>Conv2D", "TfOps>Conv2DBackpropInput", "TfOps>Conv2DBackpropFilter", "TfOps>DepthwiseConv2dNative",
          "TfOps>DepthwiseConv2dNativeBackpropInput", "TfOps>DepthwiseConv2dNativeBackpropFilter"}
# Differences between tf_ops's float32 sums and TensorFlow's, relative to the largest magnitude
# of each tensor: the same sums in another order (docs/accuracy.md).
TOLERANCE = 1e-4


def run(args, onednn, extra_env=None, timeout=900):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_OPS_ENABLE", "TF_OPS_VERBOSE")}
    env.update(TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="2", **(extra_env or {}))
    proc = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tempfile.gettempdir())
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def worker(*scenarios, onednn):
    """{scenario: its result}, the scenarios run in turn in one fresh process."""
    proc = run([WORKER, *scenarios], onednn)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            name, data = line[len("RESULT "):].split(" ", 1)
            results[name] = json.loads(data)
    assert len(results) == len(scenarios), proc.stdout[-3000:]
    return results


@pytest.fixture(scope="module", params=["1", "0"] if EXHAUSTIVE else ["1"], ids=lambda v: f"onednn{v}")
def results(request, tmp_path_factory):
    """The scenarios' results with oneDNN on (and, in the exhaustive tier, off): the SavedModel
    written in a process that never imports tf_ops, the rest in one other process."""
    model = tmp_path_factory.mktemp("savedmodel") / "model"
    written = worker(f"savedmodel_write={model}", onednn=request.param)["savedmodel_write"]
    assert not written["tf_ops_imported"]
    return worker("keras", "compat_v1", f"savedmodel_load={model}", "tape", onednn=request.param)


def assert_tf_ops_only(ops, must_have, what):
    assert set(ops) >= set(must_have), f"{what}: ran {ops}, missing {sorted(set(must_have) - set(ops))}"
    stock = [op for op in ops if not op.startswith("TfOps>")]
    assert not stock, f"{what}: TensorFlow's convolutions still ran: {stock}"


def assert_stock_only(ops, what):
    assert ops, f"{what}: no convolution ran"
    assert not [op for op in ops if op.startswith("TfOps>")], f"{what}: TfOps ops ran: {ops}"


def test_keras_fit_and_predict(results):
    r = results["keras"]
    assert_stock_only(r["off_fit"], "fit, tf_ops off")
    assert_tf_ops_only(r["on_fit"], FAMILY, "fit")
    assert_tf_ops_only(r["on_predict"], {"TfOps>Conv2D", "TfOps>DepthwiseConv2dNative", "TfOps>Conv2DBackpropInput"},
                       "predict")
    assert r["pred_diff"] < TOLERANCE, r
    assert r["weight_diff"] < TOLERANCE, r


def test_gradient_tape_step_and_the_switches(results):
    r = results["tape"]
    assert_stock_only(r["off_ops"], "tf_ops off")
    assert_tf_ops_only(r["on_ops"], FAMILY, "enable() (called twice)")
    assert r["on_diff"] < TOLERANCE, r
    # disable() and use_plugin_optimizers=False bring TensorFlow's ops back, bit for bit.
    assert_stock_only(r["disabled_ops"], "disable()")
    assert_stock_only(r["plugins_off_ops"], "use_plugin_optimizers off")
    assert r["disabled_diff"] == 0 and r["plugins_off_diff"] == 0, r
    # jit_compile=True stays XLA's (no partitioned graph holds a convolution) and still runs.
    assert not [op for op in r["jit_ops"] if op.startswith("TfOps>")], r["jit_ops"]
    assert r["jit_diff"] < 10 * TOLERANCE, r
    assert r["enabled_at_end"]
    # Exact mode: the rewritten step equals, bit for bit, the same step written with tf_ops's functions.
    assert_tf_ops_only(r["exact_ops"], FAMILY, "exact mode")
    assert r["exact_bitwise"], r
    assert r["exact_diff"] < TOLERANCE, r


def test_savedmodel_written_without_tf_ops(results):
    r = results["savedmodel_load"]
    assert_stock_only(r["off_ops"], "loaded, tf_ops off")
    assert_tf_ops_only(r["on_ops"], {"TfOps>Conv2D", "TfOps>Conv2DBackpropInput", "TfOps>DepthwiseConv2dNative"},
                       "loaded SavedModel")
    assert r["diff"] < TOLERANCE, r


def test_compat_v1_session(results):
    r = results["compat_v1"]
    assert_stock_only(r["off_ops"], "session, tf_ops off")
    assert_tf_ops_only(r["on_ops"], {"TfOps>Conv2D", "TfOps>Conv2DBackpropInput", "TfOps>Conv2DBackpropFilter"},
                       "session")
    assert r["diff"] < TOLERANCE, r


def test_another_plugin_optimizer_is_a_python_error(tmp_path):
    plugin = tmp_path / "planted_graph_plugin.so"
    cmd = ["g++", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
           *tf.sysconfig.get_compile_flags(), str(HERE / "cc" / "planted_graph_plugin.cc"), "-o", str(plugin),
           *tf.sysconfig.get_link_flags()]
    subprocess.run(cmd, check=True, capture_output=True)
    r = worker(f"planted={plugin}", onednn="0")["planted"]
    assert "another plugin graph optimizer" in r["error"] and "device type CPU" in r["error"], r
    assert r["import_warning"] and "TF_OPS_ENABLE=1" in r["import_warning"][0], r
    assert not r["enabled"]
    assert r["sum"] == 400.0  # the process goes on: 4x4 ones, 3x3 SAME over 2 channels of ones, 2 filters


SCRIPT = """
import tensorflow as tf
from tensorflow.python.eager import context
context.enable_graph_collection()
import sys
print("argv", sys.argv[1:])

@tf.function
def step(x, w):
    with tf.GradientTape() as tape:
        tape.watch(w)
        y = tf.nn.conv2d(x, w, 2, "SAME")
        loss = tf.reduce_sum(y * y)
    return tape.gradient(loss, w)

step(tf.random.normal([1, 8, 8, 3]), tf.random.normal([3, 3, 3, 4]))
ops = sorted({n.op for f in context.export_run_metadata().function_graphs for g in f.partition_graphs
              for n in g.node if "Conv" in n.op})
print("ops", ops)
"""


def test_python_m_tf_ops_run_an_unchanged_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = run(["-m", "tf_ops", "run", script, "--flag", "x"], "0", extra_env={"TF_OPS_VERBOSE": "1"})
    assert "argv ['--flag', 'x']" in proc.stdout, proc.stdout
    assert "ops ['TfOps>Conv2D', 'TfOps>Conv2DBackpropFilter']" in proc.stdout, proc.stdout
    # TF_OPS_VERBOSE=1: a line per node rewritten (or left alone) as each graph is optimized.
    assert "tf_ops_rewrite: rewrote" in proc.stderr and "Conv2D -> TfOps>Conv2D" in proc.stderr, proc.stderr[-3000:]
    # TF_OPS_ENABLE=1 turns it on at `import tf_ops`.
    env_on = run(["-c", "import tf_ops; exec(open(%r).read())" % str(script)], "0", extra_env={"TF_OPS_ENABLE": "1"})
    assert "TfOps>Conv2D" in env_on.stdout, env_on.stdout
