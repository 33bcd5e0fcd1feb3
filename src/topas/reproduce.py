"""The paper's evaluation as data: which runs make the report, and a resumable parallel runner.

``plan(cfg)`` lists every simulator run the report needs as :class:`Job` values (workload,
policy, arrival rate, seed, task count).  ``run_jobs`` executes them on a process pool, each
worker writing its result to ``OUT/cache/<key>.json`` atomically, so a rerun after a crash or a
Ctrl-C only runs what is missing.  The cache key includes :func:`code_version`, a hash of the
sources that can change a simulation result, so stale results are never reused.

Seeds: TOPAS's hyper-parameters were tuned on seeds 1 and 2 (``benchmarks/sweep_topas.py``);
everything here uses seeds 3 and up (:data:`FULL_SEEDS`).

The two motivating measurements (spec section 1 and the paper's Fig. 2) are hand-built
scenarios run on the simulator directly: :func:`motivation_alternation` and
:func:`motivation_toy`.  They take well under a second and are not cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from topas.metrics.summary import atomic_write_text

#: the policies of the main table and the load sweep: the baselines, then the paper's TOPAS
#: (the reproduction) and our flagship TOPAS (the target)
MAIN_POLICIES: tuple[str, ...] = ("fcfs", "spf", "lpm", "dfs-weight", "parrot-fcfs",
                                  "autellix-las", "kvflow", "continuum", "srpt-ca",
                                  "topas-paper", "topas")
TARGET_POLICY = "topas"
PAPER_POLICY = "topas-paper"
#: our policies: never counted as a baseline
OURS: tuple[str, ...] = (PAPER_POLICY, TARGET_POLICY)
BASELINES: tuple[str, ...] = tuple(p for p in MAIN_POLICIES if p not in OURS)
#: the ablation variants of the paper's TOPAS (TOPAS-base and single-component variants),
#: topas-hold, the oracle, and the flagship
ABLATION_POLICIES: tuple[str, ...] = ("topas-paper", "topas-base", "topas-noreuse",
                                      "topas-noaging", "topas-hold", "topas-oracle", "topas")
#: seeds never used for tuning (TOPAS was tuned on 1 and 2)
FULL_SEEDS: tuple[int, ...] = (3, 4, 5, 6, 7)
QUICK_SEEDS: tuple[int, ...] = (3,)
#: the paired comparison (topas vs every baseline): ten untuned seeds, both cache settings
PAIRED_SEEDS: tuple[int, ...] = tuple(range(3, 13))
QUICK_PAIRED_SEEDS: tuple[int, ...] = (3, 4)
#: the built-in agent topologies beyond the paper's five (the two ``-hard`` ones with a
#: per-task hardness factor: work correlated across a task's stages), and their task counts
OTHER_WORKLOADS: tuple[str, ...] = ("react", "mapreduce", "debate", "plan-execute",
                                    "supervisor", "groupchat", "mapreduce-hard",
                                    "plan-execute-hard")
OTHER_TASKS_FULL, OTHER_TASKS_QUICK, OTHER_BUSY = 80, 24, 1.25
#: the rates the paper states (task/s): the TL ablation and the SOP overhead measurement
PAPER_ABLATION = ("metagpt-tl", 0.0175)
PAPER_OVERHEAD = ("metagpt-sop", 0.15)


@dataclass(frozen=True)
class WorkloadPlan:
    """How one workload is swept.  Rates are multiples of the workload's ``default_rate``
    (measured in docs/workloads.md as loaded but unsaturated under FCFS); ``busy`` is the
    multiple the main table uses."""

    name: str
    multipliers: tuple[float, ...]
    busy: float
    tasks_full: int
    tasks_quick: int
    quick_multipliers: tuple[float, ...] = (0.5, 1.0, 1.5)


#: Light load (0.5x) to past saturation: FCFS's JCT / lower bound climbs steeply between 1x
#: and 1.5x on every workload (measured, seed 3; see docs/results.md "Load sweep").
WORKLOAD_PLANS: tuple[WorkloadPlan, ...] = (
    WorkloadPlan("chain3", (0.5, 1.0, 1.25, 1.5), 1.25, 120, 40),
    WorkloadPlan("dag4", (0.5, 1.0, 1.25, 1.5), 1.25, 120, 40),
    WorkloadPlan("dag10wide", (0.5, 1.0, 1.25, 1.5), 1.25, 60, 20),
    WorkloadPlan("metagpt-sop", (0.5, 1.0, 1.25, 1.5), 1.25, 40, 12),
    WorkloadPlan("metagpt-tl", (0.5, 1.0, 1.25, 1.5), 1.25, 40, 12),
)


def workload_plan(name: str) -> WorkloadPlan:
    for p in WORKLOAD_PLANS:
        if p.name == name:
            return p
    raise ValueError(f"workload {name!r}: not part of the reproduction "
                     f"({', '.join(p.name for p in WORKLOAD_PLANS)})")


def default_rate(workload: str) -> float:
    from topas.workloads import get_workload

    return float(get_workload(workload).default_rate)


def rate_of(workload: str, multiplier: float) -> float:
    """``multiplier x default_rate``, rounded to 6 significant digits so cache keys are stable."""
    return float(f"{default_rate(workload) * multiplier:.6g}")


@dataclass(frozen=True)
class Job:
    """One simulator run; its result is cached under :meth:`key`."""

    workload: str
    policy: str
    rate: float
    seed: int
    n_tasks: int
    #: the engine keeps unheld contexts of finished calls in free memory (vLLM APC / SGLang
    #: radix cache semantics; the engine's default, as in both real engines)
    context_cache: bool = True
    #: policy parameters, as sorted ``(name, value)`` pairs
    params: tuple[tuple[str, object], ...] = ()

    def key(self, version: str) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.workload)
        extra = "" if self.context_cache else "__nocc"
        if self.params:
            extra += "__p" + hashlib.sha256(repr(self.params).encode()).hexdigest()[:10]
        return (f"{safe}__{self.policy}__r{self.rate:g}__s{self.seed}__n{self.n_tasks}"
                f"{extra}__{version}")

    def command(self) -> str:
        """The single-run CLI command that makes the same numbers."""
        cmd = (f"topas run --workload {self.workload} --policy {self.policy} "
               f"--rate {self.rate:g} --tasks {self.n_tasks} --seed {self.seed}")
        if not self.context_cache:
            cmd += " --no-context-cache"
        for k, v in self.params:
            cmd += f" --param {k}={v}"
        return cmd


@dataclass(frozen=True)
class Config:
    """One reproduction: ``quick`` shrinks seeds, tasks and rates to fit 5 minutes on 2 cores.
    ``workloads``/``policies``/``tasks`` narrow it further (tests use a tiny configuration)."""

    quick: bool = False
    seeds: tuple[int, ...] = FULL_SEEDS
    workloads: tuple[str, ...] = tuple(p.name for p in WORKLOAD_PLANS)
    policies: tuple[str, ...] = MAIN_POLICIES
    ablation_policies: tuple[str, ...] = ABLATION_POLICIES
    tasks: int | None = None  #: override every task count
    paper_rates: bool = True  #: include the paper's stated TL/SOP rates
    #: the paired comparison: its seeds (None: PAIRED_SEEDS, or QUICK_PAIRED_SEEDS with
    #: ``quick``; () leaves it out) and the workloads beyond ``workloads`` it covers
    paired_seeds: tuple[int, ...] | None = None
    other_workloads: tuple[str, ...] = OTHER_WORKLOADS

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("seeds: give at least one seed")
        bad = [s for s in self.seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
        if bad:
            raise ValueError(f"seeds {list(self.seeds)}: must be integers >= 0, got {bad[0]!r}")
        if any(s in (1, 2) for s in self.seeds):
            raise ValueError(f"seeds {list(self.seeds)}: 1 and 2 tuned TOPAS; report on others")
        for w in self.workloads:
            workload_plan(w)
        if TARGET_POLICY not in self.policies:
            raise ValueError(f"policies: must include {TARGET_POLICY!r}")
        if self.tasks is not None and self.tasks < 1:
            raise ValueError(f"tasks {self.tasks}: must be >= 1")
        ps = self.paired()
        if ps and (len(ps) < 2 or any(s in (1, 2) for s in ps)):
            raise ValueError(f"paired seeds {list(ps)}: need >= 2 seeds, none of 1 and 2")

    def paired(self) -> tuple[int, ...]:
        if self.paired_seeds is not None:
            return self.paired_seeds
        return QUICK_PAIRED_SEEDS if self.quick else PAIRED_SEEDS

    def n_tasks(self, wp: WorkloadPlan) -> int:
        if self.tasks is not None:
            return self.tasks
        return wp.tasks_quick if self.quick else wp.tasks_full

    def multipliers(self, wp: WorkloadPlan) -> tuple[float, ...]:
        m = wp.quick_multipliers if self.quick else wp.multipliers
        return tuple(sorted(set(m) | {wp.busy}))


@dataclass(frozen=True)
class Plan:
    """Every job, and which experiment uses which (a job can serve several)."""

    sweep: tuple[Job, ...]
    ablation: tuple[Job, ...]
    paper_rate: tuple[Job, ...]
    busy_rate: dict = field(default_factory=dict)  #: workload -> busy rate (task/s)
    ablation_rates: tuple[float, ...] = ()
    #: every main policy at each workload's busy rate on the paired seeds, cache off and on
    paired: tuple[Job, ...] = ()
    #: the flagship with one departure reverted at a time (``off`` parameter), on the first
    #: five paired seeds, at the busy rates, engine context cache on
    departures: tuple[Job, ...] = ()

    def all_jobs(self) -> list[Job]:
        seen: dict[Job, None] = {}
        for j in (*self.sweep, *self.ablation, *self.paper_rate, *self.paired,
                  *self.departures):
            seen.setdefault(j, None)
        return list(seen)


def plan(cfg: Config) -> Plan:
    sweep: list[Job] = []
    busy: dict[str, float] = {}
    for w in cfg.workloads:
        wp = workload_plan(w)
        n = cfg.n_tasks(wp)
        busy[w] = rate_of(w, wp.busy)
        for m in cfg.multipliers(wp):
            r = rate_of(w, m)
            sweep += [Job(w, p, r, s, n) for p in cfg.policies for s in cfg.seeds]
    ablation: list[Job] = []
    paper: list[Job] = []
    abl_rates: list[float] = []
    tl, tl_rate = PAPER_ABLATION
    if tl in cfg.workloads:
        n = cfg.n_tasks(workload_plan(tl))
        abl_rates = sorted({busy[tl], tl_rate} if cfg.paper_rates else {busy[tl]})
        ablation = [Job(tl, p, r, s, n) for r in abl_rates for p in cfg.ablation_policies
                    for s in cfg.seeds]
    if cfg.paper_rates:
        for w, r in (PAPER_ABLATION, PAPER_OVERHEAD):
            if w in cfg.workloads:
                n = cfg.n_tasks(workload_plan(w))
                paper += [Job(w, p, r, s, n) for p in cfg.policies for s in cfg.seeds]
    paired: list[Job] = []
    departures: list[Job] = []
    pseeds = cfg.paired()
    if pseeds:
        from topas.policies.topas_ext import DEPARTURES

        for w in (*cfg.workloads, *cfg.other_workloads):
            if w in busy:
                n, r = cfg.n_tasks(workload_plan(w)), busy[w]
            else:
                n = cfg.tasks or (OTHER_TASKS_QUICK if cfg.quick else OTHER_TASKS_FULL)
                r = rate_of(w, OTHER_BUSY)
            for cc in (False, True):
                paired += [Job(w, p, r, s, n, cc) for p in cfg.policies for s in pseeds]
            departures += [Job(w, TARGET_POLICY, r, s, n, True, (("off", d),))
                           for d in DEPARTURES for s in pseeds[:5]]
    return Plan(tuple(sweep), tuple(ablation), tuple(paper), busy, tuple(abl_rates),
                tuple(paired), tuple(departures))


# -- code version --------------------------------------------------------------------------

#: sources that cannot change a simulation result (the report side, the CLI, integrations)
_NOT_SIM = ("reproduce.py", "cli.py", "metrics/report.py", "metrics/report_paired.py",
            "metrics/plots.py", "metrics/paired.py", "integrations/")


def code_version() -> str:
    """12 hex digits of a hash over every source that can change a simulation result."""
    root = Path(__file__).resolve().parent
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
        res = simulate(job.workload, job.policy, rate=job.rate, n_tasks=job.n_tasks,
                       seed=job.seed, policy_params=dict(job.params),
                       context_cache=job.context_cache)
    except Exception as e:  # noqa: BLE001 -- a failed run is a result the report must show
        msg = str(e).splitlines()[0] if str(e) else ""
        out = {"workload": job.workload, "policy": job.policy, "rate": job.rate,
               "seed": job.seed, "error": f"{type(e).__name__}: {msg}",
               "job_wall_s": time.perf_counter() - t0}
        if isinstance(e, TRANSIENT_ERRORS):
            # the machine, not the code: reported, never cached, so a rerun retries it
            out["transient"] = True
        # anything else is deterministic for this code version: cached like a success
        return out
    s = summarize(res)
    first = min((t.arrival_s for t in res.tasks), default=0.0)
    sim_span_s = max(res.makespan_s - first, 1e-12)
    decision_total_s = float(sum(res.decision_s))
    s.update({
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
    })
    return s


#: failures that depend on the machine (memory, disk, stack), not on the code version
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (MemoryError, OSError, RecursionError)


def _run_and_cache(job: Job, path: str) -> tuple[Job, dict]:
    out = run_job(job)
    out["job"] = asdict(job)
    if not out.get("transient"):
        atomic_write_text(Path(path), json.dumps(out) + "\n")
    return job, out


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them (see ``run_jobs``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and kill the workers now.  A killed worker leaves at most
    a temporary file (writes are temp + rename); complete cache entries stay."""
    pool.shutdown(wait=False, cancel_futures=True)
    kill = getattr(pool, "kill_workers", None)  # Python >= 3.14
    if kill is not None:
        kill()
        return
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        p.kill()
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        p.join(timeout=1)


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


def run_jobs(jobs: Sequence[Job], cache_dir: Path, n_workers: int | None = None,
             progress: bool = True,
             on_done: Callable[[Job, dict], None] | None = None,
             version: str | None = None, run_missing: bool = True) -> dict[Job, dict]:
    """Run every job not in ``cache_dir`` (``n_workers`` processes; 1 = in this process) and
    return all results.  Results are written as they finish, so an interrupted run resumes.

    ``version``: the code version of the cache keys (default: :func:`code_version` now).
    ``run_missing=False`` (report-only mode): run nothing; a missing result is an error."""
    cache_dir = Path(cache_dir)
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
        raise ValueError(f"cache {cache_dir}: {len(todo)} of {len(jobs)} results of code "
                         f"version {version} are missing (first: {todo[0].key(version)})")
    todo.sort(key=_job_cost, reverse=True)
    workers = n_workers if n_workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise ValueError(f"jobs {workers}: must be >= 1")
    with _progress_bar(len(jobs), len(results), progress) as advance:
        if workers == 1 or len(todo) <= 1:
            for j in todo:
                _, out = _run_and_cache(j, str(cache_dir / f"{j.key(version)}.json"))
                results[j] = out
                advance(j)
                if on_done:
                    on_done(j, out)
        else:
            pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint)
            try:
                # a few jobs in flight at a time (not the whole queue): an interrupt then has
                # nothing queued to drain
                queue = iter(todo)
                pending: set = set()

                def top_up() -> None:
                    for j in queue:
                        pending.add(pool.submit(_run_and_cache, j,
                                                str(cache_dir / f"{j.key(version)}.json")))
                        if len(pending) >= 2 * workers:
                            break

                top_up()
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        j, out = f.result()
                        results[j] = out
                        advance(j)
                        if on_done:
                            on_done(j, out)
                    top_up()
            except BaseException:  # Ctrl-C (or a failure): stop now, do not drain the queue
                _stop_pool(pool)
                _remove_temp_files(cache_dir)
                raise
            pool.shutdown(wait=True)
    return results


class _progress_bar:
    """A rich progress bar on stderr (nothing when disabled)."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, done, enabled
        self._prog = None

    def __enter__(self) -> Callable[[Job], None]:
        if not self.enabled:
            return lambda j: None
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self._prog = Progress(TextColumn("[bold]reproduce"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("runs"), TimeElapsedColumn(), TimeRemainingColumn(),
                              TextColumn("{task.description}"), console=Console(stderr=True))
        self._prog.__enter__()
        tid = self._prog.add_task("", total=self.total, completed=self.done)

        def advance(j: Job) -> None:
            self._prog.update(tid, advance=1, description=f"{j.policy} on {j.workload}")

        return advance

    def __exit__(self, *exc) -> None:
        if self._prog is not None:
            self._prog.__exit__(*exc)


# -- aggregation -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Stat:
    """Mean over seeds with the sample standard deviation as the spread (0 for one seed)."""

    mean: float
    sd: float
    n: int

    @staticmethod
    def of(values: Iterable[float]) -> Stat:
        a = np.asarray([v for v in values if v is not None], dtype=float)
        if a.size == 0:
            return Stat(float("nan"), float("nan"), 0)
        sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
        return Stat(float(a.mean()), sd, int(a.size))


def aggregate(results: dict[Job, dict], jobs: Iterable[Job], metric: str
              ) -> dict[tuple[str, float, str], Stat]:
    """``(workload, rate, policy) -> Stat`` of ``metric`` over the seeds in ``jobs``."""
    groups: dict[tuple[str, float, str], list[float]] = {}
    for j in jobs:
        r = results.get(j)
        if r is not None and "error" not in r:
            groups.setdefault((j.workload, j.rate, j.policy), []).append(float(r[metric]))
    return {k: Stat.of(v) for k, v in groups.items()}


def change_vs_best(values: dict[str, float], target: str = TARGET_POLICY,
                   higher_is_better: bool = False) -> tuple[str, float, float]:
    """TOPAS against the best baseline on one metric, each metric on its own.

    ``values`` maps policy -> value (the mean over seeds).  Returns ``(best baseline, its
    value, change in percent)`` with change = ``100 * (target - best) / best``: negative is
    better for JCTs, positive is better for throughput (``higher_is_better``)."""
    if target not in values:
        raise ValueError(f"values: no entry for the target policy {target!r}")
    base = {p: v for p, v in values.items()
            if p != target and p not in OURS and not math.isnan(v)}
    if not base:
        raise ValueError("values: no baseline to compare against")
    pick = max if higher_is_better else min
    best = pick(sorted(base), key=lambda p: base[p])
    bv = base[best]
    if bv == 0:
        raise ValueError(f"values: best baseline {best!r} has value 0; change undefined")
    return best, bv, 100.0 * (values[target] - bv) / bv


# -- the two motivating measurements ---------------------------------------------------------

def _sim(tasks, agents, policy: str, *, seed: int = 0, kv_budget_tokens: int | None = None,
         admissions: list | None = None):
    from topas.engine.cost import DEFAULT_PROFILE, get_profile
    from topas.engine.simulator import Simulator
    from topas.policies import make_policy

    def note(snap, dec) -> None:
        if admissions is not None:
            admissions.extend((rid, snap.time_s) for rid in dec.admit)

    sim = Simulator(tasks, {a.name: a for a in agents}, get_profile(DEFAULT_PROFILE),
                    make_policy(policy, seed=seed), seed=seed,
                    kv_budget_tokens=kv_budget_tokens, record_timeline=True,
                    on_decision=note if admissions is not None else None)
    return sim.run()


def motivation_alternation(prefix_tokens: Sequence[int] = (4000, 8000, 12000),
                           n_requests: int = 40, prompt_tokens: int = 512,
                           output_tokens: int = 512) -> list[dict]:
    """Two agents, ``n_requests`` one-call tasks at once, served FCFS in an order fixed by
    arrival: alternating A, B, A, B, ... or grouped (all A, then all B).  Alternation keeps
    both prefixes resident, which crowds out dynamic KV: smaller batches, longer makespan.
    One row per prefix size (both agents get the same ``l_a``)."""
    from topas.metrics import summarize
    from topas.workflow.model import Agent, Call, Stage, Task

    rows = []
    for l_a in prefix_tokens:
        agents = (Agent("A", l_a), Agent("B", l_a))
        row: dict = {"prefix_tokens": l_a, "n_requests": n_requests,
                     "prompt_tokens": prompt_tokens, "output_tokens": output_tokens}
        for order in ("alternating", "grouped"):
            names = (["A", "B"] * n_requests)[:n_requests] if order == "alternating" else \
                ["A"] * (n_requests // 2) + ["B"] * (n_requests - n_requests // 2)
            # 1 ms apart: the order is the arrival order, the load is "all at once"
            tasks = [Task(i, i * 1e-3, (Stage("s", a, (Call(prompt_tokens, output_tokens),)),))
                     for i, a in enumerate(names)]
            s = summarize(_sim(tasks, agents, "fcfs"))
            row[order] = {"mean_batch_size": s["mean_batch_size"],
                          "makespan_s": s["makespan_s"], "mean_jct_s": s["mean_jct_s"]}
        row["batch_ratio"] = row["alternating"]["mean_batch_size"] / \
            row["grouped"]["mean_batch_size"]
        row["makespan_ratio"] = row["alternating"]["makespan_s"] / row["grouped"]["makespan_s"]
        rows.append(row)
    return rows


#: the toy's engine: room for one 8k prefix and one request, not two prefixes
TOY_BUDGET_TOKENS = 10_000
TOY_POLICIES: tuple[str, ...] = ("spf", "lpm", "topas-paper", "topas")


def toy_tasks():
    """Paper Fig. 2's situation: task 0 is three calls of agent A in a chain, task 1 one call
    of agent B; both arrive at t=0, and only one agent's prefix fits at a time."""
    from topas.workflow.model import Agent, Call, Stage, Task

    agents = (Agent("A", 8000), Agent("B", 8000))
    call = (Call(1024, 256),)
    t0 = Task(0, 0.0, (Stage("a1", "A", call), Stage("a2", "A", call, deps=("a1",)),
                       Stage("a3", "A", call, deps=("a2",))))
    t1 = Task(1, 0.0, (Stage("b1", "B", call),))
    return agents, [t0, t1]


def motivation_toy(policies: Sequence[str] = TOY_POLICIES) -> dict[str, dict]:
    """Per policy: mean JCT, each task's JCT, and a Gantt timeline (prefix residency
    intervals, request run segments from admissions / preemptions / finishes)."""
    out: dict[str, dict] = {}
    for p in policies:
        agents, tasks = toy_tasks()
        adm: list[tuple[int, float]] = []
        res = _sim(tasks, agents, p, kv_budget_tokens=TOY_BUDGET_TOKENS, admissions=adm)
        out[p] = {
            "mean_jct_s": float(np.mean([t.jct_s for t in res.tasks])),
            "jct_s": {t.task_id: t.jct_s for t in res.tasks},
            "makespan_s": res.makespan_s,
            "preemptions": res.counters.preemptions,
            "gantt": gantt(res.timeline, adm, res.makespan_s),
        }
    return out


def gantt(timeline: list[tuple], admissions: list[tuple[int, float]], end_s: float) -> dict:
    """Turn a simulator timeline into bars: ``prefixes[agent] = [(start, end, how)]`` and
    ``requests[(task, stage, agent)] = [(start, end, finished?)]``."""
    prefixes: dict[str, list] = {}
    open_in: dict[str, tuple[float, str]] = {}
    requests: dict[int, dict] = {}
    starts: dict[int, list[float]] = {}
    for rid, t in admissions:
        starts.setdefault(rid, []).append(t)
    stops: dict[int, list[tuple[float, bool]]] = {}
    for e in timeline:
        if e[0] == "prefix-in":
            open_in[e[1]] = (e[2], e[3])
        elif e[0] == "prefix-out" and e[1] in open_in:
            s, how = open_in.pop(e[1])
            prefixes.setdefault(e[1], []).append((s, e[2], how))
        elif e[0] == "preempt":
            stops.setdefault(e[1], []).append((e[2], False))
        elif e[0] == "request":
            _, rid, task, stage, agent, first, fin = e
            requests[rid] = {"task": task, "stage": stage, "agent": agent, "first": first}
            stops.setdefault(rid, []).append((fin, True))
    for a, (s, how) in open_in.items():
        prefixes.setdefault(a, []).append((s, end_s, how))
    bars = []
    for rid, info in sorted(requests.items()):
        st = sorted(starts.get(rid, [info["first"]]))
        sp = sorted(stops.get(rid, []))
        for k, (s, (e, fin)) in enumerate(zip(st, sp)):
            bars.append({"request": rid, "task": info["task"], "stage": info["stage"],
                         "agent": info["agent"], "start_s": s, "end_s": e, "finished": fin})
    return {"prefixes": prefixes, "requests": bars}
