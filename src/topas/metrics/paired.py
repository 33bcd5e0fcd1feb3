"""Paired-by-seed comparisons: is policy A really better than policy B?

Every policy runs on the same seeds, so seed ``s`` gives both the same sampled trajectories
and arrivals.  The per-seed relative difference ``d_s = (A_s - B_s) / B_s`` removes the
workload's own seed-to-seed variation (spreads of +-30 % between seeds), and a t-interval over
the ``d_s`` says whether the difference is more than noise.  A mean of per-policy means does
not: it mixes that variation into both sides.

:func:`paired_rows` takes cached runs (:func:`topas.reproduce.run_jobs`) of a target policy
and the baselines on many workloads and gives, per workload and engine setting, the best
baseline and the target's paired difference against it (the report's paired section and
``benchmarks/paired.py`` both use it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: two-sided 95 % Student t quantiles for 1..30 degrees of freedom (then the normal's 1.96)
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t95(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"df {df}: a t-interval needs at least two paired values")
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True)
class Paired:
    """The paired relative difference of A against B, in percent (negative: A smaller)."""

    mean_pct: float
    lo_pct: float  #: 95 % interval of the mean per-seed difference
    hi_pct: float
    n: int
    wins: int  #: seeds where A < B

    @property
    def significant_gain(self) -> bool:
        """The interval excludes a loss (and a tie): A is smaller than B beyond noise."""
        return self.hi_pct < 0

    @property
    def significant_loss(self) -> bool:
        return self.lo_pct > 0

    def fmt(self) -> str:
        return f"{self.mean_pct:+.1f}% [{self.lo_pct:+.1f}, {self.hi_pct:+.1f}]"


def paired(a: Sequence[float], b: Sequence[float]) -> Paired:
    """Paired relative difference ``(a_s - b_s) / b_s`` over seeds ``s`` (same order in both)."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} values against {len(b)}; pair them by seed")
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.size < 2:
        raise ValueError(f"paired: {x.size} seed(s); an interval needs at least 2")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError("paired: values must be finite and the reference positive")
    d = 100.0 * (x - y) / y
    m = float(d.mean())
    half = t95(d.size - 1) * float(d.std(ddof=1)) / math.sqrt(d.size)
    return Paired(m, m - half, m + half, int(d.size), int(np.sum(x < y)))


def best_by_mean(values: Mapping[str, Sequence[float]]) -> str:
    """The policy with the smallest mean over seeds (ties: the first name in sorted order)."""
    if not values:
        raise ValueError("best_by_mean: no policies")
    return min(sorted(values), key=lambda p: float(np.mean(values[p])))


def _per_seed(results: Mapping, jobs, metric: str) -> dict:
    """``(workload, cache, policy, params) -> {seed: value}`` over the jobs that succeeded."""
    out: dict = {}
    for j in jobs:
        r = results.get(j)
        if r is None or "error" in r:
            continue
        out.setdefault((j.workload, j.context_cache, j.policy, j.params), {})[j.seed] = float(
            r[metric]
        )
    return out


def paired_rows(
    results: Mapping, jobs, target: str, baselines: Sequence[str], others: Sequence[str] = ()
) -> list[dict]:
    """Per (workload, engine cache setting): the best baseline by mean JCT over the seeds and
    the target's paired difference against it (mean JCT; p99 JCT against the best baseline
    by p99), and the same for each policy in ``others``.  A policy with a failed seed is left
    out of the comparison (its row says so)."""
    jobs = list(jobs)
    mean = _per_seed(results, jobs, "mean_jct_s")
    p99 = _per_seed(results, jobs, "p99_jct_s")
    seeds = sorted({j.seed for j in jobs})
    keys: dict = {}
    for j in jobs:
        keys.setdefault((j.workload, j.context_cache), j)
    rows = []
    for (w, cc), j0 in keys.items():

        def full(table, p, w=w, cc=cc):
            v = table.get((w, cc, p, ()), {})
            return [v[s] for s in seeds] if len(v) == len(seeds) else None

        base_m = {b: v for b in baselines if (v := full(mean, b)) is not None}
        base_p = {b: v for b in baselines if (v := full(p99, b)) is not None}
        row: dict = {
            "workload": w,
            "cache": cc,
            "rate": j0.rate,
            "n_tasks": j0.n_tasks,
            "seeds": seeds,
            "failed": [p for p in (target, *baselines, *others) if full(mean, p) is None],
        }
        if not base_m:
            rows.append(row)
            continue
        best, best_p = best_by_mean(base_m), best_by_mean(base_p)
        row.update(
            best=best,
            best_mean=float(np.mean(base_m[best])),
            best_p99=best_p,
            means={p: float(np.mean(v)) for p, v in base_m.items()},
        )
        for p in (target, *others):
            tm, tp = full(mean, p), full(p99, p)
            if tm is None or tp is None:
                continue
            row[p] = {
                "mean": float(np.mean(tm)),
                "vs_best": paired(tm, base_m[best]),
                "p99_vs_best": paired(tp, base_p[best_p]),
            }
        rows.append(row)
    return rows


def verdict(p: Paired) -> str:
    if p.significant_gain:
        return "win"
    if p.significant_loss:
        return "loss"
    return "tie"
