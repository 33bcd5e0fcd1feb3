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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from topas.reproduce.plan import Job, rate_of

#: the keys a grid file may have
KEYS = ("workloads", "policies", "baseline", "seeds", "rates", "rate_multipliers", "n_tasks",
        "params", "context_cache")
#: bounds on a grid (what fits a cluster, not what is sensible)
MAX_RUNS, MAX_TASKS = 1_000_000, 1_000_000
#: the columns of sweep.csv taken from each run's result
METRICS = ("mean_jct_s", "p99_jct_s", "jct_over_lower_bound", "throughput_tasks_per_s")


@dataclass(frozen=True)
class Grid:
    workloads: tuple[str, ...]
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    #: workload -> its rates (task/s)
    rates: dict = field(default_factory=dict)
    #: workload -> task count
    n_tasks: dict = field(default_factory=dict)
    #: policy -> sorted ``(name, value)`` pairs
    params: dict = field(default_factory=dict)
    context_cache: tuple[bool, ...] = (True,)
    baseline: str | None = None

    def jobs(self) -> list[Job]:
        """Every run, in a fixed order (workload, rate, cache, policy, seed)."""
        return [Job(w, p, r, s, self.n_tasks[w], cc, self.params.get(p, ()))
                for w in self.workloads for r in self.rates[w] for cc in self.context_cache
                for p in self.policies for s in self.seeds]


# -- parsing ------------------------------------------------------------------------------------

def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file; every error is a ValueError naming the file and key."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: does not exist")
    if not p.is_file():
        raise ValueError(f"{p}: not a file")
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not a UTF-8 text file") from None
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror})") from None
    except RecursionError:
        raise ValueError(f"{p}: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{p}: not valid YAML ({getattr(e, 'problem', None) or e}{at})"
                         ) from None
    try:
        return parse_grid(doc)
    except ValueError as e:
        raise ValueError(f"{p}: {str(e).splitlines()[0]}") from None


def _names(doc: dict, key: str) -> tuple[str, ...]:
    v = doc.get(key)
    if v is None:
        raise ValueError(f"{key}: missing (a list of names)")
    v = [v] if isinstance(v, str) else v
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise ValueError(f"{key}: must be a non-empty list of names")
    if len(set(v)) != len(v):
        raise ValueError(f"{key}: names {next(x for x in v if v.count(x) > 1)!r} twice")
    return tuple(v)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_seeds(v) -> tuple[int, ...]:
    """A seed, a list of seeds and ranges, or an inclusive range ``"A..B"``."""
    items = v if isinstance(v, list) else [v]
    out: list[int] = []
    for x in items:
        if _is_int(x):
            out.append(x)
            continue
        lo, sep, hi = str(x).partition("..") if isinstance(x, str) else ("", "", "")
        try:
            a, b = int(lo), int(hi)
        except ValueError:
            a = b = None
        if not sep or a is None:
            raise ValueError(f"seeds {x!r}: expected an integer or a range A..B")
        if a > b:
            raise ValueError(f"seeds {x!r}: empty range ({a} > {b})")
        if b - a >= MAX_RUNS:
            raise ValueError(f"seeds {x!r}: more than {MAX_RUNS:_} seeds")
        out.extend(range(a, b + 1))
    if not out:
        raise ValueError("seeds: give at least one seed")
    if any(s < 0 for s in out):
        raise ValueError(f"seeds {v!r}: seeds must be >= 0")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds {v!r}: seed {next(s for s in out if out.count(s) > 1)} twice")
    return tuple(out)


def _numbers(key: str, v) -> tuple[float, ...]:
    items = v if isinstance(v, list) else [v]
    if not items:
        raise ValueError(f"{key}: give at least one value")
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) \
                or x <= 0:
            raise ValueError(f"{key} {x!r}: must be a finite number > 0")
    if len(set(items)) != len(items):
        raise ValueError(f"{key}: a value is given twice")
    return tuple(float(x) for x in items)


def _frozen(v):
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


def parse_grid(doc) -> Grid:
    """Check a parsed grid document and resolve it (rates, task counts, parameters)."""
    from topas.policies import build_policy
    from topas.workloads import check_rate, get_workload

    if not isinstance(doc, dict):
        raise ValueError("the top level must be a mapping of " + ", ".join(KEYS))
    for k in doc:
        if k not in KEYS:
            raise ValueError(f"unknown key {k!r} (known: {', '.join(KEYS)})")
    workloads, policies = _names(doc, "workloads"), _names(doc, "policies")
    wls = {}
    for w in workloads:
        try:
            wls[w] = get_workload(w)
        except RecursionError:
            raise ValueError(f"workload {w}: nested too deeply") from None
    seeds = parse_seeds(doc.get("seeds", [3]))
    if "rates" in doc and "rate_multipliers" in doc:
        raise ValueError("rates and rate_multipliers: give one of them")
    if "rates" in doc:
        r = _numbers("rates", doc["rates"])
        rates = {w: r for w in workloads}
    else:
        m = _numbers("rate_multipliers", doc.get("rate_multipliers", [1.0]))
        rates = {w: tuple(dict.fromkeys(rate_of(w, x) for x in m)) for w in workloads}
    nt = doc.get("n_tasks")
    if isinstance(nt, dict):
        for w in nt:
            if w not in workloads:
                raise ValueError(f"n_tasks: {w!r} is not one of the workloads")
        n_tasks = {w: nt.get(w, wls[w].default_tasks) for w in workloads}
    else:
        n_tasks = {w: wls[w].default_tasks if nt is None else nt for w in workloads}
    for w, n in n_tasks.items():
        if not _is_int(n) or not 1 <= n <= MAX_TASKS:
            raise ValueError(f"n_tasks {n!r} ({w}): must be an integer in [1, {MAX_TASKS:_}]")
        for r in rates[w]:
            check_rate(r, n)
    raw = doc.get("params") or {}
    if not isinstance(raw, dict):
        raise ValueError("params: must map a policy to its parameters")
    params = {}
    for p, kv in raw.items():
        if p not in policies:
            raise ValueError(f"params: {p!r} is not one of the policies")
        if not isinstance(kv, dict) or not all(isinstance(k, str) for k in kv):
            raise ValueError(f"params.{p}: must map parameter names to values")
        params[p] = tuple(sorted((k, _frozen(v)) for k, v in kv.items()))
    for p in policies:
        build_policy(p, seeds[0], dict(params.get(p, ())))  # unknown policy or parameter
    cc = doc.get("context_cache", True)
    cc = cc if isinstance(cc, list) else [cc]
    if not cc or not all(isinstance(x, bool) for x in cc) or len(set(cc)) != len(cc):
        raise ValueError(f"context_cache {doc.get('context_cache')!r}: true, false or a list "
                         "of both")
    base = doc.get("baseline")
    if base is not None:
        if base not in policies:
            raise ValueError(f"baseline {base!r}: must be one of the policies")
        if len(seeds) < 2:
            raise ValueError(f"baseline {base!r}: a paired interval needs at least 2 seeds")
    g = Grid(workloads, policies, seeds, rates, n_tasks, params, tuple(cc), base)
    n = sum(len(rates[w]) for w in workloads) * len(cc) * len(policies) * len(seeds)
    if n > MAX_RUNS:
        raise ValueError(f"the grid has {n:_} runs; at most {MAX_RUNS:_}")
    return g


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
                        out = results.get(Job(w, p, r, s, grid.n_tasks[w], cc,
                                              grid.params.get(p, ())))
                        if out is not None and "error" not in out:
                            per[p][s] = float(out["mean_jct_s"])
                    v = np.asarray(list(per[p].values()), dtype=float)
                    cells.append({"workload": w, "rate": r, "context_cache": cc, "policy": p,
                                  "n": int(v.size),
                                  "mean_jct_s": _num(float(v.mean())) if v.size else None,
                                  "sd_jct_s": float(v.std(ddof=1)) if v.size > 1 else None})
                b = grid.baseline
                for p in grid.policies if b else ():
                    if p == b:
                        continue
                    common = [s for s in grid.seeds if s in per[p] and s in per[b]]
                    row = {"workload": w, "rate": r, "context_cache": cc, "policy": p,
                           "baseline": b, "n": len(common)}
                    if len(common) >= 2:
                        d = paired([per[p][s] for s in common], [per[b][s] for s in common])
                        row.update(mean_pct=d.mean_pct, lo_pct=d.lo_pct, hi_pct=d.hi_pct,
                                   wins=d.wins)
                    pairs.append(row)
    return {"cells": cells, "paired": pairs}


def csv_text(grid: Grid, results: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["workload", "rate", "context_cache", "policy", "params", "seed", "n_tasks",
                *METRICS, "error"])
    for j in grid.jobs():
        out = results.get(j, {"error": "missing"})
        w.writerow([j.workload, repr(j.rate), j.context_cache, j.policy,
                    json.dumps(dict(j.params), sort_keys=True) if j.params else "", j.seed,
                    j.n_tasks, *[repr(out[m]) if m in out else "" for m in METRICS],
                    out.get("error", "")])
    return buf.getvalue()


def grid_doc(grid: Grid) -> dict:
    return {"workloads": list(grid.workloads), "policies": list(grid.policies),
            "baseline": grid.baseline, "seeds": list(grid.seeds),
            "rates": {w: list(r) for w, r in grid.rates.items()}, "n_tasks": grid.n_tasks,
            "params": {p: dict(kv) for p, kv in grid.params.items()},
            "context_cache": list(grid.context_cache)}


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
            "failed" if v is None else f"{v:,.1f}")
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
        key = (d["workload"], f"{d['rate']:g}", "on" if d["context_cache"] else "off",
               d["policy"])
        if "mean_pct" in d:
            t.add_row(*key, f"{d['mean_pct']:+.1f}%", f"[{d['lo_pct']:+.1f}, "
                      f"{d['hi_pct']:+.1f}]", f"{d['wins']}/{d['n']} seeds")
        else:
            t.add_row(*key, "n/a", f"{d['n']} paired seeds", "")
    con.print(t)


def _seed_text(seeds) -> str:
    s = list(seeds)
    return f"{s[0]}..{s[-1]}" if s == list(range(s[0], s[-1] + 1)) and len(s) > 2 else \
        ",".join(map(str, s))


# -- the command -------------------------------------------------------------------------------

def cmd_sweep(args) -> int:
    from topas.cli import check_out_dir
    from topas.reproduce import runner
    from topas.reproduce.cli import check_executor

    grid = load_grid(args.grid)
    out = Path(args.out) if args.out else Path("build/sweep") / Path(args.grid).stem
    check_out_dir(str(out))
    check_executor(args)
    jobs = grid.jobs()
    t0 = time.perf_counter()
    version = runner.code_version()
    try:
        results = runner.run_jobs(jobs, out / "cache", args.jobs,
                                  progress=sys.stderr.isatty() or args.progress,
                                  version=version, executor=args.executor,
                                  ray_address=args.ray_address, label="sweep")
    except KeyboardInterrupt:
        n = sum(1 for _ in (out / "cache").glob("*.json")) if (out / "cache").is_dir() else 0
        print(f"topas sweep: interrupted; {n} complete results kept in {out / 'cache'}, "
              "the same command resumes", file=sys.stderr)
        return 130
    files = write_outputs(out, grid, results, version)
    print_tables(grid, summarize(grid, results))
    print(f"{len(jobs)} runs, {time.perf_counter() - t0:.1f} s; results: {files[0]} and "
          f"{files[1]}")
    failed = [r for r in results.values() if "error" in r]
    if failed:
        again = sum(1 for r in failed if r.get("transient"))
        print(f"topas sweep: {len(failed)} of {len(jobs)} runs failed (see {files[0]}"
              + (f"; {again} for lack of memory/disk/stack, not cached: rerun to retry"
                 if again else "") + ")", file=sys.stderr)
        return 1
    return 0


def add_arguments(subparsers) -> None:
    """Register ``topas sweep``."""
    import argparse

    from topas.cli import int_arg
    from topas.reproduce.cli import add_executor_arguments

    p = subparsers.add_parser(
        "sweep", help="run a grid of simulations from a YAML file (cached, resumable)",
        description="Expand GRID.yaml (workloads, policies, seeds, rates or rate multipliers, "
        "n_tasks, params per policy, context_cache, optional baseline) to simulator runs, "
        "run the missing ones (cached under OUT/cache like topas reproduce), print mean JCT "
        "per workload and policy (and the paired difference against the baseline), and "
        "write OUT/sweep.csv and OUT/summary.json.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("grid", metavar="GRID.yaml", help="the grid file (see examples/)")
    p.add_argument("--out", default=None, help="results folder (default: build/sweep/STEM)")
    p.add_argument("--jobs", type=int_arg(1, 1024), default=None,
                   help="worker processes, or local Ray's CPUs (default: os.cpu_count())")
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar even when stderr is not a terminal")
    add_executor_arguments(p)
    p.set_defaults(fn=cmd_sweep)
