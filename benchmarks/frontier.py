"""Mean against tail: the flagship's size-key family on the workloads SPF wins.

    PYTHONPATH=src python benchmarks/frontier.py [--workloads groupchat,mapreduce-hard]
        [--seeds 3-12] [--weights 0,1,3,10,100] [--cache on|off] [--jobs 2]

For each ``size_weight`` W (``rank_key=remaining``, ungated, on the flagship with its
``size_gated`` departure reverted; W = 0 is that flagship's arrival rank, a large W is SPF's
order) it prints the flagship's paired per-seed difference (mean and 95 %
interval) in mean JCT against the best baseline by mean, in p99 JCT against that same
baseline, and in p99 against the best baseline by p99 -- the three numbers issue 12's bar
combines -- and the same for SPF and Continuum, so one sees whether any point of the family
reaches the mean of the one and the tail of the other.  Runs are cached like paired.py's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from topas.metrics.paired import best_by_mean, paired
from topas.reproduce import BASELINES, OTHER_TASKS_FULL, Job, rate_of, run_jobs

sys.path.insert(0, str(Path(__file__).parent))
from paired import TASKS, seeds_arg  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="groupchat,mapreduce-hard")
    ap.add_argument("--seeds", default="3-12")
    ap.add_argument("--weights", default="0,1,3,10,100")
    ap.add_argument("--cache", choices=["on", "off"], default="on")
    ap.add_argument("--mult", type=float, default=1.25)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache-dir", default=".paired-cache")
    a = ap.parse_args(argv)
    seeds = seeds_arg(a.seeds)
    weights = [float(w) for w in a.weights.split(",")]
    cc = a.cache == "on"

    def variant(w: float) -> tuple:
        base = (("off", "size_gated"),)
        if w == 0:
            return base
        return (*base, ("rank_key", "remaining"), ("size_weight", w))

    jobs: list[Job] = []
    for wl in a.workloads.split(","):
        n, r = TASKS.get(wl, OTHER_TASKS_FULL), rate_of(wl, a.mult)
        for s in seeds:
            jobs += [Job(wl, b, r, s, n, cc) for b in BASELINES]
            jobs += [Job(wl, "topas", r, s, n, cc, variant(w)) for w in weights]
    res = run_jobs(jobs, Path(a.cache_dir), n_workers=a.jobs, progress=True)

    def per_seed(wl: str, pol: str, params: tuple, metric: str) -> list[float]:
        return [
            float(res[j][metric])
            for j in jobs
            if j.workload == wl and j.policy == pol and j.params == params
        ]

    print(f"seeds {a.seeds}, cache {a.cache}, rate {a.mult} x default")
    for wl in a.workloads.split(","):
        means = {b: per_seed(wl, b, (), "mean_jct_s") for b in BASELINES}
        p99s = {b: per_seed(wl, b, (), "p99_jct_s") for b in BASELINES}
        best, best_p = best_by_mean(means), best_by_mean(p99s)
        print(
            f"\n{wl}: best mean {best} ({np.mean(means[best]):.1f} s, p99 "
            f"{np.mean(p99s[best]):.1f} s); best p99 {best_p} ({np.mean(p99s[best_p]):.1f} s)"
        )
        print(
            f"  {'policy':22s} {'mean vs best':>24s} {'p99 vs best':>24s} {'p99 vs best-p99':>24s}"
        )
        rows = [(f"topas W={w:g}", per_seed(wl, "topas", variant(w), "mean_jct_s"),
                 per_seed(wl, "topas", variant(w), "p99_jct_s")) for w in weights]  # fmt: skip
        rows += [(b, means[b], p99s[b]) for b in ("spf", "continuum", "parrot-fcfs")]
        for name, m, p in rows:
            print(
                f"  {name:22s} {paired(m, means[best]).fmt():>24s} "
                f"{paired(p, p99s[best]).fmt():>24s} {paired(p, p99s[best_p]).fmt():>24s}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
