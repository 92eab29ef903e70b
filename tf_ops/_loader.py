"""Loads tf_ops/_tf_ops.so once, and explains any failure in terms a user can act on."""
import ctypes
import json
import os
import re

import tensorflow as tf

_LIBRARY = None


def library_path():
    """Path of the compiled op library, for users who call tf.load_op_library themselves: the
    file named by the environment variable TF_OPS_LIBRARY if it is set (a library built
    elsewhere, e.g. bazel-bin/_tf_ops.so), else _tf_ops.so in this package."""
    override = os.environ.get("TF_OPS_LIBRARY")
    if override:
        return os.path.abspath(override)
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tf_ops.so")


def build_info():
    """What the library was built with: TF version, compiler and flags (dict; {} if unknown).
    Read from _build_info.json beside the library."""
    path = os.path.join(os.path.dirname(library_path()), "_build_info.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _minor(version):
    """(major, minor) of a version string: (2, 21) for "2.21.0" and "2.21.1rc0". TensorFlow
    keeps its ABI within a minor series, so a library built on one patch release loads on every
    other of the same minor."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else version


def _rebuild_command(info):
    source = info.get("source_dir") or "<path to the tf_ops source checkout>"
    return f"python -m pip install --no-build-isolation --no-deps --force-reinstall {source}"


def load_library():
    """Loads the op library (once) and returns the module of generated op wrappers."""
    global _LIBRARY
    if _LIBRARY is not None:
        return _LIBRARY
    info = build_info()
    built_for = info.get("tf_version", "an unknown TensorFlow version")
    running = tf.__version__
    path = library_path()
    advice = (
        f"The library was built for TensorFlow {built_for}; TensorFlow {running} is running. "
        f"Rebuild it against the running TensorFlow with: {_rebuild_command(info)}"
    )
    if not os.path.exists(path):
        checkout = os.path.dirname(os.path.dirname(path))
        if not os.environ.get("TF_OPS_LIBRARY") and os.path.exists(os.path.join(checkout, "setup.py")):
            # Named for the package, so that `python -m tf_ops` says this sentence without a traceback.
            raise ImportError(
                f"tf_ops: Python imported tf_ops from the source checkout {checkout} (the current folder "
                "shadows the installed package), which holds no compiled library: run from another folder.",
                name="tf_ops")
        raise ImportError(f"tf_ops: the compiled op library {path} is missing. {advice}")
    if info and _minor(info.get("tf_version", "")) != _minor(running):
        raise ImportError(f"tf_ops: TensorFlow version mismatch. {advice}")
    try:
        library = tf.load_op_library(path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, OSError) as e:
        raise ImportError(f"tf_ops: could not load {path}: {e}. {advice}") from e
    isa_error = ctypes.CDLL(path).TfOpsCpuKernelIsaError
    isa_error.restype = ctypes.c_char_p
    refused = isa_error().decode()
    if refused:
        # The ops would fail with the same sentence; say it once, here (and on every later try).
        raise ImportError(f"tf_ops: {refused}", name="tf_ops")
    _LIBRARY = library
    return _LIBRARY


def c_function(name, restype, argtypes):
    """The library's C entry point `name` (through ctypes, with its types set), the library loaded
    first; RuntimeError, with the command that rebuilds it, where the library has none (built
    from an older source than this package)."""
    load_library()
    path = library_path()
    try:
        fn = getattr(ctypes.CDLL(path), name)
    except AttributeError:
        raise RuntimeError(f"tf_ops: the op library {path} has no {name}: it was built from an older source than "
                           f"this package. Rebuild it with: {_rebuild_command(build_info())}") from None
    fn.restype, fn.argtypes = restype, argtypes
    return fn


def cpu_kernel_isa():
    """The instruction set of the CPU micro-kernels this processor runs: "amx_bf16" (AVX-512
    with bfloat16 dot products, and AMX tiles for the bfloat16 GEMMs of the forward and
    backprop-input passes), "avx512_bf16" (AVX-512 with bfloat16 dot products), "avx512",
    "avx2" or "generic". Chosen once per process: the best the processor and OS support, or
    the one the environment variable TF_OPS_CPU_ISA names (one of those five; tf_ops refuses
    to import where the processor cannot run it)."""
    load_library()
    fn = ctypes.CDLL(library_path()).TfOpsCpuKernelIsa
    fn.restype = ctypes.c_char_p
    return fn().decode()


def exact_mode():
    """Whether the CPU kernels run in exact mode (see set_exact_mode)."""
    load_library()
    return bool(ctypes.CDLL(library_path()).TfOpsExactMode())


def set_exact_mode(enabled):
    """Exact mode on (True) or off (False) for the CPU kernels, process-wide; returns the mode
    it replaces. In exact mode every output element is the direct sum of its products (in
    float32 for half and bfloat16), as the direct loops form it; off, 3x3 stride-1
    convolutions with at least 16 channels per group on each side use Winograd F(4x4, 3x3) in
    all three directions (a quarter of the multiplies), within the error bound docs/accuracy.md
    states. Off by default; the environment variable TF_OPS_EXACT=1 turns it on from the
    start. Calls already running keep the mode they started with; the GPU kernels and XLA's
    lowerings are not affected (the GPU kernels always sum directly)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_exact_mode takes True or False, not {enabled!r}")
    previous = exact_mode()
    ctypes.CDLL(library_path()).TfOpsSetExactMode(1 if enabled else 0)
    return previous


def set_verbose(enabled):
    """Whether each op call prints its plan to stderr (on CPU with the call's time; the line of
    tf_ops.explain, prefixed tf_ops_verbose), process-wide, from now on; returns the setting it
    replaces. Off by default; TF_OPS_VERBOSE=1 in the environment when the library loads turns it
    on from the start."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_verbose takes True or False, not {enabled!r}")
    return _switch("verbose", enabled)


def _switch(name, on):
    """Sets a switch of the library's (cc/core/switches.h: "exact", "direct_kernels", "verbose")
    on (True) or off (False), process-wide; returns its value before. For the tests, which
    compare the fast kernels with the direct loops in one process; users set the environment
    variables (TF_OPS_EXACT=1, TF_OPS_CPU_KERNELS=direct, TF_OPS_VERBOSE=1), read once, when the
    library is loaded, or call set_exact_mode."""
    before = c_function("TfOpsSwitch", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int])(name.encode(), 1 if on else 0)
    if before < 0:
        raise ValueError(f"tf_ops: no switch named {name!r}")
    return bool(before)


def gpu_support():
    """Why the library's GPU kernels are not registered in this process (its NVIDIA driver too
    old for them, or a GPU older than the architectures they were built for), in one sentence;
    "" where they are registered or the library has none."""
    load_library()
    lib = ctypes.CDLL(library_path())
    if not hasattr(lib, "TfOpsGpuSupport"):
        return ""
    fn = lib.TfOpsGpuSupport
    fn.restype = ctypes.c_char_p
    return fn().decode()
