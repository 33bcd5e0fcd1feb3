"""Property-based invariants of the simulator under every registered policy.

On random small workloads (random DAGs, ReAct rounds, tool delays, prefix sizes, KV budgets,
block sizes, preemption semantics, with or without a host tier), with the context cache on and
off: the KV budget is never exceeded and every used token is accounted for at every
decision; every request completes exactly once and every task completes; for every call the
prompt tokens it prefilled plus those it found cached equal its prompt, and the cached ones
are whole computed blocks of its stage's previous call (or of the conversation stage it
continues), at most all of them (a cached context may have given up its tail); every JCT is at least its lower
bound; no stage starts before its predecessors finish and no call before its tool returns;
the same seed gives identical results.

Examples are new on every run: the seed comes from ``TOPAS_HYPOTHESIS_SEED`` (tests/conftest.py
picks and prints one when it is unset).  ``TOPAS_HYPOTHESIS_EXAMPLES`` is the number of
examples per policy, split between context cache off and on (CI default 80: ~1,600 cases over
the 20 policies).  The long local run is

    TOPAS_HYPOTHESIS_EXAMPLES=5000 python -m pytest tests/test_invariants.py -q
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

from kv_checks import assert_kv_accounted
from topas.engine.bounds import context_credit
from topas.engine.cluster import Cluster
from topas.engine.cost import get_profile
from topas.engine.simulator import Simulator
from topas.engine.snapshot import Location
from topas.policies import list_policies, make_policy
from topas.routing import ROUTERS, make_router
from topas.workflow.model import Agent, Call, Stage, Task

PROFILE = get_profile("a100-80g/qwen2.5-32b")
POLICIES = [p.name for p in list_policies()]
SEED = int(os.environ.get("TOPAS_HYPOTHESIS_SEED", "0"))
#: examples per policy, half with the context cache off and half with it on
EXAMPLES = max(2, int(os.environ.get("TOPAS_HYPOTHESIS_EXAMPLES", "80")))
TOL = 1e-9  # relative: the clock sums iteration times in float64


@st.composite
def scenarios(draw):
    n_agents = draw(st.integers(1, 4))
    agents = [Agent(f"a{k}", draw(st.integers(0, 3000))) for k in range(n_agents)]
    tasks = []
    for tid in range(draw(st.integers(1, 5))):
        n_st = draw(st.integers(1, 4))
        stages = []
        for k in range(n_st):
            deps = (
                tuple(
                    sorted(draw(st.sets(st.sampled_from([f"s{j}" for j in range(k)]), max_size=2)))
                )
                if k
                else ()
            )
            calls = tuple(
                Call(
                    draw(st.integers(1, 800)),
                    draw(st.integers(1, 300)),
                    draw(st.sampled_from([0.0, 0.05, 0.5, 2.0])),
                )
                for _ in range(draw(st.integers(1, 3)))
            )
            agent = f"a{draw(st.integers(0, n_agents - 1))}"
            share: dict = {}
            if deps and draw(st.booleans()):
                # a conversation: the stage begins with a dependency's leading prompt tokens
                src = stages[int(draw(st.sampled_from(deps))[1:])]
                agent = src.agent
                limit = min(src.calls[0].prompt_tokens, calls[0].prompt_tokens)
                share = dict(shares_with=src.name, shared_tokens=draw(st.integers(1, limit)))
            stages.append(Stage(f"s{k}", agent, calls, deps, kind=f"k{k % 2}", **share))
        tasks.append(Task(tid, draw(st.floats(0, 20, allow_nan=False)), tuple(stages)))
    # the largest request fits (prompt + output in blocks of 16, one block of headroom)
    need = max(a.prefix_tokens for a in agents) + 1104 + 16
    budget = draw(st.integers(need, 3 * need + 4000))
    return dict(
        agents=agents,
        tasks=tasks,
        budget=budget,
        block=draw(st.sampled_from([1, 16])),
        preemption=draw(st.sampled_from(["sglang", "vllm"])),
        host=draw(st.booleans()),
        seed=draw(st.integers(0, 3)),
    )


def _run(policy: str, sc: dict, cache: bool):
    def check(snap, dec):
        assert_kv_accounted(snap)
        # cached contexts live in free memory only, behind a resident prefix
        assert sim.ctx_cache_tokens == sum(v[1] for v in sim.ctx_cache.values())
        assert sim.used_kv + sim.ctx_cache_tokens <= sc["budget"]
        assert all(snap.prefixes[v[0]].location == Location.DEVICE for v in sim.ctx_cache.values())

    sim = Simulator(
        sc["tasks"],
        {a.name: a for a in sc["agents"]},
        PROFILE,
        make_policy(policy, seed=sc["seed"]),
        seed=sc["seed"],
        on_decision=check,
        kv_budget_tokens=sc["budget"],
        block_size=sc["block"],
        preemption=sc["preemption"],
        host_tier=sc["host"],
        context_cache=cache,
    )
    return sim.run()


def check_result(res, tasks, block: int, cluster: bool = False) -> None:
    """The run-level invariants of ``res`` (a SimResult of ``tasks``).  In a ``cluster``
    a call may find an older round's context on a replica its stage came back to: it is
    credited whole blocks, never more than the previous round's context would give."""
    c = res.counters
    assert len(res.tasks) == len(tasks)
    ids = [r.request_id for r in res.requests]
    assert len(ids) == len(set(ids)) == sum(t.n_calls for t in tasks)
    calls = {(r.task_id, r.stage, r.round_index): r for r in res.requests}
    assert len(calls) == len(ids)  # each (task, stage, round) completes exactly once
    for t in res.tasks:
        assert t.jct_s >= t.lower_bound_s * (1 - TOL), (t, t.jct_s)
    # the counter also counts hits of admissions that were preempted later
    hits = sum(r.cached_tokens for r in res.requests)
    assert c.context_hit_tokens == hits if c.preemptions == 0 else c.context_hit_tokens >= hits
    finished = {t.task_id: t.finished_s for t in res.tasks}
    for task in tasks:
        stages = {s.name: s for s in task.stages}
        for s in task.stages:
            # a stage starts once every predecessor's last call has finished (or at arrival)
            deps_done = max(
                (calls[(task.task_id, d, len(stages[d].calls) - 1)].finished_s for d in s.deps),
                default=task.arrival_s,
            )
            prev = None
            for j, call in enumerate(s.calls):
                r = calls[(task.task_id, s.name, j)]
                assert r.prompt_tokens == call.prompt_tokens
                assert r.cached_tokens + r.computed_tokens == r.prompt_tokens, r
                assert r.ready_s <= r.admitted_s <= r.first_token_s <= r.finished_s, r
                assert r.finished_s <= finished[task.task_id]
                # (events are seen at iteration boundaries, so readiness may come a bit later)
                if prev is None:
                    assert r.ready_s >= deps_done, (r, deps_done)
                    full = 0
                    if s.shares_with:
                        # only whole blocks of the shared tokens the earlier stage's last
                        # call computed (in a cluster: any of its calls, whose context a
                        # replica the stage moved away from may still cache)
                        src = stages[s.shares_with]
                        rounds = range(len(src.calls)) if cluster else [len(src.calls) - 1]
                        computed = max(
                            calls[(task.task_id, src.name, j)].prompt_tokens
                            + calls[(task.task_id, src.name, j)].output_tokens
                            - 1
                            for j in rounds
                        )
                        full = context_credit(
                            min(computed, s.shared_tokens), r.prompt_tokens, block
                        )
                    assert 0 <= r.cached_tokens <= full, (r, full)
                else:
                    # ready when its tool returns, never before
                    tool_back = prev.finished_s + s.calls[j - 1].tool_delay_s
                    assert r.ready_s >= tool_back, r
                    # only whole blocks of what the previous call computed (a leading part, or none,
                    # when the cached context had to give up room)
                    full = context_credit(
                        prev.prompt_tokens + prev.output_tokens - 1, r.prompt_tokens, block
                    )
                    assert 0 <= r.cached_tokens <= full, (r, full)
                assert r.cached_tokens % block == 0, r
                prev = r


@pytest.mark.parametrize("cache", [False, True], ids=["cache-off", "cache-on"])
@pytest.mark.parametrize("policy", POLICIES)
@seed(SEED)
@settings(
    max_examples=max(1, EXAMPLES // 2),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(sc=scenarios())
def test_invariants(policy, cache, sc):
    note(f"TOPAS_HYPOTHESIS_SEED={SEED}")
    res = _run(policy, sc, cache)
    assert res.counters.peak_kv_tokens <= sc["budget"]
    check_result(res, sc["tasks"], sc["block"])
    again = _run(policy, sc, cache)
    assert [(t.task_id, t.finished_s) for t in again.tasks] == [
        (t.task_id, t.finished_s) for t in res.tasks
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_block_padding_is_never_credited_as_cached_prompt(policy):
    """Regression (issue 13): a finished call offered its context as its block-rounded KV and
    reuse credited min(held, prompt - 1), so up to block - 1 never-computed tokens were
    skipped: (1,1), (117,1), (1,1) with blocks of 16 finished in 0.131546 s, under its lower
    bound of 0.131675 s.  The first call computed 1 token (its output was never fed back),
    which fills no block: nothing is credited."""
    task = Task(0, 0.0, (Stage("s0", "a0", (Call(1, 1), Call(117, 1), Call(1, 1))),))
    res = Simulator(
        [task],
        {"a0": Agent("a0", 0)},
        PROFILE,
        make_policy(policy),
        kv_budget_tokens=1120,
        block_size=16,
        context_cache=True,
    ).run()
    check_result(res, [task], 16)
    assert [r.cached_tokens for r in res.requests] == [0, 0, 0]
    t = res.tasks[0]
    assert t.jct_s >= t.lower_bound_s * (1 - TOL)
    assert t.lower_bound_s == pytest.approx(0.132369, abs=1e-6)


# ---------------------------------------------------------------- clusters (issue 16)
ROUTER_NAMES = list(ROUTERS)


def _run_cluster(policy: str, router: str, replicas: int, sc: dict, cache: bool):
    def check(snap, dec):
        assert_kv_accounted(snap)  # each replica's own budget and accounting

    return Cluster(
        sc["tasks"],
        {a.name: a for a in sc["agents"]},
        PROFILE,
        lambda: make_policy(policy, seed=sc["seed"]),
        make_router(router),
        replicas=replicas,
        seed=sc["seed"],
        on_decision=check,
        kv_budget_tokens=sc["budget"],
        block_size=sc["block"],
        preemption=sc["preemption"],
        host_tier=sc["host"],
        context_cache=cache,
    ).run()


@pytest.mark.parametrize("router", ROUTER_NAMES)
@seed(SEED)
@settings(
    max_examples=max(1, EXAMPLES // 2),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    sc=scenarios(),
    policy=st.sampled_from(POLICIES),
    replicas=st.integers(2, 4),
    cache=st.booleans(),
)
def test_cluster_invariants(router, sc, policy, replicas, cache):
    """Every request of the cluster runs exactly once, on one replica, within that
    replica's KV budget, and all the single-engine run invariants hold for the cluster."""
    note(f"TOPAS_HYPOTHESIS_SEED={SEED}")
    cres = _run_cluster(policy, router, replicas, sc, cache)
    assert len(cres.replicas) == replicas
    for r in cres.replicas:
        assert r.counters.peak_kv_tokens <= sc["budget"]
    assert sum(cres.routed) == sum(t.n_calls for t in sc["tasks"])
    assert sum(len(r.requests) for r in cres.replicas) == sum(cres.routed)
    check_result(cres.as_sim_result(), sc["tasks"], sc["block"], cluster=True)
    again = _run_cluster(policy, router, replicas, sc, cache)
    assert [(t.task_id, t.finished_s) for t in again.as_sim_result().tasks] == [
        (t.task_id, t.finished_s) for t in cres.as_sim_result().tasks
    ]


@seed(SEED)
@settings(
    max_examples=max(1, EXAMPLES // 2),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    sc=scenarios(),
    policy=st.sampled_from(POLICIES),
    router=st.sampled_from(ROUTER_NAMES),
    cache=st.booleans(),
)
def test_one_replica_cluster_is_the_single_engine(sc, policy, router, cache):
    note(f"TOPAS_HYPOTHESIS_SEED={SEED}")
    single = _run(policy, sc, cache)
    cl = _run_cluster(policy, router, 1, sc, cache).as_sim_result()
    assert [(t.task_id, t.finished_s) for t in cl.tasks] == sorted(
        (t.task_id, t.finished_s) for t in single.tasks
    )
    assert [
        (r.task_id, r.stage, r.round_index, r.admitted_s, r.cached_tokens) for r in cl.requests
    ] == [
        (r.task_id, r.stage, r.round_index, r.admitted_s, r.cached_tokens)
        for r in sorted(single.requests, key=lambda r: r.request_id)
    ]
