"""Paired-by-seed comparison of a target policy against every baseline, on many workloads.

    PYTHONPATH=src python benchmarks/paired.py [--workloads paper|others|all|w1,w2]
        [--target topas] [--also topas-paper] [--seeds 1,2 | 3-12] [--cache on|off|both]
        [--mult 1.25] [--task-mult 1] [--jobs 2] [--param k=v ...] [--all]

For every workload (at ``mult`` x its default rate) and engine context-cache setting it runs
every policy on the same seeds (same sampled trajectories), picks the best baseline by mean
JCT over the seeds, and prints the target's per-seed paired relative difference against it
(mean and 95 % t-interval of ``(target - best) / best``), for mean JCT and p99 JCT (against
the best baseline by p99).  ``--param`` sets target parameters (how the flagship's departures
were chosen, on seeds 1 and 2 only).  Results are cached in ``--cache-dir`` (default
``.paired-cache``) keyed by the simulator's code version; with the default task counts and
``--cache-dir docs/cache`` the runs are those of ``topas reproduce``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from topas.metrics.paired import paired_rows, verdict
from topas.policies import check_params
from topas.policies.params import key_value_pairs
from topas.reproduce import (
    BASELINES,
    OTHER_TASKS_FULL,
    OTHER_WORKLOADS,
    WORKLOAD_PLANS,
    Job,
    rate_of,
)

PAPER = tuple(p.name for p in WORKLOAD_PLANS)
TASKS = {p.name: p.tasks_full for p in WORKLOAD_PLANS}
#: ``--cache`` -> the engine context-cache settings run
CACHES = {"on": [True], "off": [False], "both": [False, True]}


def seeds_arg(text: str) -> list[int]:
    if "-" in text and "," not in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def paired_jobs(
    workloads: Sequence[str],
    runs: Sequence[tuple[str, tuple[tuple[str, object], ...]]],
    seeds: Sequence[int],
    cache: str,
    mult: float,
    task_mult: float,
) -> list[Job]:
    """Every run of each ``(policy, params)`` in ``runs`` on every workload (at ``mult`` x
    its default rate, its paired task count x ``task_mult``), seed and cache setting
    (``cache``: on, off or both): the same trajectories for every policy."""
    jobs: list[Job] = []
    for w in workloads:
        n = int(round(TASKS.get(w, OTHER_TASKS_FULL) * task_mult))
        r = rate_of(w, mult)
        for cc in CACHES[cache]:
            for s in seeds:
                jobs += [Job(w, pol, r, s, n, cc, p) for pol, p in runs]
    return jobs


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="all")
    ap.add_argument("--target", default="topas")
    ap.add_argument(
        "--also",
        default="",
        help="policies compared like the target, never counted as baselines (e.g. topas-paper)",
    )
    ap.add_argument("--baselines", default=",".join(BASELINES))
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--cache", choices=["on", "off", "both"], default="both")
    ap.add_argument("--mult", type=float, default=1.25)
    ap.add_argument("--task-mult", type=float, default=1.0, help="scale every task count")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--cache-dir", default=".paired-cache")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--all", action="store_true", help="also print every baseline's mean JCT")
    a = ap.parse_args(argv)
    wls = {"paper": PAPER, "others": OTHER_WORKLOADS, "all": PAPER + OTHER_WORKLOADS}.get(
        a.workloads, tuple(a.workloads.split(","))
    )
    try:
        seeds = seeds_arg(a.seeds)
    except ValueError:
        ap.error(f"--seeds {a.seeds!r}: expected a list such as 1,2 or a range such as 3-12")
    if len(set(seeds)) < 2:
        ap.error(f"--seeds {a.seeds!r}: a paired interval needs at least 2 distinct seeds")
    try:
        given: dict[str, object] = dict(key_value_pairs(a.param, "--param"))
    except ValueError as e:
        ap.error(str(e))
    try:
        # the target's declared parameters convert the strings, as `topas run --param` does
        # (so a choice value such as group_agents=none stays the string it names)
        params = tuple(sorted(check_params(a.target, given).items()))
    except ValueError as e:
        ap.error(f"--target {a.target} --param: {e}")
    bases = [b for b in a.baselines.split(",") if b]
    also = [p for p in a.also.split(",") if p]
    for name in (*bases, *also):
        try:
            check_params(name, {})
        except ValueError as e:
            ap.error(f"--baselines/--also: {e}")
    for w in wls:
        try:
            rate_of(w, a.mult)
        except ValueError as e:
            ap.error(f"--workloads: {e}")
    runs = [(b, ()) for b in (*bases, *also)] + [(a.target, params)]
    jobs = paired_jobs(wls, runs, seeds, a.cache, a.mult, a.task_mult)
    from topas.reproduce import run_jobs

    res = run_jobs(jobs, Path(a.cache_dir), n_workers=a.jobs, progress=not a.quiet)
    # the target's runs carry its parameters; compare them under its plain name
    tgt = f"{a.target}*"
    # (only the runs with the target's parameters: ``--also`` may name the target's policy
    # itself, e.g. the flagship with its defaults against a parameter variant)
    res = {
        (
            Job(j.workload, tgt, j.rate, j.seed, j.n_tasks, j.context_cache)
            if j.policy == a.target and j.params == params
            else j
        ): v
        for j, v in res.items()
    }
    rows = paired_rows(res, res.keys(), tgt, bases, also)
    print(
        f"target {a.target} {dict(params)} vs the best of {len(bases)} baselines; seeds "
        f"{a.seeds} (n={len(seeds)}); rate = {a.mult} x default; tasks x {a.task_mult}"
    )
    print(
        f"{'workload':13s} {'cache':5s} {'best':12s} {'best mean':>9s} {'target':>8s} "
        f"{'mean JCT vs best [95% CI]':>28s} {'p99 vs best-p99 [95% CI]':>28s} wins"
    )
    worst: float | None = None
    for row in rows:
        cc = "on" if row["cache"] else "off"
        t = row.get(tgt)
        if t is None:
            print(f"{row['workload']:13s} {cc:5s} failed: {row['failed']}")
            continue
        pm, pp = t["vs_best"], t["p99_vs_best"]
        worst = pm.mean_pct if worst is None else max(worst, pm.mean_pct)
        print(
            f"{row['workload']:13s} {cc:5s} {row['best']:12s} {row['best_mean']:9.1f} "
            f"{t['mean']:8.1f} {pm.fmt():>28s} {pp.fmt():>28s} {pm.wins:2d}/{pm.n} "
            f"{verdict(pm):4s} p99best={row['best_p99']}",
            flush=True,
        )
        for p in also:
            if p in row:
                print(f"    {p}: {row[p]['mean']:.1f} {row[p]['vs_best'].fmt()}")
        if a.all:
            print(
                "    "
                + "  ".join(
                    f"{b}={v:.1f}" for b, v in sorted(row["means"].items(), key=lambda kv: kv[1])
                )
            )
    print(
        "worst mean difference: "
        + (f"{worst:+.1f}%" if worst is not None else "none (every target run failed)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
