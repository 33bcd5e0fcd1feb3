"""``topas sweep GRID.yaml``: a grid of simulator runs from a YAML file, expanded to
:class:`~topas.reproduce.plan.Job` values and run through the same cached runner as
``topas reproduce`` (same cache keys, executors, resumption).

A grid (``examples/sweep_small.yaml``)::

    workloads: [chain3, dag4]          # names (topas list) or workload files
    policies: [fcfs, spf, topas]
    baseline: fcfs                     # optional: paired per-seed differences against it
    seeds: 3..7                        # a list, a number, or an inclusive range A..B
    rate_multipliers: [1.0, 1.25]      # x each workload's default rate; or rates: [task/s]
    n_tasks: 20                        # or {workload: n}; default: the workload's
    params: {topas: {rho: 0.5}}        # per policy, as --param
    context_cache: true                # or [false, true]

Writes ``OUT/sweep.csv`` (one row per run), ``OUT/summary.json`` (mean JCT per cell and
the paired differences) and ``OUT/cache/`` atomically; neither result file holds a wall time,
so they are identical whichever executor computed them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from topas.reproduce.grid import Grid, load_grid
from topas.reproduce.plan import Job

#: the columns of sweep.csv taken from each run's result
METRICS = ("mean_jct_s", "p99_jct_s", "jct_over_lower_bound", "throughput_tasks_per_s")


# -- results -----------------------------------------------------------------------------------


def _num(v):
    """JSON-safe: NaN becomes null."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def summarize(grid: Grid, results: dict) -> dict:
    """Mean JCT per (workload, rate, cache, policy) over the seeds that succeeded and, with a
    baseline, each policy's paired per-seed difference against it (95 % interval)."""
    from topas.metrics.paired import paired

    cells, pairs = [], []
    for w in grid.workloads:
        for r in grid.rates[w]:
            for cc in grid.context_cache:
                per: dict[str, dict[int, float]] = {}
                for p in grid.policies:
                    per[p] = {}
                    for s in grid.seeds:
                        out = results.get(
                            Job(w, p, r, s, grid.n_tasks[w], cc, grid.params.get(p, ()))
                        )
                        if out is not None and "error" not in out:
                            per[p][s] = float(out["mean_jct_s"])
                    v = np.asarray(list(per[p].values()), dtype=float)
                    cells.append(
                        {
                            "workload": w,
                            "rate": r,
                            "context_cache": cc,
                            "policy": p,
                            "n": int(v.size),
                            "mean_jct_s": _num(float(v.mean())) if v.size else None,
                            "sd_jct_s": float(v.std(ddof=1)) if v.size > 1 else None,
                        }
                    )
                b = grid.baseline
                for p in grid.policies if b else ():
                    if p == b:
                        continue
                    common = [s for s in grid.seeds if s in per[p] and s in per[b]]
                    row = {
                        "workload": w,
                        "rate": r,
                        "context_cache": cc,
                        "policy": p,
                        "baseline": b,
                        "n": len(common),
                    }
                    if len(common) >= 2:
                        d = paired([per[p][s] for s in common], [per[b][s] for s in common])
                        row.update(
                            mean_pct=d.mean_pct, lo_pct=d.lo_pct, hi_pct=d.hi_pct, wins=d.wins
                        )
                    pairs.append(row)
    return {"cells": cells, "paired": pairs}


def csv_text(grid: Grid, results: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "workload",
            "rate",
            "context_cache",
            "policy",
            "params",
            "seed",
            "n_tasks",
            *METRICS,
            "error",
        ]
    )
    for j in grid.jobs():
        out = results.get(j, {"error": "missing"})
        w.writerow(
            [
                j.workload,
                repr(j.rate),
                j.context_cache,
                j.policy,
                json.dumps(dict(j.params), sort_keys=True) if j.params else "",
                j.seed,
                j.n_tasks,
                *[repr(out[m]) if m in out else "" for m in METRICS],
                out.get("error", ""),
            ]
        )
    return buf.getvalue()


def grid_doc(grid: Grid) -> dict:
    return {
        "workloads": list(grid.workloads),
        "policies": list(grid.policies),
        "baseline": grid.baseline,
        "seeds": list(grid.seeds),
        "rates": {w: list(r) for w, r in grid.rates.items()},
        "n_tasks": grid.n_tasks,
        "params": {p: dict(kv) for p, kv in grid.params.items()},
        "context_cache": list(grid.context_cache),
    }


def write_outputs(out_dir: Path, grid: Grid, results: dict, version: str) -> list[Path]:
    """``sweep.csv`` and ``summary.json``, each written atomically; no wall times."""
    from topas.metrics.summary import atomic_write_text

    doc = {"code_version": version, "grid": grid_doc(grid), **summarize(grid, results)}
    paths = [Path(out_dir) / "sweep.csv", Path(out_dir) / "summary.json"]
    atomic_write_text(paths[0], csv_text(grid, results))
    atomic_write_text(paths[1], json.dumps(doc, indent=1) + "\n")
    return paths


def print_tables(grid: Grid, summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = Table(title=f"mean JCT (s) over seeds {_seed_text(grid.seeds)}")
    for c in ("workload", "rate", "cache"):
        t.add_column(c, no_wrap=True)
    for p in grid.policies:
        t.add_column(p, justify="right")
    rows: dict = {}
    for c in summary["cells"]:
        v = c["mean_jct_s"]
        rows.setdefault((c["workload"], c["rate"], c["context_cache"]), []).append(
            "failed" if v is None else f"{v:,.1f}"
        )
    for (w, r, cc), vals in rows.items():
        t.add_row(w, f"{r:g}", "on" if cc else "off", *vals)
    con.print(t)
    if not grid.baseline:
        return
    t = Table(title=f"paired per-seed difference in mean JCT against {grid.baseline}")
    for c in ("workload", "rate", "cache", "policy"):
        t.add_column(c, no_wrap=True)
    for c in ("mean diff", "95 % interval", "faster on"):
        t.add_column(c, justify="right", no_wrap=True)
    for d in summary["paired"]:
        key = (d["workload"], f"{d['rate']:g}", "on" if d["context_cache"] else "off", d["policy"])
        if "mean_pct" in d:
            t.add_row(
                *key,
                f"{d['mean_pct']:+.1f}%",
                f"[{d['lo_pct']:+.1f}, {d['hi_pct']:+.1f}]",
                f"{d['wins']}/{d['n']} seeds",
            )
        else:
            t.add_row(*key, "n/a", f"{d['n']} paired seeds", "")
    con.print(t)


def _seed_text(seeds) -> str:
    s = list(seeds)
    return (
        f"{s[0]}..{s[-1]}"
        if s == list(range(s[0], s[-1] + 1)) and len(s) > 2
        else ",".join(map(str, s))
    )


# -- the command -------------------------------------------------------------------------------


def cmd_sweep(args) -> int:
    from topas.cli_args import check_out_dir
    from topas.reproduce import runner
    from topas.reproduce.cli import check_executor, report_failures, report_interrupted

    grid = load_grid(args.grid)
    out = Path(args.out) if args.out else Path("build/sweep") / Path(args.grid).stem
    check_out_dir(str(out))
    check_executor(args)
    jobs = grid.jobs()
    t0 = time.perf_counter()
    version = runner.code_version()
    try:
        results = runner.run_jobs(
            jobs,
            out / "cache",
            args.jobs,
            progress=sys.stderr.isatty() or args.progress,
            version=version,
            executor=args.executor,
            ray_address=args.ray_address,
            label="sweep",
        )
    except KeyboardInterrupt:
        return report_interrupted("topas sweep", out / "cache")
    files = write_outputs(out, grid, results, version)
    print_tables(grid, summarize(grid, results))
    print(f"{len(jobs)} runs, {time.perf_counter() - t0:.1f} s; results: {files[0]} and {files[1]}")
    return report_failures("topas sweep", results, len(jobs), f"see {files[0]}")


def add_arguments(subparsers) -> None:
    """Register ``topas sweep``."""
    import argparse

    from topas.cli_args import int_arg
    from topas.reproduce.cli import add_executor_arguments

    p = subparsers.add_parser(
        "sweep",
        help="run a grid of simulations from a YAML file (cached, resumable)",
        description="Expand GRID.yaml (workloads, policies, seeds, rates or rate multipliers, "
        "n_tasks, params per policy, context_cache, optional baseline) to simulator runs, "
        "run the missing ones (cached under OUT/cache like topas reproduce), print mean JCT "
        "per workload and policy (and the paired difference against the baseline), and "
        "write OUT/sweep.csv and OUT/summary.json.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("grid", metavar="GRID.yaml", help="the grid file (see examples/)")
    p.add_argument("--out", default=None, help="results folder (default: build/sweep/STEM)")
    p.add_argument(
        "--jobs",
        type=int_arg(1, 1024),
        default=None,
        help="worker processes, or local Ray's CPUs (default: os.cpu_count())",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar even when stderr is not a terminal",
    )
    add_executor_arguments(p)
    p.set_defaults(fn=cmd_sweep)
