"""The prefix-set search against brute force on many small random states (hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_topas_fixtures import make_prefix, make_request, make_snapshot, make_task
from topas.engine.snapshot import StageStatus as S
from topas.policies.topas import Context, Topas

AGENTS = "ABCD"


@st.composite
def states(draw):
    n_agents = draw(st.integers(1, 4))
    agents = AGENTS[:n_agents]
    pref = {a: draw(st.integers(0, 3000)) for a in agents}
    resident = {a: draw(st.booleans()) for a in agents}
    on_host = {a: draw(st.booleans()) for a in agents}
    tasks, running, waiting = [], [], []
    rid = 0
    users = {a: 0 for a in agents}
    for _ in range(draw(st.integers(0, 2))):
        a = draw(st.sampled_from([x for x in agents if resident[x]] or ["-"]))
        if a == "-":
            break
        rid += 1
        t = make_task(
            rid,
            {"s": (a, (), S.READY), "n": (draw(st.sampled_from(agents)), ("s",), S.PENDING)},
            arrival_s=0.0,
        )
        running.append(
            make_request(
                rid,
                t,
                "s",
                draw(st.integers(100, 2000)),
                pref[a],
                running=True,
                generated=draw(st.integers(0, 300)),
                credit=draw(st.floats(0, 20)),
            )
        )
        users[a] += 1
        tasks.append(t)
    for _ in range(draw(st.integers(1, 4))):
        a = draw(st.sampled_from(agents))
        rid += 1
        if draw(st.booleans()):
            t = make_task(rid, {"s": (a, (), S.READY)}, arrival_s=draw(st.floats(0, 90)))
        else:
            t = make_task(
                rid,
                {"s": (a, (), S.READY), "t": (a, (), S.READY), "u": (a, ("s", "t"), S.PENDING)},
                arrival_s=draw(st.floats(0, 90)),
            )
            rid += 1
            waiting.append(
                make_request(
                    rid, t, "t", draw(st.integers(100, 3000)), pref[a], ready_s=t.arrival_s
                )
            )
        waiting.append(
            make_request(
                rid if len(t.stages) == 1 else rid - 1,
                t,
                "s",
                draw(st.integers(100, 3000)),
                pref[a],
                ready_s=t.arrival_s,
            )
        )
        tasks.append(t)
    prefixes = [
        make_prefix(a, pref[a], resident[a] or users[a] > 0, on_host=on_host[a], users=users[a])
        for a in agents
    ]
    used = sum(pref[a] for a in agents if resident[a] or users[a] > 0)
    used += sum(r.kv_tokens for r in running)
    budget = used + draw(st.integers(0, 8000))
    return make_snapshot(
        time_s=100.0,
        budget=budget,
        prefixes=prefixes,
        running=running,
        waiting=waiting,
        tasks=tasks,
    )


def footprint(snap, ctx, choice) -> int:
    used = snap.used_kv_tokens
    by_id = {r.request_id: r for r in (*snap.running, *snap.waiting)}
    used -= sum(by_id[r].kv_tokens for r in choice.preempt)
    used -= sum(snap.prefixes[a].tokens for a in choice.evict)
    used += sum(snap.prefixes[a].tokens for a in choice.resident - ctx.resident0)
    used += sum(by_id[r].prompt_tokens for r in choice.admit)
    return used


def brute_force(ctx: Context) -> float:
    """Best Score over every prefix subset and every feasible admission set in it."""
    snap, pol = ctx.snap, ctx.pol
    agents = sorted(ctx.active)
    best = float("-inf")
    for n in range(len(agents) + 1):
        for sub in itertools.combinations(agents, n):
            allowed = frozenset(sub)
            base = ctx.greedypack(allowed)  # preemptions/evictions are fixed by R
            if base is None:
                continue
            cands = [c for c in ctx.cands if c.agent in allowed]
            for m in range(min(len(cands), pol.K) + 1):
                for adm in itertools.combinations(cands, m):
                    free = ctx.free0 + sum(ctx.release[r] for r in base.preempt)
                    free += sum(snap.prefixes[a].tokens for a in base.evict)
                    res = set(ctx.resident0 & allowed)
                    for c in adm:
                        free -= c.tokens + (0 if c.agent in res else snap.prefixes[c.agent].tokens)
                        res.add(c.agent)
                    # keeping the running requests is always allowed, even when their
                    # reservations over-commit the budget; admissions must fit
                    if (m and free < 0) or len(snap.running) - len(
                        base.preempt
                    ) + m > ctx.max_batch:
                        continue
                    # conditional gains in admission order, as GREEDYPACK credits them
                    j_admit = 0.0
                    by_task = {}
                    for c in adm:
                        by_task.setdefault(c.task_id, []).append(c)
                    for cs in by_task.values():
                        hs: list[str] = []
                        for c in cs:
                            j_admit += ctx.cond_gain(c, tuple(hs))
                            hs.append(c.stage)
                    r_in = res - ctx.resident0
                    t_in = {c.task_id for c in adm if c.agent in r_in}
                    moved = sum(ctx.c_in[a] for a in r_in) + sum(ctx.c_out[a] for a in base.evict)
                    score = (
                        j_admit
                        - (moved * len(t_in) if r_in else 0.0)
                        - base.terms[2]
                        - base.terms[3]
                        + sum(ctx.reuse.get(a, 0.0) for a in res)
                    )
                    best = max(best, score)
    return best


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(states())
def test_enumeration_is_the_best_greedypack_and_never_beats_brute_force(snap):
    pol = Topas(M=8, K=4)
    ctx = Context(pol, snap)
    best = pol.search(ctx)
    assert best is not None
    per_set = [
        ctx.greedypack(frozenset(s))
        for n in range(len(ctx.active) + 1)
        for s in itertools.combinations(sorted(ctx.active), n)
    ]
    # equal up to summation order of the same terms
    assert best.score == pytest.approx(max(c.score for c in per_set if c is not None), rel=1e-12)
    assert footprint(snap, ctx, best) <= snap.kv_budget_tokens
    bf = brute_force(ctx)
    assert best.score <= bf + 1e-9


@SETTINGS
@given(states())
def test_search_equals_brute_force_when_the_budget_is_not_binding(snap):
    # with room for every request, greedy packing is optimal: scores must match exactly
    big = make_snapshot(
        time_s=snap.time_s,
        budget=snap.kv_budget_tokens + 10**6,
        prefixes=list(snap.prefixes.values()),
        running=list(snap.running),
        waiting=list(snap.waiting),
        tasks=list(snap.tasks.values()),
    )
    pol = Topas(M=8, K=8)
    ctx = Context(pol, big)
    assert abs(pol.search(ctx).score - brute_force(ctx)) < 1e-9


@SETTINGS
@given(states())
def test_hierarchical_search_is_feasible_and_between_r_t_and_brute_force(snap):
    pol = Topas(M=0, K=4)
    ctx = Context(pol, snap)
    h = pol.search(ctx)
    start = ctx.greedypack(frozenset(ctx.resident0))
    assert h is not None and footprint(snap, ctx, h) <= snap.kv_budget_tokens
    if start is not None:
        assert h.score >= start.score - 1e-9 or not ctx._busy(start) or ctx._busy(h)
    assert h.score <= brute_force(ctx) + 1e-9
    # on at most two active agents the local search visits every prefix subset
    if len(ctx.active) <= 2:
        full = Topas(M=8, K=4)
        assert abs(h.score - full.search(Context(full, snap)).score) < 1e-9 or ctx._busy(
            h
        ) != ctx._busy(full.search(Context(full, snap)))
