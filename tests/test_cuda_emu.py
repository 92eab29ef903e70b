"""The CUDA emulator (tests/cuda_emu) is itself tested: one planted kernel per failure it must
catch (a missing barrier, a race, a tiled loop missing its second barrier, an uninitialised
shared read, an out-of-bounds global write, a divergent barrier, an exit before a barrier, an
order-dependent sum, a warp exchange without __syncwarp, a launch CUDA refuses, a launch or memset
on a stream other than the op's, a block larger than the kernel's launch bounds or a kernel with
none, overlapping write-once stores, a lost update between blocks), each caught; and correct
kernels (barriers, shuffles, ballots, __syncwarp, dynamic shared memory, write-once stores, the
op's stream, a launch within its bounds) run with no report and the right values. The tensor-core product (mma.m16n8k16) follows PTX's fragment
layout: fragments placed by PTX's per-element formulas give A B exactly, a misplaced one does
not. Built with AddressSanitizer, which catches the global write."""
import os
import pathlib
import re
import subprocess
import tempfile

import numpy as np
import tensorflow as tf

import core_build

ROOT = pathlib.Path(__file__).resolve().parent.parent
EMU = ROOT / "tests" / "cuda_emu"
CXX = os.environ.get("CXX", "g++")


def emulator_flags(sanitize=True):
    """Flags of a program built from CUDA sources under the emulator."""
    flags = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-DTF_OPS_CUDA_EMU", f"-I{ROOT}", f"-I{EMU}"]
    if sanitize:
        flags += ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    return flags


class CudaEmulatorTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.driver = os.path.join(cls._tmp.name, "planted_driver")
        subprocess.run([CXX, *emulator_flags(), str(EMU / "cuda_emu.cc"), str(EMU / "planted_driver.cc"),
                        "-o", cls.driver], check=True)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def _run(self, case, seed=1, *extra):
        code, output = core_build.run(self.driver, case, str(seed), *extra)
        reports = [line for line in output.splitlines() if line.startswith("REPORT ")]
        result = re.search(r"^result (.*)$", output, re.M)
        return (code, output), reports, result.group(1).split() if result else None

    def _caught(self, case, pattern, *extra):
        (code, output), reports, _ = self._run(case, 1, *extra)
        self.assertEqual(code, 0, output[-2000:])
        self.assertTrue(any(re.search(pattern, r) for r in reports), f"{case}: {reports}")
        # Every report names the kernel, the block and the thread.
        for r in reports:
            self.assertRegex(r, r"^REPORT kernel \w+( block \(\d+,\d+,\d+\) thread \(\d+,\d+,\d+\))?: ")

    def test_correct_kernels_run_without_reports(self):
        for case in ("rotate", "tiled", "shuffle_sum", "warp_synced", "ballot"):
            for seed in (1, 2, 3):
                (code, output), reports, result = self._run(case, seed)
                self.assertEqual(code, 0, output[-2000:])
                self.assertEqual(reports, [], f"{case} seed {seed}")
        # Their values: the rotation, a warp's shuffle sum, the ballot of the odd lanes.
        _, _, rotate = self._run("rotate")
        self.assertEqual(float.fromhex(rotate[0]), 1.0 / 2)
        _, _, synced = self._run("warp_synced")
        self.assertEqual([float.fromhex(v) for v in synced[:4]], [1.0, 0.0, 3.0, 2.0])
        _, _, ballot = self._run("ballot")
        self.assertEqual(int(ballot[-1]), 0xAAAAAAAA)
        _, _, sums = self._run("shuffle_sum")
        values = [1.0 / (i + 1) + (1e4 if i % 7 == 0 else 0.0) for i in range(32)]
        self.assertAllClose([float.fromhex(sums[0])], [sum(values)], rtol=1e-6)

    def test_mma_follows_ptx_fragment_layout(self):
        a = np.array([[(16 * r + k) % 7 - 3 for k in range(16)] for r in range(16)], dtype=np.float64)
        b = np.array([[(8 * k + c) % 5 - 2 for c in range(8)] for k in range(16)], dtype=np.float64)
        want = a @ b + 0.5
        for seed in (1, 2):
            (code, output), reports, result = self._run("mma", seed)
            self.assertEqual(code, 0, output[-2000:])
            self.assertEqual(reports, [])
            got = np.array([float.fromhex(v) for v in result[:128]]).reshape(16, 8)
            self.assertAllEqual(got, want)
        (code, output), reports, result = self._run("mma_swapped")
        self.assertEqual((code, reports), (0, []))
        got = np.array([float.fromhex(v) for v in result[:128]]).reshape(16, 8)
        self.assertNotAllClose(got, want)

    def test_missing_barrier(self):
        self._caught("missing_barrier", r"'tile'\[\d+\] that (nothing wrote|thread .* wrote since the last barrier)")

    def test_race(self):
        self._caught("race", r"writes shared memory 'slot'\[0\] that thread \(\d+,0,0\) wrote since the last barrier")

    def test_tiled_loop_missing_its_second_barrier(self):
        self._caught("tiled_missing_second_barrier", r"(wrote|read) since the last barrier")

    def test_uninitialised_shared_read(self):
        self._caught("uninitialised", r"reads shared memory 'tile'\[\d+\] that nothing wrote")

    def test_divergent_barrier(self):
        self._caught("divergent_barrier", r"waits at the barrier at planted.cu:\d+ while thread .* waits at planted.cu:\d+")

    def test_exit_before_barrier(self):
        self._caught("exit_before_barrier", r"exited while other threads of its block wait at a barrier")

    def test_warp_exchange_without_syncwarp(self):
        self._caught("warp_unsynced", r"'tile'\[\d+\] that (nothing wrote|thread .* wrote since the last barrier)")

    def test_launch_cuda_refuses(self):
        (_, output), reports, _ = self._run("bad_launch")
        self.assertIn("launch invalid configuration argument", output)
        self.assertTrue(any("which CUDA refuses" in r for r in reports), reports)

    def test_out_of_bounds_global_write(self):
        (code, output), _, _ = self._run("out_of_bounds")
        self.assertNotEqual(code, 0)
        self.assertIn("AddressSanitizer: heap-buffer-overflow", output)
        self.assertIn("WRITE of size 4", output)

    def test_write_once_stores(self):
        # Four blocks storing their own elements once: no report, each element counted once.
        for seed in (1, 2):
            (code, output), reports, result = self._run("store_once", seed)
            self.assertEqual((code, reports), (0, []), output[-2000:])
            self.assertEqual(int(result[4 * 64]), 4 * 64)
        self._caught("overlapping_stores", r"stores global memory at 0x[0-9a-f]+ \(element \d+ of the output\), "
                     r"which block \(0,0,0\) thread \(\d+,0,0\) stored in this launch: an output written twice")
        # Of 64 tracked elements, the overlapping kernel stores 32, each twice: none once.
        _, _, result = self._run("overlapping_stores")
        self.assertEqual(int(result[4 * 64]), 0)

    def test_lost_update_between_blocks(self):
        # One block at a time computes the right sum; on a GPU the blocks race. The second
        # store of the element in the launch is what gives it away.
        self._caught("lost_update", r"which block \(\d,0,0\) thread \(0,0,0\) stored in this launch")

    def test_launch_on_another_stream(self):
        (code, output), reports, _ = self._run("stream")
        self.assertEqual((code, reports), (0, []), output[-2000:])
        (code, output), reports, _ = self._run("other_stream")
        self.assertEqual(code, 0, output[-2000:])
        self.assertEqual(len(reports), 2, reports)
        self.assertRegex(reports[0], r"^REPORT kernel StoreOnce: launch on stream \(nil\), not the op's stream 0x")
        self.assertRegex(reports[1], r"memset on stream 0x[0-9a-f]+, not the op's stream 0x")

    def test_launch_bounds(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("Bounded 64\nBounded 96\n")  # the least bound counts
        try:
            (code, output), reports, _ = self._run("within_bounds", 1, f.name)
            self.assertEqual((code, reports), (0, []), output[-2000:])
            self.assertIn("launch no error", output)
            (code, output), reports, _ = self._run("launch_bounds", 1, f.name)
            self.assertEqual(code, 0, output[-2000:])
            self.assertEqual(reports, ["REPORT kernel Bounded: launch with a block of 128 threads, more than the 64 "
                                       "of its __launch_bounds__, which CUDA refuses"])
            self.assertIn("launch too many resources requested for launch", output)
            self._caught("unbounded", r"^REPORT kernel StoreOnce: a kernel with no __launch_bounds__", f.name)
        finally:
            os.unlink(f.name)

    def test_order_dependent_sum_differs_between_seeds(self):
        # A float sum by atomics: its value depends on the order the emulator runs threads in,
        # which the seed shuffles; the determinism checks compare seeds for exactly this.
        results = {self._run("atomic_sum", seed)[2][0] for seed in (1, 2, 3)}
        self.assertGreater(len(results), 1, results)


if __name__ == "__main__":
    tf.test.main()
