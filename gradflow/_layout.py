"""Where ``gradflow.theory``, ``gradflow.sims`` and ``gradflow.app`` come from.

The repository keeps four top-level package folders, ``gradflow/``, ``theory/``, ``sims/`` and
``app/``; an install (wheel or editable, ``pyproject.toml``'s ``package-dir``) puts the last three
inside the first, as ``gradflow.theory``, ``gradflow.sims`` and ``gradflow.app``. In a source
checkout used without an install (``PYTHONPATH`` = the repository root, e.g. a git worktree beside
an installed checkout), :func:`install_source_finder` maps the subpackage names onto the sibling
folders the same way. ``import gradflow`` does not call it (a library import adds no import hook
to the user's process); the ``gradflow`` command (:func:`gradflow.app.cli.main`), the test run
(``tests/conftest.py``) and the benchmarks (``benchmarks/__init__.py``) do. ``import theory`` / ``import sims``
(a second copy of the modules under another name: two registries, two classes of every result)
is refused with an ImportError by the folders' own ``__init__``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

__all__ = ["SUBPACKAGES", "install_source_finder"]

SUBPACKAGES = {"gradflow.theory": "theory", "gradflow.sims": "sims", "gradflow.app": "app"}
"""Installed name -> folder of the repository root."""


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``gradflow.theory`` / ``gradflow.sims`` in the folders beside ``gradflow/``."""

    def __init__(self, root: str):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        folder = SUBPACKAGES.get(fullname)
        if folder is None:
            return None
        init = os.path.join(self.root, folder, "__init__.py")
        if not os.path.isfile(init):
            return None
        # The folder's name is the subpackage's last name part, so the import system's own path
        # search finds it given the repository root as the search path. Import hooks that wrap
        # that search (jaxtyping's, switched on in the test run) come before the PathFinder in
        # sys.meta_path; asking them first lets them instrument the subpackages' __init__ too.
        for finder in sys.meta_path:
            if finder is importlib.machinery.PathFinder:
                break
            if isinstance(finder, _SourceFinder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, [self.root], target)
            if spec is not None and spec.origin == init:
                return spec
        return importlib.machinery.PathFinder.find_spec(fullname, [self.root], target)


def install_source_finder(package_dir: str) -> bool:
    """Map the subpackages onto the repository's folders when gradflow runs from a checkout.

    ``package_dir`` is the folder of the imported ``gradflow`` package. Does nothing (returns
    ``False``) when the subpackages are inside it (a wheel) or the folder is not a checkout
    (no ``pyproject.toml`` beside it)."""
    root = os.path.dirname(os.path.abspath(package_dir))
    if all(os.path.isdir(os.path.join(package_dir, name.split(".")[1])) for name in SUBPACKAGES):
        return False
    if not os.path.isfile(os.path.join(root, "pyproject.toml")):
        return False
    if any(isinstance(f, _SourceFinder) and f.root == root for f in sys.meta_path):
        return True
    # first: the subpackages come from the checkout this gradflow was imported from, also when
    # another checkout is installed in editable mode (its finder would map them to that one)
    sys.meta_path.insert(0, _SourceFinder(root))
    return True

