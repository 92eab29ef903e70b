"""Building TF-free test programs from the core (cc/core) with the flags the installed library
was built with: each instruction-set file with its own flags, the checkout's headers first,
warnings as errors. Under TF_OPS_SANITIZE=1 (.ci/sanitize), or when asked, with
AddressSanitizer and UndefinedBehaviorSanitizer. Objects are compiled once per test run and
reused by every program built with the same flags (the micro-kernels take the longest): once
per process, and across the processes of one pytest run (its workers) through the folder
named by TF_OPS_TEST_OBJECTS, which tests/conftest.py makes for the run."""
import atexit
import concurrent.futures
import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading

import tensorflow as tf

import tf_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE_SOURCES = ["cc/core/conv_geometry.cc", "cc/core/cpu/conv_cpu.cc", "cc/core/cpu/conv_fast.cc",
                "cc/core/cpu/conv_winograd.cc"]
SANITIZE = os.environ.get("TF_OPS_SANITIZE") == "1"
SANITIZER_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

# Compiled objects of this process: (compiler, flags, source) -> future of the object's path.
# Sources do not change while the tests run.
_objects = {}
_objects_lock = threading.Lock()
_objects_dir = os.environ.get("TF_OPS_TEST_OBJECTS")
if not _objects_dir:
    _objects_dir = tempfile.mkdtemp(prefix="tf_ops_objects_")
    atexit.register(shutil.rmtree, _objects_dir, True)


def _compile(command, src):
    """The object `command` (a compile command without -o) makes of src: compiled by the first
    caller, waited for by any other."""
    key = tuple(command)
    with _objects_lock:
        future = _objects.get(key)
        owner = future is None
        if owner:
            future = _objects[key] = concurrent.futures.Future()
    if owner:
        name = hashlib.sha256("\0".join(command).encode()).hexdigest()[:20]
        obj = os.path.join(_objects_dir, f"{name}_{os.path.basename(src)}.o")
        # Another process of the run may be compiling the same object: the first to lock it
        # compiles it, the others wait and take it.
        with open(obj + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = None
            if not os.path.exists(obj):
                proc = subprocess.run([*command, "-o", obj + ".part"], capture_output=True, text=True)
                if proc.returncode == 0:
                    os.replace(obj + ".part", obj)
        if proc is not None and proc.returncode != 0:
            with _objects_lock:
                del _objects[key]
            future.set_exception(AssertionError(f"compiling {src} failed:\n{proc.stderr[-4000:]}"))
        else:
            future.set_result(obj)
    return future.result()


def available_isas():
    """The instruction sets of the CPU micro-kernels this processor runs, narrowest first (the
    values of TF_OPS_CPU_ISA that change something here)."""
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    isas = ["generic"]
    if all(f in flags for f in (" avx2", " fma", " f16c")):
        isas.append("avx2")
    if all(f in flags for f in (" avx512f", " avx512vl", " avx512bw", " avx512dq")):
        isas.append("avx512")
        if " avx512_bf16" in flags:
            isas.append("avx512_bf16")
            if " amx_bf16" in flags and " amx_tile" in flags:
                isas.append("amx_bf16")
    return isas


def _recorded_flags(info):
    """The library's compile flags without -fPIC, its checkout's -I, and its TensorFlow
    include directory: an isolated pip build compiled against a temporary copy of TensorFlow
    that is gone now, so the running TensorFlow's headers (the same version: the library
    loaded) take its place."""
    flags, recorded = [], iter(info["compile_flags"])
    for flag in recorded:
        if flag == "-isystem":
            next(recorded)
        elif flag not in ("-fPIC", f"-I{info['source_dir']}"):
            flags.append(flag)
    return flags + ["-isystem", tf.sysconfig.get_include()]


def build(out_dir, name, sources, extra_flags=(), sanitize=SANITIZE, sanitize_kernels=None):
    """Links the core, the micro-kernels and `sources` ([(path, per-file flags)], paths from
    the checkout root) into out_dir/name; returns its path. extra_flags apply to the core and
    `sources`; the micro-kernels take the sanitizers only if sanitize_kernels (default:
    sanitize), so that a program that checks other code under them can link the unsanitized
    micro-kernels already compiled (they take minutes to compile with the sanitizers)."""
    info = tf_ops.build_info()
    base = [f"-I{ROOT}", *_recorded_flags(info), "-Werror"]
    sanitizers = SANITIZER_FLAGS if sanitize else []
    kernel_sanitizers = SANITIZER_FLAGS if (sanitize if sanitize_kernels is None else sanitize_kernels) else []
    cxx = os.environ.get("CXX", info.get("compiler", "g++"))
    units = ([[*base, *extra_flags, *sanitizers, "-c", src] for src in CORE_SOURCES] +
             [[*base, *kernel_sanitizers, *flags, "-c", src] for src, flags in info["microkernel_flags"].items()] +
             [[*base, *extra_flags, *sanitizers, *flags, "-c", src] for src, flags in sources])

    def compile_unit(unit):
        *flags, src = unit
        return _compile([cxx, *flags, str(ROOT / src)], src)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_unit, units))
    program = os.path.join(out_dir, name)
    subprocess.run([cxx, *objects, *(SANITIZER_FLAGS[:1] if sanitize else []), "-lpthread", "-o", program],
                   check=True)
    return program


def run(program, *args, env=None, timeout=1800):
    """Runs a program built here; (exit status, stdout + stderr). A sanitized program carries
    its own runtimes, so a preloaded one (.ci/sanitize's, for Python) is dropped."""
    env = dict(os.environ if env is None else env, ASAN_OPTIONS="detect_leaks=0")
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([program, *args], capture_output=True, text=True, env=env, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr
