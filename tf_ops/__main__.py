"""python -m tf_ops: what is installed, and a self-check of every op.

Prints the TensorFlow version, the library and how it was built, the registered kernels
per device and dtype (XLA's among them: every op has an XLA lowering), then runs every op on
a handful of configurations against the float64 reference and TensorFlow's built-in op, with
timings, and once per op under tf.function(jit_compile=True) against the reference and the
kernels. Exits 1 if any row fails.

`python -m tf_ops bench` runs the benchmark instead (python -m tf_ops bench --help), and
`python -m tf_ops explain` prints the plan the CPU kernels would run for one call of an op
(python -m tf_ops explain --help), and `python -m tf_ops run SCRIPT [ARGS...]` runs an unchanged
script with tf_ops.enable() on.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import kernels  # noqa: E402

import tf_ops  # noqa: E402
from tf_ops import _selfcheck as sc  # noqa: E402

# (label, config): plain NHWC cases TensorFlow runs everywhere, then the cases only
# tf_ops runs on CPU.
CONFIGS = [
    ("NHWC s2 SAME 3x3", sc.make_config("NHWC", 4, 32, 32, 32, [3, 3, 32, 32], (2, 2), (1, 1), "SAME")),
    ("NHWC s1 VALID 5x5", sc.make_config("NHWC", 2, 24, 20, 16, [5, 5, 16, 24], (1, 1), (1, 1), "VALID")),
    ("NCHW s(2,1) dil 2", sc.make_config("NCHW", 2, 20, 18, 16, [3, 3, 16, 16], (2, 1), (2, 2), "SAME")),
    ("NHWC groups 4 EXPLICIT", sc.make_config("NHWC", 2, 20, 20, 32, [3, 3, 8, 32], (2, 2), (1, 1),
                                              "EXPLICIT", (1, 2, 0, 1))),
]
DEPTHWISE_CONFIGS = [
    ("NHWC s2 SAME 3x3 m1", sc.make_config("NHWC", 4, 32, 32, 32, [3, 3, 32, 1], (2, 2), (1, 1), "SAME",
                                           depthwise=True)),
    ("NCHW s(1,2) dil 2 m2", sc.make_config("NCHW", 2, 20, 18, 8, [3, 3, 8, 2], (1, 2), (2, 2), "SAME",
                                            depthwise=True)),
]
DTYPES = [tf.float32, tf.float64]


def _time_ms(fn, repeats):
    fn()  # warm up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples))


def _gflop(cfg):
    """Useful GFLOP of the convolution: 2 * N * OH * OW * K * KH * KW * FI."""
    n, oh, ow = cfg["y_shape"][0], *(cfg["y_shape"][2:] if cfg["data_format"] == "NCHW" else cfg["y_shape"][1:3])
    kh, kw, fi, k = cfg["filter_shape"]
    if cfg["depthwise"]:
        fi, k = 1, fi * k
    return 2.0 * n * oh * ow * k * kh * kw * fi / 1e9


def _shown_flags(flags):
    """The compile flags, an include folder that is gone (an isolated build's copy of
    TensorFlow) shown as <removed-isolated-build>."""
    shown, it = [], iter(flags)
    for flag in it:
        if flag == "-isystem":
            folder = next(it, "")
            shown += [flag, folder if os.path.isdir(folder) else "<removed-isolated-build>/tensorflow/include"]
        else:
            shown.append(flag)
    return shown


def _kernel_table():
    rows = []
    for name, op in tf_ops.OP_NAMES.items():
        per_device = {}
        for k in kernels.get_registered_kernels_for_op(op).kernel:
            types = [tf.dtypes.as_dtype(t).name for c in k.constraint if c.name == "T"
                     for t in c.allowed_values.list.type]
            per_device.setdefault(k.device_type, []).extend(types)
        for device, types in sorted(per_device.items()):
            rows.append((op, device, ", ".join(sorted(types))))
    return rows


def _gpu_line(info):
    """What the library has for GPUs, and whether TensorFlow found one."""
    gpus = tf.config.list_physical_devices("GPU")
    found = f"{len(gpus)} GPU(s) found" if gpus else "no GPU found"
    cuda = info.get("cuda")
    if not cuda:
        return f"CUDA kernels: not built (no nvcc at build time, or TF_OPS_CUDA=0); {found}"
    archs = ", ".join(f"sm_{a}" for a in cuda["archs"])
    status = tf_ops.gpu_support()
    return (f"CUDA kernels: CUDA {cuda['version']}, {archs} + compute_{cuda['ptx']} PTX "
            f"(needs an NVIDIA driver of 580 or newer); {found}"
            + (f"; {status}" if status else ""))


def _check_rows(repeats):
    rows, ok = [], True
    rng = np.random.default_rng(0)
    for kind in sc.KINDS:
        configs = DEPTHWISE_CONFIGS if sc.is_depthwise(kind) else CONFIGS
        for label, cfg in configs:
            for dtype in DTYPES:
                arrays = sc.make_inputs(rng, cfg, dtype)
                ours = sc.run_ours(kind, cfg, arrays, dtype)
                err = sc.max_error(ours, sc.run_reference(kind, cfg, arrays))
                passed = err <= sc.TOLERANCE[dtype]
                builtin = sc.run_builtin(kind, cfg, arrays, dtype)
                if builtin is None:
                    builtin_err, builtin_ms = "unsupported", "-"
                else:
                    b = sc.max_error(ours, builtin)
                    passed = passed and b <= sc.BUILTIN_TOLERANCE[dtype]
                    builtin_err = f"{b:.1e}"
                    builtin_ms = f"{_time_ms(lambda: sc.run_builtin(kind, cfg, arrays, dtype), repeats):.2f}"
                ours_ms = _time_ms(lambda: sc.run_ours(kind, cfg, arrays, dtype), repeats)
                ok = ok and passed
                rows.append((kind, label, dtype.name, f"{err:.1e}", builtin_err,
                             "PASS" if passed else "FAIL", f"{ours_ms:.2f}", builtin_ms,
                             f"{_gflop(cfg) / ours_ms * 1e3:.1f}"))
    return rows, ok


def _xla_rows():
    """Every op once under XLA (jit_compile=True) on a configuration with groups or a depth
    multiplier, NCHW or strides: error vs the reference and vs the kernels. Compiling registers
    XLA's kernels for the ops, which the kernel table then lists. (One tf.function per op, each
    traced once: TensorFlow's warning about functions created in a loop is silenced here.)"""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        return _xla_rows_traced()
    finally:
        logger.setLevel(level)


def _xla_rows_traced():
    rows, ok = [], True
    rng = np.random.default_rng(1)
    for kind in sc.KINDS:
        label, cfg = (DEPTHWISE_CONFIGS if sc.is_depthwise(kind) else CONFIGS)[-1]
        arrays = sc.make_inputs(rng, cfg, tf.float32)
        tensors = [tf.constant(arrays[k], tf.float32) for k in ("x", "w", "dy")]
        fn = tf.function(lambda x, w, dy, kind=kind, cfg=cfg: sc.run_ours_tensors(kind, cfg, x, w, dy),
                         jit_compile=True)
        try:
            got = fn(*tensors).numpy()
        except (tf.errors.OpError, ValueError) as e:
            ok = False
            rows.append((kind, label, "float32", "-", "-", f"FAIL: {str(e).splitlines()[0][:60]}"))
            continue
        err = sc.max_error(got, sc.run_reference(kind, cfg, arrays))
        vs_kernels = sc.max_error(got, sc.run_ours(kind, cfg, arrays, tf.float32))
        passed = err <= sc.TOLERANCE[tf.float32] and vs_kernels <= 2 * sc.TOLERANCE[tf.float32]
        ok = ok and passed
        rows.append((kind, label, "float32", f"{err:.1e}", f"{vs_kernels:.1e}", "PASS" if passed else "FAIL"))
    return rows, ok


def _print_table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        from tf_ops import _bench
        return _bench.main(argv[1:])
    if argv[:1] == ["explain"]:
        from tf_ops import _explain
        return _explain.main(argv[1:])
    if argv[:1] == ["run"]:
        from tf_ops import _enable
        return _enable.run_main(argv[1:])
    return selfcheck_main(argv)


def selfcheck_main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tf_ops", description=__doc__.splitlines()[0],
                                     epilog="python -m tf_ops bench --help: the benchmark; "
                                            "python -m tf_ops explain --help: which kernel runs a call; "
                                            "python -m tf_ops run SCRIPT [ARGS...]: a script with tf_ops.enable() on")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per op (median is shown)")
    args = parser.parse_args(argv)

    info = tf_ops.build_info()
    print(f"tf_ops {tf_ops.__version__}")
    print(f"TensorFlow {tf.__version__} (oneDNN {'on' if sc.ONEDNN else 'off'})")
    print(f"library: {tf_ops.library_path()}")
    print(f"built for TensorFlow {info.get('tf_version', '?')} with {info.get('compiler_version', '?')}")
    print(f"compile flags: {' '.join(_shown_flags(info.get('compile_flags', [])))}")
    print(f"CPU micro-kernels: {tf_ops.cpu_kernel_isa()} (TF_OPS_CPU_ISA names another)")
    print(_gpu_line(info))
    print()
    xla_rows, xla_ok = _xla_rows()
    print("Registered kernels (XLA_CPU_JIT, XLA_GPU_JIT: the XLA lowerings)")
    _print_table(("op", "device", "dtypes"), _kernel_table())
    print("Self-check: max error vs float64 reference and vs TensorFlow's built-in op; time in ms "
          f"(median of {args.repeats}, eager, intra-op threads: {tf.config.threading.get_intra_op_parallelism_threads() or 'default'})")
    rows, ok = _check_rows(args.repeats)
    _print_table(("op", "config", "dtype", "err vs ref", "err vs TF", "result", "tf_ops ms", "TF ms",
                         "tf_ops GFLOP/s"), rows)
    print("Under XLA (tf.function(jit_compile=True)): max error vs float64 reference and vs the kernels")
    _print_table(("op", "config", "dtype", "err vs ref", "err vs kernels", "result"), xla_rows)
    failed = sum(r[5] == "FAIL" for r in rows) + sum(r[5] != "PASS" for r in xla_rows)
    print(f"{len(rows) + len(xla_rows) - failed} passed, {failed} failed")
    return 0 if ok and xla_ok else 1


if __name__ == "__main__":
    sys.exit(main())
