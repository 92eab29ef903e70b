"""The GPU harness's driver (tests/gpu/run.sh): the TF-free CUDA kernels, built into a small
library with a C entry point (capi.cu), checked on a real GPU against PyTorch (cuDNN) and the
float64 numpy reference of tf_ops (tf_ops/reference.py, loaded alone: no TensorFlow here), for
bitwise determinism, and timed against cuDNN.

    python3 tests/gpu/harness.py --lib LIB parity   every direction and type over the matrix
    python3 tests/gpu/harness.py --lib LIB small    the small cases, ours alone (for compute-sanitizer)
    python3 tests/gpu/harness.py --lib LIB bench [--quick] [--dtypes float16,...] [--out CSV]

With --emulated, LIB is the same sources built by the host compiler with the CUDA emulator
(tests/gpu/emulated.sh) and tensors stay on the CPU: the harness itself checked without a GPU.
"""
import argparse
import ast
import ctypes
import importlib.util
import pathlib
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("tf_ops_reference", ROOT / "tf_ops" / "reference.py")
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

DTYPES = {"float16": (0, torch.float16, 2.0**-11, 2.0**-25), "bfloat16": (1, torch.bfloat16, 2.0**-8, 0.0),
          "float32": (2, torch.float32, 2.0**-24, 0.0), "float64": (3, torch.float64, 2.0**-53, 0.0),
          "int32": (4, torch.int32, 0.0, 0.0)}
PADDING = {"SAME": 0, "VALID": 1, "EXPLICIT": 2}
DEVICE = "cuda"  # "cpu" under --emulated
# tf_ops::gpu::Kernel, each forced in the parity sweep, and the op's plan (CUTLASS's entries
# first; float32 as 3xTF32, or as TF32): tests/gpu/capi.cu.
KERNELS = {"GEMM": 1, "direct": 2, "plan": 3, "plan_tf32": 4}


class Case:
    def __init__(self, fmt, n, h, w, c, kh, kw, fi, k, strides=(1, 1), dilations=(1, 1), padding="SAME",
                 pads=(0, 0, 0, 0)):
        self.fmt, self.n, self.h, self.w, self.c = fmt, n, h, w, c
        self.kh, self.kw, self.fi, self.k = kh, kw, fi, k
        self.strides, self.dilations, self.padding, self.pads = strides, dilations, padding, pads
        self.g = g = reference.Geometry(self.x_shape(), [kh, kw, fi, k], self.full(strides), padding,
                                        self.explicit(), self.full(dilations), fmt)
        self.oh, self.ow = g.oh, g.ow
        self.y = [n, k, g.oh, g.ow] if fmt == "NCHW" else [n, g.oh, g.ow, k]

    def x_shape(self):
        return [self.n, self.c, self.h, self.w] if self.fmt == "NCHW" else [self.n, self.h, self.w, self.c]

    def full(self, hw):
        return [1, 1, *hw] if self.fmt == "NCHW" else [1, *hw, 1]

    def explicit(self):
        if self.padding != "EXPLICIT":
            return []
        p = self.pads
        return [0, 0, 0, 0, p[0], p[1], p[2], p[3]] if self.fmt == "NCHW" else [0, 0, p[0], p[1], p[2], p[3], 0, 0]

    def attrs(self):
        return dict(strides=self.full(self.strides), padding=self.padding, explicit_paddings=self.explicit(),
                    dilations=self.full(self.dilations), data_format=self.fmt)

    def __str__(self):
        return (f"{self.fmt} x{self.x_shape()} w[{self.kh},{self.kw},{self.fi},{self.k}] s{self.strides} "
                f"d{self.dilations} {self.padding}{list(self.pads) if self.padding == 'EXPLICIT' else ''}")


class Library:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.tf_ops_gpu_conv.restype = ctypes.c_int

    def run(self, direction, dtype, case, a, b, out, sync=True, kernel=0):
        sizes = (ctypes.c_int64 * 8)(case.n, case.h, case.w, case.c, case.kh, case.kw, case.fi, case.k)
        p = case.pads
        attrs = (ctypes.c_int64 * 9)(*case.strides, *case.dilations, PADDING[case.padding], *p)
        err = ctypes.create_string_buffer(512)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream if DEVICE == "cuda" else None)
        code = self.lib.tf_ops_gpu_conv(direction, DTYPES[dtype][0], 0 if case.fmt == "NHWC" else 1, sizes, attrs,
                                        ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()),
                                        ctypes.c_void_p(out.data_ptr()), stream, kernel, err, 512)
        if code != 0:
            raise RuntimeError(err.value.decode())
        if sync:
            synchronize()


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def cudnn_op(direction, case, x, w, dy):
    """The same job through PyTorch's convolution ops alone (cuDNN on the GPU): returns a call
    that runs only the one op (aten.convolution, or aten.convolution_backward for the one
    gradient asked for), with the layout changes and TensorFlow's padding (which may be
    asymmetric) done beforehand, and a function that turns its result into ours."""
    fmt = torch.channels_last if case.fmt == "NHWC" else torch.contiguous_format
    to_nchw = (lambda t: t) if case.fmt == "NCHW" else (lambda t: t.permute(0, 3, 1, 2))
    from_nchw = (lambda t: t) if case.fmt == "NCHW" else (lambda t: t.permute(0, 2, 3, 1))
    g = case.g
    groups = case.c // case.fi
    xp = F.pad(to_nchw(x), (g.pl, g.pr, g.pt, g.pb)).contiguous(memory_format=fmt)
    weight = w.permute(3, 2, 0, 1).contiguous(memory_format=fmt)
    # stride, padding, dilation, transposed, output padding, groups
    conv = (list(case.strides), [0, 0], list(case.dilations), False, [0, 0], groups)
    if direction == 0:
        return (lambda: torch.ops.aten.convolution(xp, weight, None, *conv),
                lambda y: from_nchw(y[:, :, :case.oh, :case.ow]))
    # The convolution of the padded input may have a row or column more than TensorFlow's
    # output: its gradient there is zero.
    full = torch.ops.aten.convolution(xp, weight, None, *conv).shape
    dyp = torch.zeros(full, dtype=dy.dtype, device=dy.device)
    dyp[:, :, :case.oh, :case.ow] = to_nchw(dy)
    dyp = dyp.contiguous(memory_format=fmt)
    mask = [direction == 1, direction == 2, False]
    call = lambda: torch.ops.aten.convolution_backward(dyp, xp, weight, None, *conv, mask)  # noqa: E731
    if direction == 1:
        return call, lambda r: from_nchw(r[0][:, :, g.pt:g.pt + case.h, g.pl:g.pl + case.w])
    return call, lambda r: r[1].permute(2, 3, 1, 0)


def torch_reference(direction, case, x, w, dy):
    """PyTorch's result (cuDNN on the GPU) in our layout."""
    call, finish = cudnn_op(direction, case, x, w, dy)
    return finish(call())


def check(lib, direction, dtype, case, rng, with_torch=True):
    """Runs the case in each kernel, three times each. Returns, per kernel, (bitwise the same
    every time, within the bound, the largest error over the bound), and PyTorch's largest
    error (None where not compared)."""
    torch_type = DTYPES[dtype][1]
    if dtype == "int32":
        make = lambda shape: torch.tensor(rng.integers(-(1 << 20), 1 << 20, size=shape), dtype=torch.int32)  # noqa: E731
    else:
        make = lambda shape: torch.tensor(rng.uniform(-1, 1, size=shape)).to(torch_type)  # noqa: E731
    x, w, dy = make(case.x_shape()), make([case.kh, case.kw, case.fi, case.k]), make(case.y)
    a, b = ((x, w), (w, dy), (x, dy))[direction]
    shape = (case.y, case.x_shape(), [case.kh, case.kw, case.fi, case.k])[direction]
    results = {}
    for kernel, code in KERNELS.items():
        outs = []
        for _ in range(3):
            out = torch.full(shape, 7, dtype=torch_type, device=DEVICE)
            lib.run(direction, dtype, case, a.to(DEVICE), b.to(DEVICE), out, kernel=code)
            outs.append(out.cpu())
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[outs[0].element_size()]
        results[kernel] = (all(torch.equal(outs[0].view(bits), o.view(bits)) for o in outs[1:]),
                           outs[0].to(torch.float64).numpy())
    ex = [t.to(torch.float64).numpy() for t in (x, w, dy)]
    fn = (lambda v: reference.conv2d(v[0], v[1], **case.attrs()),
          lambda v: reference.conv2d_backprop_input(case.x_shape(), v[1], v[2], **case.attrs()),
          lambda v: reference.conv2d_backprop_filter(v[0], [case.kh, case.kw, case.fi, case.k], v[2],
                                                     **case.attrs()))[direction]
    if dtype == "int32":
        exact = fn([e.astype(np.int64) for e in ex])
        wrapped = ((exact.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31))
        return {k: (same, np.array_equal(got.astype(np.int64), wrapped), 0.0)
                for k, (same, got) in results.items()}, None
    exact, abs_sum = fn(ex), fn([np.abs(e) for e in ex])
    products = (case.kh * case.kw * case.fi, case.kh * case.kw * case.k // (case.c // case.fi),
                case.n * case.oh * case.ow)[direction]
    unit, floor = DTYPES[dtype][2], DTYPES[dtype][3]
    acc = 2.0**-53 if dtype == "float64" else 2.0**-24
    bound = (2 * products * acc + unit) * abs_sum + floor
    # float32 on tensor cores (docs/accuracy.md): TF32 rounds each factor to 10 bits (2**-11
    # relative each, 2**-10 a product); 3xTF32 leaves the small parts' product out (2**-22).
    product_error = {"plan_tf32": 2.0**-10, "plan": 2.0**-21} if dtype == "float32" else {}
    bounds = {k: bound + product_error.get(k, 0.0) * abs_sum for k in results}
    checked = {k: (same, bool(np.all(np.abs(got - exact) <= bounds[k])),
                   float(np.max(np.abs(got - exact) / np.maximum(bounds[k], 1e-300))) if got.size else 0.0)
               for k, (same, got) in results.items()}
    vs_torch = None
    if with_torch and dtype != "float64" and exact.size and x.numel() and w.numel() and dy.numel():
        cu = torch_reference(direction, case, *(t.to(DEVICE) for t in (x, w, dy))).to(torch.float64).cpu().numpy()
        vs_torch = float(np.max(np.abs(cu - exact)))
    return checked, vs_torch


def sweep_geometries():
    """The geometries of the emulated sweep, read from tests/cuda_emu/sweep_geometries.inc (one
    SPEC(what, layout, n, h, w, c, kh, kw, fi, k, strides, dilations, padding, pads) a line),
    but for those without input channels: the float64 reference has no group to put such a
    filter in."""
    out = []
    for line in (ROOT / "tests" / "cuda_emu" / "sweep_geometries.inc").read_text().splitlines():
        if line.startswith("SPEC("):
            fields = [f.strip() for f in line[line.rindex('"') + 2:line.rindex(")")].split(",")]
            fmt, sizes, attrs, padding, pads = fields[0], fields[1:9], fields[9:13], fields[13], fields[14:]
            sh, sw, dh, dw = map(int, attrs)
            if int(sizes[3]) == 0:
                continue
            out.append(Case(fmt, *map(int, sizes), (sh, sw), (dh, dw), padding.upper(), tuple(map(int, pads))))
    return out


def cases(small):
    """The parity matrix: a few hand-picked layers, then the geometries of the emulated sweep, so
    that every dispatch decision proven under the emulator runs on the hardware too. The
    sanitizers' sweep (small) leaves out the larger hand-picked layers."""
    picked = [Case("NHWC", 2, 9, 10, 6, 3, 3, 6, 8), Case("NCHW", 2, 9, 10, 6, 3, 3, 6, 8),
              Case("NHWC", 2, 11, 13, 4, 2, 3, 4, 5, (2, 3), (1, 2), "VALID")]
    larger = [Case("NCHW", 1, 10, 9, 4, 3, 2, 2, 6, (2, 1), (2, 1), "EXPLICIT", (1, 2, 0, 3)),
              Case("NHWC", 2, 12, 12, 12, 3, 3, 1, 12, (2, 2), (2, 2)),
              Case("NHWC", 1, 17, 17, 70, 3, 3, 70, 70), Case("NHWC", 2, 40, 40, 3, 7, 7, 3, 16, (2, 2)),
              Case("NHWC", 2, 33, 34, 8, 3, 3, 8, 8)]
    return picked + (sweep_geometries() if small else larger + sweep_geometries())


def parity(lib, small):
    rng = np.random.default_rng(0)
    failures = 0
    for case in cases(small):
        for direction, name in enumerate(("forward", "backprop input", "backprop filter")):
            for dtype in DTYPES:
                if dtype == "int32" and direction == 2:
                    continue
                # The sanitizers' sweep runs our kernels alone: cuDNN's are not ours to check.
                checked, vs_torch = check(lib, direction, dtype, case, rng, with_torch=not small)
                for kernel, (same, ok, worst) in checked.items():
                    failures += (not same) + (not ok)
                    print(f"{'PASS' if same and ok else 'FAIL'} {name:15} {dtype:8} {kernel:6} {case}: "
                          f"error/bound {worst:.3f}, bitwise repeatable {same}"
                          + (f", PyTorch's max error {vs_torch:.2e}" if vs_torch is not None else ""))
    print(f"{failures} failed")
    return 1 if failures else 0


def bench_shapes(quick):
    """The shapes of `python -m tf_ops bench` (with --quick, its quick ones), read from
    tf_ops/_bench.py."""
    wanted = "QUICK_SHAPES" if quick else "SHAPES"
    tree = ast.parse((ROOT / "tf_ops" / "_bench.py").read_text())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                names[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    shapes = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == wanted:
            for call in node.value.elts:
                args = [ast.literal_eval(a) for a in call.args]
                kw = {k.arg: names[k.value.id] if isinstance(k.value, ast.Name) else ast.literal_eval(k.value)
                      for k in call.keywords}
                shapes.append((args, kw))
    return shapes


def bench(lib, out_path, quick, dtypes=("float32", "tf32", "float16", "bfloat16")):
    """The op's GPU plan (CUTLASS's entries first) against cuDNN: float32 with TF32 off on both
    sides (ours 3xTF32, cuDNN's FFMA), "tf32" float32 with TF32 on on both sides, float16 and
    bfloat16."""
    torch.backends.cudnn.benchmark = True
    rows = ["shape,direction,dtype,ours_ms,cudnn_ms,ratio,ours_tflops"]
    for (name, n, hwc, filt, stride, padding), kw in bench_shapes(quick):
        if kw.get("depthwise"):
            filt = (filt[0], filt[1], 1, filt[2] * filt[3])
        fmt = kw.get("data_format", "NHWC")
        d = kw.get("dilation", 1)
        case = Case(fmt, n, hwc[0], hwc[1], hwc[2], *filt, (stride, stride), (d, d), padding)
        flops = 2.0 * n * case.oh * case.ow * case.k * case.kh * case.kw * case.fi
        for dtype in dtypes:
            tf32 = dtype == "tf32"
            stored = "float32" if tf32 else dtype
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
            t = DTYPES[stored][1]
            x = torch.randn(case.x_shape(), device=DEVICE).to(t)
            w = torch.randn([case.kh, case.kw, case.fi, case.k], device=DEVICE).to(t)
            dy = torch.randn(case.y, device=DEVICE).to(t)
            for direction, dname in enumerate(("forward", "input", "filter")):
                a, b = ((x, w), (w, dy), (x, dy))[direction]
                out = torch.empty((case.y, case.x_shape(), list(w.shape))[direction], dtype=t, device=DEVICE)
                ours = timed(lambda: lib.run(direction, stored, case, a, b, out, sync=False,
                                             kernel=KERNELS["plan_tf32" if tf32 else "plan"]))
                theirs = timed(cudnn_op(direction, case, x, w, dy)[0])
                rows.append(f"{name},{dname},{dtype},{ours:.4f},{theirs:.4f},{theirs / ours:.3g},"
                            f"{flops / ours / 1e9:.3f}")
                print(rows[-1], flush=True)
    if out_path:
        pathlib.Path(out_path).write_text("\n".join(rows) + "\n")
    return 0


def timed(fn, repeats=10):
    """Milliseconds per call, the calls queued back to back."""
    fn()
    synchronize()
    if DEVICE != "cuda":
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - start) * 1e3 / repeats
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True)
    parser.add_argument("mode", choices=("parity", "small", "bench"))
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true", help="bench: the quick shapes")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16", help="bench: the element types timed")
    parser.add_argument("--emulated", action="store_true", help="LIB runs the kernels under the emulator")
    args = parser.parse_args()
    global DEVICE
    DEVICE = "cpu" if args.emulated else "cuda"
    lib = Library(args.lib)
    try:
        if args.mode == "bench":
            dtypes = args.dtypes.split(",")
            if not set(dtypes) <= {"float32", "float16", "bfloat16"}:
                parser.error(f"--dtypes {args.dtypes}: float32, float16 and bfloat16 are timed")
            return bench(lib, args.out, args.quick, dtypes)
        return parity(lib, args.mode == "small")
    finally:
        synchronize()
        lib.lib.tf_ops_gpu_free_workspace()


if __name__ == "__main__":
    sys.exit(main())
