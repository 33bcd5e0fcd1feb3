"""TOPAS's ``revoke_value`` parameter measured on the five paper workloads (busy rates).

    PYTHONPATH=src python benchmarks/revoke_value.py [--seeds 1 2]

Prints, per workload, mean JCT (s) and policy preemptions (mean over the seeds) for
``revoke_value="credit"`` (default: J_revoke = the credit recorded at admission) and
``"current"`` (J_revoke at least the aged gain the running request would have if it were
waiting now).  Seeds 1 and 2 are the tuning seeds (docs/topas.md).
"""

from __future__ import annotations

import argparse
import statistics

from topas.api import simulate
from topas.metrics import summarize

CELLS = [
    ("chain3", 0.25, 120),
    ("dag4", 0.15, 120),
    ("dag10wide", 0.0375, 60),
    ("metagpt-sop", 0.01, 40),
    ("metagpt-tl", 0.0075, 40),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    print(
        "| workload | rate | credit: mean JCT (s) | policy preemptions | current: mean JCT (s) "
        "| policy preemptions |"
    )
    print("|---|---|---|---|---|---|")
    for wl, rate, n in CELLS:
        cells = []
        for value in ("credit", "current"):
            ms, pre = [], []
            for seed in args.seeds:
                s = summarize(
                    simulate(
                        wl,
                        "topas-paper",
                        rate=rate,
                        n_tasks=n,
                        seed=seed,
                        policy_params={"revoke_value": value},
                    )
                )
                ms.append(s["mean_jct_s"])
                pre.append(s["preemptions"] - s["engine_preemptions"])
            cells += [f"{statistics.mean(ms):,.1f}", f"{statistics.mean(pre):.0f}"]
        print(f"| {wl} | {rate} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
