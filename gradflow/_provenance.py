"""Where a result came from, written once: package versions, the git revision of the checkout and
a hash of the source files that compute a result.

Used by :mod:`gradflow._xarray` (a trajectory's ``attrs``), :mod:`gradflow.attention.sweep` (a store's
``attrs``) and :mod:`gradflow.sims.build` (each figure's ``ID.json``); the Sec. 4 run cache keys
its figure data by :func:`source_hash` of the modules that train a run. (The exported-program
cache, ``gradflow/_engine/_export.py``, still hashes gradflow's sources itself.)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def versions(packages: tuple[str, ...] = ("jax", "jaxlib", "diffrax", "equinox", "numpy"),
             missing: str | None = "unknown") -> dict[str, str | None]:
    """``{"gradflow": …, pkg: version}``: gradflow's version by import name (the distribution is
    ``gradflow-attn``), then each of ``packages`` as installed, ``missing`` for one that is not."""
    from ._version import __version__

    out: dict[str, str | None] = {"gradflow": __version__}
    for pkg in packages:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = missing
    return out


def git_revision(root: str = ROOT) -> str:
    """The checkout's ``HEAD`` commit, with ``-dirty`` when tracked files differ from it;
    ``"unknown"`` outside a git checkout or without git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def source_hash(*modules) -> str:
    """A 12-hex-digit SHA-256 over the source files of ``modules`` (module objects or import
    names), each preceded by its module name, in the order given: it changes exactly when the
    code that computes a result changes (a comment included), unlike a hand-bumped version.

    Raises:
        GradflowValueError: a module without a ``.py`` source file.
    """
    import importlib

    from ._errors import GradflowValueError

    h = hashlib.sha256()
    for mod in modules:
        mod = importlib.import_module(mod) if isinstance(mod, str) else mod
        path = getattr(mod, "__file__", None)
        if not path or not path.endswith(".py"):
            raise GradflowValueError(f"source_hash: got module {mod.__name__!r}; expected one with a .py source file")
        with open(path, "rb") as fh:
            h.update(mod.__name__.encode() + b"\0" + fh.read() + b"\0")
    return h.hexdigest()[:12]
