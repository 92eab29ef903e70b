"""Builds tf_ops/_tf_ops.so against the TensorFlow installed in the build environment.

The compile and link flags come from tf.sysconfig. What the library was built with (the
TensorFlow version, compiler and flags) is written beside it to _build_info.json, which the
loader reads to explain a version mismatch.
"""
import concurrent.futures
import json
import os
import platform
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [
    "cc/core/conv_geometry.cc",
    "cc/core/cpu/conv_cpu.cc",
    "cc/core/cpu/conv_fast.cc",
    "cc/core/cpu/microkernels_generic.cc",
    "cc/ops/conv_ops.cc",
    "cc/kernels/conv_kernels.cc",
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
UBSAN_FOR_TF_HEADERS = ("signed-integer-overflow,integer-divide-by-zero,shift,bounds,vla-bound,"
                      "float-cast-overflow,float-divide-by-zero,alignment,bool,enum,unreachable,"
                      "return,pointer-overflow")


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
        sanitize = os.environ.get("TF_OPS_SANITIZE") == "1"
        if sanitize:
            # AddressSanitizer and UndefinedBehaviorSanitizer; any report aborts the process.
            common = ["-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
            compile_flags += common
            link_flags += ["-fsanitize=address,undefined"] + common
        compile_flags += shlex.split(os.environ.get("TF_OPS_EXTRA_CXXFLAGS", ""))
        link_flags += shlex.split(os.environ.get("TF_OPS_EXTRA_LDFLAGS", ""))

        obj_dir = os.path.join(self.build_temp, "tf_ops_objs")
        os.makedirs(obj_dir, exist_ok=True)
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)

        def compile_one(src):
            obj = os.path.join(obj_dir, src.replace("/", "_") + ".o")
            flags = compile_flags + MICROKERNEL_FLAGS.get(src, [])
            if sanitize:
                # GCC's null and nonnull-attribute checks turn constexpr code in TensorFlow's
                # absl headers into errors; the TF-including glue gets every other check, the
                # TF-free core all of them.
                flags = flags + ["-fsanitize=address,undefined" if src.startswith("cc/core/")
                                 else "-fsanitize=address," + UBSAN_FOR_TF_HEADERS]
            cmd = [cxx] + flags + ["-c", os.path.join(HERE, src), "-o", obj]
            print(" ".join(shlex.quote(c) for c in cmd), flush=True)
            subprocess.check_call(cmd)
            return obj

        jobs = int(os.environ.get("TF_OPS_BUILD_JOBS", os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            objects = list(pool.map(compile_one, SOURCES))
        cmd = [cxx] + objects + ["-o", out] + link_flags
        print(" ".join(shlex.quote(c) for c in cmd), flush=True)
        subprocess.check_call(cmd)

        compiler = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
        info = {
            "tf_version": tf.__version__,
            "tf_git_version": getattr(tf, "__git_version__", ""),
            "python": sys.version.split()[0],
            "compiler": cxx,
            "compiler_version": compiler.splitlines()[0] if compiler else "",
            "compile_flags": compile_flags,
            "link_flags": link_flags,
            "sanitize": sanitize,
            "microkernel_flags": MICROKERNEL_FLAGS,
            "source_dir": HERE,
        }
        with open(os.path.join(os.path.dirname(out), "_build_info.json"), "w") as f:
            json.dump(info, f, indent=2)


setup(
    ext_modules=[Extension("tf_ops._tf_ops", sources=SOURCES)],
    cmdclass={"build_ext": BuildTfOpsLibrary},
)
