"""Builds tf_ops/_tf_ops.so (the op library) and tf_ops/libtf_ops_cc.so (the C++ op API, with
its header copied to tf_ops/include) against the TensorFlow installed in the build environment.

The compile and link flags come from tf.sysconfig. What the library was built with (the
TensorFlow version, compiler and flags) is written beside it to _build_info.json, which the
loader reads to explain a version mismatch.

The package depends on the TensorFlow distribution it was built against (`tensorflow`,
`tensorflow-cpu`, ...) at the same minor version: built against tensorflow 2.19.1, it requires
tensorflow>=2.19,<2.20. The build stops, saying what to run instead, if that TensorFlow is
missing, outside the supported minors, or not the one the target environment already has
(an isolated build of `pip install .` next to another TensorFlow, whose result would
replace it).
"""
import concurrent.futures
import glob
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import site
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [
    "cc/core/conv_geometry.cc",
    "cc/core/switches.cc",
    "cc/core/vocabulary.cc",
    "cc/core/cpu/conv_cpu.cc",
    "cc/core/cpu/conv_fast.cc",
    "cc/core/cpu/conv_winograd.cc",
    "cc/core/cpu/microkernels.cc",
    "cc/core/cpu/plan.cc",
    "cc/core/cpu/roofline.cc",
    "cc/core/cpu/microkernels_generic.cc",
    "cc/ops/conv_ops.cc",
    "cc/kernels/conv_checks.cc",
    "cc/kernels/conv_kernels.cc",
    "cc/kernels/conv_xla.cc",
    "cc/kernels/graph_plugin.cc",
    "cc/kernels/graph_rewrite.cc",
]
# The micro-kernels are built once per instruction set and chosen at run time
# (cc/core/cpu/microkernels.h); only those files get the instruction-set flags. Their sums
# use fused multiply-adds where the instruction set has them (-ffp-contract=fast).
# -Wno-psabi: 64-byte vector values never cross a call boundary there (all helpers are
# always_inline), so GCC's note about their calling convention does not apply.
MICROKERNEL_FLAGS = {
    "cc/core/cpu/microkernels_generic.cc": ["-ffp-contract=fast", "-Wno-psabi"],
    "cc/core/cpu/microkernels_avx2.cc": ["-ffp-contract=fast", "-Wno-psabi", "-mavx2", "-mfma",
                                         "-mf16c"],
    "cc/core/cpu/microkernels_avx512.cc": ["-ffp-contract=fast", "-mavx512f", "-mavx512vl",
                                           "-mavx512bw", "-mavx512dq", "-mfma", "-mf16c"],
    "cc/core/cpu/microkernels_avx512bf16.cc": ["-mavx512f", "-mavx512vl", "-mavx512bw",
                                               "-mavx512dq", "-mavx512bf16"],
}
if platform.machine().lower() in ("x86_64", "amd64"):
    SOURCES += ["cc/core/cpu/microkernels_avx2.cc", "cc/core/cpu/microkernels_avx512.cc",
                "cc/core/cpu/microkernels_avx512bf16.cc"]
WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter"]
# The C++ op API (tf_ops::ops, gradients included), shipped in the package for C++ programs:
# compiled into a library of its own beside the op library, its header under tf_ops/include
# (tf_ops.sysconfig gives the flags).
CPP_API_SOURCES = ["cc/ops/tf_ops_ops.cc", "cc/ops/tf_ops_gradients.cc"]
CPP_API_HEADERS = ["cc/ops/tf_ops_ops.h"]
CPP_API_LIBRARY = "libtf_ops_cc.so"
# The XLA lowerings include XLA's headers, which include two libraries' headers that the pip
# TensorFlow ships under include/external (_xla_flags); the op library then links
# libtensorflow_cc.so.2, which exports XLA's op registry and builder.
XLA_SOURCE = "cc/kernels/conv_xla.cc"
# Linked into both libraries from a static archive, its symbols kept private: see the file.
COMPAT_SOURCE = "cc/compat/libstdcxx_compat.cc"
# The CUDA kernels (nvcc) and the driver check (the host compiler with CUDA's headers), built
# where a CUDA compiler is found (TF_OPS_CUDA=0 or 1 forces it off or on); they are TF-free, and
# the op library's glue registers GPU kernels when built with them (-DTF_OPS_WITH_CUDA=1).
CUDA_SOURCES = ["cc/core/gpu/conv_gpu.cu"]
CUDA_HOST_SOURCES = ["cc/core/gpu/gpu_support.cc", "cc/core/gpu/gpu_plan.cc", "cc/core/gpu/gpu_run.cc"]
# CUTLASS's convolutions (cc/core/gpu/cutlass_conv.h), one element type a translation unit so
# that they compile in parallel, the longest first; their headers come from PyPI's
# nvidia-cutlass (the build requirement CUTLASS_REQUIREMENT, or CUTLASS_INCLUDE).
CUTLASS_SOURCES = ["cc/core/gpu/cutlass_tf32x3.cu", "cc/core/gpu/cutlass_tf32.cu", "cc/core/gpu/cutlass_half.cu",
                   "cc/core/gpu/cutlass_bfloat16.cu", "cc/core/gpu/cutlass_conv.cu"]
CUTLASS_REQUIREMENT = "nvidia-cutlass>=4.2,<5"
CUDA_GLUE = "cc/kernels/conv_kernels.cc"
# SASS for each architecture (compute capability x 10), PTX for the newest; TF_OPS_CUDA_ARCHS
# ("80;90" or "80,86,90") overrides.
DEFAULT_CUDA_ARCHS = "80;90"
UBSAN_FOR_TF_HEADERS = ("signed-integer-overflow,integer-divide-by-zero,shift,bounds,vla-bound,"
                      "float-cast-overflow,float-divide-by-zero,alignment,bool,enum,unreachable,"
                      "return,pointer-overflow")


# Supported TensorFlow minors, oldest and newest (2.18 to 2.21). pyproject.toml's build
# requirement spells the same range.
TF_OLDEST, TF_NEWEST = (2, 18), (2, 21)
TF_RANGE = f">={TF_OLDEST[0]}.{TF_OLDEST[1]},<{TF_NEWEST[0]}.{TF_NEWEST[1] + 1}"
SUPPORTED = f"TensorFlow {TF_OLDEST[0]}.{TF_OLDEST[1]} to {TF_NEWEST[0]}.{TF_NEWEST[1]}"
BUILD_HERE = f"python -m pip install --no-build-isolation {shlex.quote(HERE)}"
INSTALL_TF = f'python -m pip install "tensorflow{TF_RANGE}"   (or "tensorflow-cpu{TF_RANGE}")'


def _stop(message):
    sys.exit("\ntf_ops: " + message + "\n")


def _tf_distributions(paths=None):
    """The installed distributions that provide the `tensorflow` package (tensorflow,
    tensorflow-cpu, tf-nightly, ...) on `paths` (default sys.path), in path order."""
    found = []
    for dist in importlib.metadata.distributions(**({} if paths is None else {"path": paths})):
        if any(str(f) == "tensorflow/__init__.py" for f in dist.files or ()):
            found.append(dist)
    return found


def _dist_name(dist):
    return re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()


def _minor(version):
    return tuple(int(v) for v in re.findall(r"\d+", version)[:2])


def _target_paths():
    """Where the environment this build installs into keeps its packages. In an isolated
    build (pip's), sys.path holds the build environment instead, but sys.prefix is still the
    target environment's. Outside a virtual environment, the user's site-packages count too
    (pip turns them off in the build environment, not in the one it installs into)."""
    paths = list(site.getsitepackages())
    if sys.prefix == sys.base_prefix:
        paths.append(site.getusersitepackages())
    return [p for p in paths if os.path.isdir(p)]


def _tensorflow_requirement():
    """Checks the TensorFlow this build compiles against and returns the requirement the
    package gets: that distribution at that minor version."""
    try:
        import tensorflow as tf
    except ImportError as e:
        _stop(f"no TensorFlow to build against ({e}). tf_ops is compiled against the TensorFlow "
              f"it runs with, and supports {SUPPORTED}. Install one first, then build "
              f"without build isolation:\n    {INSTALL_TF}\n    {BUILD_HERE}")
    version = tf.__version__
    tf_init = os.path.realpath(tf.__file__)
    dist = next((d for d in _tf_distributions()
                 if os.path.realpath(d.locate_file("tensorflow/__init__.py")) == tf_init), None)
    name = _dist_name(dist) if dist is not None else "tensorflow"
    if not TF_OLDEST <= _minor(version) <= TF_NEWEST:
        _stop(f"TensorFlow {version} ({name}, {tf.__file__}) is installed; tf_ops supports "
              f"{SUPPORTED}. Install a supported one, then build against it:\n"
              f"    {INSTALL_TF}\n    {BUILD_HERE}")
    installed = _tf_distributions(_target_paths())
    if installed and not any((_dist_name(d), d.version) == (name, version) for d in installed):
        have = ", ".join(f"{_dist_name(d)} {d.version}" for d in installed)
        # A build without isolation uses the environment's own setuptools and wheel.
        tools = {"setuptools", "wheel"} - {_dist_name(d) for d in
                                           importlib.metadata.distributions(path=_target_paths())}
        build_here = (f"python -m pip install {' '.join(sorted(tools))}\n    " if tools
                      else "") + BUILD_HERE
        if all(TF_OLDEST <= _minor(d.version) <= TF_NEWEST for d in installed):
            how = f"Build against the installed one instead:\n    {build_here}"
        else:
            how = (f"tf_ops supports {SUPPORTED}: install a supported one, then build against "
                   f"it:\n    {INSTALL_TF}\n    {build_here}")
        _stop(f"this environment ({sys.prefix}) has {have}, but this isolated build got "
              f"{name} {version} to compile against; installing the result would replace your "
              f"TensorFlow. {how}")
    major, minor = _minor(version)
    return f"{name}>={major}.{minor},<{major}.{minor + 1}"


def _tf_flags():
    import tensorflow as tf

    compile_flags = []
    for flag in tf.sysconfig.get_compile_flags():
        # TensorFlow's headers are system headers: their warnings are not ours to fix.
        if flag.startswith("-I"):
            compile_flags += ["-isystem", flag[2:]]
        elif not flag.startswith("--std") and not flag.startswith("-std"):
            compile_flags.append(flag)
    return tf, compile_flags, tf.sysconfig.get_link_flags()


def _xla_flags(tf):
    """-isystem for the folders under TensorFlow's include/external that hold the headers XLA's
    include (highwayhash, farmhash), and -DNDEBUG: TensorFlow's release build compiles XLA's
    inline debug checks out, and its libraries do not export all that they would call (2.18's
    lack an absl logging instantiation one of them needs)."""
    external = os.path.join(tf.sysconfig.get_include(), "external")
    flags = []
    for header in ("highwayhash/arch_specific.h", "farmhash.h"):
        # The folder that #include "<header>" resolves against: the path less the header's.
        found = sorted(path[:-len(header) - 1] for path in glob.glob(
            os.path.join(external, "**", os.path.basename(header)), recursive=True)
            if path.endswith(os.sep + header))
        if not found:
            _stop(f"TensorFlow's headers lack {header}, which its XLA headers include")
        flags += ["-isystem", found[0]]
    return flags + ["-DNDEBUG"]


def _find_nvcc():
    """nvcc's path, from PATH, CUDA_HOME or /usr/local/cuda; None where there is none or
    TF_OPS_CUDA turns the CUDA build off."""
    setting = os.environ.get("TF_OPS_CUDA", "auto").strip().lower()
    if setting in ("0", "off", "no", "false"):
        return None
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    for candidate in (shutil.which("nvcc"), os.path.join(cuda_home, "bin", "nvcc")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    if setting in ("1", "on", "yes", "true"):
        _stop(f"TF_OPS_CUDA={os.environ['TF_OPS_CUDA']} asks for the CUDA kernels, but no nvcc was "
              f"found on PATH or under CUDA_HOME ({cuda_home}). Install the CUDA toolkit, or build "
              "without them: TF_OPS_CUDA=0")
    return None


def _cuda_home(nvcc):
    """The CUDA toolkit nvcc belongs to: where nvcc says its tree is (its dry run names it
    TOP, also when nvcc on PATH is a wrapper script), else CUDA_HOME, else nvcc's grandparent."""
    dry = subprocess.run([nvcc, "-v", "--dryrun", "-c", "-x", "cu", os.devnull],
                         capture_output=True, text=True)
    top = re.search(r"^#\$ TOP=(.+)$", dry.stdout + dry.stderr, re.M)
    for home in ([os.path.normpath(top.group(1).strip())] if top else []) + [
            os.environ.get("CUDA_HOME", ""), os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))]:
        if home and os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h")):
            return home
    _stop(f"found {nvcc}, but not the CUDA toolkit it belongs to (include/cuda_runtime_api.h); "
          "set CUDA_HOME to it, or build without the CUDA kernels: TF_OPS_CUDA=0")


def _cutlass_include():
    """CUTLASS's include folder: CUTLASS_INCLUDE, else the one PyPI's nvidia-cutlass installs
    (cutlass_library/source/include), found without importing it."""
    candidates = [os.environ["CUTLASS_INCLUDE"]] if os.environ.get("CUTLASS_INCLUDE") else []
    try:
        import importlib.util
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(os.path.join(location, "source", "include"))
    for include in candidates:
        if os.path.isfile(os.path.join(include, "cutlass", "cutlass.h")):
            return include
    _stop("found nvcc, but not CUTLASS's headers, which the GPU kernels are built with. Install them "
          f"into the build environment: python -m pip install '{CUTLASS_REQUIREMENT}' (or set "
          "CUTLASS_INCLUDE to a CUTLASS include folder), or build without the CUDA kernels: TF_OPS_CUDA=0")


def _cuda_archs():
    text = os.environ.get("TF_OPS_CUDA_ARCHS", DEFAULT_CUDA_ARCHS)
    archs = {a.strip() for a in re.split(r"[;, ]+", text) if a.strip()}
    if not archs or not all(a.isdigit() for a in archs):
        _stop(f"TF_OPS_CUDA_ARCHS={text!r}: give compute capabilities times ten, e.g. \"80;90\"")
    archs = sorted(archs, key=int)
    if int(archs[0]) < 80:
        _stop(f"TF_OPS_CUDA_ARCHS={text!r}: the CUDA kernels use the tensor-core instructions of sm_80 "
              "(Ampere) and newer; give 80 or above")
    return archs


class BuildTfOpsLibrary(build_ext):
    """Compiles the C++ sources into one shared library loaded with tf.load_op_library."""

    def get_ext_filename(self, ext_name):
        return os.path.join(*ext_name.split(".")) + ".so"

    def build_extension(self, ext):
        tf, tf_compile, tf_link = _tf_flags()
        cxx = os.environ.get("CXX", "g++")
        compile_flags = ["-std=c++17", "-O3", "-fPIC", "-I" + HERE] + WARNINGS + tf_compile
        if os.environ.get("TF_OPS_WERROR") == "1":
            compile_flags.append("-Werror")
        link_flags = ["-shared"] + tf_link
        xla_flags = _xla_flags(tf)
        sanitize = os.environ.get("TF_OPS_SANITIZE") == "1"
        if sanitize:
            # AddressSanitizer and UndefinedBehaviorSanitizer; any report aborts the process.
            # Line tables (-g1) are all a report's stack needs, and compile far faster than
            # full debug information of TensorFlow's headers.
            common = ["-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g1", "-O1"]
            compile_flags += common
            link_flags += ["-fsanitize=address,undefined"] + common
        compile_flags += shlex.split(os.environ.get("TF_OPS_EXTRA_CXXFLAGS", ""))
        link_flags += shlex.split(os.environ.get("TF_OPS_EXTRA_LDFLAGS", ""))

        obj_dir = os.path.join(self.build_temp, "tf_ops_objs")
        os.makedirs(obj_dir, exist_ok=True)
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)

        def run(cmd):
            """Runs cmd, showing it and its output; returns the output."""
            print(" ".join(shlex.quote(c) for c in cmd), flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            sys.stdout.write(proc.stdout)
            sys.stderr.write(proc.stderr)
            sys.stdout.flush(), sys.stderr.flush()
            if proc.returncode != 0:
                raise subprocess.CalledProcessError(proc.returncode, cmd)
            return proc.stdout + proc.stderr

        def object_of(src):
            return os.path.join(obj_dir, src.replace("/", "_") + ".o")

        def compile_one(src, extra=()):
            obj = object_of(src)
            flags = compile_flags + MICROKERNEL_FLAGS.get(src, []) + list(extra)
            if src == XLA_SOURCE:
                flags += xla_flags
            if sanitize:
                # GCC's null and nonnull-attribute checks turn constexpr code in TensorFlow's
                # absl headers into errors; the TF-including glue gets every other check, the
                # TF-free core all of them.
                flags = flags + ["-fsanitize=address,undefined" if src.startswith("cc/core/")
                                 else "-fsanitize=address," + UBSAN_FOR_TF_HEADERS]
            run([cxx] + flags + ["-c", os.path.join(HERE, src), "-o", obj])
            return obj

        nvcc = _find_nvcc()
        cuda, cuda_link = None, []
        if nvcc is not None:
            cuda_home = _cuda_home(nvcc)
            release = re.search(r"release (\d+\.\d+)", subprocess.run(
                [nvcc, "--version"], capture_output=True, text=True).stdout)
            archs = _cuda_archs()
            cutlass_include = _cutlass_include()
            cuda = {"nvcc": nvcc, "version": release.group(1) if release else "", "archs": archs,
                    "ptx": archs[-1], "home": cuda_home, "cutlass_include": cutlass_include}
            gencode = [f for a in archs for f in ("-gencode", f"arch=compute_{a},code=sm_{a}")]
            gencode += ["-gencode", f"arch=compute_{archs[-1]},code=compute_{archs[-1]}"]
            nvcc_flags = ["-std=c++17", "-O3", "-I" + HERE, "-Xcompiler", "-fPIC"] + gencode
            if os.environ.get("TF_OPS_WERROR") == "1":
                nvcc_flags += ["-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror"]
            cuda.update(flags=nvcc_flags, output={})
            cuda_include = ["-isystem", os.path.join(cuda_home, "include"),
                            f"-DTF_OPS_CUDA_MIN_ARCH={archs[0]}"]
            # The CUDA runtime, linked statically with its symbols kept private: the library then
            # loads where CUDA is not installed, and reaches the driver only when asked.
            cuda_link = [os.path.join(cuda_home, "lib64", "libcudart_static.a"),
                         "-Wl,--exclude-libs,libcudart_static.a", "-ldl", "-lrt", "-lpthread"]

        def compile_cuda(src):
            # nvcc's output is kept with the build (an empty one under TF_OPS_WERROR=1 is the
            # proof that the kernels build warning-clean, tests/test_cuda_kernels.py). CUTLASS
            # needs --expt-relaxed-constexpr (NVIDIA/cutlass#1898: wrong results without it).
            obj = object_of(src)
            extra = (["-isystem", cuda["cutlass_include"], "--expt-relaxed-constexpr"]
                     if src in CUTLASS_SOURCES else [])
            cuda["output"][src] = run([nvcc] + nvcc_flags + extra + ["-c", os.path.join(HERE, src), "-o", obj])
            return obj

        def compile_with_cuda(src):
            extra = cuda_include + (["-DTF_OPS_WITH_CUDA=1", "-DTF_OPS_WITH_CUTLASS=1"] if src == CUDA_GLUE else [])
            return compile_one(src, extra)

        jobs = int(os.environ.get("TF_OPS_BUILD_JOBS", os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            if cuda is None:
                futures = [pool.submit(compile_one, src) for src in SOURCES]
            else:
                futures = [pool.submit(compile_cuda, src) for src in CUTLASS_SOURCES + CUDA_SOURCES]
                futures += [pool.submit(compile_with_cuda, src) for src in SOURCES + CUDA_HOST_SOURCES]
            api_futures = [pool.submit(compile_one, src) for src in CPP_API_SOURCES]
            compat_future = pool.submit(compile_one, COMPAT_SOURCE)
            objects = [f.result() for f in futures]
            api_objects = [f.result() for f in api_futures]
        compat = os.path.join(obj_dir, "libtf_ops_compat.a")
        if os.path.exists(compat):
            os.remove(compat)
        subprocess.check_call(["ar", "rcs", compat, compat_future.result()])
        # Both libraries need TensorFlow's C++ API library beside its framework (the op library
        # for XLA's registry and builder); the op library, CUDA's runtime too.
        api_link = [compat, "-Wl,--exclude-libs,libtf_ops_compat.a"] + link_flags + ["-l:libtensorflow_cc.so.2"]
        op_link = api_link + cuda_link
        run([cxx] + objects + ["-o", out] + op_link)
        package_dir = os.path.dirname(out)
        run([cxx] + api_objects + ["-o", os.path.join(package_dir, CPP_API_LIBRARY)] + api_link)
        for header in CPP_API_HEADERS:
            target = os.path.join(package_dir, "include", header)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(HERE, header), target)

        compiler = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
        info = {
            "tf_version": tf.__version__,
            "tf_git_version": getattr(tf, "__git_version__", ""),
            "python": sys.version.split()[0],
            "compiler": cxx,
            "compiler_version": compiler.splitlines()[0] if compiler else "",
            "compile_flags": compile_flags,
            "link_flags": op_link,
            "sanitize": sanitize,
            "microkernel_flags": MICROKERNEL_FLAGS,
            "source_dir": HERE,
            "core_sha256": core_sha256(HERE),
            "cuda": cuda,
        }
        with open(os.path.join(os.path.dirname(out), "_build_info.json"), "w") as f:
            json.dump(info, f, indent=2)


def core_sha256(root):
    """A digest of the core's sources (cc/core: paths and contents), recorded with the build: the
    tests' C++ drivers link this library and compile the checkout's core headers against it, so
    they check first that the checkout is the one the library was built from."""
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(root, "cc", "core", "**", "*"), recursive=True)):
        if os.path.isfile(path):
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


setup(
    install_requires=[_tensorflow_requirement(), "numpy"],
    ext_modules=[Extension("tf_ops._tf_ops", sources=SOURCES)],
    cmdclass={"build_ext": BuildTfOpsLibrary},
)
