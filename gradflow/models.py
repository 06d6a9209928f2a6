"""Deprecated alias of :mod:`gradflow.attention.models` (the paper's model moved into
``gradflow.attention``); importing it warns, and it goes in gradflow 0.2."""

import sys as _sys
import warnings as _warnings

from .attention import models as _moved

_warnings.warn("gradflow.models moved to gradflow.attention.models; the old name goes in gradflow 0.2",
               DeprecationWarning, stacklevel=2)
_sys.modules[__name__] = _moved
