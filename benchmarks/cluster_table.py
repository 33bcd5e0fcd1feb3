"""Routers x policies on a cluster of replicas, paired by seed against round-robin.

    PYTHONPATH=src python benchmarks/cluster_table.py [--workloads metagpt-tl,dag4,...]
        [--replicas 2,4,8] [--policies fcfs,continuum,topas] [--routers all]
        [--seeds 3-12] [--mult 1.25] [--tasks-per-replica 20] [--jobs 2]
        [--cache .cluster-cache.json] [--plot docs/img/cluster-routers.png] [--format wide]

Each workload runs at ``mult`` x its default rate x N on N replicas (every replica as busy as
the single engine of the reproduction) with ``tasks-per-replica`` x N tasks, the engine's
defaults otherwise (context cache on).  For every (workload, N, policy) it prints each
router's mean JCT over the seeds and its per-seed paired relative difference against
round-robin (mean and 95 % t-interval; negative: the router is faster), for mean and p99 JCT
(the best router's mean in bold), and at the end which router is best most often.  Results are cached in ``--cache`` (written
atomically after every finished run) so an interrupted sweep resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from topas.metrics.paired import paired
from topas.reproduce import rate_of
from topas.routing import ROUTERS

sys.path.insert(0, str(Path(__file__).parent))
from paired import seeds_arg  # noqa: E402


def one(key: tuple) -> tuple[tuple, dict]:
    from topas.api import simulate_cluster
    from topas.metrics import summarize

    wl, n, policy, router, seed, mult, per = key
    c = simulate_cluster(
        wl,
        policy,
        replicas=n,
        router=router,
        rate=rate_of(wl, mult * n),
        n_tasks=per * n,
        seed=seed,
    )
    s = summarize(c.as_sim_result())
    return key, {
        "mean_jct_s": s["mean_jct_s"],
        "p99_jct_s": s["p99_jct_s"],
        "moved": c.moved_contexts,
        "wall_s": c.wall_s,
    }


def _save(path: Path, cache: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(cache, f)
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="metagpt-tl,plan-execute-hard,dag4")
    ap.add_argument("--replicas", default="2,4,8")
    ap.add_argument("--policies", default="fcfs,continuum,topas")
    ap.add_argument("--routers", default="all")
    ap.add_argument("--seeds", default="3-12")
    ap.add_argument("--mult", type=float, default=1.25)
    ap.add_argument("--tasks-per-replica", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", default=".cluster-cache.json")
    ap.add_argument("--plot", default=None, help="also write the figure here (PNG)")
    ap.add_argument(
        "--format",
        choices=["wide", "long"],
        default="wide",
        help="wide: one row per (N, policy), a column per router (docs/cluster.md);"
        " long: one row per router, with mean and p99 JCT in seconds",
    )
    a = ap.parse_args(argv)
    wls = a.workloads.split(",")
    ns = [int(x) for x in a.replicas.split(",")]
    pols = a.policies.split(",")
    routers = list(ROUTERS) if a.routers == "all" else a.routers.split(",")
    if "round-robin" not in routers:
        routers.insert(0, "round-robin")
    seeds = seeds_arg(a.seeds)
    path = Path(a.cache)
    cache = json.loads(path.read_text()) if path.exists() else {}
    keys = [
        (w, n, p, r, s, a.mult, a.tasks_per_replica)
        for w in wls
        for n in ns
        for p in pols
        for r in routers
        for s in seeds
    ]
    todo = [k for k in keys if json.dumps(k) not in cache]
    print(f"{len(keys)} runs, {len(keys) - len(todo)} cached", file=sys.stderr)
    with ProcessPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(one, k) for k in todo]
        for i, f in enumerate(as_completed(futs), 1):
            k, v = f.result()
            cache[json.dumps(k)] = v
            _save(path, cache)
            if i % 10 == 0 or i == len(futs):
                print(f"  {i}/{len(futs)} done", file=sys.stderr)

    def vals(w, n, p, r, metric):
        return [
            cache[json.dumps((w, n, p, r, s, a.mult, a.tasks_per_replica))][metric] for s in seeds
        ]

    best_count: dict[str, int] = {r: 0 for r in routers}
    panels: dict = {}
    print(
        f"seeds {a.seeds}, rate {a.mult} x default x N, {a.tasks_per_replica} x N tasks; "
        "paired difference vs round-robin, mean [95 % interval]\n"
    )
    wide = a.format == "wide"
    others = [r for r in routers if r != "round-robin"]
    for w in wls:
        print(f"### {w}\n")
        if wide:
            print("| N | policy | round-robin mean / p99 JCT s | " + " | ".join(others) + " |")
            print("|---|---|---:|" + "---:|" * len(others))
        else:
            print("| N | policy | router | mean JCT s | vs round-robin | p99 JCT s | p99 vs rr |")
            print("|---|---|---|---:|---:|---:|---:|")
        for n in ns:
            for p in pols:
                rr, rr99 = (
                    vals(w, n, p, "round-robin", "mean_jct_s"),
                    vals(w, n, p, "round-robin", "p99_jct_s"),
                )
                means = {r: float(np.mean(vals(w, n, p, r, "mean_jct_s"))) for r in routers}
                best = min(means, key=means.get)
                best_count[best] += 1
                cells = []
                for r in routers:
                    m, m99 = vals(w, n, p, r, "mean_jct_s"), vals(w, n, p, r, "p99_jct_s")
                    pr = None if r == "round-robin" else paired(m, rr)
                    if pr is not None:
                        panels.setdefault(f"{w}, {p}", {}).setdefault(r, []).append(
                            (n, pr.mean_pct, pr.lo_pct, pr.hi_pct)
                        )
                    d = "-" if pr is None else pr.fmt()
                    d99 = "-" if r == "round-robin" else paired(m99, rr99).fmt()
                    mark = " **best**" if r == best else ""
                    if wide:
                        cells.append(
                            f"{np.mean(m):,.0f} / {np.mean(m99):,.0f}"
                            if pr is None
                            else (f"**{d}**" if r == best else d) + f"<br>p99 {d99}"
                        )
                    else:
                        print(
                            f"| {n} | {p} | {r}{mark} | {np.mean(m):,.1f} | {d} | "
                            f"{np.mean(m99):,.1f} | {d99} |"
                        )
                if wide:
                    print(f"| {n} | {p} | " + " | ".join(cells) + " |")
        print()
    print(
        "best router (lowest mean JCT) per (workload, N, policy): "
        + ", ".join(f"{r} {c}" for r, c in sorted(best_count.items(), key=lambda x: -x[1]))
    )
    if a.plot:
        from topas.metrics.plots import router_comparison

        router_comparison(
            Path(a.plot), f"routers vs round-robin, paired over seeds {a.seeds}", panels
        )
        print(f"figure: {a.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
