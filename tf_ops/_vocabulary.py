"""The library's vocabulary (cc/core/vocabulary.h), read from the library itself (TfOpsVocabulary),
so that the package names nothing the core does not: the directions, element types, layouts, the
ops of the family, the CPU algorithms and the GPU plan's entries and rules, each list in the
order of its enum (a name's position is its number in the library's interfaces)."""
import ctypes
import functools

from tf_ops import _loader


@functools.lru_cache(maxsize=None)
def _lists():
    """{list: tuple of its lines' words}, from the library."""
    fn = _loader.c_function("TfOpsVocabulary", ctypes.c_int64, [ctypes.c_char_p, ctypes.c_int64])
    size = fn(None, 0)
    if size < 0:
        raise MemoryError("tf_ops: the library could not write its vocabulary")
    out = ctypes.create_string_buffer(size + 1)
    fn(out, size + 1)
    lists = {}
    for line in out.value.decode().splitlines():
        kind, *words = line.split()
        lists.setdefault(kind, []).append(tuple(words))
    return {kind: tuple(words) for kind, words in lists.items()}


def names(kind):
    """The names of list `kind` ("direction", "element", "layout", "cpu_algorithm", "gpu_entry",
    "gpu_rule"), in enum order."""
    return tuple(words[0] for words in _lists()[kind])


def ops():
    """{TensorFlow op name: (direction number, depthwise)} of the family's eight ops."""
    directions = names("direction")
    return {name: (directions.index(direction), depthwise == "1") for name, direction, depthwise in _lists()["op"]}
