"""Runs every op on fixed inputs with a given intra-op thread count; writes the outputs.

Usage: python determinism_worker.py THREADS OUT.npz
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

threads, out = int(sys.argv[1]), sys.argv[2]
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(1)

import common  # noqa: E402

CONFIGS = [
    # Large enough that the thread pool splits the work.
    common.make_config("NHWC", 4, 33, 31, 16, [3, 3, 8, 16], (2, 2), (1, 1), "SAME"),
    common.make_config("NCHW", 3, 29, 30, 12, [3, 2, 12, 8], (1, 2), (2, 1), "EXPLICIT", (1, 2, 0, 1)),
    common.make_config("NHWC", 2, 40, 24, 8, [5, 3, 8, 3], (2, 1), (1, 2), "VALID", depthwise=True),
    # 3x3 stride 1 with enough channels: Winograd (exact mode: the direct passes), one grouped;
    # 150 and 160 tiles of 4x4 outputs, so that the filter gradient runs by two slices.
    common.make_config("NHWC", 6, 20, 19, 48, [3, 3, 48, 40], (1, 1), (1, 1), "SAME"),
    common.make_config("NCHW", 10, 13, 14, 64, [3, 3, 32, 48], (1, 1), (1, 1), "SAME"),
    # 128 -> 128: forward and backprop input stream a transformed filter too large for the
    # cache, 18 tiles in one block, its two column blocks in two units.
    common.make_config("NHWC", 2, 12, 12, 128, [3, 3, 128, 128], (1, 1), (1, 1), "SAME"),
    # On AMX tiles, bfloat16: a strided forward pass whose rows of 20 columns run banded, and
    # stride-1 bands of one column block (32 channels) written out a row at a time.
    common.make_config("NHWC", 4, 40, 40, 32, [4, 4, 32, 48], (2, 2), (1, 1), "SAME"),
    common.make_config("NHWC", 3, 20, 21, 32, [3, 3, 32, 32], (1, 1), (1, 1), "SAME"),
    # On AMX tiles, bfloat16: a filter gradient of 16 slices of two pieces each (the
    # configurations above take it too: by slices and channel chunks, with groups, strided).
    common.make_config("NHWC", 5, 62, 62, 16, [3, 3, 16, 16], (1, 1), (1, 1), "SAME"),
]
WINOGRAD = (3, 4, 5)
results = {}


def run(c, cfg, prefix, rng):
    for kind, dtypes in common.KINDS.items():
        if common.is_depthwise(kind) != cfg["depthwise"]:
            continue
        for dtype in dtypes:
            arrays = common.make_inputs(rng, cfg, dtype)
            value = common.run_ours(kind, cfg, arrays, dtype)
            results[f"{prefix}{c}/{kind}/{dtype.name}"] = np.frombuffer(value.tobytes(), np.uint8)


rng = np.random.default_rng(0)
for c, cfg in enumerate(CONFIGS):
    run(c, cfg, "", rng)
import tf_ops  # noqa: E402

tf_ops.set_exact_mode(True)
rng = np.random.default_rng(1)
for c in WINOGRAD:
    run(c, CONFIGS[c], "exact/", rng)
np.savez(out, **results)
