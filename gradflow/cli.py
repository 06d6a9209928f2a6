"""``gradflow.cli`` is :mod:`gradflow.app.cli`: the entry point that installs made before the app
moved into ``gradflow.app`` still call (``gradflow = gradflow.cli:main``), and
``python -m gradflow.cli``. It maps ``gradflow.app`` (and ``gradflow.theory``, ``gradflow.sims``)
onto a source checkout's folders first, as the command does (:func:`gradflow.app.cli.main`)."""

import os as _os
import sys as _sys

from ._layout import install_source_finder as _install_source_finder

_install_source_finder(_os.path.dirname(_os.path.abspath(__file__)))

from gradflow.app import cli as _moved  # noqa: E402

if __name__ == "__main__":  # python -m gradflow.cli
    _sys.exit(_moved.main())
_sys.modules[__name__] = _moved
