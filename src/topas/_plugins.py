"""Import every public module of a package once, so the modules can register themselves."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

_done: set[str] = set()


def import_submodules(package: str, path: Iterable[str], skip: tuple[str, ...] = ()) -> None:
    """Import ``package.<name>`` for every module in ``path`` not starting with ``_`` and not
    in ``skip``; only the first call per package does anything."""
    if package in _done:
        return
    _done.add(package)
    for m in pkgutil.iter_modules(path):
        if not m.name.startswith("_") and m.name not in skip:
            importlib.import_module(f"{package}.{m.name}")
