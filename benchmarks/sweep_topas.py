"""Sweep TOPAS hyper-parameters (M, K, beta, rho, H_age) one at a time around the defaults.

    PYTHONPATH=src python benchmarks/sweep_topas.py [--workload W] [--rate R] [--tasks N]
                                                    [--seeds 1 2 3]

Prints mean and p99 JCT (seconds, averaged over the seeds) for each value; the defaults in
src/topas/policies/topas.py (DEFAULTS) are the best mean JCT of this sweep.
"""

from __future__ import annotations

import argparse
import statistics

from topas.api import simulate
from topas.metrics import summarize
from topas.policies.topas import DEFAULTS

GRID = {
    "M": [2, 4, 6, 8],
    "K": [2, 4, 8, 16],
    "beta": [0.0, 1.0, 10.0, 100.0],
    "rho": [0.0, 0.5, 1.0, 2.0],
    "H_age": [None, 5.0, 30.0, 120.0],
}


def run(args, params):
    ms, ps = [], []
    for seed in args.seeds:
        s = summarize(simulate(args.workload, "topas", rate=args.rate, n_tasks=args.tasks,
                               seed=seed, policy_params=params))
        ms.append(s["mean_jct_s"])
        ps.append(s["p99_jct_s"])
    return statistics.mean(ms), statistics.mean(ps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="toy-chain")
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    print(f"workload={args.workload} rate={args.rate} tasks={args.tasks} seeds={args.seeds}")
    print(f"defaults: {DEFAULTS}")
    for name, values in GRID.items():
        for v in values:
            m, p = run(args, {**DEFAULTS, name: v})
            mark = " *" if v == DEFAULTS[name] else ""
            print(f"{name:6s}={str(v):6s} mean_jct_s={m:8.2f} p99_jct_s={p:8.2f}{mark}")


if __name__ == "__main__":
    main()
