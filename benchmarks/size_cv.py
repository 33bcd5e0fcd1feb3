"""The coefficient of variation of tasks' first-sight E[LP] under the flagship, per workload.

    PYTHONPATH=src python benchmarks/size_cv.py [--workloads w1,w2] [--seeds 1,2] [--corr]

For each workload (default task count and rate) and seed it runs ``topas`` with its
``size_gated`` departure reverted (the arrival rank the gates are chosen for) and records, for
every task, the estimator's expected longest remaining path the first time the policy
estimates the task; it prints std/mean over the run's tasks (what ``size_cv`` gates on).
With ``--corr`` it also prints the Spearman rank correlation, over the run's tasks, between
that estimate and the task's time from then to its finish (what ``size_corr`` gates on).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from topas.api import simulate
from topas.policies.topas.aging import spearman
from topas.policies.topas.policy import Topas

ALL = (
    "chain3,dag4,dag10wide,metagpt-sop,metagpt-tl,react,mapreduce,debate,plan-execute,"
    "supervisor,groupchat,mapreduce-hard,plan-execute-hard"
)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=ALL)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--corr", action="store_true", help="also the size_corr correlation")
    a = ap.parse_args(argv)
    first: dict[int, float] = {}
    first_t: dict[int, float] = {}
    orig = Topas._build_task_info

    def probe(self, snap, ts, gen):
        info = orig(self, snap, ts, gen)
        if ts.task_id not in first:
            first[ts.task_id] = info.l_i if info.chain else info.entry.expected_lp(snap.time_s)
            first_t[ts.task_id] = snap.time_s
        return info

    Topas._build_task_info = probe
    try:
        for w in a.workloads.split(","):
            cvs, corrs = [], []
            for seed in (int(s) for s in a.seeds.split(",")):
                first.clear()
                first_t.clear()
                # the flagship's arrival rank (size_gated reverted): the gates are chosen
                # from these figures, so they must not depend on the gates
                res = simulate(w, "topas", seed=seed, policy_params={"off": "size_gated"})
                v = np.array(list(first.values()))
                cvs.append(f"{v.std() / v.mean():.2f}")
                fin = {t.task_id: t.finished_s for t in res.tasks}
                ids = [t for t in first if t in fin]
                lps = [first[t] for t in ids]
                corrs.append(f"{spearman(lps, [fin[t] - first_t[t] for t in ids]):.2f}")
            line = f"{w:18s} first-sight E[LP] CV by seed: {' '.join(cvs)}"
            if a.corr:
                line += f"   rank correlation with time to finish: {' '.join(corrs)}"
            print(line, flush=True)
    finally:
        Topas._build_task_info = orig
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
