"""python -m tf_ops bench --kernels: the CPU kernel tables against their own arithmetic peak.

For each kernel table this processor runs (generic, avx2, avx512: the float tiles of
avx512_bf16 and amx_bf16 are avx512's), on as many threads as TensorFlow's intra-op pool:
  - peak: a loop of independent multiply-adds on the table's vectors, the most its
    arithmetic can do here;
  - each float GEMM tile of the table (forward and backprop input: gemm.affine; backprop
    filter: gemm.strided) on a long reduction with its operands in cache;
  - layers through the ops, each named by the pass it runs (tf_ops.explain), in a process of
    their own with TF_OPS_CPU_ISA naming the table: useful GFLOP/s of the forward convolution
    over our time.
Every rate is also given as a fraction of the same table's peak, measured in the same run.
"""
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import tensorflow as tf

import tf_ops
from tf_ops import _bench
from tf_ops._bench import Shape

FLOAT_TABLES = ("generic", "avx2", "avx512")

# One layer per pass, float32 NHWC: sized to take 20-300 ms on the generic table of 2 cores.
PASS_LAYERS = [
    ("conv2d", Shape("resnet1x1", 16, (28, 28, 64), (1, 1, 64, 256), 1, "VALID"), False),
    ("conv2d", Shape("vgg", 4, (56, 56, 64), (3, 3, 64, 64), 1, "SAME"), False),
    ("conv2d", Shape("vgg", 4, (56, 56, 64), (3, 3, 64, 64), 1, "SAME"), True),
    ("conv2d_backprop_input", Shape("unet", 4, (64, 64, 64), (3, 3, 64, 128), 2, "SAME"), False),
    ("conv2d_backprop_filter", Shape("resnet3x3", 4, (28, 28, 128), (3, 3, 128, 128), 1, "SAME"), True),
    ("conv2d_backprop_filter", Shape("resnet1x1", 16, (28, 28, 64), (1, 1, 64, 256), 1, "VALID"), False),
    ("depthwise_conv2d_native", Shape("mobilenet_s1", 8, (56, 56, 128), (3, 3, 128, 1), 1, "SAME",
                                      depthwise=True), False),
]
QUICK_PASS_LAYERS = [
    ("conv2d", Shape("tiny", 2, (12, 12, 32), (3, 3, 32, 32), 1, "SAME"), False),
    ("conv2d_backprop_filter", Shape("tiny", 2, (12, 12, 32), (1, 1, 32, 32), 1, "VALID"), False),
]


def roofline(isa, threads, seconds):
    """[(kernel, where, GFLOP/s)] of table `isa` (TfOpsCpuRoofline), or None where this
    processor cannot run it."""
    tf_ops.load_library()
    fn = ctypes.CDLL(tf_ops.library_path()).TfOpsCpuRoofline
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_double, ctypes.c_char_p, ctypes.c_int64]
    out = ctypes.create_string_buffer(1 << 16)
    size = fn(isa.encode(), threads, seconds, out, len(out))
    text = out.value.decode()
    if size >= len(out):
        raise RuntimeError(f"TfOpsCpuRoofline wrote {size} bytes, more than {len(out)}")
    if text.startswith("error: "):
        if "cannot run" in text:
            return None
        raise RuntimeError(text.strip())
    rows = []
    for line in text.splitlines():
        kernel, where, gflops = line.split("\t")
        rows.append((kernel, where, float(gflops)))
    return rows


def pass_rates(quick, budget_s):
    """[{op, shape, exact, algorithm, ms, gflops}] of the pass layers, in this process (whose
    table TF_OPS_CPU_ISA chose)."""
    rows = []
    for op_name, shape, exact in (QUICK_PASS_LAYERS if quick else PASS_LAYERS):
        cfg = _bench.make_cfg(shape)
        t = _bench.make_tensors(cfg, tf.float32, seed=1)
        fn = _bench.our_call(op_name, cfg, t)
        previous = tf_ops.set_exact_mode(exact)
        try:
            algorithm = tf_ops.explain(op_name, list(cfg["x_shape"]), list(cfg["filter_shape"]),
                                       strides=shape.stride, padding=shape.padding, dtype=tf.float32).algorithm
            times, _ = _bench.interleaved_times(fn, None, budget_s, 3, 200)
        finally:
            tf_ops.set_exact_mode(previous)
        seconds = statistics.median(times)
        rows.append({"op": op_name, "shape": shape.name, "n": shape.n, "exact": exact,
                     "algorithm": algorithm, "ms": seconds * 1e3,
                     "gflops": _bench.useful_gflop(shape, cfg) / seconds})
    return rows


def _passes_in_process(isa, quick, budget_s):
    """pass_rates in a process of its own whose kernel table is `isa` (TF_OPS_CPU_ISA is read
    once per process)."""
    env = dict(os.environ, TF_OPS_CPU_ISA=isa, TF_CPP_MIN_LOG_LEVEL="2")
    code = ("import json; from tf_ops import _bench_kernels as k; "
            f"print('PASSES', json.dumps(k.pass_rates({quick!r}, {budget_s!r})))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("PASSES "):
            return json.loads(line[len("PASSES "):])
    raise RuntimeError(f"the pass layers on the {isa} table failed:\n{proc.stderr[-3000:]}")


def main(args):
    started = time.perf_counter()
    machine = _bench.machine_facts()
    threads = machine["intra_op_threads"]
    seconds = 0.06 if args.quick else 0.9
    budget = 0.02 if args.quick else 0.5
    print(f"tf_ops {tf_ops.__version__}; processor: {machine['processor']}; {threads} threads "
          f"(TensorFlow's intra-op pool); this process's table: {tf_ops.cpu_kernel_isa()}")
    print(f"each kernel row: the best of three runs of all {threads} threads at once for {seconds / 3:g} s "
          "(the peak before and after the tiles); each layer: median of "
          f"calls for {budget:g} s, in a process whose TF_OPS_CPU_ISA names the table")
    print()
    tables = []
    for isa in FLOAT_TABLES:
        rows = roofline(isa, threads, seconds)
        if rows is None:
            continue
        peak = rows[0][2]
        kernels = [{"kernel": k, "where": w, "gflops": g, "peak_fraction": g / peak} for k, w, g in rows]
        passes = _passes_in_process(isa, args.quick, budget)
        for p in passes:
            p["peak_fraction"] = p["gflops"] / peak
        tables.append({"table": isa, "peak_gflops": peak, "kernels": kernels, "passes": passes})

    print(f"{'table':<8} {'kernel or layer':<44} {'GFLOP/s':>9} {'of peak':>8}")
    for t in tables:
        for k in t["kernels"]:
            label = k["kernel"] + ("" if k["kernel"] == "peak" else f" ({k['where']})")
            print(f"{t['table']:<8} {label:<44} {k['gflops']:9.1f} {k['peak_fraction']:8.0%}")
        for p in t["passes"]:
            label = (f"{p['op']} {p['shape']} b{p['n']}: {p['algorithm']}"
                     + (" (exact)" if p["exact"] else ""))
            print(f"{t['table']:<8} {label:<44} {p['gflops']:9.1f} {p['peak_fraction']:8.0%}")
        print()
    print("peak: independent multiply-adds on the table's vectors (FMA where it has them); gemm rows: "
          f"the tiles on a reduction of 512 with operands in cache; layer rows: useful GFLOP/s of the "
          "forward convolution over our time (Winograd's useful work is the direct sum's, so it can pass "
          "100%).")
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "tf_ops": tf_ops.__version__,
              "tensorflow": tf.__version__, "machine": machine, "threads": threads,
              "settings": {"quick": args.quick, "kernel_seconds": seconds, "layer_budget_s": budget},
              "tables": tables, "wall_s": time.perf_counter() - started}
    os.makedirs(args.out, exist_ok=True)
    path = _bench.result_stem(args.out, "kernels", args.quick, per_table=False) + ".json"
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {path}; total wall time {time.perf_counter() - started:.1f} s")
    return 0
