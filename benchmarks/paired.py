"""Paired-by-seed comparison of a target policy against every baseline, on many workloads.

    PYTHONPATH=src python benchmarks/paired.py [--workloads paper|others|all|w1,w2]
        [--target topas] [--baselines fcfs,spf,...] [--seeds 3-12] [--cache on|off|both]
        [--mult 1.25] [--jobs 2] [--param k=v ...] [--tasks N]

For every workload (at ``mult`` x its default rate) and engine context-cache setting it runs
every policy on the same seeds (same sampled trajectories), picks the best baseline by mean
JCT over the seeds, and prints the target's per-seed paired relative difference against it
(mean and 95 % t-interval of ``(target - best) / best``), for mean and p99 JCT.  Results are
cached in ``--cache-dir`` (default ``.paired-cache``) keyed by the simulator's code version.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from topas.metrics.paired import best_by_mean, paired
from topas.reproduce import BASELINES, Job, rate_of, run_jobs

PAPER = ("chain3", "dag4", "dag10wide", "metagpt-sop", "metagpt-tl")
OTHERS = ("react", "mapreduce", "debate", "plan-execute", "supervisor", "groupchat")
#: task counts: the reproduction's for the paper's workloads, 80 for the others
TASKS = {"chain3": 120, "dag4": 120, "dag10wide": 60, "metagpt-sop": 40, "metagpt-tl": 40}


def ntasks(a, w: str) -> int:
    return a.tasks or int(round(TASKS.get(w, 80) * a.task_mult))


def seeds_arg(text: str) -> list[int]:
    if "-" in text and "," not in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def parse_value(v: str):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(v.lower(), v)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="all")
    ap.add_argument("--target", default="topas")
    ap.add_argument("--baselines", default=",".join(BASELINES))
    ap.add_argument("--seeds", default="3-12")
    ap.add_argument("--cache", choices=["on", "off", "both"], default="both")
    ap.add_argument("--mult", type=float, default=1.25)
    ap.add_argument("--tasks", type=int, default=None)
    ap.add_argument("--task-mult", type=float, default=1.0, help="scale every task count")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--cache-dir", default=".paired-cache")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--all", action="store_true", help="also print every baseline's mean JCT")
    a = ap.parse_args(argv)
    wls = {"paper": PAPER, "others": OTHERS, "all": PAPER + OTHERS}.get(
        a.workloads, tuple(a.workloads.split(",")))
    seeds = seeds_arg(a.seeds)
    params = tuple(sorted((k, parse_value(v)) for k, v in (p.split("=", 1) for p in a.param)))
    bases = [b for b in a.baselines.split(",") if b]
    caches = {"on": [True], "off": [False], "both": [False, True]}[a.cache]
    jobs: list[Job] = []
    for w in wls:
        n = ntasks(a, w)
        r = rate_of(w, a.mult)
        for cc in caches:
            for s in seeds:
                jobs += [Job(w, b, r, s, n, cc) for b in bases]
                jobs.append(Job(w, a.target, r, s, n, cc, params))
    res = run_jobs(jobs, Path(a.cache_dir), n_workers=a.jobs, progress=not a.quiet)
    print(f"target {a.target} {dict(params)} vs best baseline of {len(bases)}; seeds "
          f"{seeds[0]}..{seeds[-1]} (n={len(seeds)}); rate = {a.mult} x default")
    print(f"{'workload':13s} {'cache':5s} {'best':12s} {'best mean':>9s} {'target':>8s} "
          f"{'mean JCT vs best [95% CI]':>28s} {'p99 vs best-p99 [95% CI]':>28s} wins")
    worst = -1e9
    for w in wls:
        for cc in caches:
            def vals(pol, metric, prm=()):
                out = []
                for s in seeds:
                    j = Job(w, pol, rate_of(w, a.mult), s, ntasks(a, w), cc, prm)
                    r = res[j]
                    if "error" in r:
                        return None
                    out.append(r[metric])
                return out
            mean = {b: v for b in bases if (v := vals(b, "mean_jct_s")) is not None}
            p99 = {b: v for b in bases if (v := vals(b, "p99_jct_s")) is not None}
            tm = vals(a.target, "mean_jct_s", params)
            tp = vals(a.target, "p99_jct_s", params)
            best = best_by_mean(mean)
            bestp = best_by_mean(p99)
            if tm is None:
                print(f"{w:13s} {'on' if cc else 'off':5s} target FAILED")
                continue
            pm = paired(tm, mean[best])
            pp = paired(tp, p99[bestp])
            worst = max(worst, pm.mean_pct)
            flag = "WIN " if pm.significant_gain else ("LOSS" if pm.significant_loss else "tie ")
            print(f"{w:13s} {'on' if cc else 'off':5s} {best:12s} {np.mean(mean[best]):9.1f} "
                  f"{np.mean(tm):8.1f} {pm.fmt():>28s} {pp.fmt():>28s} {pm.wins:2d}/{pm.n} "
                  f"{flag} p99best={bestp}", flush=True)
            if a.all:
                print("    " + "  ".join(f"{b}={np.mean(v):.1f}" for b, v in
                                        sorted(mean.items(), key=lambda kv: np.mean(kv[1]))))
    print(f"worst mean difference: {worst:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
