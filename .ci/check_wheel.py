"""Checks a tf_ops wheel made by auditwheel (.ci/tf_versions), in the environment it was
installed into: a manylinux tag no newer than TensorFlow's own (the wheel installs wherever the
TensorFlow it needs does), the package's libraries, header and build record inside, and no
TensorFlow library and nothing grafted (the libraries need only TensorFlow's, which the
tensorflow package provides, and the system's).
Usage: python .ci/check_wheel.py WHEEL"""
import importlib.metadata
import re
import sys
import zipfile

LIBRARIES = ["tf_ops/_tf_ops.so", "tf_ops/libtf_ops_cc.so"]
REQUIRED = set(LIBRARIES) | {"tf_ops/_build_info.json", "tf_ops/include/cc/ops/tf_ops_ops.h",
                             "tf_ops/__init__.py", "tf_ops/sysconfig.py"}
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_x86_64")


def tensorflow_glibc():
    """The glibc version of the installed TensorFlow wheel's manylinux tag."""
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            wheel = importlib.metadata.distribution(name).read_text("WHEEL") or ""
        except importlib.metadata.PackageNotFoundError:
            continue
        tags = [tuple(map(int, m.groups())) for m in MANYLINUX.finditer(wheel)]
        if tags:
            return min(tags), name
    sys.exit("check_wheel: no installed TensorFlow wheel with a manylinux tag")


def main(path):
    tag = MANYLINUX.search(path.rsplit("/", 1)[-1])
    if not tag:
        sys.exit(f"check_wheel: not a manylinux x86-64 wheel: {path}")
    ours = tuple(map(int, tag.groups()))
    theirs, tf_name = tensorflow_glibc()
    if ours > theirs:
        sys.exit(f"check_wheel: tagged for glibc {ours[0]}.{ours[1]}, newer than {tf_name}'s "
                 f"{theirs[0]}.{theirs[1]}: it would not install everywhere {tf_name} does")
    names = zipfile.ZipFile(path).namelist()
    missing = sorted(REQUIRED - set(names))
    if missing:
        sys.exit(f"check_wheel: missing from the wheel: {missing}")
    libraries = sorted(n for n in names if re.search(r"\.so(\.\d+)*$", n))
    if libraries != LIBRARIES:
        sys.exit(f"check_wheel: shared libraries {libraries}, expected {LIBRARIES}")
    foreign = [n for n in names if "tensorflow" in n.lower() or ".libs/" in n]
    if foreign:
        sys.exit(f"check_wheel: copied into the wheel: {foreign}")
    print(f"wheel {tag.group(0)} (glibc {ours[0]}.{ours[1]}; {tf_name}: {theirs[0]}.{theirs[1]}), "
          f"{len(names)} files, libraries {', '.join(libraries)}, no TensorFlow library inside")


if __name__ == "__main__":
    main(sys.argv[1])
