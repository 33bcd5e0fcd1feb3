"""Independence bias of TOPAS's E[LP] estimator (review attack 2), hardness on vs off.

    PYTHONPATH=src python benchmarks/independence_bias.py [--seeds 1 2 ... 10] [--tasks 120]

TOPAS values a task by ``L_i = E[LP]``, the expected longest remaining path with every
unfinished stage's residual service drawn *independently* from the pooled history of its
(agent, stage kind) (``MonteCarloLP(EmpiricalResidual())``, 64 rows, the policy's seed).  The
review's attack 2: when one task is hard in all of its stages at once, independent residuals
misestimate the critical path.  This script runs the ``topas`` policy on the simulator and,
at two points of every task's life, compares the estimate with what then happened:

* **arrival** -- the first decision that sees the task (what TOPAS ranks a new task by);
* **midway** -- the first decision at which at least half of its stages are done (the
  finished stages have shown how hard the task is; the estimator does not use that).

The realised remaining longest path at time ``t`` uses each stage's realised service (first
admission to completion, the quantity the estimator's pool holds): a stage started by ``t``
contributes ``done - t``, a later one ``done - started`` after its dependencies, so queueing
before a stage's first admission is left out, as the estimator (which assumes ready stages
start now) leaves it out.  Each workload runs with its hardness factor (``mapreduce-hard``,
``plan-execute-hard``: one LogNormal factor of mean 1, sigma 0.8 per task multiplying rounds
and outputs in all stages) and without (``mapreduce``, ``plan-execute``: the same file
without the factor), at the base workload's default rate, same seeds.

Per run (tasks after the first ``--warmup``, whose estimates still lean on the cost-model
prior) it takes the mean relative bias ``mean((L_hat - LP) / LP)``, the bias of the mean
``sum(L_hat - LP) / sum(LP)`` and the Spearman rank correlation of ``L_hat`` with ``LP``; it
prints each as the mean over seeds with a 95 % t-interval, and the paired difference
hardness on minus off.  For the hard variants it also gives the mean relative bias over the
third of tasks with the smallest and with the largest factor.  A last column separates the
marginals from the path structure: the bias of the sum over unfinished stages of each stage's
mean residual against the sum of their realised remaining services (no max: for a chain of
stages E[LP] is that sum whatever the correlation, so there the whole bias is the marginals').

A second table isolates the independence assumption itself from everything else (no
queueing, no estimator pool, no missing information): on ``--iso-tasks`` sampled tasks per
seed it takes every stage's isolated service (alone on an empty engine, ``task_lower_bound``
of the stage on its own) and compares the mean critical path of the tasks as sampled with the
mean critical path after shuffling each stage's isolated times across tasks (per stage name:
the same marginals, the within-task correlation removed).  Its relative difference is the
bias an estimator with exact marginals but independent stages would have at arrival.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import replace

import numpy as np

from topas.api import simulate
from topas.engine.bounds import task_lower_bound
from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.engine.snapshot import StageStatus
from topas.estimators import MonteCarloLP
from topas.estimators.residual import EmpiricalResidual
from topas.metrics.paired import t95
from topas.policies.topas.aging import spearman
from topas.workflow.model import Task
from topas.workloads import get_workload

PAIRS = [("mapreduce", "mapreduce-hard"), ("plan-execute", "plan-execute-hard")]
POINTS = ("arrival", "midway")


def ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95 % t-interval."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, math.nan
    t = t95(len(xs) - 1)
    return m, t * statistics.stdev(xs) / math.sqrt(len(xs))


def realised_stage_sum(ts, t: float) -> float:
    """Sum over unfinished stages of their realised remaining service from ``t``."""
    tot = 0.0
    for st in ts.stages.values():
        if st.done_s is not None and st.done_s <= t:
            continue
        started = st.started_s is not None and st.started_s <= t
        tot += st.done_s - t if started else st.done_s - st.started_s
    return tot


def realised_remaining(ts, t: float) -> float:
    """Longest remaining path from ``t`` over the task's realised stage services."""
    finish: dict[str, float] = {}
    for name in ts.order:
        st = ts.stages[name]
        if st.done_s is not None and st.done_s <= t:
            finish[name] = 0.0
            continue
        if st.started_s is not None and st.started_s <= t:
            finish[name] = st.done_s - t
            continue
        start = max((finish[d] for d in st.deps), default=0.0)
        finish[name] = start + (st.done_s - st.started_s)
    return max(finish.values())


def run(
    workload: str,
    seed: int,
    n_tasks: int,
    rate: float,
    warmup: int,
    residuals: tuple[str, ...] = ("independent",),
) -> dict:
    """One run of the ``topas`` policy (``size_gated`` reverted); every estimator in
    ``residuals`` (``independent``: TOPAS's; ``correlated``: the copula,
    topas.estimators.copula) watches the same run, so their figures are paired by task."""
    wl = get_workload(workload)
    tasks, factors = wl.sample_with_factors(n_tasks, rate, np.random.default_rng(seed))
    # TOPAS's configuration (64 rows, the policy's seed), independent or correlated
    mcs = {
        name: MonteCarloLP(
            EmpiricalResidual(), n_samples=64, seed=seed, correlated=name == "correlated"
        )
        for name in residuals
    }
    est: dict[str, dict[int, tuple]] = {p: {} for p in POINTS}
    states = {}

    def observe(snap, _dec) -> None:
        for tid, ts in snap.tasks.items():
            states[tid] = ts
            point = None
            if tid not in est["arrival"]:
                point = "arrival"
            elif (
                tid not in est["midway"]
                and 2 * ts.stages_done >= len(ts.stages)
                and any(s.status != StageStatus.DONE for s in ts.stages.values())
            ):
                point = "midway"
            vals = []
            for mc in mcs.values():
                # every estimator sees every task version (its online learning needs them)
                e = mc.entry(snap, ts)
                if point is not None:
                    # E[LP], and the sum of the stages' mean residuals (no max: marginals)
                    vals.append(
                        (e.expected_lp(snap.time_s), float(e._z_at(snap.time_s).mean(axis=0).sum()))
                    )
            if point is not None:
                est[point][tid] = (snap.time_s, vals)

    # the flagship with its size_gated departure reverted: the estimators are compared on
    # the schedule of the arrival rank (size_gated's gate is chosen from these figures)
    res = simulate(
        workload,
        "topas",
        rate=rate,
        n_tasks=n_tasks,
        seed=seed,
        tasks=tasks,
        on_decision=observe,
        policy_params={"off": "size_gated"},
    )
    assert len(res.tasks) == n_tasks
    out = {"factor": np.array(factors[warmup:])}
    for p in POINTS:
        ids = [i for i in range(warmup, n_tasks) if i in est[p]]
        r = np.array([realised_remaining(states[i], est[p][i][0]) for i in ids])
        rs = np.array([realised_stage_sum(states[i], est[p][i][0]) for i in ids])
        keep = r > 0
        for k, name in enumerate(residuals):
            e = np.array([est[p][i][1][k][0] for i in ids])
            es = np.array([est[p][i][1][k][1] for i in ids])
            out[(name, p)] = (np.array(ids)[keep], e[keep], r[keep])
            out[(name, p + "/sum")] = float((es - rs).sum() / rs.sum())
    return out


def isolated_shuffle_bias(workload: str, seed: int, n_tasks: int) -> float:
    """``mean LP(shuffled) / mean LP(as sampled) - 1`` over isolated stage services."""
    wl = get_workload(workload)
    tasks = wl.sample(n_tasks, wl.default_rate, np.random.default_rng(seed))
    prof = get_profile(DEFAULT_PROFILE)
    agents, cost = {a.name: a for a in wl.agents}, prof.cost_model()
    alone = [
        {
            s.name: task_lower_bound(
                Task(0, 0.0, (replace(s, deps=()),)), agents, cost, prof.prefill_chunk_tokens
            )
            for s in t.stages
        }
        for t in tasks
    ]
    by_name: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        for s in t.stages:
            by_name.setdefault(s.name, []).append(i)
    rng = np.random.default_rng([seed, 7])
    shuffled = [dict(a) for a in alone]
    for name, idx in by_name.items():
        perm = rng.permutation(len(idx))
        for k, i in enumerate(idx):
            shuffled[i][name] = alone[idx[perm[k]]][name]

    def lp(t: Task, z: dict[str, float]) -> float:
        f: dict[str, float] = {}
        for k in t.topological_order():
            s = t.stages[k]
            f[s.name] = max((f[d] for d in s.deps), default=0.0) + z[s.name]
        return max(f.values())

    true = [lp(t, z) for t, z in zip(tasks, alone)]
    shuf = [lp(t, z) for t, z in zip(tasks, shuffled)]
    return float(np.mean(shuf) / np.mean(true) - 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 11)))
    ap.add_argument("--tasks", type=int, default=120)
    ap.add_argument("--warmup", type=int, default=20, help="first tasks left out")
    ap.add_argument(
        "--iso-tasks",
        type=int,
        default=300,
        help="tasks per seed for the isolated-path shuffle table",
    )
    ap.add_argument(
        "--residual",
        choices=("independent", "correlated", "both"),
        default="independent",
        help="the estimator measured: TOPAS's independent "
        "residuals, the correlated ones (topas.estimators.copula), or both on "
        "the same runs with their paired difference",
    )
    ap.add_argument("--no-iso", action="store_true", help="skip the isolated-path table")
    args = ap.parse_args()
    residuals = ("independent", "correlated") if args.residual == "both" else (args.residual,)
    t0 = time.perf_counter()
    print(
        f"seeds {args.seeds}; {args.tasks} tasks per run, first {args.warmup} left out; "
        f"policy topas; mean over seeds +- 95 % t half-width"
    )
    print(
        "| workload | estimator | point | mean relative bias | bias of the mean | "
        "Spearman rho | easiest third: mean relative bias | hardest third: mean relative "
        "bias | marginals only: bias of summed stage means |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for base, hard in PAIRS:
        rate = get_workload(base).default_rate
        per: dict[str, list[dict]] = {}
        for name in (base, hard):
            per[name] = [run(name, s, args.tasks, rate, args.warmup, residuals) for s in args.seeds]
        for p, res_name in ((p, rn) for p in POINTS for rn in residuals):
            rel = {}
            for name in (base, hard):
                rows = {"rel": [], "mean": [], "rho": [], "low": [], "top": []}
                for o in per[name]:
                    ids, e, r = o[(res_name, p)]
                    rows["rel"].append(float(np.mean((e - r) / r)))
                    rows["mean"].append(float((e - r).sum() / r.sum()))
                    rows["rho"].append(spearman(e, r))
                    f = o["factor"][ids - args.warmup]
                    if name == hard:
                        low, top = f <= np.quantile(f, 1 / 3), f >= np.quantile(f, 2 / 3)
                        rows["low"].append(float(np.mean((e[low] - r[low]) / r[low])))
                        rows["top"].append(float(np.mean((e[top] - r[top]) / r[top])))
                rel[name] = rows["rel"]
                cells = [f"{m:+.3f} +- {h:.3f}" for m, h in (ci95(rows["rel"]), ci95(rows["mean"]))]
                cells.append("{:.3f} +- {:.3f}".format(*ci95(rows["rho"])))
                for k in ("low", "top"):
                    cells.append("{:+.3f} +- {:.3f}".format(*ci95(rows[k])) if rows[k] else "-")
                cells.append(
                    "{:+.3f} +- {:.3f}".format(
                        *ci95([o[(res_name, p + "/sum")] for o in per[name]])
                    )
                )
                print(f"| {name} | {res_name} | {p} | " + " | ".join(cells) + " |")
            d = [a - b for a, b in zip(rel[hard], rel[base])]
            print(
                f"| {hard} minus {base} (paired) | {res_name} | {p} | "
                "{:+.3f} +- {:.3f} | | | | | |".format(*ci95(d))
            )
        if len(residuals) == 2:
            # the same tasks, the same run: correlated minus independent, per seed
            for name in (base, hard):
                for p in POINTS:
                    cells = []
                    for stat in ("rel", "rho"):
                        d = []
                        for o in per[name]:
                            (_, e0, r), (_, e1, _) = o[(residuals[0], p)], o[(residuals[1], p)]
                            if stat == "rel":
                                d.append(
                                    float(np.mean(np.abs(e1 - r) / r) - np.mean(np.abs(e0 - r) / r))
                                )
                            else:
                                d.append(spearman(e1, r) - spearman(e0, r))
                        cells.append("{:+.3f} +- {:.3f}".format(*ci95(d)))
                    print(
                        f"| {name} | correlated minus independent (paired) | {p} | "
                        f"mean abs. relative error {cells[0]} | | Spearman {cells[1]} "
                        "| | | |"
                    )
    if args.no_iso:
        print(f"wall {time.perf_counter() - t0:.0f} s")
        return
    print()
    print(
        f"isolated stage services, {args.iso_tasks} tasks per seed, same seeds: "
        f"mean critical path with stage times shuffled across tasks vs as sampled"
    )
    print("| workload | relative bias of independent stages |")
    print("|---|---|")
    for pair in PAIRS:
        for name in pair:
            b = [isolated_shuffle_bias(name, s, args.iso_tasks) for s in args.seeds]
            print(f"| {name} | " + "{:+.4f} +- {:.4f}".format(*ci95(b)) + " |")
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
