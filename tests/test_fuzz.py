"""Property-based fuzzing of every op of the family (tests/fuzz_worker.py describes the inputs
and the rules). Each op is fuzzed in its own subprocess so that a crash (a signal) or a hang
fails the test with the input that caused it instead of taking pytest down; after a crash
the worker is restarted past the culprit, up to MAX_CRASHES times, so one crash does not
hide the rest of the budget. The inputs fuzzing has found (fuzz_worker.CORPUS) run first.

    pytest -q tests/test_fuzz.py                               CI: fixed seed, 150 per op
    TF_OPS_FUZZ_EXAMPLES=5000 pytest -q tests/test_fuzz.py     a longer run
    TF_OPS_FUZZ_SEED=N                                         another fixed seed
    TF_OPS_FUZZ_MAX_CRASHES=N                                  restarts after crashes (3)
    TF_OPS_FUZZ_CALL_TIMEOUT=S                                 a call is a hang after S s (5)

A line per op (examples, results and how many of them were compared with the reference,
errors, crashes, failures) is printed and appended to $TMPDIR/tf_ops_fuzz_summary.txt (the
system temp dir when TMPDIR is unset); on failure it heads the assertion message.
"""
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import tensorflow as tf

import common
from tiers import budget

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "fuzz_worker.py"
EXAMPLES = budget("TF_OPS_FUZZ_EXAMPLES", fast=20, exhaustive=150)
SEED = int(os.environ.get("TF_OPS_FUZZ_SEED", "20250607"))
MAX_CRASHES = int(os.environ.get("TF_OPS_FUZZ_MAX_CRASHES", "3"))
# No restart after a crash once an op has taken this long (a hang costs the per-call limit).
MAX_SECONDS_AFTER_CRASH = 60 + EXAMPLES * 0.5
SUMMARY_FILE = pathlib.Path(tempfile.gettempdir()) / "tf_ops_fuzz_summary.txt"
NOISE = ("cuda", "cpu_feature_guard", "To enable the following", "absl::InitializeLog",
         "computation placer")


def read_log(path):
    """The JSON records of a worker log; a torn last line (the process died mid-write) is
    dropped."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return records


def tail(text, limit=2500):
    lines = [line for line in (text or "").splitlines() if not any(n in line for n in NOISE)]
    return "\n".join(lines)[-limit:]


def fault_report(text, lines=8):
    """What the dying process said: failed CHECKs, uncaught C++ exceptions and sanitizer
    reports, then the first lines of faulthandler's report (the fault or timeout and the
    innermost Python frames); the tail of stderr if there is none of these."""
    all_lines = (text or "").splitlines()
    causes = [line for line in all_lines if any(m in line for m in (
        "Check failed", "terminate called", "what():", "ERROR: AddressSanitizer",
        "runtime error:", "SUMMARY:"))][:6]
    for i, line in enumerate(all_lines):
        if line.startswith(("Fatal Python error", "Timeout (")):
            return "\n".join(causes + all_lines[i:i + lines])
    return "\n".join(causes) + "\n" + tail(text, 1500)


def replay_command(case):
    return f"python tests/fuzz_worker.py --replay {shlex.quote(json.dumps(case))}"


def describe_failure(record):
    case = record.get("input", {})
    return (f"#{record.get('index')} {record.get('symptom')}\n"
            f"  expected: {record.get('expected')} ({record.get('reason')})\n"
            f"  input: {json.dumps(case)}\n"
            f"  reproduce: {replay_command(case)}")


def describe_death(rc, stderr, case):
    if rc == "timeout":
        symptom = "hang: the worker ran past its time limit"
    elif rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = str(-rc)
        symptom = f"crash: killed by signal {name}"
    elif "Timeout (" in (stderr or ""):
        symptom = "hang: the call did not return within the per-call limit (faulthandler)"
    else:
        symptom = f"worker died with exit code {rc} before its summary"
    if case is None:
        return f"{symptom}, before any input was written\n  stderr:\n{tail(stderr)}"
    return (f"#{case.get('index')} {symptom}\n  input: {json.dumps(case)}\n"
            f"  reproduce: {replay_command(case)}\n  stderr:\n{fault_report(stderr)}")


class FuzzTest(tf.test.TestCase):

    def _fuzz(self, kind):
        totals = dict(examples=0, corpus=0, results=0, compared=0, errors=0, crashes=0,
                      failures=0)
        problems = []
        resume_after = None
        started = time.monotonic()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
        if "ASAN_OPTIONS" in env:
            # Under AddressSanitizer (.ci/sanitize) an allocation of an absurd size must fail
            # as it does without it (TensorFlow then raises ResourceExhaustedError), not
            # abort the process.
            env["ASAN_OPTIONS"] += ":allocator_may_return_null=1"
        with tempfile.TemporaryDirectory() as tmp:
            for segment in range(MAX_CRASHES + 1):
                log = os.path.join(tmp, f"{kind}.{segment}.jsonl")
                cmd = [sys.executable, str(WORKER), kind, str(SEED), str(EXAMPLES), log]
                if resume_after is not None:
                    cmd += ["--resume-after", str(resume_after)]
                try:
                    proc = subprocess.run(cmd, cwd=str(HERE), env=env, capture_output=True,
                                          text=True, timeout=300 + 3 * EXAMPLES)
                    rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
                except subprocess.TimeoutExpired as e:
                    rc, stdout, stderr = "timeout", e.stdout, e.stderr
                    stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) \
                        else stderr
                records = read_log(log)
                for r in records:
                    if r.get("event") == "failure":
                        problems.append(describe_failure(r))
                summary = next((r for r in records if r.get("event") == "summary"), None)
                if summary is not None:
                    for key in ("examples", "corpus", "results", "errors", "failures"):
                        totals[key] += summary[key]
                    totals["compared"] += summary["detail"].get("result-values", 0)
                    if rc != (1 if summary["failures"] else 0):
                        problems.append(f"worker exit code {rc} with summary {summary}\n"
                                        f"{tail(stderr)}")
                    break
                # The worker died: the culprit is the last input without an outcome line.
                done = {r["index"] for r in records if r.get("event") == "outcome"}
                inputs = [r for r in records if r.get("event") == "input"]
                for r in records:
                    if r.get("event") == "outcome":
                        totals["results" if r["outcome"] == "result" else "errors"] += 1
                        totals["examples"] += 1
                        totals["failures"] += bool(r.get("failed"))
                        totals["corpus"] += r["index"] < 0
                        totals["compared"] += r.get("detail") == "result-values"
                culprit = inputs[-1] if inputs and inputs[-1]["index"] not in done else None
                problems.append(describe_death(rc, stderr, culprit))
                totals["crashes"] += 1
                totals["examples"] += culprit is not None
                totals["corpus"] += culprit is not None and culprit["index"] < 0
                if culprit is None or segment == MAX_CRASHES or \
                        time.monotonic() - started > MAX_SECONDS_AFTER_CRASH:
                    problems.append(f"stopped after {totals['crashes']} crash(es); the rest "
                                    "of the budget did not run")
                    break
                resume_after = culprit["index"]
        line = (f"tf_ops fuzz {kind}: seed={SEED} budget={EXAMPLES} "
                f"examples={totals['examples']} (corpus {totals['corpus']}) "
                f"results={totals['results']} (values compared {totals['compared']}) "
                f"errors={totals['errors']} crashes={totals['crashes']} "
                f"failures={totals['failures']} time={time.monotonic() - started:.1f}s")
        print(line)
        with open(SUMMARY_FILE, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        if problems:
            self.fail(line + "\n\n" + "\n\n".join(problems))
        self.assertGreater(totals["examples"], 0, line)

    def test_conv2d(self):
        self._fuzz("conv2d")

    def test_backprop_input(self):
        self._fuzz("backprop_input")

    def test_backprop_input_v2(self):
        self._fuzz("backprop_input_v2")

    def test_backprop_filter(self):
        self._fuzz("backprop_filter")

    def test_backprop_filter_v2(self):
        self._fuzz("backprop_filter_v2")

    def test_depthwise(self):
        self._fuzz("depthwise")

    def test_depthwise_backprop_input(self):
        self._fuzz("depthwise_backprop_input")

    def test_depthwise_backprop_filter(self):
        self._fuzz("depthwise_backprop_filter")

    def test_every_kind_is_fuzzed(self):
        tested = {name[len("test_"):] for name in dir(self) if name.startswith("test_")}
        self.assertLessEqual(set(common.KINDS), tested)


if __name__ == "__main__":
    tf.test.main()
