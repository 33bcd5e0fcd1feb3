"""The resumable parallel runner: :func:`run_jobs` executes :class:`Job` values on an
executor (a process pool, or Ray: :mod:`~topas.reproduce.executors`), caching each result
atomically under a key that includes :func:`code_version`."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from topas.metrics.summary import atomic_write_text
from topas.reproduce.executors import Executor, InlineExecutor, PoolExecutor, make_executor
from topas.reproduce.plan import Job, default_rate

# -- code version --------------------------------------------------------------------------

#: sources that cannot change a simulation result (the report side, the CLI, integrations)
_NOT_SIM = ("reproduce/", "cli.py", "metrics/plots.py", "metrics/paired.py", "integrations/")


def code_version() -> str:
    """12 hex digits of a hash over every source that can change a simulation result."""
    root = Path(__file__).resolve().parent.parent  # src/topas
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or p.suffix not in (".py", ".yaml", ".yml", ".json"):
            continue
        if "__pycache__" in rel or any(rel == x or rel.startswith(x) for x in _NOT_SIM):
            continue
        h.update(rel.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


# -- one run ---------------------------------------------------------------------------------


def run_job(job: Job) -> dict:
    """Simulate ``job``; the summary plus per-task JCTs and the decision-time totals."""
    from topas.api import simulate
    from topas.metrics import summarize

    t0 = time.perf_counter()
    try:
        res = simulate(
            job.workload,
            job.policy,
            rate=job.rate,
            n_tasks=job.n_tasks,
            seed=job.seed,
            policy_params=dict(job.params),
            context_cache=job.context_cache,
        )
    except Exception as e:  # noqa: BLE001 -- a failed run is a result the report must show
        msg = str(e).splitlines()[0] if str(e) else ""
        out = {
            "workload": job.workload,
            "policy": job.policy,
            "rate": job.rate,
            "seed": job.seed,
            "error": f"{type(e).__name__}: {msg}",
            "job_wall_s": time.perf_counter() - t0,
        }
        if isinstance(e, TRANSIENT_ERRORS):
            # the machine, not the code: reported, never cached, so a rerun retries it
            out["transient"] = True
        # anything else is deterministic for this code version: cached like a success
        return out
    s = summarize(res)
    first = min((t.arrival_s for t in res.tasks), default=0.0)
    sim_span_s = max(res.makespan_s - first, 1e-12)
    decision_total_s = float(sum(res.decision_s))
    s.update(
        {
            "workload": job.workload,
            "rate": job.rate,
            # the paper's overhead is scheduler time over serving (wall) time; on the simulator the
            # serving time is the simulated span, so this is the comparable share
            "decision_total_s": decision_total_s,
            "decision_share_of_sim": decision_total_s / sim_span_s,
            "sim_span_s": sim_span_s,
            "jct_s": [t.jct_s for t in sorted(res.tasks, key=lambda t: t.task_id)],
            "lower_bound_s": [t.lower_bound_s for t in sorted(res.tasks, key=lambda t: t.task_id)],
            "job_wall_s": time.perf_counter() - t0,
        }
    )
    return s


#: failures that depend on the machine (memory, disk, stack), not on the code version
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (MemoryError, OSError, RecursionError)


def _remove_temp_files(cache_dir: Path) -> None:
    """Temporary files a killed writer left behind (``.<name>.json.<random>``)."""
    for f in cache_dir.glob(".*.json.*"):
        try:
            f.unlink()
        except OSError:
            pass


def _load_cached(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # missing or unreadable: run it again


#: rough relative cost for scheduling the biggest jobs first (keeps the pool busy at the end)
_COST = {"dag10wide": 6.0, "metagpt-tl": 4.0, "metagpt-sop": 3.0, "dag4": 2.0, "chain3": 1.0}


def _job_cost(j: Job) -> float:
    pol = 6.0 if j.policy.startswith("topas") else 1.0
    return _COST.get(j.workload, 1.0) * pol * j.n_tasks * j.rate / default_rate(j.workload)


def run_jobs(
    jobs: Sequence[Job],
    cache_dir: Path,
    n_workers: int | None = None,
    progress: bool = True,
    on_done: Callable[[Job, dict], None] | None = None,
    version: str | None = None,
    run_missing: bool = True,
    executor: str | Executor = "pool",
    ray_address: str | None = None,
    label: str = "reproduce",
) -> dict[Job, dict]:
    """Run every job not in ``cache_dir`` and return all results.  Results are written as
    they finish, so an interrupted run resumes.

    ``executor``: ``"pool"`` (``n_workers`` processes; 1 = in this process), ``"ray"``
    (local Ray with ``n_workers`` CPUs, or the cluster at ``ray_address``) or an
    :class:`~topas.reproduce.executors.Executor`.  ``version``: the code version of the
    cache keys (default: :func:`code_version` now).  ``run_missing=False`` (report-only
    mode): run nothing; a missing result is an error.  ``label``: the progress bar's."""
    cache_dir = Path(cache_dir)
    ex = make_executor(executor, n_workers, ray_address)  # fails now if Ray is missing
    cache_dir.mkdir(parents=True, exist_ok=True)
    ignore = cache_dir / ".gitignore"
    if not ignore.exists():
        atomic_write_text(ignore, "*\n")
    # load the simulator and every policy before forking, so all workers run the code that
    # the version hash describes even if a source file is edited during a long run
    import topas.api  # noqa: F401
    from topas.policies import list_policies

    list_policies()
    report_only = not run_missing
    version = version or code_version()
    results: dict[Job, dict] = {}
    todo: list[Job] = []
    for j in jobs:
        hit = _load_cached(cache_dir / f"{j.key(version)}.json")
        if hit is not None:
            results[j] = hit
        else:
            todo.append(j)
    if report_only and todo:
        raise ValueError(
            f"cache {cache_dir}: {len(todo)} of {len(jobs)} results of code "
            f"version {version} are missing (first: {todo[0].key(version)})"
        )
    todo.sort(key=_job_cost, reverse=True)
    if isinstance(ex, PoolExecutor) and (ex.workers == 1 or len(todo) <= 1):
        ex = InlineExecutor()  # no pool for one worker or one job
    with _progress_bar(len(jobs), len(results), progress, label) as advance:
        if not todo:
            return results
        ex.start()
        try:
            # a few jobs in flight at a time (not the whole queue): an interrupt then has
            # nothing queued to drain
            queue = iter(todo)

            def top_up() -> None:
                while ex.in_flight() < 2 * ex.workers:
                    j = next(queue, None)
                    if j is None:
                        return
                    ex.submit(j, cache_dir / f"{j.key(version)}.json")

            top_up()
            while ex.in_flight():
                for j, out in ex.wait():
                    results[j] = out
                    advance(j)
                    if on_done:
                        on_done(j, out)
                top_up()
        except BaseException:  # Ctrl-C (or a failure): stop now, do not drain the queue
            ex.stop()
            _remove_temp_files(cache_dir)
            raise
        ex.close()
    return results


class _progress_bar:
    """A rich progress bar on stderr (nothing when disabled)."""

    def __init__(self, total: int, done: int, enabled: bool, label: str = "reproduce") -> None:
        self.total, self.done, self.enabled, self.label = total, done, enabled, label
        self._prog = None

    def __enter__(self) -> Callable[[Job], None]:
        if not self.enabled:
            return lambda j: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._prog = Progress(
            TextColumn(f"[bold]{self.label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("runs"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
        )
        self._prog.__enter__()
        tid = self._prog.add_task("", total=self.total, completed=self.done)

        def advance(j: Job) -> None:
            self._prog.update(tid, advance=1, description=f"{j.policy} on {j.workload}")

        return advance

    def __exit__(self, *exc) -> None:
        if self._prog is not None:
            self._prog.__exit__(*exc)
