"""Probes of the engine's context cache and admission timing, paired by seed (tuning seeds).

    PYTHONPATH=src python benchmarks/cache_probes.py [--workload groupchat] [--rate 0.0625]
        [--tasks 80] [--seeds 1,2] [--policies spf,topas] [--probe PROBE ...]
        [--param K=V ...]

Each probe changes one thing for the length of a run, by patching the simulator or the
flagship's search from outside (``src`` is unchanged; nothing here is a shipped option):

* ``none`` -- the engine as shipped;
* ``trim-oldest`` -- the context cache, when free memory runs short, trims the contexts of the
  youngest tasks first instead of the least recently finished (LRU, what vLLM and SGLang
  do): the most a cache-priority hint from the policy could give, since the oldest tasks'
  calls run first under every task-ordered policy;
* ``evict-penalty=W`` -- the flagship's Score charges an eviction ``W`` times the prefill
  time of the cached contexts the evicted prefix takes with it (those contexts become
  unreachable), so it evicts less;
* ``step-admission=B`` -- per-step admission, as vLLM's scheduler admits: a decision's
  admissions are taken in order only while the running requests' unprefilled tokens are below
  ``B`` (the step's token budget; the rest stay waiting), and the engine decides again when a
  prefill completes after such a cut.

``--param`` sets parameters of the flagship ``topas`` (e.g. ``off=cache_priority``, the
flagship before it ranked its cache); other policies run with their defaults.

Per run it prints mean and p99 JCT (s), context-cache hit tokens, the context tokens the cache
held for each request when it first appeared in a snapshot (summed: what admitting every
request at once would have found), policy evictions and the cached-context tokens those
evictions made unreachable; then the probe's paired change of
mean JCT against ``none`` per policy (mean over seeds).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import numpy as np

from topas.api import sample_tasks
from topas.engine.bounds import context_credit
from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.engine.decision import Decision
from topas.engine.simulator import Simulator
from topas.engine.snapshot import Phase
from topas.policies import build_policy, check_params
from topas.policies.params import key_value_pairs
from topas.policies.topas import search


def _trim_oldest(sim: Simulator) -> None:
    """Reorder the cache youngest task first before the simulator's own trim, which evicts
    from the front of the cache (in whole blocks, from each context's tail)."""
    trim0 = sim._trim_ctx_cache

    def young_first(key: tuple[int, str]) -> float:
        ts = sim.tasks.get(key[0])
        return -ts.arrival_s if ts is not None else -float("inf")

    def trim() -> None:
        cache = sim.ctx_cache
        if sim.ctx_cache_tokens > sim.config.kv_budget_tokens - sim.used_kv:
            items = [(k, cache[k]) for k in sorted(cache, key=young_first)]
            cache.clear()
            cache.update(items)
            trim0()

    sim._trim_ctx_cache = trim  # type: ignore[method-assign]


def _cached_tokens(sim: Simulator, agent: str) -> int:
    return sum(v[1] for v in sim.ctx_cache.values() if v[0] == agent)


def _offered_tokens(sim: Simulator, r) -> int:
    """Context tokens the cache holds for waiting request ``r`` now: what admitting it now
    would be credited (:func:`~topas.engine.bounds.context_credit`), found as the simulator's
    admission finds it -- its stage's own context, or for a stage's first call the context of
    the conversation it continues."""
    key = (r.task_id, r.stage)
    if key in sim.ctx_cache:
        got = sim.ctx_cache[key][2]
    else:
        spec = sim._stage_spec.get(key)
        if r.round_index != 0 or spec is None or not spec.shares_with:
            return 0
        src = sim.ctx_cache.get((r.task_id, spec.shares_with))
        if src is None:
            return 0
        got = min(src[2], spec.shared_tokens)
    return context_credit(got, r.prompt_tokens, sim.config.block_size)


def _evict_penalty(sim: Simulator, weight: float):
    """Patch GreedyPack._score for this run; returns the function that undoes it."""
    orig = search.GreedyPack._score

    def _score(self, admitted, preempt, evict, resident, j_admit, credit, done):
        c = orig(self, admitted, preempt, evict, resident, j_admit, credit, done)
        if not evict:
            return c
        lost = 0.0
        for a in evict:
            tok = _cached_tokens(sim, a)
            if tok:
                lost += self.snap.cost.prefill_time(tok, self.snap.prefixes[a].tokens)
        return dataclasses.replace(c, score=c.score - weight * lost) if lost else c

    search.GreedyPack._score = _score  # type: ignore[method-assign]
    return lambda: setattr(search.GreedyPack, "_score", orig)


def _step_admission(sim: Simulator, budget: int) -> None:
    apply0, step0 = sim._apply, sim._step_prefill
    state = {"cut": False}

    def backlog() -> int:
        return sum(
            j.prefill_left
            for j in sim.running.values()
            if j.req.phase in (Phase.PREFILL, Phase.LOADING)
        )

    def apply(d: Decision) -> None:
        if d.admit:
            left, keep = backlog(), []
            for rid in d.admit:
                if left >= budget:
                    state["cut"] = True
                    break
                keep.append(rid)
                r = sim._wreq[rid]
                left += r.prompt_tokens + r.generated_tokens
            if len(keep) < len(d.admit):
                d = dataclasses.replace(d, admit=tuple(keep))
        apply0(d)

    def step_prefill(decoders, prefillers):
        before = {id(j) for j in prefillers if getattr(j, "prefill_left", 0) > 0}
        dt = step0(decoders, prefillers)
        done = any(id(j) in before and j.prefill_left <= 0 for j in prefillers)
        if done and state["cut"] and sim.waiting:
            state["cut"] = False
            sim._note("prefill-done")
        return dt

    sim._apply = apply  # type: ignore[method-assign]
    sim._step_prefill = step_prefill  # type: ignore[method-assign]


def run(
    workload: str,
    policy: str,
    rate: float,
    n: int,
    seed: int,
    probe: str,
    params: dict[str, object] | None = None,
) -> dict:
    wl, tasks = sample_tasks(workload, n, rate, seed)
    pol = build_policy(policy, seed, params if policy == "topas" else None)
    stats = {"evictions": 0, "lost_tokens": 0}
    first_seen: dict[int, int] = {}
    sim: Simulator | None = None
    decide0 = pol.decide

    def decide(snap):
        for r in snap.waiting:
            if r.request_id not in first_seen:
                first_seen[r.request_id] = _offered_tokens(sim, r)
        d = decide0(snap)
        if d.evict:
            stats["evictions"] += len(d.evict)
            stats["lost_tokens"] += sum(_cached_tokens(sim, a) for a in d.evict)
        return d

    pol.decide = decide  # type: ignore[method-assign]
    sim = Simulator(
        tasks, {a.name: a for a in wl.agents}, get_profile(DEFAULT_PROFILE), pol, seed=seed
    )
    undo = None
    name, _, arg = probe.partition("=")
    if name == "trim-oldest":
        _trim_oldest(sim)
    elif name == "evict-penalty":
        undo = _evict_penalty(sim, float(arg))
    elif name == "step-admission":
        _step_admission(sim, int(arg))
    try:
        res = sim.run()
    finally:
        if undo is not None:
            undo()
    jct = [t.jct_s for t in res.tasks]
    return {
        "mean": float(np.mean(jct)),
        "p99": float(np.percentile(jct, 99)),
        "hits": sim.counters.context_hit_tokens,
        "offered": sum(first_seen.values()),
        **stats,
    }


PROBES = ("none", "trim-oldest", "evict-penalty", "step-admission")


def _check_probe(probe: str) -> str | None:
    """The problem with ``probe``, or None."""
    name, eq, arg = probe.partition("=")
    if name not in PROBES:
        return f"--probe {probe!r}: unknown; choose none, trim-oldest, evict-penalty=W, step-admission=B"
    if name in ("evict-penalty", "step-admission"):
        try:
            v = float(arg) if name == "evict-penalty" else int(arg)
        except ValueError:
            return f"--probe {probe!r}: needs {name}={'W (a number)' if name == 'evict-penalty' else 'B (tokens)'}"
        if not (v >= 0 if name == "evict-penalty" else v >= 1):
            lo = 0 if name == "evict-penalty" else 1
            return f"--probe {probe!r}: the value must be >= {lo}"
    elif eq:
        return f"--probe {probe!r}: takes no value"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="groupchat")
    ap.add_argument("--rate", type=float, default=0.0625)
    ap.add_argument("--tasks", type=int, default=80)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--policies", default="spf,topas")
    ap.add_argument("--probe", action="append", default=None)
    ap.add_argument("--param", action="append", default=[], help="K=V for the flagship topas")
    a = ap.parse_args(argv)
    try:
        params = check_params("topas", dict(key_value_pairs(a.param, "--param")))
    except ValueError as e:
        ap.error(f"--param: {e}")
    probes = ["none"] + [p for p in (a.probe or ["trim-oldest"]) if p != "none"]
    for p in probes:
        if (msg := _check_probe(p)) is not None:
            ap.error(msg)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds {a.seeds!r}: must be integers separated by commas")
    if a.tasks < 1 or not a.rate > 0:
        ap.error(f"--tasks {a.tasks} / --rate {a.rate}: must be >= 1 and > 0")
    base: dict[tuple[str, int], float] = {}
    print(f"{a.workload} rate {a.rate} tasks {a.tasks} seeds {a.seeds}")
    print(
        f"{'probe':22s} {'policy':8s} seed {'mean':>8s} {'p99':>8s} {'hits':>9s} {'offered':>9s} evict lost_tok"
    )
    for probe in probes:
        for pol in a.policies.split(","):
            diffs = []
            for s in seeds:
                r = run(a.workload, pol, a.rate, a.tasks, s, probe, params)
                if probe == "none":
                    base[(pol, s)] = r["mean"]
                else:
                    diffs.append(100 * (r["mean"] / base[(pol, s)] - 1))
                print(
                    f"{probe:22s} {pol:8s} {s:4d} {r['mean']:8.1f} {r['p99']:8.1f} "
                    f"{r['hits']:9d} {r['offered']:9d} {r['evictions']:5d} {r['lost_tokens']:8d}",
                    flush=True,
                )
            if diffs:
                print(f"{'':22s} {pol:8s} mean JCT vs none: {statistics.mean(diffs):+.1f} %")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
