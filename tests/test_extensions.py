"""The two extensions of docs/extensions.md: ``srpt-ca`` and ``topas-hold``."""

from __future__ import annotations

import pytest

from kv_checks import assert_kv_accounted
from test_topas_fixtures import COST, history, make_prefix, make_request, make_snapshot, make_task
from topas.engine.snapshot import StageStatus as S
from topas.policies import make_policy


# -- srpt-ca ---------------------------------------------------------------------------------
def switch_state(other_service_s: float):
    """Agent A's prefix is resident and idle; agent B's (8k tokens, no host copy: recompute
    ~3 s) is not.  One single-stage task per agent, ~10 s vs ``other_service_s`` of expected
    service.  The budget fits one of the two requests: B's only after evicting A."""
    hist = {
        ("A", "a"): history("A", "a", [10.0] * 8, out=200),
        ("B", "b"): history("B", "b", [other_service_s] * 8, out=200),
    }
    ta = make_task(1, {"a": ("A", (), S.READY)}, arrival_s=0.0)
    tb = make_task(2, {"b": ("B", (), S.READY)}, arrival_s=1.0)
    ra = make_request(1, ta, "a", 1000, 4000, ready_s=0.0)
    rb = make_request(2, tb, "b", 1000, 8000, ready_s=1.0)
    prefixes = [make_prefix("A", 4000, True), make_prefix("B", 8000, False, on_host=False)]
    return make_snapshot(
        time_s=2.0, budget=9500, prefixes=prefixes, waiting=[ra, rb], tasks=[ta, tb], hist=hist
    )


def test_srpt_ca_keeps_the_resident_agent_for_a_marginally_longer_task():
    s = switch_state(9.0)
    spf = make_policy("spf", seed=0)
    rem = spf.remaining_s(s)
    # B's task is shorter, but by less than recomputing B's prefix costs
    assert rem[2] < rem[1] < rem[2] + COST.prefill_time(8000)
    assert spf.decide(s).admit == (2,)
    ca = make_policy("srpt-ca", seed=0)
    d = ca.decide(s)
    assert d.admit == (1,) and d.evict == ()
    keys = ca.order_keys(s)
    assert keys[2] == pytest.approx(rem[2] + COST.prefill_time(8000))
    assert keys[1] == pytest.approx(rem[1])
    # switch_weight=0 is SPF
    assert make_policy("srpt-ca", seed=0, switch_weight=0).decide(s).admit == (2,)


def test_srpt_ca_switches_for_a_much_shorter_task():
    s = switch_state(2.0)
    ca = make_policy("srpt-ca", seed=0)
    keys = ca.order_keys(s)
    assert keys[2] < keys[1]
    d = ca.decide(s)
    assert d.admit == (2,) and d.evict == ("A",)
    assert make_policy("spf", seed=0).decide(s).admit == (2,)


def test_srpt_ca_charges_a_host_copy_only_the_swap_in():
    s = switch_state(9.0)
    s.prefixes["B"].on_host = True
    s.prefixes["B"].location = 1  # Location.HOST
    keys = make_policy("srpt-ca", seed=0).order_keys(s)
    rem = make_policy("spf", seed=0).remaining_s(s)
    assert keys[2] == pytest.approx(rem[2] + COST.swap_time(8000))
    # a 84 ms swap does not outweigh a 1 s shorter task
    assert make_policy("srpt-ca", seed=0).decide(s).admit == (2,)


def test_srpt_ca_rejects_a_negative_weight():
    with pytest.raises(ValueError, match="switch_weight"):
        make_policy("srpt-ca", seed=0, switch_weight=-1)


# -- topas-hold ------------------------------------------------------------------------------
def react_run(policy: str, tool_s: float, rounds: int = 3, budget: int | None = None, **params):
    """One ReAct stage of ``rounds`` calls with ``tool_s`` tool calls between them.  Returns,
    per call after the first, whether its context was still held when it became ready, and
    the run's result.  Checks on every decision that every used KV token is a prefix, a
    running call or a live held context."""
    from topas.engine.cost import DEFAULT_PROFILE, get_profile
    from topas.engine.simulator import Simulator
    from topas.workflow.model import Agent, Call, Stage, Task

    agents = {"w": Agent("w", 1000)}
    calls = tuple(
        Call(3000 + 200 * k, 40, tool_s if k < rounds - 1 else 0.0) for k in range(rounds)
    )
    tasks = [Task(0, 0.0, (Stage("s", "w", calls),))]
    held_at_return = []

    def watch(s, d) -> None:
        assert_kv_accounted(s)
        for r in s.waiting:
            if r.round_index > 0:
                h = s.held.get((r.task_id, r.stage))
                held_at_return.append(h is not None and h.expires_s > s.time_s)

    # without the engine's context cache, so that only holding reuses a context
    res = Simulator(
        tasks,
        agents,
        get_profile(DEFAULT_PROFILE),
        make_policy(policy, seed=0, **params),
        on_decision=watch,
        kv_budget_tokens=budget,
        context_cache=False,
    ).run()
    return held_at_return, res


def test_topas_hold_keeps_the_context_through_a_short_tool_call():
    held, res = react_run("topas-hold", 0.3)
    base_held, base = react_run("topas-paper", 0.3)
    assert held == [True, True] and base_held == [False, False]
    # the kept context is not prefilled again, and the task finishes sooner
    assert res.counters.prefill_tokens < base.counters.prefill_tokens
    assert res.tasks[0].jct_s < base.tasks[0].jct_s


def test_topas_hold_lets_a_long_tool_call_expire():
    held, res = react_run("topas-hold", 100.0)  # beyond max_ttl_s = 30 s
    _, base = react_run("topas-paper", 100.0)
    assert held == [False, False]
    assert res.counters.prefill_tokens == base.counters.prefill_tokens


def test_topas_hold_stops_holding_once_it_learns_tools_are_long():
    # 20 s tools (within max_ttl_s) on a small budget: holding ~3k of 12k tokens for 20 s
    # costs more than the ~1 s reload saves, which the policy learns after min_samples
    held, _ = react_run("topas-hold", 20.0, rounds=6, budget=12000)
    assert held[:3] == [True, True, True]  # cold start: exponential model says hold
    assert held[3:] == [False, False]
    held, _ = react_run("topas-hold", 0.3, rounds=6, budget=12000)
    assert held == [True] * 5


def test_topas_hold_releases_a_younger_tasks_context_for_an_older_blocked_request():
    import dataclasses

    from topas.engine.snapshot import HeldContext

    old = make_task(1, {"s": ("x", (), S.READY)}, arrival_s=0.0)
    young = make_task(2, {"s": ("x", (), S.TOOL)}, arrival_s=5.0)
    h = HeldContext(2, "s", "x", 3000, since_s=6.0, expires_s=20.0)
    r = make_request(1, old, "s", 3000, 1000, ready_s=7.0)
    s = make_snapshot(
        time_s=8.0,
        budget=6000,
        prefixes=[make_prefix("x", 1000, True)],
        waiting=[r],
        tasks=[old, young],
        held={(2, "s"): h},
    )
    s = dataclasses.replace(s, used_kv_tokens=1000 + 3000)  # the live context counts
    assert make_policy("topas-paper", seed=0, reserve_ratio=0).decide(s).admit == ()
    d = make_policy("topas-hold", seed=0, reserve_ratio=0).decide(s)
    assert d.release == ((2, "s"),) and d.admit == (1,) and d.credit[1] == 0.0
    # with room for both, nothing is released
    s2 = dataclasses.replace(s, config=dataclasses.replace(s.config, kv_budget_tokens=9000))
    d2 = make_policy("topas-hold", seed=0, reserve_ratio=0).decide(s2)
    assert d2.release == () and d2.admit == (1,)
