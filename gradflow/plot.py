"""Deprecated alias of :mod:`gradflow.attention.plot` (the paper's model moved into
``gradflow.attention``); importing it warns, and it goes in gradflow 0.2."""

import sys as _sys
import warnings as _warnings

from .attention import plot as _moved

_warnings.warn("gradflow.plot moved to gradflow.attention.plot; the old name goes in gradflow 0.2",
               DeprecationWarning, stacklevel=2)
_sys.modules[__name__] = _moved
