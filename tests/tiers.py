"""The two test tiers, read by the tests that have a budget.

`pytest -q tests` runs the fast tier: every test not marked `exhaustive`, at a reduced budget
(the kernel sweep on the best instruction set over a sample that still reaches every path and
micro-kernel, fewer random configurations and examples). `pytest -q tests --exhaustive` (or
TF_OPS_EXHAUSTIVE=1) runs the exhaustive tier, as CI does: the full budgets, and the tests
marked `exhaustive` (TensorFlow's and Keras's own test files, the planted GPU kernel bugs, the
checks that start several TensorFlow processes or a whole build: docs/testing.md lists them),
which the fast tier leaves out and names at its end. A budget's environment variable, where it
has one, overrides both tiers."""
import os

EXHAUSTIVE = os.environ.get("TF_OPS_EXHAUSTIVE") == "1"


def budget(variable, fast, exhaustive):
    """The tier's budget, or the value of the environment variable `variable` where it is set."""
    value = os.environ.get(variable)
    return int(value) if value else (exhaustive if EXHAUSTIVE else fast)
