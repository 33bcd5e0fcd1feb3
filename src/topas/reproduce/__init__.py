"""The paper's evaluation as data: which runs make the report, and a resumable parallel runner.

``plan(cfg)`` lists every simulator run the report needs as :class:`Job` values (workload,
policy, arrival rate, seed, task count).  ``run_jobs`` executes them on a process pool (or
Ray), each result written to ``OUT/cache/<key>.json`` atomically, so a rerun after a crash or
a Ctrl-C only runs what is missing.  The cache key includes :func:`code_version`, a hash of the
sources that can change a simulation result, so stale results are never reused.

Seeds: TOPAS's hyper-parameters were tuned on seeds 1 and 2 (``benchmarks/sweep_topas.py``);
everything here uses seeds 3 and up (:data:`FULL_SEEDS`).

The two motivating measurements (spec section 1 and the paper's Fig. 2) are hand-built
scenarios run on the simulator directly: :func:`motivation_alternation` and
:func:`motivation_toy`.  They take well under a second and are not cached.

The package: :mod:`~topas.reproduce.plan` (what to run), :mod:`~topas.reproduce.runner` (the
cached runner and the code version), :mod:`~topas.reproduce.executors` (where the jobs run: a
process pool, or Ray in :mod:`~topas.reproduce.ray_executor`), :mod:`~topas.reproduce.stats`
(aggregation), :mod:`~topas.reproduce.experiments` (the motivating toys),
:mod:`~topas.reproduce.cli` (``topas reproduce``) and :mod:`~topas.reproduce.grid` /
:mod:`~topas.reproduce.sweep` (``topas sweep GRID.yaml``); the report is rendered by
:mod:`topas.reproduce.report`.
"""

from topas.reproduce.experiments import (
    TOY_BUDGET_TOKENS,
    TOY_POLICIES,
    gantt,
    motivation_alternation,
    motivation_toy,
    toy_tasks,
)
from topas.reproduce.plan import (
    ABLATION_POLICIES,
    BASELINES,
    FULL_SEEDS,
    MAIN_POLICIES,
    OTHER_BUSY,
    OTHER_TASKS_FULL,
    OTHER_TASKS_QUICK,
    OTHER_WORKLOADS,
    OURS,
    PAIRED_SEEDS,
    PAPER_ABLATION,
    PAPER_OVERHEAD,
    PAPER_POLICY,
    QUICK_PAIRED_SEEDS,
    QUICK_SEEDS,
    TARGET_POLICY,
    WORKLOAD_PLANS,
    Config,
    Job,
    Plan,
    WorkloadPlan,
    default_rate,
    plan,
    rate_of,
    workload_plan,
)
from topas.reproduce.runner import TRANSIENT_ERRORS, code_version, run_job, run_jobs
from topas.reproduce.stats import Stat, aggregate, change_vs_best

__all__ = [
    "ABLATION_POLICIES",
    "BASELINES",
    "FULL_SEEDS",
    "MAIN_POLICIES",
    "OTHER_BUSY",
    "OTHER_TASKS_FULL",
    "OTHER_TASKS_QUICK",
    "OTHER_WORKLOADS",
    "OURS",
    "PAIRED_SEEDS",
    "PAPER_ABLATION",
    "PAPER_OVERHEAD",
    "PAPER_POLICY",
    "QUICK_PAIRED_SEEDS",
    "QUICK_SEEDS",
    "TARGET_POLICY",
    "TOY_BUDGET_TOKENS",
    "TOY_POLICIES",
    "TRANSIENT_ERRORS",
    "WORKLOAD_PLANS",
    "Config",
    "Job",
    "Plan",
    "Stat",
    "WorkloadPlan",
    "aggregate",
    "change_vs_best",
    "code_version",
    "default_rate",
    "gantt",
    "motivation_alternation",
    "motivation_toy",
    "plan",
    "rate_of",
    "run_job",
    "run_jobs",
    "toy_tasks",
    "workload_plan",
]
