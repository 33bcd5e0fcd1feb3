"""Estimators: residual-service distributions and the expected longest remaining path.

``expected_remaining_s(snapshot, task_state) -> float`` is the stable entry point (used by
baselines such as SPF); :class:`MonteCarloLP` and the :class:`ResidualModel` implementations
are what TOPAS builds on.  See docs/topas.md.
"""

from topas.estimators.longest_path import (
    DEFAULT_SAMPLES,
    MonteCarloLP,
    TaskMC,
    expected_remaining_s,
    longest_path_mean,
)
from topas.estimators.residual import EmpiricalResidual, ResidualModel, TrueResidual

__all__ = [
    "DEFAULT_SAMPLES",
    "EmpiricalResidual",
    "MonteCarloLP",
    "ResidualModel",
    "TaskMC",
    "TrueResidual",
    "expected_remaining_s",
    "longest_path_mean",
]
