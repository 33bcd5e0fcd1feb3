"""Decision-time benchmark of TOPAS: mean / p99 milliseconds per decision and decisions/s.

    PYTHONPATH=src python benchmarks/bench_decisions.py [--workload metagpt-sop] [--rate 0.15]
                                                        [--tasks 40] [--seed 1]

Runs the workload at ``rate`` and at 4x that load on the paper's engine profile
(a100-80g/qwen2.5-32b).  Falls back to toy-chain when the workload is not registered yet.
Target (issue 5): mean <= 0.2 ms and p99 <= 2 ms at 4x load; the paper reports 1.9 ms.
"""

from __future__ import annotations

import argparse

import numpy as np

from topas.api import simulate
from topas.workloads import list_workloads


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="metagpt-sop")
    ap.add_argument("--rate", type=float, default=0.15)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policy", default="topas")
    args = ap.parse_args()
    wl = args.workload if args.workload in list_workloads() else "toy-chain"
    if wl != args.workload:
        print(f"workload {args.workload!r} not registered; using {wl!r}")
    for mult in (1, 4):
        rate = args.rate * mult
        res = simulate(wl, args.policy, rate=rate, n_tasks=args.tasks, seed=args.seed,
                       profile="a100-80g/qwen2.5-32b")
        ms = np.asarray(res.decision_s) * 1e3
        print(f"{args.policy} {wl} rate={rate:.4g} ({mult}x): decisions={ms.size} "
              f"mean_ms={ms.mean():.3f} p99_ms={np.percentile(ms, 99):.3f} "
              f"decisions_per_s={1e3 / ms.mean():.0f} share_of_sim_wall="
              f"{ms.sum() / 1e3 / res.wall_s:.2f}")


if __name__ == "__main__":
    main()
