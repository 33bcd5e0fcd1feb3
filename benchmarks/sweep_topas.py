"""Sweep TOPAS hyper-parameters one at a time around the defaults, on several workloads.

    PYTHONPATH=src python benchmarks/sweep_topas.py [--workloads metagpt-tl metagpt-sop]
        [--mults 1 2] [--tasks 30] [--seeds 1 2] [--grid quick|full]

For every (workload, rate = default rate x mult) it prints mean / p99 JCT (seconds, averaged
over the seeds) per value, and a final score per value: the mean over all cells of
mean JCT / mean JCT of the defaults (< 1 is better).  The defaults in
src/topas/policies/topas/policy.py (DEFAULTS) were chosen from this table (docs/topas.md).
M is not swept on the MetaGPT workloads: they have at most 5 agents, so with M >= 5 every
prefix subset is enumerated and smaller M only switches to the (never better) local search.
"""

from __future__ import annotations

import argparse
import statistics

from topas.api import simulate
from topas.metrics import summarize
from topas.policies.topas import DEFAULTS
from topas.workloads import get_workload

GRIDS = {
    "quick": {"rho": [0.0, 0.25, 1.0], "beta": [0.0, 10.0], "K": [2], "H_age": [60.0]},
    "full": {
        "rho": [0.0, 0.1, 0.25, 0.5, 1.0, 2.0],
        "beta": [0.0, 1.0, 10.0, 100.0],
        "K": [2, 4, 8, 16],
        "H_age": [None, 5.0, 60.0, 600.0],
        "M": [0, 2, 6],
    },
}


def run(wl: str, rate: float, tasks: int, seeds: list[int], params: dict) -> tuple[float, float]:
    ms, ps = [], []
    for seed in seeds:
        s = summarize(
            simulate(wl, "topas-paper", rate=rate, n_tasks=tasks, seed=seed, policy_params=params)
        )
        ms.append(s["mean_jct_s"])
        ps.append(s["p99_jct_s"])
    return statistics.mean(ms), statistics.mean(ps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", nargs="+", default=["metagpt-tl", "metagpt-sop"])
    ap.add_argument("--mults", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--tasks", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--grid", choices=sorted(GRIDS), default="quick")
    args = ap.parse_args()
    print(f"tasks={args.tasks} seeds={args.seeds} defaults={DEFAULTS}")
    configs: list[tuple[str, object]] = [("defaults", None)]
    for name, values in GRIDS[args.grid].items():
        configs += [(name, v) for v in values if v != DEFAULTS.get(name)]
    ratios: dict[int, list[float]] = {k: [] for k in range(len(configs))}
    for wl in args.workloads:
        for mult in args.mults:
            rate = get_workload(wl).default_rate * mult
            base = None
            for k, (name, v) in enumerate(configs):
                params = dict(DEFAULTS) if v is None else {**DEFAULTS, name: v}
                m, p = run(wl, rate, args.tasks, args.seeds, params)
                base = m if base is None else base
                ratios[k].append(m / base)
                label = "defaults" if v is None else f"{name}={v}"
                print(
                    f"{wl:12s} rate={rate:.4g} {label:14s} mean_jct_s={m:8.1f} p99_jct_s={p:8.1f}",
                    flush=True,
                )
    print("mean over cells of mean JCT / defaults' mean JCT:")
    for k, (name, v) in enumerate(configs):
        label = "defaults" if v is None else f"{name}={v}"
        print(f"  {label:14s} {statistics.mean(ratios[k]):.3f}")


if __name__ == "__main__":
    main()
