"""The tests' independent NumPy/SciPy reference of the flow: :mod:`benchmarks.reference` (one copy,
shared with the benchmarks, which must not import the tests)."""

from benchmarks.reference import (cross_entropy_residual, euler, field, integrate, logistic_residual,  # noqa: F401
                                  softmax, square_residual)
