"""Every TOPAS variant runs random small workloads on the simulator without an invalid
decision, finishes every task, and never does worse than the empty-engine lower bound."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topas.api import simulate

VARIANTS = ["topas", "topas-paper", "topas-base", "topas-noreuse", "topas-noaging", "topas-oracle"]


@pytest.mark.parametrize("policy", VARIANTS)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    rate=st.sampled_from([0.5, 2.0]),
    budget=st.sampled_from([12_000, 32_768]),
    preemption=st.sampled_from(["sglang", "vllm"]),
)
def test_variant_completes_every_task_feasibly(policy, seed, rate, budget, preemption):
    res = simulate(
        "toy-chain",
        policy,
        n_tasks=8,
        rate=rate,
        seed=seed,
        kv_budget_tokens=budget,
        preemption=preemption,
    )
    assert len(res.tasks) == 8
    for t in res.tasks:
        assert t.jct_s >= t.lower_bound_s - 1e-6
    assert res.counters.peak_kv_tokens <= budget
