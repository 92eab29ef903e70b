"""The shared conv geometry is 64-bit safe: for sizes past 2**31 and up to the int64 limit,
it either computes exactly what unbounded integer arithmetic gives, or refuses with an
overflow error exactly when a quantity of the computation does not fit in int64.

The geometry is TF-free, so it is compiled alone with the C++ compiler and driven here."""
import os
import pathlib
import random
import subprocess
import tempfile

import tensorflow as tf

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
INT64_MAX = common.INT64_MAX


_PADDING = {"S": "SAME", "V": "VALID", "E": "EXPLICIT"}


def _exact_window(size, k, d, s, padding, before, after):
    """What the geometry must return: ('OK', out, before, after) or 'overflow' or 'negative'."""
    out, before, after, overflow = common.window_int64(size, k, d, s, _PADDING[padding],
                                                       (before, after))
    if overflow:
        return "overflow"
    return ("OK", out, before, after) if out >= 0 else "negative"


class GeometryInt64Test(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.driver = os.path.join(cls._tmp.name, "geometry_driver")
        cxx = os.environ.get("CXX", "g++")
        # Under the sanitizer job (TF_OPS_SANITIZE=1) the driver is checked by ASan and UBSan.
        sanitize = (["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
                    if os.environ.get("TF_OPS_SANITIZE") == "1" else [])
        subprocess.run([cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", *sanitize, f"-I{ROOT}",
                        str(ROOT / "tests/cc/geometry_driver.cc"),
                        str(ROOT / "cc/core/conv_geometry.cc"), "-o", cls.driver], check=True)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def _run(self, lines):
        proc = subprocess.run([self.driver], input="\n".join(lines) + "\n", capture_output=True,
                              text=True, check=True, timeout=120)
        return proc.stdout.splitlines()

    def test_window_sizes_past_int32_and_near_int64(self):
        rng = random.Random(0)
        edges = [0, 1, 2, 3, 2**31 - 1, 2**31, 2**32 + 5, 2**40, 2**61, 2**62, 2**62 + 1,
                 INT64_MAX // 2, INT64_MAX - 1, INT64_MAX]

        def value(lo):
            return rng.choice([v for v in edges if v >= lo] + [rng.randint(lo, INT64_MAX),
                                                                 rng.randint(lo, 2**34)])

        cases = []
        for _ in range(6000):
            padding = rng.choice("SVE")
            size, k = value(0), value(0)
            d, s = value(1), value(1)
            before, after = (value(0), value(0)) if padding == "E" else (0, 0)
            cases.append((size, k, d, s, padding, before, after))
        got = self._run([f"W {a} {b} {c} {d} {e} {f} {g}" for a, b, c, d, e, f, g in cases])
        counts = {"OK": 0, "overflow": 0, "negative": 0}
        for case, line in zip(cases, got):
            want = _exact_window(*case)
            what = f"window{case}"
            if want == "overflow":
                self.assertStartsWith(line, "ERR Convolution sizes overflow 64-bit arithmetic", what)
                self.assertIn(f"stride: {case[3]}", line)
                counts["overflow"] += 1
            elif want == "negative":
                self.assertStartsWith(line, "ERR Computed output size would be negative", what)
                counts["negative"] += 1
            else:
                self.assertEqual(line, "OK " + " ".join(str(v) for v in want[1:]), what)
                counts["OK"] += 1
        # The sweep must exercise every outcome, and mostly exact results past int32.
        self.assertGreater(counts["OK"], 1000, counts)
        self.assertGreater(counts["overflow"], 100, counts)
        self.assertGreater(counts["negative"], 100, counts)

    def test_tensor_element_counts_past_int32_and_int64(self):
        # [n, h, w, c] with h * w * c past 2**31 (fits int64) and past 2**63 (refused).
        lines = [
            "G 1 65536 65536 2 3 3 2 2 1 1 S 0 0 0 0",            # 2**33 input elements
            "G 2 3037000500 3037000500 2 1 1 2 2 1 1 V 0 0 0 0",  # > 2**63 elements
            "G 1 1 1 1 1 1 1 1 1 1 E 4611686018427387904 4611686018427387904 0 0",  # padding overflow
            "G 1 3 3 4 3 3 2 6 2 1 S 0 0 0 0",                    # 2 groups, fine
            "G 1 3 3 4 3 3 3 6 2 1 S 0 0 0 0",                    # 4 % 3 != 0
            "G 1 3 3 4 3 3 2 5 2 1 S 0 0 0 0",                    # 5 % 2 groups != 0
        ]
        got = self._run(lines)
        self.assertEqual(got[0], "OK 65536 65536")
        self.assertEqual(got[1], "ERR Convolution tensor of shape [2, 3037000500, 3037000500, 2] "
                                 "would have more than 2**63 - 1 elements")
        self.assertStartsWith(got[2], "ERR Convolution sizes overflow 64-bit arithmetic")
        self.assertEqual(got[3], "OK 2 2")
        self.assertEqual(got[4], "ERR input depth must be evenly divisible by filter depth: 4 vs 3")
        self.assertEqual(got[5], "ERR output depth must be evenly divisible by number of groups: 5 vs 2")


if __name__ == "__main__":
    tf.test.main()
