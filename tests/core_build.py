"""Building the tests' C++ drivers of the core (cc/core): their sources compiled with the flags
the installed library was built with, the checkout's headers first, warnings as errors, and
linked against the installed library itself (tf_ops/_tf_ops.so, which exports the core), so
that they drive the very objects TensorFlow runs: the core and its micro-kernels, built once, by
the set-up. The driver's sources name no TensorFlow code; the library brings TensorFlow's two
libraries into the process. The checkout must be the one the library was built from (its
build records a digest of cc/core). Under TF_OPS_SANITIZE=1 (.ci/sanitize: the installed
library is its sanitized build), or when asked, with AddressSanitizer and
UndefinedBehaviorSanitizer. Objects are compiled once per test run and reused by every program
built with the same flags: once per process, and across the processes of one pytest run (its
workers) through the folder named by TF_OPS_TEST_OBJECTS, which tests/conftest.py makes for the
run."""
import atexit
import concurrent.futures
import fcntl
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import threading

import tensorflow as tf

import tf_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
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


def core_sha256():
    """The digest of the checkout's cc/core, as setup.py records it with the build."""
    digest = hashlib.sha256()
    for path in sorted(p for p in (ROOT / "cc" / "core").rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _library_link_flags(info):
    """Link flags of a program that calls the installed library's core: the library, the two
    TensorFlow libraries it needs, and a run path to both as RPATH (which, unlike RUNPATH, also
    serves the library's own dependencies)."""
    assert info.get("core_sha256") == core_sha256(), (
        f"the installed tf_ops ({tf_ops.__file__}) was not built from this checkout's cc/core "
        f"(built from {info.get('source_dir')}); reinstall it: python -m pip install .")
    library = os.path.join(os.path.dirname(tf_ops.__file__), "_tf_ops.so")
    tf_dir = tf.sysconfig.get_lib()
    return [library, f"-L{tf_dir}", "-l:libtensorflow_framework.so.2", "-l:libtensorflow_cc.so.2",
            f"-Wl,--disable-new-dtags,-rpath,{os.path.dirname(library)}:{tf_dir}"]


def build(out_dir, name, sources, extra_flags=(), sanitize=SANITIZE):
    """Compiles `sources` ([(path, per-file flags)], paths from the checkout root; extra_flags
    apply to all) and links them against the installed library into out_dir/name; returns its
    path. With the sanitizers if asked or if the library has them (a sanitized library needs
    their runtimes in the program). A program that compiles the GPU kernels under the CUDA
    emulator defines their entry points itself, and its definitions take the place of the
    library's in the process (which never calls them: no CUDA device is set up there)."""
    info = tf_ops.build_info()
    sanitize = sanitize or bool(info.get("sanitize"))
    sanitizers = SANITIZER_FLAGS if sanitize else []
    base = [f"-I{ROOT}", *_recorded_flags(info), "-Werror", *extra_flags, *sanitizers]
    cxx = os.environ.get("CXX", info.get("compiler", "g++"))
    link = _library_link_flags(info)

    def compile_unit(unit):
        src, flags = unit
        return _compile([cxx, *base, *flags, "-c", str(ROOT / src)], src)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_unit, sources))
    program = os.path.join(out_dir, name)
    subprocess.run([cxx, *objects, *sanitizers[:1], *link, "-lpthread", "-o", program], check=True)
    return program


# The log lines TensorFlow's libraries write as a program linked against the library starts
# (absl's format, whatever TF_CPP_MIN_LOG_LEVEL says): not the program's output.
_TF_LOG = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\) is called .*"
                     r"|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\] .*)\n", re.M)


def run(program, *args, env=None, timeout=1800):
    """Runs a program built here; (exit status, stdout + stderr, without TensorFlow's log
    lines). A sanitized program carries its own runtimes, so a preloaded one (.ci/sanitize's,
    for Python) is dropped."""
    # TensorFlow's start-up, which the library brings into the program, frees a block of
    # protobuf's descriptor pool with another size than it allocated (uninstrumented code that
    # AddressSanitizer still sees through operator delete): that one check is off.
    env = dict(os.environ if env is None else env, ASAN_OPTIONS="detect_leaks=0:new_delete_type_mismatch=0")
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([program, *args], capture_output=True, text=True, env=env, timeout=timeout)
    return proc.returncode, proc.stdout + _TF_LOG.sub("", proc.stderr)
