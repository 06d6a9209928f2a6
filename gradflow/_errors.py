"""Error types raised at gradflow's public boundaries."""

from __future__ import annotations


class GradflowValueError(ValueError):
    """A bad argument to a public gradflow function.

    The message always names the argument, the value received and what is accepted.
    It is a ``ValueError`` so callers that already catch ``ValueError`` keep working.
    """


def bad_arg(name: str, value, accepted: str) -> GradflowValueError:
    """Build a :class:`GradflowValueError` for argument ``name``."""
    text = repr(value)
    if len(text) > 120:
        text = text[:117] + "..."
    return GradflowValueError(f"{name}: got {text}; expected {accepted}")
