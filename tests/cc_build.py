"""Compiling C++ programs against the installed TensorFlow and tf_ops, for the tests that
build C++ drivers, as a user's program is built: the flags of tf_ops.sysconfig (tf_ops'
header from the installed package, TensorFlow's headers as system headers, warnings as errors)
and its link flags (TensorFlow's C++ libraries, tf_ops' C++ API library and its op library; see
cc/ops/tf_ops_ops.h). Nothing is compiled from the checkout but the programs themselves."""
import concurrent.futures
import functools
import os
import pathlib
import shlex
import subprocess
import time

import tf_ops.sysconfig

ROOT = pathlib.Path(__file__).resolve().parent.parent
CXX = os.environ.get("CXX", "g++")


def tf_compile_flags():
    """Warnings as errors, and tf_ops.sysconfig's compile flags (C++17 among them)."""
    return ["-Wall", "-Wextra", "-Werror", *tf_ops.sysconfig.get_compile_flags()]


def link_flags(with_op_library):
    """tf_ops.sysconfig's link flags; without the op library, TensorFlow's and tf_ops' C++ API
    libraries only (a program that loads the op library at run time)."""
    op_library = "-l:" + os.path.basename(tf_ops.library_path())
    return [f for f in tf_ops.sysconfig.get_link_flags() if with_op_library or f != op_library]


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
    """Compiles the main sources of `programs` and links each program into out_dir.
    `programs` maps a program name to (main source, whether to link tf_ops' op library);
    programs may share a main source. Returns (paths by name, seconds spent compiling, seconds
    spent linking)."""
    out_dir = pathlib.Path(out_dir)
    flags = tf_compile_flags() + [opt]
    sources = list(dict.fromkeys(pathlib.Path(src) for src, _ in programs.values()))
    objects = {src: out_dir / (src.stem + ".o") for src in sources}
    jobs = jobs or os.cpu_count() or 1

    def link(name):
        src, with_tf_ops = programs[name]
        _run([CXX, *fast_linker_flags(), str(objects[pathlib.Path(src)]), *link_flags(with_tf_ops),
              "-o", str(out_dir / name)])

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda src: _run([CXX, *flags, "-c", str(src), "-o", str(objects[src])]),
                      sources))
    compiled = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(link, programs))
    return ({name: out_dir / name for name in programs}, compiled - start,
            time.monotonic() - compiled)
