"""Public names a package imports on first use (PEP 562's module ``__getattr__``)."""

from __future__ import annotations

import importlib

__all__ = ["lazy_names"]


def lazy_names(package: str, namespace: dict, names: dict[str, str]):
    """``(__getattr__, __dir__)`` for the package ``package`` (its ``__name__``) whose module
    globals are ``namespace``: each name of ``names`` is imported from its module (``names[name]``,
    relative to the package) when first asked for, then kept in ``namespace``. Another name raises
    ``AttributeError`` as usual."""

    def __getattr__(name):
        if name in names:
            value = getattr(importlib.import_module(names[name], package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
