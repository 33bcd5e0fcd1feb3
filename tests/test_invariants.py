"""Property-based invariants of the simulator under every registered policy.

On random small workloads (random DAGs, ReAct rounds, tool delays, prefix sizes, KV budgets,
block sizes, preemption semantics, with or without a host tier): the KV budget is never
exceeded and every used token is accounted for at every decision, every request completes
exactly once, every task completes, every JCT is at least
its lower bound, and the same seed gives identical results.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kv_checks import assert_kv_accounted
from topas.engine.cost import get_profile
from topas.engine.simulator import Simulator
from topas.engine.snapshot import Location
from topas.policies import list_policies, make_policy
from topas.workflow.model import Agent, Call, Stage, Task

PROFILE = get_profile("a100-80g/qwen2.5-32b")
POLICIES = [p.name for p in list_policies()]
# >= 1,000 generated cases across the policies in CI; override with TOPAS_HYPOTHESIS_EXAMPLES
EXAMPLES = int(os.environ.get("TOPAS_HYPOTHESIS_EXAMPLES",
                              str(max(60, -(-1000 // max(1, len(POLICIES)))))))


@st.composite
def scenarios(draw):
    n_agents = draw(st.integers(1, 4))
    agents = [Agent(f"a{k}", draw(st.integers(0, 3000))) for k in range(n_agents)]
    tasks = []
    for tid in range(draw(st.integers(1, 5))):
        n_st = draw(st.integers(1, 4))
        stages = []
        for k in range(n_st):
            deps = tuple(sorted(draw(st.sets(st.sampled_from([f"s{j}" for j in range(k)]),
                                             max_size=2)))) if k else ()
            calls = tuple(
                Call(draw(st.integers(1, 800)), draw(st.integers(1, 300)),
                     draw(st.sampled_from([0.0, 0.05, 0.5, 2.0])))
                for _ in range(draw(st.integers(1, 3))))
            stages.append(Stage(f"s{k}", f"a{draw(st.integers(0, n_agents - 1))}", calls, deps,
                                kind=f"k{k % 2}"))
        tasks.append(Task(tid, draw(st.floats(0, 20, allow_nan=False)), tuple(stages)))
    # the largest request fits (prompt + output in blocks of 16, one block of headroom)
    need = max(a.prefix_tokens for a in agents) + 1104 + 16
    budget = draw(st.integers(need, 3 * need + 4000))
    return dict(agents=agents, tasks=tasks, budget=budget,
                block=draw(st.sampled_from([1, 16])),
                preemption=draw(st.sampled_from(["sglang", "vllm"])),
                host=draw(st.booleans()), cache=draw(st.booleans()),
                seed=draw(st.integers(0, 3)))


def _run(policy: str, sc: dict):
    def check(snap, dec):
        assert_kv_accounted(snap)
        # cached contexts live in free memory only, behind a resident prefix
        assert sim.ctx_cache_tokens == sum(t for _, t in sim.ctx_cache.values())
        assert sim.used_kv + sim.ctx_cache_tokens <= sc["budget"]
        assert all(snap.prefixes[a].location == Location.DEVICE for a, _ in sim.ctx_cache.values())

    sim = Simulator(sc["tasks"], {a.name: a for a in sc["agents"]}, PROFILE,
                    make_policy(policy, seed=sc["seed"]), seed=sc["seed"], on_decision=check,
                    kv_budget_tokens=sc["budget"], block_size=sc["block"],
                    preemption=sc["preemption"], host_tier=sc["host"],
                    context_cache=sc["cache"])
    return sim.run()


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios())
def test_invariants(policy, sc):
    res = _run(policy, sc)
    c = res.counters
    assert c.peak_kv_tokens <= sc["budget"]
    assert len(res.tasks) == len(sc["tasks"])
    ids = [r.request_id for r in res.requests]
    assert len(ids) == len(set(ids)) == sum(t.n_calls for t in sc["tasks"])
    # each (task, stage, round) completes exactly once
    keys = {(r.task_id, r.stage, r.round_index) for r in res.requests}
    assert len(keys) == len(ids)
    for t in res.tasks:
        assert t.jct_s >= t.lower_bound_s * (1 - 1e-9) - 1e-9
    for r in res.requests:
        assert r.ready_s <= r.admitted_s <= r.first_token_s <= r.finished_s
    again = _run(policy, sc)
    assert [(t.task_id, t.finished_s) for t in again.tasks] == \
        [(t.task_id, t.finished_s) for t in res.tasks]
