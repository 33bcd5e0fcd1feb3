"""The coefficient of variation of tasks' first-sight E[LP] under the flagship, per workload.

    PYTHONPATH=src python benchmarks/size_cv.py [--workloads w1,w2] [--seeds 1,2]

For each workload (default task count and rate) and seed it runs ``topas`` and records, for
every task, the estimator's expected longest remaining path the first time the policy
estimates the task; it prints std/mean over the run's tasks (what ``size_cv`` gates on).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from topas.api import simulate
from topas.policies.topas.policy import Topas

ALL = (
    "chain3,dag4,dag10wide,metagpt-sop,metagpt-tl,react,mapreduce,debate,plan-execute,"
    "supervisor,groupchat,mapreduce-hard,plan-execute-hard"
)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=ALL)
    ap.add_argument("--seeds", default="1,2")
    a = ap.parse_args(argv)
    first: dict[int, float] = {}
    orig = Topas._build_task_info

    def probe(self, snap, ts, gen):
        info = orig(self, snap, ts, gen)
        if ts.task_id not in first:
            first[ts.task_id] = info.l_i if info.chain else info.entry.expected_lp(snap.time_s)
        return info

    Topas._build_task_info = probe
    try:
        for w in a.workloads.split(","):
            cvs = []
            for seed in (int(s) for s in a.seeds.split(",")):
                first.clear()
                simulate(w, "topas", seed=seed)
                v = np.array(list(first.values()))
                cvs.append(f"{v.std() / v.mean():.2f}")
            print(f"{w:18s} first-sight E[LP] CV by seed: {' '.join(cvs)}", flush=True)
    finally:
        Topas._build_task_info = orig
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
