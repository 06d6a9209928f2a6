"""``gradflow.maps`` is :mod:`gradflow.attention.maps` (a public name of ``gradflow``, kept: the
maps are part of the paper's model, which lives in ``gradflow.attention``)."""

import sys as _sys

from .attention import maps as _moved

_sys.modules[__name__] = _moved
