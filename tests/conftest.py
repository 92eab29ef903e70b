import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_ops  # noqa: E402

_SOURCE = pathlib.Path(__file__).resolve().parent.parent
# The suite tests the installed package, never the source tree.
assert not pathlib.Path(tf_ops.__file__).resolve().is_relative_to(_SOURCE), (
    f"tests imported tf_ops from the source tree ({tf_ops.__file__}); install it and run "
    "the tests with the `pytest` command, not `python -m pytest`, from the checkout root")


def pytest_addoption(parser):
    parser.addoption("--exhaustive", action="store_true",
                     help="the exhaustive tier: the GPU sweep over its whole generated space, sanitized, "
                          "and its planted bugs (CI runs it; TF_OPS_EXHAUSTIVE=1 does the same)")


def pytest_configure(config):
    if config.getoption("--exhaustive"):
        os.environ["TF_OPS_EXHAUSTIVE"] = "1"


def pytest_collection_modifyitems(config, items):
    # tf.test.TestCase defines test_session(), a deprecated context manager that is not a
    # test; pytest would collect it and report it as skipped.
    deselected = [item for item in items if item.name == "test_session"]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.name != "test_session"]
