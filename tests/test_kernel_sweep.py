"""The dense differential sweep of the fast CPU kernels against the direct loops
(tests/cc/sweep_driver.cc): every quantity the fast kernels' dispatchers and blockings read,
over its whole small range and across every threshold, in float32, float16 and bfloat16,
against float64 with a bound relative to the sum of absolute products; and the coverage check
that every path and every micro-kernel of the instruction set's table was reached.

The driver (its source free of TensorFlow, compiled with the flags the installed library was
built with) is linked against the installed library: it proves the core and micro-kernels that
TensorFlow runs. The exhaustive tier runs every geometry on every instruction set this processor
has (named by TF_OPS_CPU_ISA), in parts of the geometries (--shard), four per processor, side
by side, each on all of them (--isas: a case's float64 results computed once). The fast tier,
and .ci/sanitize (under TF_OPS_SANITIZE=1, the driver built with AddressSanitizer and
UndefinedBehaviorSanitizer), run the best instruction set on a sample of about one geometry in
SAMPLE, filled (--fill) with the cheapest geometries left out that reach an algorithm, path or
micro-kernel the sample missed: every one is still reached, or the test fails. Every run
poisons the workspace the passes take (NaN), holds each call's workspace to its plan's bytes,
and requires exact zeros where no product reaches an element. The sanitized run leaves out
the float64 results (--no-values): its kernels run, twice each, compared bitwise, for the
sanitizers to watch."""
import concurrent.futures
import os
import re
import tempfile

import tensorflow as tf

import core_build
from tiers import EXHAUSTIVE


# The fast tier's and the sanitized run's sample, filled to the whole coverage.
SAMPLE = 32


def run_driver(driver, isa, *args):
    return core_build.run(driver, *args, env=dict(os.environ, TF_OPS_CPU_ISA=isa))


class KernelSweepTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.driver = core_build.build(cls._tmp.name, "sweep_driver", [("tests/cc/sweep_driver.cc", [])])

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def test_every_space_on_every_instruction_set(self):
        # The exhaustive tier runs the geometries in parts (--shard), four per processor, side
        # by side, each on every instruction set (--isas): parts of about 4 minutes each on
        # two cores (Intel Xeon with AMX), far inside the driver's time limit on a busy
        # machine, that keep every processor busy to the end; a path or micro-kernel must be
        # reached by some part of its instruction set.
        isas = core_build.available_isas()
        cpus = os.cpu_count() or 1
        args, least, parts = ("--isas", ",".join(isas)), 100000, 4 * cpus
        if core_build.SANITIZE or not EXHAUSTIVE:
            isas = isas[-1:]
            args, least, parts = ("--sample", str(SAMPLE), "--fill"), 100000 // (2 * SAMPLE), 1
        if core_build.SANITIZE:
            # The sanitizers' reports are what this run is for; the values are the unsanitized
            # sweep's to check.
            args += ("--no-values",)

        def run(part):
            shard = ("--shard", f"{part}/{parts}") if parts > 1 else ()
            return run_driver(self.driver, isas[-1], *args, *shard)

        with concurrent.futures.ThreadPoolExecutor(max_workers=cpus) as pool:
            results = list(pool.map(run, range(parts)))
        for part, (code, out) in enumerate(results):
            failures = [line for line in out.splitlines() if line.startswith("FAIL")]
            self.assertEqual(failures, [], f"part {part}:\n" + "\n".join(failures[:40]))
            self.assertEqual(code, 0, f"part {part}:\n{out[-3000:]}")
            # One block of results per instruction set, in the order asked for.
            self.assertEqual(re.findall(r"(?m)^isa (\S+)$", out), isas, out[-3000:])
        for index, isa in enumerate(isas):
            cases, unreached = 0, None
            for part in range(parts):
                out = "isa " + re.split(r"(?m)^isa ", results[part][1])[index + 1]
                cases += int(re.search(r"^cases (\d+) runs (\d+) failures 0$", out, re.M).group(1))
                if "--fill" in args:
                    self.assertRegex(out, r"(?m)^filled \d+$")
                if parts > 1:
                    self.assertIn(f"coverage of part {part} of {parts}\n", out)
                # What this part did not reach, listed line by line as the driver counts it.
                lines = [line for line in out.splitlines() if line.startswith("UNREACHED")]
                self.assertRegex(out, rf"(?m)^unreached {len(lines)}$")
                kernels = re.search(r"^kernels (\d+) reached of (\d+)$", out, re.M)
                missed_kernels = sum(line.startswith("UNREACHED kernel: ") for line in lines)
                self.assertEqual(int(kernels.group(1)), int(kernels.group(2)) - missed_kernels, isa)
                unreached = set(lines) if unreached is None else unreached & set(lines)
            self.assertGreater(cases, least, isa)
            self.assertEqual(sorted(unreached), [], isa)

    def test_a_part_reports_what_it_did_not_reach(self):
        # A part (--shard) lists the paths and kernels it missed and leaves the verdict to
        # the caller, which fails on what no part reached.
        code, out = run_driver(self.driver, core_build.available_isas()[-1], "--sample", "1000",
                               "--shard", "0/1000")
        self.assertEqual(code, 0, out[-2000:])
        self.assertIn("coverage of part 0 of 1000\n", out)
        self.assertRegex(out, r"(?m)^UNREACHED path: ")
        self.assertRegex(out, r"(?m)^UNREACHED kernel: ")

    def test_driver_reports_a_wrong_result(self):
        # The sweep's checks can fail: a fast kernel that drops a filter column (through the
        # driver's planted fault) is reported, with the geometry.
        code, out = run_driver(self.driver, core_build.available_isas()[-1], "--space", "columns",
                               "--plant-fault")
        self.assertEqual(code, 1, out[-2000:])
        self.assertRegex(out, r"FAIL \w+: backprop input float32 \[columns merged\] NHWC x\[")

    def test_driver_reports_an_off_by_one_plan(self):
        # A planner that counts one column block too few where the channels are not whole
        # blocks (the driver's planted switch) leaves columns uncomputed: reported, in both
        # directions the GEMM passes run, with the geometry.
        code, out = run_driver(self.driver, core_build.available_isas()[-1], "--space", "channels",
                               "--sample", "64", "--plant-planner-bug")
        self.assertEqual(code, 1, out[-2000:])
        self.assertRegex(out, r"FAIL \w+: forward float32 \[channels\]")

    def test_driver_reports_an_unwritten_workspace_read(self):
        # Workspace is poisoned (NaN) when a pass takes it: a filter gradient that leaves its
        # accumulators uncleared (the driver's planted switch) gives NaN, reported with the
        # geometry, in the element types whose sums live in workspace.
        code, out = run_driver(self.driver, core_build.available_isas()[-1], "--space", "filter",
                               "--sample", "16", "--plant-unwritten-workspace")
        self.assertEqual(code, 1, out[-2000:])
        self.assertRegex(out, r"FAIL \w+: backprop filter (float16|bfloat16) \[")
        self.assertNotRegex(out, r"FAIL \w+: (forward|backprop input) ")

    def test_instruction_sets_of_one_run_are_reported_apart(self):
        # With --isas, each instruction set's checks and coverage are its own: the same
        # planted fault fails on each, named, and each block counts its own cases.
        isas = core_build.available_isas()[-2:]
        code, out = run_driver(self.driver, isas[-1], "--space", "columns", "--plant-fault",
                               "--isas", ",".join(isas))
        self.assertEqual(code, 1, out[-2000:])
        self.assertEqual(re.findall(r"(?m)^isa (\S+)$", out), isas)
        cases = re.findall(r"(?m)^cases (\d+) runs \d+ failures (\d+)$", out)
        self.assertEqual(len(cases), len(isas))
        for isa, (n, failed) in zip(isas, cases):
            self.assertGreater(int(n), 0)
            self.assertGreater(int(failed), 0, isa)
            self.assertRegex(out, rf"(?m)^FAIL {isa}: backprop input float32 ")


if __name__ == "__main__":
    tf.test.main()
