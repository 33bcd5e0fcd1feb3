"""The Ray executor's tests: every test here is marked ``ray`` (``make test`` deselects them)
and skipped when Ray is not importable.  They run in Ray's own venv, which
``bash scripts/ci_ray.sh`` (``make test-ray``) builds outside the clone and then uses."""

from __future__ import annotations

import os

import pytest

try:
    import ray  # noqa: F401

    HAVE_RAY = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_RAY = False


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.ray)
            if not HAVE_RAY:
                item.add_marker(
                    pytest.mark.skip(reason="ray is not importable (bash scripts/ci_ray.sh)")
                )
