"""python -m tf_ops bench: how fast each op is next to what TensorFlow offers for the same job.

Every row times one of our ops against TensorFlow's built-in op on the same tensors, in the same
process, calls alternating so that both sides see the same machine state (other processes,
clock, caches). Where the built-in op cannot run a case, the row uses the composition of
built-in ops a user would write instead (transposes, space_to_batch, per-group convolutions,
tape gradients), and says so. Throughput is reported against the machine's own float32 GEMM
rate, measured before and after the rows, so that rows can be read without knowing the
processor.
"""
import argparse
import csv
import ctypes
import datetime
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import _selfcheck as sc


@dataclass(frozen=True)
class Shape:
    """One convolution: forward input x (NHWC sizes, whatever the data format), filter HWIO.
    Every direction of the op family is timed on it, in each of `dtypes`; `extra_ops` adds
    rows for ops beyond the three directions."""
    name: str
    n: int
    hwc: tuple
    filter: tuple
    stride: int
    padding: str
    dilation: int = 1
    data_format: str = "NHWC"
    depthwise: bool = False
    dtypes: tuple = ("float32",)
    extra_ops: tuple = ()


ALL_16 = ("float32", "bfloat16", "float16")

# The default set: layers of common networks, and the cases TensorFlow's CPU kernels refuse.
SHAPES = [
    Shape("dcgan", 16, (16, 16, 256), (5, 5, 256, 512), 2, "SAME", dtypes=ALL_16),
    Shape("unet", 8, (64, 64, 64), (3, 3, 64, 128), 2, "SAME", extra_ops=("conv2d_backprop_input_v2",)),
    Shape("vgg", 8, (56, 56, 64), (3, 3, 64, 64), 1, "SAME", dtypes=ALL_16),
    Shape("resnet1x1", 16, (28, 28, 64), (1, 1, 64, 256), 1, "VALID", dtypes=ALL_16),
    Shape("stem", 8, (224, 224, 3), (7, 7, 3, 64), 2, "SAME", dtypes=("float32", "bfloat16")),
    Shape("small", 32, (32, 32, 16), (3, 3, 16, 16), 1, "SAME"),
    Shape("batch1", 1, (128, 128, 32), (3, 3, 32, 32), 2, "SAME"),
    Shape("dilated", 8, (56, 56, 64), (3, 3, 64, 64), 1, "SAME", dilation=2),
    Shape("grouped", 8, (56, 56, 128), (3, 3, 32, 128), 1, "SAME"),
    Shape("vgg_nchw", 8, (56, 56, 64), (3, 3, 64, 64), 1, "SAME", data_format="NCHW"),
    Shape("unet_nchw", 8, (64, 64, 64), (3, 3, 64, 128), 2, "SAME", data_format="NCHW"),
    # Layers outside the common networks' best-known ones: a deep 3x3 layer on small images, a 4x4
    # stride-2 GAN layer, a mid-sized ResNet 3x3 layer, a batch-1 stride-2 layer, the first 3x3
    # layer of a small network on RGB images, a vision transformer's 16x16 patch embedding, the
    # 512-channel 3x3 layer of ResNet's last stage (7x7 images) and of VGG's (14x14, batch 1).
    Shape("deep_small", 16, (14, 14, 256), (3, 3, 256, 256), 1, "SAME", dtypes=("float32", "bfloat16")),
    Shape("gan4x4", 16, (32, 32, 128), (4, 4, 128, 256), 2, "SAME", dtypes=("float32", "bfloat16")),
    Shape("resnet3x3", 16, (28, 28, 128), (3, 3, 128, 128), 1, "SAME"),
    Shape("batch1_s2", 1, (112, 112, 48), (3, 3, 48, 96), 2, "SAME"),
    Shape("rgb3x3", 8, (112, 112, 3), (3, 3, 3, 16), 1, "SAME", dtypes=("float32", "bfloat16")),
    Shape("patch16", 16, (224, 224, 3), (16, 16, 3, 384), 16, "VALID", dtypes=("float32", "bfloat16")),
    Shape("resnet_s4", 16, (7, 7, 512), (3, 3, 512, 512), 1, "SAME", dtypes=("float32", "bfloat16")),
    Shape("vgg_b1_512", 1, (14, 14, 512), (3, 3, 512, 512), 1, "SAME"),
    Shape("mobilenet_s2", 32, (112, 112, 32), (3, 3, 32, 1), 2, "SAME", depthwise=True),
    Shape("mobilenet_s1", 32, (56, 56, 128), (3, 3, 128, 1), 1, "SAME", depthwise=True),
    Shape("mobilenet_b1", 1, (112, 112, 96), (3, 3, 96, 1), 1, "SAME", depthwise=True),
]

# --quick: the same code paths (every baseline kind, 16-bit types, V2) on tiny tensors.
QUICK_SHAPES = [
    Shape("tiny", 2, (12, 12, 8), (3, 3, 8, 8), 1, "SAME", dtypes=ALL_16),
    Shape("tiny_s2", 2, (13, 13, 4), (3, 3, 4, 8), 2, "SAME", extra_ops=("conv2d_backprop_input_v2",)),
    Shape("tiny_nchw", 2, (12, 12, 8), (3, 3, 8, 8), 1, "SAME", data_format="NCHW"),
    Shape("tiny_dilated", 2, (12, 12, 8), (3, 3, 8, 8), 1, "SAME", dilation=2),
    Shape("tiny_grouped", 2, (12, 12, 8), (3, 3, 2, 8), 1, "SAME"),
    Shape("tiny_dw", 2, (12, 12, 8), (3, 3, 8, 2), 2, "SAME", depthwise=True),
    Shape("tiny_dw_dilated", 2, (12, 12, 8), (3, 3, 8, 1), 1, "SAME", dilation=2, depthwise=True),
]


@dataclass(frozen=True)
class Op:
    """One of our public functions: TensorFlow's op for the same job, which tensor it
    computes ("forward", "input" or "filter"), and its name in tf_ops._selfcheck."""
    tf_name: str
    direction: str
    depthwise: bool
    kind: str


OPS = {
    "conv2d": Op("Conv2D", "forward", False, "conv2d"),
    "conv2d_backprop_input": Op("Conv2DBackpropInput", "input", False, "backprop_input"),
    "conv2d_backprop_filter": Op("Conv2DBackpropFilter", "filter", False, "backprop_filter"),
    # No TensorFlow kernel exists for the V2 ops: they are compared with the V1 op they equal.
    "conv2d_backprop_input_v2": Op("Conv2DBackpropInput", "input", False, "backprop_input_v2"),
    "conv2d_backprop_filter_v2": Op("Conv2DBackpropFilter", "filter", False, "backprop_filter_v2"),
    "depthwise_conv2d_native": Op("DepthwiseConv2dNative", "forward", True, "depthwise"),
    "depthwise_conv2d_backprop_input": Op("DepthwiseConv2dNativeBackpropInput", "input", True,
                                          "depthwise_backprop_input"),
    "depthwise_conv2d_backprop_filter": Op("DepthwiseConv2dNativeBackpropFilter", "filter", True,
                                           "depthwise_backprop_filter"),
}
DIRECTIONS = {
    False: ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"),
    True: ("depthwise_conv2d_native", "depthwise_conv2d_backprop_input", "depthwise_conv2d_backprop_filter"),
}
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
UNAVAILABLE = "unavailable"


# ---------------------------------------------------------------------------------------------
# The machine


def machine_facts():
    """Processor model, CPU counts and the instruction-set flags that decide which kernels
    (ours and oneDNN's) can run, from /proc/cpuinfo where it exists."""
    model, flags, cores_per_socket = platform.processor() or platform.machine(), set(), None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and model in ("", platform.processor(), platform.machine()):
                    model = value
                elif key == "flags" and not flags:
                    flags = set(value.split())
                elif key == "cpu cores" and cores_per_socket is None:
                    cores_per_socket = int(value)
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    return {
        "processor": model,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "cores_per_socket": cores_per_socket,
        "intra_op_threads": intra or usable,
        "isa_flags": {flag: flag in flags for flag in ISA_FLAGS},
    }


def _load_average():
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def gemm_size(quick):
    """2048, or 4096 on machines fast enough that 2048 takes under 50 ms (512 for --quick)."""
    if quick:
        return 512
    a = tf.random.uniform([2048, 2048])
    tf.linalg.matmul(a, a)
    start = time.perf_counter()
    tf.linalg.matmul(a, a)
    return 4096 if time.perf_counter() - start < 0.05 else 2048


def gemm_gflops(n, runs):
    """The float32 GEMM rate of tf.linalg.matmul (median of runs after one warm-up): what this
    machine and TensorFlow reach on the friendliest dense workload, the yardstick for every
    row's GFLOP/s."""
    a = tf.random.uniform([n, n])
    b = tf.random.uniform([n, n])
    tf.linalg.matmul(a, b)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        tf.linalg.matmul(a, b)
        samples.append(time.perf_counter() - start)
    return 2.0 * n ** 3 / statistics.median(samples) / 1e9


# ---------------------------------------------------------------------------------------------
# Resident memory


def _read_status_kib(*keys):
    values = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in keys:
                    values[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return values if len(values) == len(keys) else None


def _reset_peak_rss():
    """Sets VmHWM back to the current VmRSS (Linux 4.0+), so that the next reading is the
    peak of what follows rather than of the whole process so far. False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _return_free_heap():
    """Hands free malloc memory back to the OS (glibc's malloc_trim), so that a call's scratch
    buffers show up as new resident pages instead of reusing pages an earlier call left."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_rss_growth_mib(fn):
    """How far the process's peak resident memory rose above its resident memory during one
    call of fn (MiB), or None where /proc cannot tell: the output and scratch memory the
    call needed beyond what was resident and in use. Memory TensorFlow's allocator keeps
    pooled (with oneDNN on it pools freed tensors) is reused without showing. Without a
    resettable peak the figure is the rise of the process-lifetime peak instead."""
    _return_free_heap()
    resettable = _reset_peak_rss()
    before = _read_status_kib("VmRSS", "VmHWM")
    if before is None:
        return None
    result = fn()
    after = _read_status_kib("VmHWM")
    del result
    base = before["VmRSS"] if resettable else before["VmHWM"]
    return max(0, after["VmHWM"] - base) / 1024.0


# ---------------------------------------------------------------------------------------------
# One row: configuration, inputs, our call and the baseline


def rows_for(shapes):
    """(op name, Shape, dtype name) for every row the shape table asks for, in table order."""
    rows = []
    for shape in shapes:
        for op in DIRECTIONS[shape.depthwise] + tuple(shape.extra_ops):
            for dtype in shape.dtypes:
                rows.append((op, shape, dtype))
    return rows


def make_cfg(shape):
    h, w, c = shape.hwc
    cfg = sc.make_config(shape.data_format, shape.n, h, w, c, shape.filter, (shape.stride,) * 2,
                         (shape.dilation,) * 2, shape.padding, depthwise=shape.depthwise)
    if cfg is None:
        raise ValueError(f"shape {shape.name}: the output would be empty")
    return cfg


def useful_gflop(shape, cfg):
    """Useful work of the forward convolution, which every direction repeats in another
    order: 2*N*Hout*Wout*Cout*KH*KW*Cin/groups (for depthwise, Cout*Cin/groups = C*M)."""
    y = cfg["y_shape"]
    oh, ow = (y[2], y[3]) if shape.data_format == "NCHW" else (y[1], y[2])
    kh, kw, fi, fo = shape.filter  # fi * fo: Cout * (Cin/groups), or C * M for depthwise
    return 2.0 * shape.n * oh * ow * fi * fo * kh * kw / 1e9


def make_tensors(cfg, dtype, seed):
    rng = np.random.default_rng(seed)

    def rand(shape):
        return tf.cast(tf.constant(rng.uniform(-1, 1, size=shape).astype(np.float32)), dtype)

    return {
        "x": rand(cfg["x_shape"]),
        "w": rand(cfg["filter_shape"]),
        "dy": rand(cfg["y_shape"]),
        "x_sizes": tf.constant(cfg["x_shape"], tf.int32),
        "w_sizes": tf.constant(cfg["filter_shape"], tf.int32),
    }


def our_call(op_name, cfg, t):
    """Our public function on the row's tensors, as a user calls it (eager)."""
    s, p, f, d = cfg["strides"], cfg["padding"], cfg["data_format"], cfg["dilations"]
    x, w, dy, xs, ws = t["x"], t["w"], t["dy"], t["x_sizes"], t["w_sizes"]
    calls = {
        "conv2d": lambda: tf_ops.conv2d(x, w, s, p, data_format=f, dilations=d),
        "conv2d_backprop_input":
            lambda: tf_ops.conv2d_backprop_input(xs, w, dy, s, p, data_format=f, dilations=d),
        "conv2d_backprop_input_v2":
            lambda: tf_ops.conv2d_backprop_input_v2(x, w, dy, s, p, data_format=f, dilations=d),
        "conv2d_backprop_filter":
            lambda: tf_ops.conv2d_backprop_filter(x, ws, dy, s, p, data_format=f, dilations=d),
        "conv2d_backprop_filter_v2":
            lambda: tf_ops.conv2d_backprop_filter_v2(x, w, dy, s, p, data_format=f, dilations=d),
        "depthwise_conv2d_native":
            lambda: tf_ops.depthwise_conv2d_native(x, w, s, p, data_format=f, dilations=d),
        "depthwise_conv2d_backprop_input":
            lambda: tf_ops.depthwise_conv2d_backprop_input(xs, w, dy, s, p, data_format=f, dilations=d),
        "depthwise_conv2d_backprop_filter":
            lambda: tf_ops.depthwise_conv2d_backprop_filter(x, ws, dy, s, p, data_format=f, dilations=d),
    }
    return calls[op_name]


def builtin_call(op, cfg, t):
    """TensorFlow's raw op, eager: what a user gets from tf.nn / tf.raw_ops."""
    raw = getattr(tf.raw_ops, op.tf_name)
    a = dict(strides=cfg["strides"], padding=cfg["padding"], data_format=cfg["data_format"],
             dilations=cfg["dilations"])
    x, w, dy, xs, ws = t["x"], t["w"], t["dy"], t["x_sizes"], t["w_sizes"]
    if op.direction == "forward":
        return lambda: raw(input=x, filter=w, **a)
    if op.direction == "input":
        return lambda: raw(input_sizes=xs, filter=w, out_backprop=dy, **a)
    return lambda: raw(input=x, filter_sizes=ws, out_backprop=dy, **a)


def composition(op, shape, cfg, t):
    """The built-in ops a user would combine where the built-in op cannot run the case:
    the forward convolution written with ops TensorFlow's CPU kernels accept, and its tape
    gradient for the backprop directions. Inside one tf.function, as a user would write it:
    graph pruning drops the forward pass that the gradient does not need, and the tape costs
    nothing per call. Returns (description, call)."""
    fi = shape.filter[2]
    rate = shape.dilation
    nchw = shape.data_format == "NCHW"
    groups = 1 if shape.depthwise else shape.hwc[2] // fi
    strides, padding = [1, shape.stride, shape.stride, 1], shape.padding

    if shape.depthwise:
        what = "tf.nn.depthwise_conv2d with dilations (space_to_batch)" if rate > 1 else "built-in op"

        def conv_nhwc(x, w):
            if rate > 1:
                return tf.nn.depthwise_conv2d(x, w, strides, padding, dilations=[rate, rate])
            return tf.raw_ops.DepthwiseConv2dNative(input=x, filter=w, strides=strides, padding=padding)
    else:
        if rate > 1 and shape.stride != 1:
            raise NotImplementedError("TensorFlow has no CPU composition for a strided dilated conv")
        what = "tf.nn.atrous_conv2d (space_to_batch)" if rate > 1 else "built-in op"
        if groups > 1:
            what = f"{what} per group ({groups} groups) + concat"

        def one_group(x, w):
            if rate > 1:
                return tf.nn.atrous_conv2d(x, w, rate, padding)
            return tf.raw_ops.Conv2D(input=x, filter=w, strides=strides, padding=padding)

        def conv_nhwc(x, w):
            if groups == 1:
                return one_group(x, w)
            pairs = zip(tf.split(x, groups, axis=3), tf.split(w, groups, axis=3))
            return tf.concat([one_group(xg, wg) for xg, wg in pairs], axis=3)

    if nchw:
        what = f"transpose to NHWC, {what}, transpose back"

    def forward(x, w):
        if not nchw:
            return conv_nhwc(x, w)
        y = conv_nhwc(tf.transpose(x, [0, 2, 3, 1]), w)
        return tf.transpose(y, [0, 3, 1, 2])

    @tf.function(autograph=False)
    def run(x, w, dy):
        if op.direction == "forward":
            return forward(x, w)
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = forward(x, w)
        wrt = x if op.direction == "input" else w
        return tape.gradient(y, wrt, output_gradients=dy)

    description = "composition: " + ("tape gradient of " if op.direction != "forward" else "") + what
    x, w, dy = t["x"], t["w"], t["dy"]
    return description, lambda: run(x, w, dy)


def baseline(op_name, shape, cfg, t, dtype):
    """(description, call, result of one probing call, note) of what the row compares with.
    The built-in op is tried first unless it is known to crash or to be wrong: with dilations
    TensorFlow's CPU kernels refuse, ignore them (depthwise) or, with oneDNN, crash in some
    backprop paths, so dilated rows go straight to the composition. call is None where
    nothing TensorFlow offers runs the case."""
    op = OPS[op_name]
    label = "built-in" if not op.kind.endswith("_v2") else \
        f"built-in {op.tf_name} (V1; the V2 op has no TensorFlow kernel)"
    notes = []
    if shape.dilation == 1:
        if not sc.builtin_supports(op.kind, cfg, dtype):
            return UNAVAILABLE, None, None, "TensorFlow's op is known to compute wrong values here"
        call = builtin_call(op, cfg, t)
        try:
            return label, call, call(), ""
        except Exception as e:  # noqa: BLE001  (any refusal means: use the composition)
            notes.append(f"built-in refused: {_first_line(e)}")
    try:
        description, call = composition(op, shape, cfg, t)
        return description, call, call(), "; ".join(notes)
    except Exception as e:  # noqa: BLE001  (a baseline that cannot run never stops the harness)
        notes.append(f"composition failed: {_first_line(e)}")
        return UNAVAILABLE, None, None, "; ".join(notes)


def _first_line(error):
    text = str(error).strip().splitlines()
    text = text[0] if text else type(error).__name__
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:\w+\].*$", "", text)
    return f"{type(error).__name__}: {text[:160]}"


def _rel_diff(ours, theirs):
    """max |ours - theirs| / max(1, max |theirs|): the two sides must compute the same thing
    for the timing to mean anything."""
    a = tf.cast(ours, tf.float64).numpy()
    b = tf.cast(theirs, tf.float64).numpy()
    return sc.max_error(a, b)


# ---------------------------------------------------------------------------------------------
# Timing


def interleaved_times(ours, theirs, budget_s, min_runs, max_runs):
    """Per-call seconds of ours and theirs, called alternately so that drifts of the machine
    (turbo, other processes) hit both sides alike: at least min_runs each, more until the
    slower side has spent budget_s, at most max_runs. Warm-up first, until each side has
    run for a tenth of the budget (at least once), so first-call costs (tracing, primitive
    caches, page faults on new buffers) stay out of the samples."""
    sides = [ours] + ([theirs] if theirs is not None else [])
    for fn in sides:
        spent, calls = 0.0, 0
        while calls < 1 or (spent < budget_s / 10 and calls < 20):
            start = time.perf_counter()
            fn()
            spent += time.perf_counter() - start
            calls += 1
    samples = [[] for _ in sides]
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while True:
            for fn, acc in zip(sides, samples):
                start = time.perf_counter()
                fn()
                acc.append(time.perf_counter() - start)
            runs = len(samples[0])
            if runs >= max_runs or (runs >= min_runs and max(sum(s) for s in samples) >= budget_s):
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples[0], (samples[1] if theirs is not None else None)


def bench_row(op_name, shape, dtype_name, args, seed):
    dtype = tf.as_dtype(dtype_name)
    cfg = make_cfg(shape)
    t = make_tensors(cfg, dtype, seed)
    ours = our_call(op_name, cfg, t)
    ours_result = ours()
    description, theirs, theirs_result, note = baseline(op_name, shape, cfg, t, dtype)
    diff = _rel_diff(ours_result, theirs_result) if theirs is not None else None
    del ours_result, theirs_result
    gc.collect()

    ours_s, theirs_s = interleaved_times(ours, theirs, args.budget, args.min_runs, args.max_runs)
    ours_ms = statistics.median(ours_s) * 1e3
    theirs_ms = statistics.median(theirs_s) * 1e3 if theirs is not None else None
    gflop = useful_gflop(shape, cfg)
    row = {
        "op": op_name,
        "shape": shape.name,
        "dtype": dtype_name,
        "data_format": shape.data_format,
        "x_shape": "x".join(map(str, cfg["x_shape"])),
        "filter_shape": "x".join(map(str, cfg["filter_shape"])),
        "y_shape": "x".join(map(str, cfg["y_shape"])),
        "stride": shape.stride,
        "dilation": shape.dilation,
        "padding": shape.padding,
        "gflop": gflop,
        "ours_ms": ours_ms,
        "tf_ms": theirs_ms,
        "ratio": theirs_ms / ours_ms if theirs is not None else UNAVAILABLE,
        "ours_gflops": gflop / ours_ms * 1e3,
        "tf_gflops": gflop / theirs_ms * 1e3 if theirs is not None else None,
        "peak_fraction": None,  # set once the peak is final
        "ours_runs": len(ours_s),
        "tf_runs": len(theirs_s) if theirs is not None else 0,
        "ours_peak_rss_growth_mib": peak_rss_growth_mib(ours),
        "tf_peak_rss_growth_mib": peak_rss_growth_mib(theirs) if theirs is not None else None,
        "max_rel_diff": diff,
        "diff_tolerance": sc.BUILTIN_TOLERANCE[dtype],
        "baseline": description,
        "note": note,
    }
    return row


# ---------------------------------------------------------------------------------------------
# Output


COLUMNS = [  # (header, row -> text); op, shape and dtype lead, the baseline closes each line
    ("ours ms", lambda r: _num(r["ours_ms"])),
    ("TF ms", lambda r: _num(r["tf_ms"])),
    ("TF/ours", lambda r: "-" if r["ratio"] == UNAVAILABLE else f"{r['ratio']:.2f}"),
    ("GFLOP/s", lambda r: f"{r['ours_gflops']:.1f}"),
    ("%peak", lambda r: f"{100 * r['peak_fraction']:.0f}%"),
    ("peak+MiB", lambda r: _num(r["ours_peak_rss_growth_mib"], 1)),
    ("TF +MiB", lambda r: _num(r["tf_peak_rss_growth_mib"], 1)),
    ("diff", lambda r: "-" if r["max_rel_diff"] is None else
        f"{r['max_rel_diff']:.0e}" + ("!" if r["max_rel_diff"] > r["diff_tolerance"] else "")),
]


def _num(value, digits=None):
    if value is None:
        return "-"
    if digits is None:
        digits = 3 if value < 10 else 2 if value < 100 else 1
    return f"{value:.{digits}f}"


def print_table(rows):
    lines = []
    for r in rows:
        note = r["note"] if len(r["note"]) <= 90 else r["note"][:87] + "..."
        lines.append([r["op"], r["shape"], r["dtype"]] + [fmt(r) for _, fmt in COLUMNS]
                     + [r["baseline"] + (f"  [{note}]" if note else "")])
    header = ["op", "shape", "dtype"] + [h for h, _ in COLUMNS] + ["TF baseline"]
    widths = [max(len(line[i]) for line in [header] + lines) for i in range(len(header) - 1)]

    def fmt_line(cells):
        left = [f"{c:<{w}}" for c, w in zip(cells[:3], widths[:3])]
        right = [f"{c:>{w}}" for c, w in zip(cells[3:-1], widths[3:])]
        return "  ".join(left + right + [cells[-1]])

    head = fmt_line(header)
    print(head)
    print("-" * len(head))
    for line in lines:
        print(fmt_line(line))


class Progress:
    """A one-line progress indicator on stderr: rewritten in place on a terminal, one line
    per row otherwise (logs)."""

    def __init__(self, total):
        self.total = total
        self.tty = sys.stderr.isatty()

    def show(self, i, text):
        line = f"[{i:>{len(str(self.total))}}/{self.total}] {text}"
        if self.tty:
            sys.stderr.write("\r" + line + "\033[K")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def clear(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def geomeans(rows):
    """Geometric mean of TF/ours per (op, dtype), over the rows that have a baseline."""
    groups = {}
    for r in rows:
        if r["ratio"] != UNAVAILABLE:
            groups.setdefault((r["op"], r["dtype"]), []).append(r["ratio"])
    return [{"op": op, "dtype": dtype, "geomean_ratio": math.exp(sum(map(math.log, v)) / len(v)),
             "rows": len(v)} for (op, dtype), v in groups.items()]


CSV_FIELDS = ["op", "shape", "dtype", "data_format", "x_shape", "filter_shape", "y_shape", "stride",
              "dilation", "padding", "gflop", "ours_ms", "tf_ms", "ratio", "ours_gflops", "tf_gflops",
              "peak_fraction", "ours_runs", "tf_runs", "ours_peak_rss_growth_mib",
              "tf_peak_rss_growth_mib", "max_rel_diff", "diff_tolerance", "baseline", "note"]


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if r[k] is None else r[k]) for k in CSV_FIELDS})


def write_plot(path, rows, title):
    """Horizontal bars of TF/ours per row, log scale, with the break-even line. Returns a
    note instead of failing where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return ("matplotlib is not installed: no plot written (install tf_ops with its bench extra, "
                "pip install '.[bench]', or pip install matplotlib)")
    shown = [r for r in rows if r["ratio"] != UNAVAILABLE]
    if not shown:
        return "no row has a baseline: no plot written"
    labels = [f"{r['op']} {r['shape']} {r['dtype']}" for r in shown]
    ratios = [r["ratio"] for r in shown]
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.22 * len(shown)))
    positions = range(len(shown))[::-1]
    # Bars grow from the break-even line, so faster and slower rows point different ways.
    ax.barh(list(positions), [v - 1 for v in ratios], left=1,
            color=["tab:green" if v >= 1 else "tab:red" for v in ratios])
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.set_yticks(list(positions))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("TF time / tf_ops time (right of 1: tf_ops faster)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------------------------
# Command line


# Where a run writes unless told: a folder of its own, so that a run from the checkout's root
# leaves the committed results (benchmarks/results) alone.
DEFAULT_OUT = "tf_ops_bench"


def result_stem(out, kind, quick, onednn=None, per_table=True):
    """out/<kind>[_quick][_<table>][_onednn_<on|off>]: <table> is TF_OPS_CPU_ISA where it names
    the kernel table (and the run is per_table), so that runs of each table sit side by side."""
    forced = os.environ.get("TF_OPS_CPU_ISA") if per_table else None
    name = (kind + ("_quick" if quick else "") + (f"_{forced}" if forced else "")
            + ("" if onednn is None else f"_onednn_{'on' if onednn else 'off'}"))
    return os.path.join(out, name)


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tf_ops bench", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--onednn", choices=("on", "off"),
                        help="run TensorFlow with oneDNN on or off (default: as TF_ENABLE_ONEDNN_OPTS "
                             "says, which is on unless it is 0)")
    parser.add_argument("--filter", metavar="REGEX", help="only rows whose 'op shape dtype' text matches")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a smoke test of every path")
    parser.add_argument("--kernels", action="store_true",
                        help="instead of the layers against TensorFlow: each CPU kernel table's tiles and passes "
                             "against the table's own arithmetic peak (kernels.json)")
    parser.add_argument("--models", action="store_true",
                        help="instead of the layers: training steps of whole Keras models, tf_ops' layers "
                             "against Keras's (models_onednn_*.json)")
    parser.add_argument("--plan-cache", action="store_true",
                        help="instead of the layers against TensorFlow: small layers and a model's inference "
                             "with the ops' plan cache on and off (plan_cache.json)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"folder for the CSV, JSON and PNG (default: {DEFAULT_OUT} in the current folder; "
                             "the checkout's committed results are benchmarks/results, written only when named)")
    parser.add_argument("--budget", type=float, default=None,
                        help="timed seconds per side per row (default 0.3; 0.02 with --quick)")
    parser.add_argument("--min-runs", type=int, default=5, help="timed runs per side at least (default 5)")
    parser.add_argument("--max-runs", type=int, default=1000, help="timed runs per side at most")
    args = parser.parse_args(argv)
    if args.budget is None:
        args.budget = 0.02 if args.quick else 0.3
    return args


def _without_onednn_flag(argv):
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--onednn":
            skip = True
        elif not a.startswith("--onednn="):
            out.append(a)
    return out


def _rerun_with_onednn(mode, argv):
    """TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it is imported, and importing tf_ops
    imports it: another mode needs another process."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1" if mode == "on" else "0")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = [sys.executable, "-m", "tf_ops", "bench"] + _without_onednn_flag(argv)
    return subprocess.run(cmd, env=env).returncode


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parse(argv)
    onednn = sc.onednn_enabled()
    if args.onednn is not None and (args.onednn == "on") != onednn:
        return _rerun_with_onednn(args.onednn, argv)

    if args.kernels + args.models + args.plan_cache > 1:
        print("--kernels, --models and --plan-cache are separate runs: name one", file=sys.stderr)
        return 2
    if args.kernels:
        from tf_ops import _bench_kernels
        return _bench_kernels.main(args)
    if args.models:
        from tf_ops import _bench_models
        return _bench_models.main(args)
    if args.plan_cache:
        from tf_ops import _bench_plans
        return _bench_plans.main(args)

    started = time.perf_counter()
    shapes = QUICK_SHAPES if args.quick else SHAPES
    rows = rows_for(shapes)
    if args.filter:
        try:
            pattern = re.compile(args.filter)
        except re.error as e:
            print(f"--filter {args.filter!r} is not a regular expression: {e}", file=sys.stderr)
            return 2
        rows = [r for r in rows if pattern.search(f"{r[0]} {r[1].name} {r[2]}")]
        if not rows:
            print(f"no row matches --filter {args.filter!r}", file=sys.stderr)
            return 2

    machine = machine_facts()
    info = tf_ops.build_info()
    isa = tf_ops.cpu_kernel_isa()
    flags = " ".join(f for f, on in machine["isa_flags"].items() if on) or "none of interest"
    missing = " ".join(f for f, on in machine["isa_flags"].items() if not on)
    print(f"tf_ops {tf_ops.__version__} (built with {info.get('compiler_version', '?')}; "
          f"CPU micro-kernels: {isa}); TensorFlow {tf.__version__}, oneDNN {'on' if onednn else 'off'}")
    print(f"processor: {machine['processor']}; {machine['usable_cpus']} usable of "
          f"{machine['logical_cpus']} logical CPUs; intra-op threads {machine['intra_op_threads']}")
    print(f"ISA flags: {flags}" + (f" (absent: {missing})" if missing else ""))
    load = _load_average()
    if load is not None:
        print(f"load average (1 min) at start: {load:.2f} (other processes share the CPUs; "
              "ours and TF's calls alternate so that both sides see the same load)")
    n, runs = gemm_size(args.quick), 3 if args.quick else 5
    peak = {"gemm_n": n, "runs": runs, "gflops_before": gemm_gflops(n, runs),
            "what": (f"float32 GEMM {n}^3 through tf.linalg.matmul, median of {runs}, "
                     f"{machine['intra_op_threads']} threads")}
    print(f"peak: {peak['gflops_before']:.1f} GFLOP/s ({peak['what']}); measured again after the "
          "rows, the higher of the two is the peak")
    print(f"each row: warm-up, then ours and TF's calls alternating, >= {args.min_runs} each and more "
          f"until the slower side has run {args.budget:g} s; median times; eager calls "
          "(compositions in one tf.function)")
    print()

    progress = Progress(len(rows))
    results, failures = [], 0
    for i, (op_name, shape, dtype_name) in enumerate(rows, 1):
        progress.show(i, f"{op_name} {shape.name} {dtype_name}")
        try:
            results.append(bench_row(op_name, shape, dtype_name, args, seed=i))
        except Exception as e:  # noqa: BLE001  (report, keep going, fail at the end)
            progress.clear()
            failures += 1
            print(f"{op_name} {shape.name} {dtype_name}: our op failed: {_first_line(e)}", flush=True)
    progress.clear()

    peak["gflops_after"] = gemm_gflops(n, runs)
    machine["load_average_start"], machine["load_average_end"] = load, _load_average()
    peak["gflops"] = max(peak["gflops_before"], peak["gflops_after"])
    for r in results:
        r["peak_fraction"] = r["ours_gflops"] / peak["gflops"]
    print(f"peak measured again after the rows: {peak['gflops_after']:.1f} GFLOP/s; "
          f"%peak below is of {peak['gflops']:.1f} GFLOP/s")
    print()
    print_table(results)
    print()
    print("TF/ours > 1: tf_ops is faster. GFLOP/s: useful FLOPs of the forward convolution / our time "
          "(every direction, every dtype); %peak: of the float32 GEMM peak.")
    print("peak+MiB, TF +MiB: rise of the process's peak resident memory (VmHWM) above its resident "
          "memory (VmRSS) during one call, free heap returned to the OS and the peak reset first: "
          "output and scratch memory not already resident (TensorFlow's allocator pools tensors "
          "with oneDNN on).")
    print("diff: max |ours - TF| / max(1, max |TF|); '!' marks a row above the parity tests' "
          "bound for the dtype.")
    print()
    means = geomeans(results)
    op_w = max([len(m["op"]) for m in means] + [0])
    print("Geometric mean of TF/ours per op and dtype:")
    for m in means:
        print(f"  geomean {m['op']:<{op_w}}  {m['dtype']:<8}  "
              f"{m['geomean_ratio']:6.2f}  ({m['rows']} row{'s' if m['rows'] != 1 else ''})")
    unavailable = sum(r["ratio"] == UNAVAILABLE for r in results)
    if unavailable:
        print(f"  ({unavailable} rows without a TensorFlow baseline)")

    wall = time.perf_counter() - started
    now = datetime.datetime.now()
    os.makedirs(args.out, exist_ok=True)
    stem = result_stem(args.out, "bench", args.quick, onednn)
    write_csv(stem + ".csv", results)
    report = {
        "date": now.isoformat(timespec="seconds"),
        "tf_ops": {"version": tf_ops.__version__, "cpu_kernel_isa": isa,
                   "build": {k: info.get(k) for k in ("tf_version", "compiler_version", "compile_flags")}},
        "tensorflow": tf.__version__,
        "onednn": onednn,
        "machine": machine,
        "peak": peak,
        "settings": {"quick": args.quick, "filter": args.filter, "budget_s": args.budget,
                     "min_runs": args.min_runs, "max_runs": args.max_runs},
        "rows": results,
        "geomean": means,
        "failures": failures,
        "wall_s": wall,
    }
    with open(stem + ".json", "w") as f:
        json.dump(report, f, indent=1)
    title = (f"TF / tf_ops time per row, oneDNN {'on' if onednn else 'off'} - {machine['processor']}, "
             f"{machine['intra_op_threads']} threads - {now:%Y-%m-%d}")
    plot_note = write_plot(stem + ".png", results, title)
    print()
    print(f"wrote {stem}.csv, {stem}.json" + ("" if plot_note else f", {stem}.png"))
    if plot_note:
        print(plot_note)
    if failures:
        print(f"{failures} rows failed")
    print(f"total wall time: {time.perf_counter() - started:.1f} s")
    return 1 if failures else 0
