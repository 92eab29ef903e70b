"""A pytest plugin that seeds NumPy's global generator before each upstream test, loaded in
both runs of Keras's layer tests (on Keras's own layers and on tf_ops'): those tests draw
their inputs and weights from it unseeded and compare results within tolerances, so a rare
draw failed one run and not the other (Keras's own Conv3D test, which tf_ops does not
route, once). Seeded, each test draws the same values in both runs, every time."""
import numpy as np


def pytest_runtest_setup(item):
    np.random.seed(20261130)
