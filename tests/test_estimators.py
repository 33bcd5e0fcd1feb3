"""Residual-service estimator and Monte Carlo E[LP] against exact answers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from test_topas_fixtures import history, make_prefix, make_snapshot, make_task
from topas.engine.snapshot import StageStatus as S
from topas.estimators import EmpiricalResidual, MonteCarloLP, expected_remaining_s
from topas.estimators.longest_path import longest_path_mean


class Discrete:
    """Each stage's residual is uniform over a fixed list of values."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def stage_residuals(self, snap, task, stage, generated_tokens=0):
        return np.sort(np.asarray(self.table[stage.name], dtype=float))


def exact_elp(order, deps, table, offsets=None):
    """Enumerate every outcome of independent uniform discrete residuals."""
    offsets = offsets or {}
    total = 0.0
    combos = list(itertools.product(*(table[n] for n in order)))
    for combo in combos:
        z = dict(zip(order, combo))
        f = {}
        for n in order:
            f[n] = max([offsets.get(n, 0.0)] + [f[d] for d in deps[n]]) + z[n]
        total += max(f.values())
    return total / len(combos)


DIAMOND = {
    "a": ("A", (), S.READY),
    "b": ("B", ("a",), S.PENDING),
    "c": ("C", ("a",), S.PENDING),
    "d": ("D", ("b", "c"), S.PENDING),
}
TABLE = {"a": [1.0, 3.0], "b": [2.0, 10.0], "c": [4.0, 6.0, 8.0], "d": [1.0, 2.0]}


def test_longest_path_mean_equals_enumeration_over_all_outcomes():
    order = list(DIAMOND)
    deps = {n: DIAMOND[n][1] for n in order}
    combos = np.array(list(itertools.product(*(TABLE[n] for n in order))))
    idx = {n: k for k, n in enumerate(order)}
    dl = [tuple(idx[d] for d in deps[n]) for n in order]
    got = longest_path_mean(combos, dl)
    assert got == pytest.approx(exact_elp(order, deps, TABLE), abs=1e-12)
    got_off = longest_path_mean(combos, dl, {0: 2.5})
    assert got_off == pytest.approx(exact_elp(order, deps, TABLE, {"a": 2.5}), abs=1e-12)


def test_monte_carlo_converges_to_exact_and_expectation_is_outside_the_max():
    task = make_task(1, DIAMOND)
    snap = make_snapshot(tasks=[task], prefixes=[make_prefix(a, 100, True) for a in "ABCD"])
    mc = MonteCarloLP(Discrete(TABLE), n_samples=40_000, seed=3)
    got = mc.expected_remaining_s(snap, task)
    exact = exact_elp(list(DIAMOND), {n: v[1] for n, v in DIAMOND.items()}, TABLE)
    assert got == pytest.approx(exact, rel=0.01)
    # the critical path switches between b and c: E[max] is well above max of the means
    means = {n: float(np.mean(v)) for n, v in TABLE.items()}
    max_of_means = means["a"] + max(means["b"], means["c"]) + means["d"]
    assert exact > max_of_means + 0.5
    assert got > max_of_means + 0.5


def test_common_random_numbers_same_task_same_answer_and_cache_by_version():
    task = make_task(1, DIAMOND)
    snap = make_snapshot(tasks=[task], prefixes=[make_prefix(a, 100, True) for a in "ABCD"])
    mc = MonteCarloLP(Discrete(TABLE), n_samples=64, seed=3)
    e1 = mc.entry(snap, task)
    assert mc.entry(snap, task) is e1
    task.version += 1
    e2 = mc.entry(snap, task)
    assert e2 is not e1
    np.testing.assert_array_equal(e1.z, e2.z)  # same uniforms, same distribution


def test_deferral_of_a_chain_head_adds_exactly_the_deferral():
    chain = {"a": ("A", (), S.READY), "b": ("B", ("a",), S.PENDING)}
    task = make_task(1, chain)
    snap = make_snapshot(tasks=[task], prefixes=[make_prefix(a, 100, True) for a in "AB"])
    mc = MonteCarloLP(Discrete({"a": [1.0, 5.0], "b": [2.0, 3.0]}), n_samples=256)
    e = mc.entry(snap, task)
    assert e.expected_lp(0.0, (0,), 1.5) - e.expected_lp(0.0) == pytest.approx(1.5)


def test_deferring_a_side_branch_off_the_critical_path_costs_nothing():
    dag = {"a": ("A", (), S.READY), "b": ("B", (), S.READY)}
    task = make_task(1, dag)
    snap = make_snapshot(tasks=[task], prefixes=[make_prefix(a, 100, True) for a in "AB"])
    mc = MonteCarloLP(Discrete({"a": [10.0], "b": [1.0]}), n_samples=16)
    e = mc.entry(snap, task)
    assert e.expected_lp(0.0, (1,), 2.0) == pytest.approx(10.0)
    assert e.expected_lp(0.0, (0,), 2.0) == pytest.approx(12.0)


def test_empirical_residual_prior_history_and_conditioning():
    est = EmpiricalResidual(min_history=3)
    task = make_task(1, {"w": ("W", (), S.READY)})
    snap = make_snapshot(tasks=[task], prefixes=[make_prefix("W", 1000, True)])
    prior = est.stage_residuals(snap, task, task.stages["w"])
    assert len(prior) == 5 and np.all(np.diff(prior) >= 0) and prior[0] > 0
    # the prior is the cost model's call time alone: longer outputs take longer
    assert prior[-1] > 2 * prior[0]

    hist = {("W", "w"): history("W", "w", [4.0, 6.0, 8.0, 10.0], rounds=2, out=400)}
    snap = make_snapshot(
        tasks=[task], prefixes=[make_prefix("W", 1000, True)], hist=hist, time_s=7.0
    )
    np.testing.assert_allclose(
        est.stage_residuals(snap, task, task.stages["w"]), [4.0, 6.0, 8.0, 10.0]
    )
    # started 7 s ago: only the executions longer than 7 s remain, shifted by 7 s
    st = task.stages["w"]
    st.status = S.RUNNING
    st.started_s = 0.0
    np.testing.assert_allclose(est.stage_residuals(snap, task, st), [1.0, 3.0])
    # one round done of two-round records: still those; none had 3 rounds -> relaxed
    st.rounds_done = 1
    np.testing.assert_allclose(est.stage_residuals(snap, task, st), [1.0, 3.0])
    # longer than every record: one more mean call (mean of z / rounds = 3.5 s)
    snap2 = make_snapshot(
        tasks=[task], prefixes=[make_prefix("W", 1000, True)], hist=hist, time_s=20.0
    )
    np.testing.assert_allclose(est.stage_residuals(snap2, task, st), [3.5])


def test_expected_remaining_s_is_positive_and_shrinks_as_stages_finish():
    chain = {"a": ("A", (), S.READY), "b": ("B", ("a",), S.PENDING)}
    task = make_task(7, chain)
    snap = make_snapshot(tasks=[task], prefixes=[make_prefix(a, 500, True) for a in "AB"])
    full = expected_remaining_s(snap, task)
    task.stages["a"].status = S.DONE
    task.stages["b"].status = S.READY
    task.version += 1
    assert 0 < expected_remaining_s(snap, task) < full
