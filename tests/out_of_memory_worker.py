"""Runs calls of tf_ops' ops whose workspace cannot be had, for test_out_of_memory.py, in a process
of its own: the address space is capped (RLIMIT_AS, as `ulimit -v` and batch schedulers cap it) at
what the process holds plus the call's output plus half its workspace, so that the inputs and the
output are there and the workspace is not.

    python out_of_memory_worker.py CASES_JSON

CASES_JSON: [[kind, data_format, [N, H, W, C], filter shape], ...]. For each case, after a small
call of the same op has warmed the process up: the large call under the cap, then, under the
same cap, a small call (less data) compared with the float64 reference; the cap is lifted
before the next case. Prints one line "RESULT " + JSON per case: {kind, data_format,
workspace_bytes (the plan's, from tf_ops.explain), error (the exception's class, or null),
message, small_error (the small call's largest error, relative to its largest value)}.
"""
import gc
import json
import resource
import sys

import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import _selfcheck as sc

# The function of tf_ops.explain that runs each kind's op.
EXPLAIN = {
    "conv2d": "conv2d",
    "backprop_input": "conv2d_backprop_input",
    "backprop_input_v2": "conv2d_backprop_input_v2",
    "backprop_filter": "conv2d_backprop_filter",
    "backprop_filter_v2": "conv2d_backprop_filter_v2",
    "depthwise": "depthwise_conv2d_native",
    "depthwise_backprop_input": "depthwise_conv2d_backprop_input",
    "depthwise_backprop_filter": "depthwise_conv2d_backprop_filter",
}


def address_space_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def output_shape(kind, cfg):
    if kind in ("conv2d", "depthwise"):
        return cfg["y_shape"]
    return cfg["x_shape"] if "input" in kind else cfg["filter_shape"]


def small_call(kind, fmt, depthwise):
    """A call of the op on a little data: its largest error against the float64 reference,
    relative to the reference's largest value."""
    cfg = sc.make_config(fmt, 2, 7, 6, 8, [3, 3, 8, 2] if depthwise else [3, 3, 4, 6], (2, 1), (1, 1), "SAME",
                         depthwise=depthwise)
    arrays = sc.make_inputs(np.random.default_rng(0), cfg, tf.float32)
    got = sc.run_ours(kind, cfg, arrays, tf.float32)
    want = sc.run_reference(kind, cfg, arrays)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def run_case(kind, fmt, nhwc, filter_shape):
    depthwise = sc.is_depthwise(kind)
    n, h, w, c = nhwc
    cfg = sc.make_config(fmt, n, h, w, c, filter_shape, (1, 1), (1, 1), "SAME", depthwise=depthwise)
    small_call(kind, fmt, depthwise)  # the op's kernel and TensorFlow's threads made before the cap
    plan = tf_ops.explain(EXPLAIN[kind], cfg["x_shape"], filter_shape, padding="SAME", data_format=fmt)
    x, w, dy = (tf.zeros(cfg[name], tf.float32) for name in ("x_shape", "filter_shape", "y_shape"))
    out_bytes = 4 * int(np.prod(output_shape(kind, cfg)))
    result = dict(kind=kind, data_format=fmt, workspace_bytes=plan.workspace_bytes, error=None, message="")
    # What earlier cases left for the collector (an exception's traceback holds its frames and
    # their tensors) goes now, not under the cap, where its freeing would make room.
    gc.collect()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes() + out_bytes + plan.workspace_bytes // 2, hard))
    try:
        try:
            sc.run_ours_tensors(kind, cfg, x, w, dy)
        except tf.errors.OpError as e:
            result.update(error=type(e).__name__, message=e.message)
        result["small_error"] = small_call(kind, fmt, depthwise)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    return result


def main():
    for kind, fmt, nhwc, filter_shape in json.loads(sys.argv[1]):
        print("RESULT " + json.dumps(run_case(kind, fmt, nhwc, filter_shape)), flush=True)


if __name__ == "__main__":
    main()
