"""The two extensions of docs/extensions.md: ``srpt-ca`` and ``topas-hold``."""

from __future__ import annotations

import pytest

from topas.engine.snapshot import StageStatus as S
from topas.policies import make_policy

from test_topas_fixtures import COST, history, make_prefix, make_request, make_snapshot, make_task


# -- srpt-ca ---------------------------------------------------------------------------------
def switch_state(other_service_s: float):
    """Agent A's prefix is resident and idle; agent B's (8k tokens, no host copy: recompute
    ~3 s) is not.  One single-stage task per agent, ~10 s vs ``other_service_s`` of expected
    service.  The budget fits one of the two requests: B's only after evicting A."""
    hist = {("A", "a"): history("A", "a", [10.0] * 8, out=200),
            ("B", "b"): history("B", "b", [other_service_s] * 8, out=200)}
    ta = make_task(1, {"a": ("A", (), S.READY)}, arrival_s=0.0)
    tb = make_task(2, {"b": ("B", (), S.READY)}, arrival_s=1.0)
    ra = make_request(1, ta, "a", 1000, 4000, ready_s=0.0)
    rb = make_request(2, tb, "b", 1000, 8000, ready_s=1.0)
    prefixes = [make_prefix("A", 4000, True), make_prefix("B", 8000, False, on_host=False)]
    return make_snapshot(time_s=2.0, budget=9500, prefixes=prefixes, waiting=[ra, rb],
                         tasks=[ta, tb], hist=hist)


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
