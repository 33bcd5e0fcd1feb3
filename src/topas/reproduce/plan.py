"""Which runs make the report: the policies, seeds, workloads and rates (:class:`Config`),
one run (:class:`Job`, its cache key and CLI command) and the full list (:func:`plan`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

#: the policies of the main table and the load sweep: the baselines, then the paper's TOPAS
#: (the reproduction) and our flagship TOPAS (the target)
MAIN_POLICIES: tuple[str, ...] = (
    "fcfs",
    "spf",
    "lpm",
    "dfs-weight",
    "parrot-fcfs",
    "autellix-las",
    "kvflow",
    "continuum",
    "srpt-ca",
    "topas-paper",
    "topas",
)
TARGET_POLICY = "topas"
PAPER_POLICY = "topas-paper"
#: our policies: never counted as a baseline
OURS: tuple[str, ...] = (PAPER_POLICY, TARGET_POLICY)
BASELINES: tuple[str, ...] = tuple(p for p in MAIN_POLICIES if p not in OURS)
#: the ablation variants of the paper's TOPAS (TOPAS-base and single-component variants),
#: topas-hold, the oracle, and the flagship
ABLATION_POLICIES: tuple[str, ...] = (
    "topas-paper",
    "topas-base",
    "topas-noreuse",
    "topas-noaging",
    "topas-hold",
    "topas-oracle",
    "topas",
)
#: seeds never used for tuning (TOPAS was tuned on 1 and 2)
FULL_SEEDS: tuple[int, ...] = (3, 4, 5, 6, 7)
QUICK_SEEDS: tuple[int, ...] = (3,)
#: the paired comparison (topas vs every baseline): ten untuned seeds, both cache settings
PAIRED_SEEDS: tuple[int, ...] = tuple(range(3, 13))
QUICK_PAIRED_SEEDS: tuple[int, ...] = (3, 4)
#: the built-in agent topologies beyond the paper's five (the two ``-hard`` ones with a
#: per-task hardness factor: work correlated across a task's stages), and their task counts
OTHER_WORKLOADS: tuple[str, ...] = (
    "react",
    "mapreduce",
    "debate",
    "plan-execute",
    "supervisor",
    "groupchat",
    "mapreduce-hard",
    "plan-execute-hard",
)
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
    raise ValueError(
        f"workload {name!r}: not part of the reproduction "
        f"({', '.join(p.name for p in WORKLOAD_PLANS)})"
    )


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
        return (
            f"{safe}__{self.policy}__r{self.rate:g}__s{self.seed}__n{self.n_tasks}"
            f"{extra}__{version}"
        )

    def command(self) -> str:
        """The single-run CLI command that makes the same numbers."""
        cmd = (
            f"topas run --workload {self.workload} --policy {self.policy} "
            f"--rate {self.rate:g} --tasks {self.n_tasks} --seed {self.seed}"
        )
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
    #: the flagship with one departure reverted at a time (``off`` parameter), on every
    #: paired seed (ten: a paired interval over >= 10 seeds), at the busy rates, engine
    #: context cache on
    departures: tuple[Job, ...] = ()

    def all_jobs(self) -> list[Job]:
        seen: dict[Job, None] = {}
        for j in (*self.sweep, *self.ablation, *self.paper_rate, *self.paired, *self.departures):
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
        ablation = [
            Job(tl, p, r, s, n) for r in abl_rates for p in cfg.ablation_policies for s in cfg.seeds
        ]
    if cfg.paper_rates:
        for w, r in (PAPER_ABLATION, PAPER_OVERHEAD):
            if w in cfg.workloads:
                n = cfg.n_tasks(workload_plan(w))
                paper += [Job(w, p, r, s, n) for p in cfg.policies for s in cfg.seeds]
    paired: list[Job] = []
    departures: list[Job] = []
    pseeds = cfg.paired()
    if pseeds:
        from topas.policies.topas import DEPARTURES

        for w in (*cfg.workloads, *cfg.other_workloads):
            if w in busy:
                n, r = cfg.n_tasks(workload_plan(w)), busy[w]
            else:
                n = cfg.tasks or (OTHER_TASKS_QUICK if cfg.quick else OTHER_TASKS_FULL)
                r = rate_of(w, OTHER_BUSY)
            for cc in (False, True):
                paired += [Job(w, p, r, s, n, cc) for p in cfg.policies for s in pseeds]
            departures += [
                Job(w, TARGET_POLICY, r, s, n, True, (("off", d),))
                for d in DEPARTURES
                for s in pseeds
            ]
    return Plan(
        tuple(sweep),
        tuple(ablation),
        tuple(paper),
        busy,
        tuple(abl_rates),
        tuple(paired),
        tuple(departures),
    )
