"""Out of memory is an error, not a crash: every op, in each layout, on a call whose workspace
(taken from TensorFlow's allocator, once, before anything runs) cannot be had under a capped address
space raises ResourceExhaustedError naming the op, the bytes and what they are for, and the
process goes on: the next call, with less data, under the same cap, succeeds and is right. Run in
a process of its own (out_of_memory_worker.py); the sanitizer job runs it too."""
import json
import os
import pathlib
import re
import subprocess
import sys

import tensorflow as tf

from test_errors import LABELS

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "out_of_memory_worker.py"

# A call whose workspace is at least this large, so that half of it, the room the worker leaves
# beside the output under the cap, is far more than TensorFlow's own small allocations need.
MIN_WORKSPACE_BYTES = 48 << 20

# (kind, data_format, [N, H, W, C], filter shape), each with a workspace of MIN_WORKSPACE_BYTES
# or more (checked below): in NCHW the NHWC copies of a 64 x 384 x 384 image; in NHWC the
# packed or transposed filter, the Winograd filter gradient's sums, the depthwise filter panel
# and the depthwise filter gradient's slices.
CASES = []
for kind in LABELS:
    depthwise = kind.startswith("depthwise")
    CASES.append([kind, "NCHW", [1, 384, 384, 64], [3, 3, 64, 1] if depthwise else [3, 3, 64, 64]])
    if kind == "depthwise_backprop_filter":
        CASES.append([kind, "NHWC", [1, 8, 8, 100000], [7, 7, 100000, 1]])
    elif depthwise:
        CASES.append([kind, "NHWC", [1, 8, 8, 300000], [7, 7, 300000, 1]])
    elif "filter" in kind:
        CASES.append([kind, "NHWC", [1, 32, 32, 1024], [3, 3, 1024, 1024]])
    else:
        CASES.append([kind, "NHWC", [1, 8, 8, 1024], [5, 5, 1024, 1024]])


def run_worker(cases, onednn):
    """(the worker's process, {(kind, data_format): result}) for `cases`, with TensorFlow's
    oneDNN operations on or off. With them off, TensorFlow's CPU allocator is the C library's
    malloc, which returns what a case frees to the system, so that every case meets the cap
    afresh. With them on it is oneDNN's, which keeps what it once had for later requests: only a
    process's first large call then meets the cap, so it runs one case."""
    # One malloc arena: the C library then never unmaps a pool thread's arena of its own in the
    # middle of a case, which would make room under the cap that the case did not count on.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_OPS_CPU_KERNELS="", TF_ENABLE_ONEDNN_OPTS=str(int(onednn)),
               MALLOC_ARENA_MAX="1")
    if "ASAN_OPTIONS" in env:
        # Under AddressSanitizer (.ci/sanitize) an allocation that cannot be had must fail as it
        # does without it, not abort the process; and what is freed is unmapped at once, as
        # malloc does, not held in quarantine and unmapped in the middle of a later case.
        env["ASAN_OPTIONS"] += ":allocator_may_return_null=1:quarantine_size_mb=0"
    proc = subprocess.run([sys.executable, str(WORKER), json.dumps(cases)], cwd=HERE, env=env, capture_output=True,
                          text=True, timeout=900)
    results = {(r["kind"], r["data_format"]): r
               for r in (json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
                         if line.startswith("RESULT "))}
    return proc, results


class OutOfMemoryTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.proc, cls.results = run_worker(CASES, onednn=False)
        cls.onednn_proc, cls.onednn_results = run_worker(CASES[:1], onednn=True)

    def runs(self):
        """(allocator, case, its result or None, the worker's stderr) for every case run."""
        for allocator, cases, proc, results in (("malloc", CASES, self.proc, self.results),
                                                ("onednn", CASES[:1], self.onednn_proc, self.onednn_results)):
            for kind, fmt, _, _ in cases:
                yield allocator, kind, fmt, results.get((kind, fmt)), proc.stderr[-4000:]

    def test_the_process_goes_on(self):
        for proc, results, cases in ((self.proc, self.results, CASES),
                                     (self.onednn_proc, self.onednn_results, CASES[:1])):
            self.assertEqual(proc.returncode, 0, proc.stderr[-4000:])
            self.assertEqual(len(results), len(cases), proc.stderr[-4000:])

    def test_resource_exhausted_naming_op_bytes_and_use(self):
        for allocator, kind, fmt, r, stderr in self.runs():
            with self.subTest(allocator=allocator, kind=kind, data_format=fmt):
                self.assertIsNotNone(r, stderr)
                self.assertGreaterEqual(r["workspace_bytes"], MIN_WORKSPACE_BYTES,
                                        "the case no longer needs enough workspace: pick a larger one")
                self.assertEqual(r["error"], "ResourceExhaustedError", r["message"])
                message = r["message"]
                self.assertIn(LABELS[kind] + ":", message)
                asked = re.search(r"cannot allocate (\d+) bytes of workspace for the (\w+) plan", message)
                self.assertIsNotNone(asked, message)
                # The plan's bytes and the alignment of its buffers.
                self.assertGreaterEqual(int(asked.group(1)), r["workspace_bytes"], message)
                self.assertLessEqual(int(asked.group(1)), r["workspace_bytes"] + 4096, message)
                self.assertIn("TF_OPS_CPU_KERNELS=direct", message)
                if fmt == "NCHW":
                    self.assertIn("NHWC copies of the NCHW operands", message)
                    self.assertIn("Tensors in NHWC need no copies", message)

    def test_the_next_call_with_less_data_succeeds(self):
        for allocator, kind, fmt, r, stderr in self.runs():
            with self.subTest(allocator=allocator, kind=kind, data_format=fmt):
                self.assertIsNotNone(r, stderr)
                self.assertLess(r["small_error"], 1e-5)
