"""Session setup shared by the test files.

The property-based invariant suite (tests/test_invariants.py) draws new examples on every
run from ``TOPAS_HYPOTHESIS_SEED``; when it is unset a fresh seed is chosen here and printed
in the pytest header, so a failure reproduces with ``TOPAS_HYPOTHESIS_SEED=<seed> pytest ...``.
"""

from __future__ import annotations

import os
import secrets

os.environ.setdefault("TOPAS_HYPOTHESIS_SEED", str(secrets.randbelow(2**32)))


def pytest_report_header(config):
    s = os.environ["TOPAS_HYPOTHESIS_SEED"]
    return (
        f"hypothesis seed: {s} (reproduce: TOPAS_HYPOTHESIS_SEED={s} "
        "python -m pytest tests/test_invariants.py)"
    )
