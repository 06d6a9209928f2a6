"""Error types raised at gradflow's public boundaries."""

from __future__ import annotations

import argparse

import numpy as np


class GradflowValueError(ValueError):
    """A bad argument to a public gradflow function.

    The message always names the argument, the value received and what is accepted, on
    one line. It is a ``ValueError`` so callers that already catch ``ValueError`` keep working.
    """


class ArgumentParser(argparse.ArgumentParser):
    """argparse with gradflow's error format, for every command line of the project (``gradflow``,
    ``python -m gradflow.sims.sec4.grids``): one line on stderr, ``gradflow: error: …`` and a
    pointer to ``-h``, exit status 2 (no usage block)."""

    def error(self, message):
        self.exit(2, f"gradflow: error: {message} (see {self.prog} -h)\n")


def describe(value) -> str:
    """A one-line description of ``value`` (arrays: shape, dtype and non-finite count)."""
    if isinstance(value, list) and value:  # a list of numbers reads as an array (tuples are shapes)
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError):  # ragged
            arr = None
        if arr is not None and arr.dtype.kind in "biuf":
            value = arr
    if hasattr(value, "shape") and hasattr(value, "dtype") and np.ndim(value) > 0:
        arr = np.asarray(value)
        text = f"array of shape {arr.shape}, dtype {arr.dtype}"
        if arr.dtype.kind in "fc":
            n_nan, n_inf = int(np.isnan(arr).sum()), int(np.isinf(arr).sum())
            if n_nan or n_inf:
                text += f", with {n_nan} NaN and {n_inf} inf"
                n_neg = int(np.isneginf(arr).sum())
                if n_neg:
                    text += f" ({n_neg} of them -inf)"
        if arr.size <= 6:
            text += " " + np.array2string(arr.ravel(), separator=", ", max_line_width=10_000)
        return text
    text = " ".join(repr(value).split())
    return text if len(text) <= 120 else text[:117] + "..."


def bad_arg(name: str, value, accepted: str) -> GradflowValueError:
    """Build a :class:`GradflowValueError` for argument ``name``."""
    return GradflowValueError(f"{name}: got {describe(value)}; expected {accepted}")
