"""Where the KV memory goes: resident prefixes, running requests, held contexts and free room,
per policy, and how mean JCT moves with the KV budget.

    PYTHONPATH=src python benchmarks/memory_split.py [--workload metagpt-sop] [--mult 1.25]
        [--tasks 120] [--seeds 1,2] [--policies continuum,spf,topas]
        [--kv-budget 32768,40000] [--no-context-cache] [--param k=v ...]

For every KV budget (tokens; default: the profile's) and policy it runs the workload at
``mult`` x its default rate on each seed (same trajectories for every policy) and prints the
mean over seeds of: mean JCT and request queueing (s), and time-weighted means over the
intervals between scheduling decisions of the tokens in resident agent prefixes, in running
requests (prompt and generated tokens), in held contexts, and free (free includes the
engine's evictable context cache), all as they stand once the decision that opens the
interval is applied (its preemptions, evictions, loads, holds and admissions, computed by the
engine's own decision check, :func:`topas.engine.state.check_snapshot`; decode growth within
the interval is not counted); the batch size; the number of requests each decision left
waiting and the share of time with one left waiting.  ``--param`` sets parameters of the
TOPAS policies only.  A workload whose JCT falls steeply with the budget while every policy
stays within a few percent of the others at each budget is bound by memory, not by order.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from topas.api import sample_tasks
from topas.engine.cost import get_profile
from topas.engine.decision import Decision
from topas.engine.simulator import Simulator
from topas.engine.snapshot import Location, Snapshot
from topas.engine.state import check_snapshot
from topas.policies import check_params, make_policy, policy_info
from topas.policies.params import key_value_pairs
from topas.reproduce import rate_of
from topas.workloads import list_workloads

PROFILE = "a100-80g/qwen2.5-32b"
#: the time-weighted quantities, in print order
FIELDS = ("prefix", "running", "held", "free", "batch", "waiting", "any_waiting")


class _Sampled:
    """Wraps a policy and integrates the engine state over time: each interval between two
    decisions counts the memory and batch as the earlier decision left them (the state the
    interval began in, once that decision is applied) and the requests it left waiting."""

    def __init__(self, pol) -> None:
        self.pol, self.name = pol, pol.name
        if hasattr(pol, "bind_oracle"):
            self.bind_oracle = pol.bind_oracle
        self.sums = dict.fromkeys(FIELDS, 0.0)
        self.total_s = 0.0
        self._last: tuple[float, dict[str, float]] | None = None  #: (time, state after it)

    def decide(self, snap: Snapshot):
        now = snap.time_s
        if self._last is not None:
            t0, vals = self._last
            dt = now - t0
            for k, v in vals.items():
                self.sums[k] += v * dt
            self.total_s += dt
        d = self.pol.decide(snap)
        self._last = (now, after_decision(snap, d))
        return d

    def means(self) -> dict[str, float]:
        t = self.total_s if self.total_s > 0 else 1.0
        return {k: v / t for k, v in self.sums.items()}


def after_decision(snap: Snapshot, d: Decision) -> dict[str, float]:
    """The memory split and batch once ``d`` is applied to the state ``snap`` shows."""
    eff = check_snapshot(d, snap)
    now = snap.time_s
    gone = set(eff.drop) | set(eff.evict)
    waiting = {r.request_id: r for r in snap.waiting}
    admitted = [waiting[rid] for rid in eff.admit]
    resident = {
        a for a, p in snap.prefixes.items() if p.location == Location.DEVICE and a not in gone
    }
    resident |= set(eff.load) | {r.agent for r in admitted}
    preempted = set(eff.preempt)
    running = [r for r in snap.running if r.request_id not in preempted] + admitted
    taken = {(r.task_id, r.stage) for r in admitted}  # an admitted call takes over its hold
    released = set(eff.release)
    held = sum(
        h.tokens
        for k, h in snap.held.items()
        if k not in released and k not in taken and eff.hold.get(k, h.expires_s) > now
    )
    left = len(snap.waiting) - len(admitted) + len(preempted)
    return {
        "prefix": sum(snap.prefixes[a].tokens for a in resident),
        "running": sum(r.prompt_tokens + r.generated_tokens for r in running),
        "held": held,
        "free": snap.kv_budget_tokens - eff.used_after_tokens,
        "batch": len(running),
        "waiting": left,
        "any_waiting": 1 if left > 0 else 0,
    }


def run_one(
    workload: str,
    policy: str,
    rate: float,
    tasks_n: int,
    seed: int,
    kv_budget: int | None,
    context_cache: bool,
    params: dict[str, object],
) -> dict[str, float]:
    """One run: mean JCT and queueing (s) and the time-weighted memory split."""
    w, tasks = sample_tasks(workload, tasks_n, rate, seed)
    pol = _Sampled(make_policy(policy, seed=seed, **params))
    res = Simulator(
        tasks,
        {a.name: a for a in w.agents},
        get_profile(PROFILE),
        pol,
        seed=seed,
        kv_budget_tokens=kv_budget,
        context_cache=context_cache,
    ).run()
    out = pol.means()
    out["jct"] = float(np.mean([t.jct_s for t in res.tasks]))
    waits = [r.admitted_s - r.ready_s for r in res.requests]
    out["queue"] = float(np.mean(waits)) if waits else 0.0
    return out


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise ValueError(f"{what} {text!r}: expected comma-separated integers") from None
    if not vals:
        raise ValueError(f"{what} {text!r}: expected at least one integer")
    return vals


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="metagpt-sop")
    ap.add_argument("--mult", type=float, default=1.25, help="x the workload's default rate")
    ap.add_argument("--tasks", type=int, default=120)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--policies", default="continuum,spf,topas")
    ap.add_argument(
        "--kv-budget", default="", help="comma-separated KV budgets (tokens); default: profile"
    )
    ap.add_argument("--no-context-cache", action="store_true")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    try:
        if args.workload not in list_workloads():
            raise ValueError(f"--workload {args.workload!r}: not a registered workload")
        if not args.mult > 0:
            raise ValueError(f"--mult {args.mult}: must be > 0")
        if args.tasks < 1:
            raise ValueError(f"--tasks {args.tasks}: must be at least 1")
        seeds = _ints(args.seeds, "--seeds")
        budgets: list[int | None] = (
            list(_ints(args.kv_budget, "--kv-budget")) if args.kv_budget else [None]
        )
        if any(b is not None and b < 1 for b in budgets):
            raise ValueError(f"--kv-budget {args.kv_budget!r}: budgets must be positive")
        policies = [p for p in args.policies.split(",") if p]
        if not policies:
            raise ValueError("--policies '': expected at least one policy")
        for p in policies:
            policy_info(p)  # ValueError naming an unknown policy
        given = dict(key_value_pairs(args.param, "--param"))
        # --param applies to the TOPAS policies only, converted by their declarations
        own = {p: check_params(p, given) if p.startswith("topas") else {} for p in policies}
    except ValueError as e:  # ParamError is a ValueError
        ap.error(str(e))
    rate = rate_of(args.workload, args.mult)
    cache = not args.no_context_cache
    print(
        f"{args.workload} at {rate:g} task/s ({args.mult:g} x default), {args.tasks} tasks, "
        f"seeds {','.join(map(str, seeds))}, context cache {'on' if cache else 'off'}; "
        "memory columns: time-weighted mean tokens"
    )
    head = "budget   policy          mean JCT  queue/req  prefixes  running   held     free"
    print(head + "  batch  waiting  time waiting")
    for b in budgets:
        for p in policies:
            try:
                runs = [
                    run_one(args.workload, p, rate, args.tasks, s, b, cache, own[p]) for s in seeds
                ]
            except ValueError as e:  # e.g. WorkflowError: a call larger than the budget
                ap.error(f"--kv-budget {b}: {e}" if b is not None else str(e))
            m = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
            label = str(b) if b is not None else "profile"
            print(
                f"{label:8s} {p:14s} {m['jct']:9.1f} {m['queue']:10.2f} {m['prefix']:9.0f} "
                f"{m['running']:8.0f} {m['held']:6.0f} {m['free']:8.0f} {m['batch']:6.2f} "
                f"{m['waiting']:8.2f} {100 * m['any_waiting']:12.0f}%"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
