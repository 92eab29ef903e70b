import collections
import os
import pathlib
import resource
import shutil
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_ops  # noqa: E402

_SOURCE = pathlib.Path(__file__).resolve().parent.parent
# The suite tests the installed package, never the source tree (a package installed into a
# virtual environment inside the checkout, as the README's .venv, is an installed one).
_IMPORTED = pathlib.Path(tf_ops.__file__).resolve()
assert not _IMPORTED.is_relative_to(_SOURCE) or "site-packages" in _IMPORTED.parts, (
    f"tests imported tf_ops from the source tree ({tf_ops.__file__}); install it and run "
    "the tests with the `pytest` command, not `python -m pytest`, from the checkout root")


def pytest_addoption(parser):
    parser.addoption("--exhaustive", action="store_true",
                     help="the exhaustive tier (tests/tiers.py): full budgets and the tests marked "
                          "exhaustive (CI runs it; TF_OPS_EXHAUSTIVE=1 does the same)")


def pytest_configure(config):
    if config.getoption("--exhaustive"):
        os.environ["TF_OPS_EXHAUSTIVE"] = "1"
    # One folder of compiled test objects for the whole run, its pytest-xdist workers included
    # (tests/core_build.py): made by the process that starts the run, inherited by the workers.
    if not hasattr(config, "workerinput") and "TF_OPS_TEST_OBJECTS" not in os.environ:
        config._tf_ops_objects = tempfile.mkdtemp(prefix="tf_ops_objects_")
        os.environ["TF_OPS_TEST_OBJECTS"] = config._tf_ops_objects
    config.addinivalue_line("markers", "exhaustive: runs only in the exhaustive tier (--exhaustive)")


# The longest test files, longest first: pytest-xdist hands files to its workers in the order
# collected, and a long one started last would run on alone; the short ones, in name order, fill
# the end. Each run checks the list against the processor seconds it measured (the terminal
# summary names a file not in it that took longer than its last).
LONGEST_FIRST = ["test_kernel_sweep.py", "test_cuda_kernels.py", "test_tf_upstream.py",
                 "test_xla.py", "test_enable.py", "test_savedmodel.py", "test_cutlass.py", "test_fuzz.py", "test_cpp_api.py",
                 "test_fast_kernels.py", "test_bench.py", "test_distribute.py", "test_api.py",
                 "test_accuracy.py", "test_out_of_memory.py", "test_gradients.py", "test_layers.py"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as collected
    # tf.test.TestCase defines test_session(), a deprecated context manager that is not a
    # test; pytest would collect it and report it as skipped.
    deselected = [item for item in items if item.name == "test_session"]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.name != "test_session"]
    # The fast tier leaves out the exhaustive tier's own tests, and says so at its end (under
    # pytest-xdist each worker collects every test and tells the controller).
    if os.environ.get("TF_OPS_EXHAUSTIVE") != "1":
        left_out = [item for item in items if item.get_closest_marker("exhaustive")]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker("exhaustive")]
        config._tf_ops_left_out = {item.nodeid for item in left_out}
        if hasattr(config, "workeroutput"):
            config.workeroutput["tf_ops_left_out"] = sorted(config._tf_ops_left_out)


def pytest_unconfigure(config):
    folder = getattr(config, "_tf_ops_objects", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("TF_OPS_TEST_OBJECTS", None)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    left_out = getattr(node, "workeroutput", {}).get("tf_ops_left_out", [])
    node.config._tf_ops_left_out = getattr(node.config, "_tf_ops_left_out", set()) | set(left_out)


def _processor_seconds():
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Processor seconds of each test (set-up and tear-down included): its process's threads
    # and the subprocesses it waited for. CI's length is its processor time (docs/testing.md).
    _processor_start[item.nodeid] = _processor_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown":
        start = _processor_start.pop(item.nodeid, None)
        if start is not None:
            report.user_properties.append(("tf_ops_processor_s", _processor_seconds() - start))


def pytest_runtest_logreport(report):
    seconds = dict(report.user_properties).get("tf_ops_processor_s")
    if report.when == "teardown" and seconds is not None:
        _processor_by_file[report.nodeid.split("::")[0]] += seconds
        _processor_by_test[report.nodeid] = seconds


_processor_start = {}
_processor_by_file, _processor_by_test = collections.Counter(), collections.Counter()


def pytest_terminal_summary(terminalreporter, config):
    if _processor_by_file:
        total = sum(_processor_by_file.values())
        top = ", ".join(f"{name.removeprefix('tests/')} {s:.0f}" for name, s in _processor_by_file.most_common(12))
        terminalreporter.write_line(f"tf_ops: processor seconds {total:.0f}; by test file, most first: {top}")
        last = _processor_by_file.get("tests/" + LONGEST_FIRST[-1])
        outgrown = [name.removeprefix("tests/") for name, s in _processor_by_file.most_common()
                    if last is not None and s > last and name.removeprefix("tests/") not in LONGEST_FIRST]
        if outgrown:
            terminalreporter.write_line(f"tf_ops: longer than a file of LONGEST_FIRST (tests/conftest.py) but not "
                                        f"in it: {', '.join(outgrown)}")
        durations = config.getoption("durations", None)
        if durations is not None:  # as pytest's own list: 0 for every test
            for name, s in _processor_by_test.most_common(durations or None):
                terminalreporter.write_line(f"{s:8.1f} processor s  {name}")
    if os.environ.get("TF_OPS_EXHAUSTIVE") == "1":
        terminalreporter.write_line("tf_ops: exhaustive tier: full budgets, every test")
        return
    left_out = getattr(config, "_tf_ops_left_out", set())
    files = sorted({nodeid.split("::")[0].removeprefix("tests/") for nodeid in left_out})
    tests = f"{len(left_out)} exhaustive tests ({', '.join(files)}); " if left_out else ""
    terminalreporter.write_line(
        f"tf_ops: fast tier, budgets reduced (tests/tiers.py). Not run: {tests}the kernel sweep on "
        "every instruction set, unsampled; the full parity, random-geometry, fuzz, XLA and "
        "GPU-sweep budgets. pytest -q tests --exhaustive runs them.")
