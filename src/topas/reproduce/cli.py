"""``topas reproduce``: run (or resume) the plan and write the report."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from topas.metrics.summary import atomic_write_text
from topas.reproduce.plan import FULL_SEEDS, QUICK_SEEDS, Config
from topas.reproduce.report import Reproduction, write_report

# -- the command -------------------------------------------------------------------------------


def reproduce(
    cfg,
    out_dir: Path,
    jobs: int | None = None,
    progress: bool = True,
    command: str = "topas reproduce",
    report_only: bool = False,
    executor: str = "pool",
    ray_address: str | None = None,
) -> tuple[Reproduction, list[Path]]:
    """Run (or resume) every experiment of ``cfg`` and write the report into ``out_dir``.
    ``report_only``: rebuild the report from the cached results of the code version of the
    last invocation that computed runs, running nothing.  ``executor``/``ray_address``: where
    the runs go (:func:`topas.reproduce.runner.run_jobs`)."""
    from topas.reproduce import runner
    from topas.reproduce.experiments import motivation_alternation, motivation_toy
    from topas.reproduce.plan import plan

    t0 = time.perf_counter()
    pl = plan(cfg)
    n_workers = jobs if jobs is not None else (os.cpu_count() or 1)
    cache = Path(out_dir) / "cache"
    log_path = cache / "invocations.log"
    try:
        log = json.loads(log_path.read_text())
    except (OSError, ValueError):
        log = []
    if report_only:
        # the code version with the most cached results of this plan
        keys = {j.key("") for j in pl.all_jobs()}
        count: dict[str, int] = {}
        for f in cache.glob("*.json") if cache.exists() else []:
            stem, _, ver = f.stem.rpartition("__")
            if f"{stem}__" in keys:
                count[ver] = count.get(ver, 0) + 1
        if not count:
            raise ValueError(
                f"--report-only: {cache} holds no cached run that computed "
                "results for this configuration"
            )
        version = max(sorted(count), key=lambda v: count[v])
    else:
        # load the simulator and every policy first, then hash: the workers fork from here
        import topas.api  # noqa: F401
        from topas.policies import list_policies

        list_policies()
        version = runner.code_version()
    n_cached = sum(1 for _ in cache.glob("*.json")) if cache.exists() else 0
    # Ray on a cluster without --jobs: as many jobs at once as the cluster has CPUs
    results = runner.run_jobs(
        pl.all_jobs(),
        cache,
        jobs if executor == "ray" else n_workers,
        progress=progress,
        version=version,
        run_missing=not report_only,
        executor=executor,
        ray_address=ray_address,
    )
    rep = Reproduction(
        cfg=cfg,
        plan=pl,
        results=results,
        alternation=motivation_alternation(),
        toy=motivation_toy(),
        command=command,
        wall_s=0.0,
        jobs=n_workers,
        version=version,
    )
    rep.wall_s = time.perf_counter() - t0
    # remember what each invocation cost, so a report regenerated from the cache can still
    # state the wall time of the run that computed it
    ran = max(0, sum(1 for _ in cache.glob("*.json")) - n_cached)
    log.append(
        {
            "command": command,
            "version": rep.version,
            "workers": n_workers,
            "runs_computed": ran,
            "runs_total": len(results),
            "wall_s": rep.wall_s,
            "date": time.strftime("%Y-%m-%d %H:%M"),
        }
    )
    atomic_write_text(log_path, json.dumps(log, indent=1) + "\n")
    # the invocations of this code version (all of them if the log's versions disagree, as
    # when a file changed between the hash and the log entry)
    done = [e for e in log if e["runs_computed"] > 0]
    rep.invocations = [e for e in done if e["version"] == rep.version] or done
    return rep, write_report(rep, out_dir)


def _parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"--seeds {text!r}: must be comma-separated integers") from None
    if not seeds:
        raise ValueError(f"--seeds {text!r}: give at least one seed")
    if any(s < 0 for s in seeds):
        raise ValueError(f"--seeds {text!r}: seeds must be >= 0")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r}: a seed is given twice")
    return seeds


def cmd_reproduce(args) -> int:

    seeds = _parse_seeds(args.seeds) if args.seeds else (QUICK_SEEDS if args.quick else FULL_SEEDS)
    out = Path(args.out) if args.out else Path("build/reproduce-quick" if args.quick else "docs")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be >= 1")
    kw = {}
    if args.workloads:
        kw["workloads"] = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    cfg = Config(quick=args.quick, seeds=seeds, tasks=args.tasks, **kw)
    from topas.cli_args import check_out_dir

    check_out_dir(str(out))  # before any run: a report that cannot be written wastes them
    check_executor(args)
    parts = ["topas reproduce"]
    if args.quick:
        parts.append("--quick")
    if args.out:
        parts.append(f"--out {args.out}")
    if args.seeds:
        parts.append(f"--seeds {args.seeds}")
    if args.tasks:
        parts.append(f"--tasks {args.tasks}")
    if args.workloads:
        parts.append(f"--workloads {args.workloads}")
    try:
        rep, files = reproduce(
            cfg,
            out,
            args.jobs,
            progress=sys.stderr.isatty() or args.progress,
            command=" ".join(parts),
            report_only=args.report_only,
            executor=args.executor,
            ray_address=args.ray_address,
        )
    except KeyboardInterrupt:
        return report_interrupted("topas reproduce", out / "cache")
    print(
        f"{len(rep.results)} runs, {rep.wall_s / 60:.1f} min; report: {files[0]} and "
        f"{files[1]} ({len(files) - 2} figures)"
    )
    return report_failures(
        "topas reproduce", rep.results, len(rep.results), f"listed in {files[0]}"
    )


def report_interrupted(command: str, cache: Path) -> int:
    """The stderr line after Ctrl-C (how many complete results ``cache`` keeps) and the exit
    status 130."""
    n = sum(1 for _ in cache.glob("*.json")) if cache.is_dir() else 0
    print(
        f"{command}: interrupted; {n} complete results kept in {cache}, the same command resumes",
        file=sys.stderr,
    )
    return 130


def report_failures(command: str, results: dict, total: int, where: str) -> int:
    """One stderr line when runs of ``results`` failed (of ``total``; ``where``: where they
    are listed) and the exit status: 1 if any failed, else 0.  Transient failures are not
    cached, so the line says a rerun retries them."""
    failed = [r for r in results.values() if "error" in r]
    if not failed:
        return 0
    again = sum(1 for r in failed if r.get("transient"))
    print(
        f"{command}: {len(failed)} of {total} runs failed ({where}"
        + (f"; {again} for lack of memory/disk/stack, not cached: rerun to retry" if again else "")
        + ")",
        file=sys.stderr,
    )
    return 1


def add_arguments(subparsers) -> None:
    """Register ``topas reproduce`` and ``topas sweep`` (called by topas.cli)."""
    p = subparsers.add_parser(
        "reproduce",
        help="run the paper's evaluation on the simulator and write a report",
        description="Run every experiment of the TOPAS evaluation (main table, load sweep, "
        "ablation, overhead, motivating toys) on a process pool or Ray, cache each run under "
        "OUT/cache, and write OUT/results.md, OUT/results.html and OUT/img/*.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="one seed, few tasks and rates: a smoke test (<= 5 min on 2 cores)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="report folder (default: docs, or build/reproduce-quick with --quick)",
    )
    from topas.cli_args import int_arg

    p.add_argument(
        "--jobs",
        type=int_arg(1, 1024),
        default=None,
        help="worker processes (default: os.cpu_count())",
    )
    p.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds (default 3,4,5,6,7; --quick: 3); never 1 or 2",
    )
    p.add_argument(
        "--tasks", type=int_arg(1, 1_000_000), default=None, help="override every task count"
    )
    p.add_argument(
        "--workloads",
        default=None,
        help="comma-separated subset of chain3,dag4,dag10wide,metagpt-sop,"
        "metagpt-tl (default: all)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the report from OUT/cache (the code version of the last run "
        "that computed results); simulate nothing",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar even when stderr is not a terminal",
    )
    add_executor_arguments(p)
    p.set_defaults(fn=cmd_reproduce)
    from topas.reproduce import sweep

    sweep.add_arguments(subparsers)  # topas sweep: the same runner on a grid from a file


def add_executor_arguments(p) -> None:
    """``--executor`` and ``--ray-address`` (reproduce and sweep)."""
    from topas.reproduce.executors import EXECUTORS

    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="pool",
        help="where the runs go: a local process pool (--jobs processes), or Ray "
        "(the optional ray extra): a local Ray with --jobs CPUs, or the "
        "cluster at --ray-address; the cache is the same",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="with --executor ray: an existing cluster (e.g. ray://head:10001 or "
        "auto; default: $RAY_ADDRESS, else start a local Ray)",
    )


def check_executor(args) -> None:
    """Bad ``--executor``/``--ray-address`` combinations, before any work (exit 2)."""
    from topas.reproduce.ray_executor import RAY_MISSING, ray_available

    if args.executor == "ray" and not ray_available():
        raise ValueError(f"--executor ray: {RAY_MISSING}")
    if args.ray_address and args.executor != "ray":
        raise ValueError(f"--ray-address {args.ray_address}: only with --executor ray")
