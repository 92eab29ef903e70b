"""Compiling C++ programs against the installed TensorFlow and tf_ops, for the tests that
build C++ drivers: TensorFlow's compile flags from tf.sysconfig with its headers as system
headers (as setup.py includes them), our sources warning-clean, and the link flags of
TensorFlow's C++ libraries and of tf_ops' op library (see cc/ops/tf_ops_ops.h)."""
import concurrent.futures
import functools
import os
import pathlib
import shlex
import subprocess
import time

import tensorflow as tf

import tf_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
CXX = os.environ.get("CXX", "g++")
# The sources of the C++ op API, compiled into every program that uses it.
CPP_API_SOURCES = [ROOT / "cc/ops/tf_ops_ops.cc", ROOT / "cc/ops/tf_ops_gradients.cc"]


def tf_compile_flags():
    """-std=c++17, warnings as errors, the checkout on the include path, and TensorFlow's
    flags with its include folder as -isystem."""
    flags = ["-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{ROOT}"]
    for flag in tf.sysconfig.get_compile_flags():
        if flag.startswith("-I"):
            flags += ["-isystem", flag[2:]]
        elif not flag.startswith(("-std", "--std")):
            flags.append(flag)
    return flags


def tf_link_flags():
    """libtensorflow_cc and libtensorflow_framework of the pip TensorFlow, found at run time
    through the rpath."""
    lib = tf.sysconfig.get_lib()
    return [f"-L{lib}", "-l:libtensorflow_cc.so.2", "-l:libtensorflow_framework.so.2",
            f"-Wl,-rpath,{lib}"]


def tf_ops_link_flags():
    """tf_ops' op library, kept even by a linker that defaults to --as-needed (a program calls
    none of its functions; linking it is what registers the ops and kernels)."""
    lib = os.path.dirname(tf_ops.library_path())
    return [f"-L{lib}", "-Wl,--push-state,--no-as-needed", "-l:_tf_ops.so", "-Wl,--pop-state",
            f"-Wl,-rpath,{lib}"]


@functools.lru_cache(maxsize=None)
def fast_linker_flags():
    """-fuse-ld=lld or gold where the compiler has one: they read libtensorflow_cc's half a
    million exported symbols several times faster than GNU ld. [] otherwise."""
    for linker in ("lld", "gold"):
        probe = subprocess.run([CXX, f"-fuse-ld={linker}", "-Wl,--version"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            return [f"-fuse-ld={linker}"]
    return []


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"command failed ({proc.returncode}): {shlex.join(cmd)}\n"
                             f"{proc.stdout}{proc.stderr}")


def build_programs(out_dir, programs, opt="-O1", jobs=None):
    """Compiles the main sources of `programs`, plus CPP_API_SOURCES once, and links each
    program into out_dir. `programs` maps a program name to (main source, whether to link
    tf_ops' op library); programs may share a main source. Returns (paths by name, seconds
    spent compiling, seconds spent linking)."""
    out_dir = pathlib.Path(out_dir)
    flags = tf_compile_flags() + [opt]
    api = [pathlib.Path(p) for p in CPP_API_SOURCES]
    sources = list(dict.fromkeys(api + [pathlib.Path(src) for src, _ in programs.values()]))
    objects = {src: out_dir / (src.stem + ".o") for src in sources}
    jobs = jobs or os.cpu_count() or 1

    def link(name):
        src, with_tf_ops = programs[name]
        _run([CXX, *fast_linker_flags(), str(objects[pathlib.Path(src)]),
              *(str(objects[a]) for a in api), *tf_link_flags(),
              *(tf_ops_link_flags() if with_tf_ops else []), "-o", str(out_dir / name)])

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda src: _run([CXX, *flags, "-c", str(src), "-o", str(objects[src])]),
                      sources))
    compiled = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(link, programs))
    return ({name: out_dir / name for name in programs}, compiled - start,
            time.monotonic() - compiled)
