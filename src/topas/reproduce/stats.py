"""Aggregation of cached runs over seeds (:class:`Stat`, :func:`aggregate`) and the change
of the target against the best baseline (:func:`change_vs_best`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from topas.reproduce.plan import OURS, TARGET_POLICY, Job

# -- aggregation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """Mean over seeds with the sample standard deviation as the spread (0 for one seed)."""

    mean: float
    sd: float
    n: int

    @staticmethod
    def of(values: Iterable[float]) -> Stat:
        a = np.asarray([v for v in values if v is not None], dtype=float)
        if a.size == 0:
            return Stat(float("nan"), float("nan"), 0)
        sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
        return Stat(float(a.mean()), sd, int(a.size))


def aggregate(
    results: dict[Job, dict], jobs: Iterable[Job], metric: str
) -> dict[tuple[str, float, str], Stat]:
    """``(workload, rate, policy) -> Stat`` of ``metric`` over the seeds in ``jobs``."""
    groups: dict[tuple[str, float, str], list[float]] = {}
    for j in jobs:
        r = results.get(j)
        if r is not None and "error" not in r:
            groups.setdefault((j.workload, j.rate, j.policy), []).append(float(r[metric]))
    return {k: Stat.of(v) for k, v in groups.items()}


def change_vs_best(
    values: dict[str, float], target: str = TARGET_POLICY, higher_is_better: bool = False
) -> tuple[str, float, float]:
    """TOPAS against the best baseline on one metric, each metric on its own.

    ``values`` maps policy -> value (the mean over seeds).  Returns ``(best baseline, its
    value, change in percent)`` with change = ``100 * (target - best) / best``: negative is
    better for JCTs, positive is better for throughput (``higher_is_better``)."""
    if target not in values:
        raise ValueError(f"values: no entry for the target policy {target!r}")
    base = {p: v for p, v in values.items() if p != target and p not in OURS and not math.isnan(v)}
    if not base:
        raise ValueError("values: no baseline to compare against")
    pick = max if higher_is_better else min
    best = pick(sorted(base), key=lambda p: base[p])
    bv = base[best]
    if bv == 0:
        raise ValueError(f"values: best baseline {best!r} has value 0; change undefined")
    return best, bv, 100.0 * (values[target] - bv) / bv
