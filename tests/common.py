"""Shared pieces of the test suite: random configurations over the feature matrix, on top
of the plumbing (tolerances, runners) that the self-check command shares."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from tf_ops._selfcheck import *  # noqa: F401,F403
from tf_ops._selfcheck import is_depthwise, make_config


def random_config(rng, depthwise=False, max_size=10, plain=False):
    """A random valid convolution over every axis of the feature matrix. A `plain` one is
    NHWC, undilated, ungrouped and has equal strides: what every TensorFlow CPU kernel runs."""
    while True:
        fmt = str(rng.choice(["NHWC", "NCHW"]))
        h, w = (int(v) for v in rng.integers(1, max_size + 1, size=2))
        kh, kw = (int(v) for v in rng.integers(1, 4, size=2))
        sh, sw = (int(v) for v in rng.choice([1, 1, 2, 3], size=2))
        dh, dw = (int(v) for v in rng.choice([1, 1, 2, 3], size=2))
        if plain:
            fmt, sw, dh, dw = "NHWC", sh, 1, 1
        padding = str(rng.choice(["SAME", "VALID", "EXPLICIT"]))
        pads = [int(v) for v in rng.integers(0, 3, size=4)] if padding == "EXPLICIT" else [0] * 4
        if depthwise:
            c, m = int(rng.integers(1, 5)), int(rng.integers(1, 4))
            filter_shape = [kh, kw, c, m]
        else:
            groups = 1 if plain else int(rng.choice([1, 1, 2, 3]))
            fi = int(rng.integers(1, 4))
            c = fi * groups
            filter_shape = [kh, kw, fi, groups * int(rng.integers(1, 3))]
        cfg = make_config(fmt, int(rng.integers(1, 4)), h, w, c, filter_shape, (sh, sw),
                          (dh, dw), padding, pads, depthwise)
        if cfg is not None:
            return cfg


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def fits_int64(*values):
    return all(INT64_MIN <= v <= INT64_MAX for v in values)


def trunc_div(a, b):
    """Integer division truncating toward zero, as C++ does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def window_int64(in_size, k, dilation, stride, padding, pads=(0, 0)):
    """One spatial dimension as tf_ops' geometry computes it in int64, modelled with
    unbounded integers: (out, pad_before, pad_after, overflow), where `overflow` says an
    intermediate of the computation, or the output size itself, does not fit in int64.
    `padding` is "SAME", "VALID" or "EXPLICIT"; `pads` are read for EXPLICIT only."""
    eff = (k - 1) * dilation + 1
    over = not fits_int64((k - 1) * dilation, eff)
    if padding == "SAME":
        size = -(-in_size // stride)
        need = 0
        if size > 0:
            reach = (size - 1) * stride + eff
            over |= not fits_int64((size - 1) * stride, reach)
            need = max(0, reach - in_size)
        before, after = need // 2, need - need // 2
    else:
        before, after = pads if padding == "EXPLICIT" else (0, 0)
        span = in_size + before + after - eff
        over |= not fits_int64(in_size + before, in_size + before + after, span)
        size = span // stride + 1 if span >= 0 else trunc_div(span + stride, stride)
        over |= not fits_int64(size)
    return size, before, after, over


def run_upstream_pytest(files, plugin_dir, plugins, env, out_dir, report_name):
    """Runs another project's test files with pytest in a fresh interpreter, with the plugins
    found in plugin_dir; returns ({test id: outcome}, output). An outcome is "passed",
    "failure", "error" or "skipped: <reason>"."""
    report = os.path.join(out_dir, report_name + ".xml")
    env = dict(os.environ, **env,
               PYTHONPATH=os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
            "-o", "junit_family=xunit1", *(a for p in plugins for a in ("-p", p)), *map(str, files)]
    # From a scratch folder: the checkout must not shadow the installed tf_ops.
    proc = subprocess.run(args, cwd=out_dir, env=env, capture_output=True, text=True, timeout=1800)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
                if child.tag == "skipped":
                    outcome += ": " + (child.get("message") or "")
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return outcomes, proc.stdout + proc.stderr
