"""python -m tf_ops bench --plan-cache: what the ops' plan cache saves, on small layers and in
inference.

Each CPU op keeps the plans of its calls by geometry (cc/core/cpu/conv_cpu.h: PlanCache), so a
call of a shape seen before plans nothing. Here each row times the same op with the cache on and
off (the library's plan_cache switch, TF_OPS_PLAN_CACHE=0 turns it off for a process), the two
alternating: eager calls of small layers, where planning is a visible share of a call, and the
inference step of a small Keras model on tf_ops' layers (one tf.function, batch 1).
"""
import json
import os
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

import tf_ops
from tf_ops import _bench
from tf_ops import _bench_models
from tf_ops import _explain
from tf_ops import _loader

Shape = _bench.Shape

# Small layers, batch 1 and 2: where a call is short enough for its planning to show.
SHAPES = [
    Shape("tiny", 2, (12, 12, 8), (3, 3, 8, 8), 1, "SAME"),
    Shape("tiny_s2", 2, (13, 13, 4), (3, 3, 4, 8), 2, "SAME"),
    Shape("tiny_nchw", 2, (12, 12, 8), (3, 3, 8, 8), 1, "SAME", data_format="NCHW"),
    Shape("tiny_dw", 2, (12, 12, 8), (3, 3, 8, 1), 1, "SAME", depthwise=True),
    Shape("b1_14x14x64", 1, (14, 14, 64), (3, 3, 64, 64), 1, "SAME"),
    Shape("b1_7x7x256_s2", 1, (14, 14, 128), (3, 3, 128, 256), 2, "SAME"),
    Shape("b1_28x28x32_dw", 1, (28, 28, 32), (3, 3, 32, 1), 1, "SAME", depthwise=True),
]
QUICK_SHAPES = SHAPES[:2]

# (name, builder, input shape): inference at batch 1.
MODELS = [
    ("mobilenet_v2_0.35_64", lambda: keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3),
                                                                    alpha=0.35, classes=10), (64, 64, 3)),
]


def cached_and_not(fn, budget, min_runs, max_runs):
    """Median seconds of fn with the plan cache on and off, the two alternating."""
    def with_cache(on):
        def run():
            _loader._switch("plan_cache", on)
            fn()
        return run

    try:
        on, off = _bench.interleaved_times(with_cache(True), with_cache(False), budget, min_runs, max_runs)
    finally:
        _loader._switch("plan_cache", True)
    return statistics.median(on), statistics.median(off), len(on)


def explain_us(op_name, cfg, calls=2000):
    """Microseconds of one TfOpsExplain call for the layer (the checks, the geometry, the plan and
    its line, through ctypes): an upper bound of what planning costs a call."""
    args = _explain._arguments(op_name, cfg["x_shape"], cfg["filter_shape"], cfg["strides"], cfg["padding"],
                               cfg["data_format"], cfg["dilations"], tf.float32, None)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            _explain._explain_line("cpu", *args)
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def layer_row(op_name, shape, budget, min_runs, max_runs, seed):
    cfg = _bench.make_cfg(shape)
    call = _bench.our_call(op_name, cfg, _bench.make_tensors(cfg, tf.float32, seed))
    cached, planned, runs = cached_and_not(call, budget, min_runs, max_runs)
    return {"what": f"{op_name} {shape.name}", "x_shape": "x".join(map(str, cfg["x_shape"])),
            "filter_shape": "x".join(map(str, cfg["filter_shape"])), "data_format": shape.data_format,
            "cached_us": cached * 1e6, "uncached_us": planned * 1e6, "saved_us": (planned - cached) * 1e6,
            "ratio": planned / cached, "explain_us": explain_us(op_name, cfg), "runs": runs}


def model_row(name, build, shape, budget, seed):
    keras.utils.set_random_seed(seed)
    model = _bench_models.clone(build(), _bench_models.swap_layer)
    convolutions = _bench_models.swapped_count(model)
    x = tf.constant(np.random.default_rng(seed).uniform(-1, 1, size=(1,) + shape).astype(np.float32))
    infer = tf.function(lambda x: model(x, training=False), jit_compile=False)
    cached, planned, runs = cached_and_not(lambda: infer(x), budget, 3, 2000)
    return {"what": f"{name} inference, batch 1 ({convolutions} convolutions)", "x_shape": "x".join(map(str, (1,) + shape)),
            "filter_shape": "", "data_format": "NHWC", "cached_us": cached * 1e6, "uncached_us": planned * 1e6,
            "saved_us": (planned - cached) * 1e6, "ratio": planned / cached, "explain_us": None, "runs": runs}


def main(args):
    started = time.perf_counter()
    machine = _bench.machine_facts()
    budget = 0.02 if args.quick else max(args.budget, 1.0)
    print(f"tf_ops {tf_ops.__version__} (CPU micro-kernels: {tf_ops.cpu_kernel_isa()}); TensorFlow "
          f"{tf.__version__}; processor: {machine['processor']}; {machine['intra_op_threads']} threads")
    print(f"each row: the op (or model) with its plan cache on and off, alternating for {budget:g} s a side; "
          "median times")
    print()
    rows, failures = [], 0
    shapes = QUICK_SHAPES if args.quick else SHAPES
    for i, shape in enumerate(shapes, 1):
        for op_name in _bench.DIRECTIONS[shape.depthwise]:
            try:
                rows.append(layer_row(op_name, shape, budget, args.min_runs, args.max_runs, seed=i))
            except Exception as e:  # noqa: BLE001  (report, keep going, fail at the end)
                failures += 1
                print(f"{op_name} {shape.name}: failed: {_bench._first_line(e)}", flush=True)
    for i, (name, build, shape) in enumerate(MODELS[:0] if args.quick else MODELS, 1):
        try:
            rows.append(model_row(name, build, shape, max(budget, 3.0), seed=i))
        except Exception as e:  # noqa: BLE001
            failures += 1
            print(f"{name}: failed: {_bench._first_line(e)}", flush=True)
    width = max([len(r["what"]) for r in rows] + [4])
    print(f"{'what':<{width}} {'cached us':>10} {'planned us':>10} {'saved us':>9} {'planned/cached':>14} "
          f"{'explain us':>10}")
    for r in rows:
        explain = "-" if r["explain_us"] is None else f"{r['explain_us']:.1f}"
        print(f"{r['what']:<{width}} {r['cached_us']:10.1f} {r['uncached_us']:10.1f} {r['saved_us']:9.1f} "
              f"{r['ratio']:14.3f} {explain:>10}")
    print()
    print("planned/cached > 1: the cache saves that share of a call's time (planning again every call). "
          "explain us: one TfOpsExplain call for the layer (checks, geometry, plan, its line): an upper bound "
          "of planning.")
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "tf_ops": tf_ops.__version__,
              "cpu_kernel_isa": tf_ops.cpu_kernel_isa(), "tensorflow": tf.__version__, "machine": machine,
              "settings": {"quick": args.quick, "budget_s": budget}, "rows": rows, "failures": failures,
              "wall_s": time.perf_counter() - started}
    os.makedirs(args.out, exist_ok=True)
    path = _bench.result_stem(args.out, "plan_cache", args.quick) + ".json"
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {path}; total wall time {time.perf_counter() - started:.1f} s")
    return 1 if failures else 0
