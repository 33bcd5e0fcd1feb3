"""Correlated residuals (topas.estimators.copula, review H1): what the task factor learns and
how it moves a task's estimate and a decision."""

from __future__ import annotations

import math

import numpy as np
import pytest

from test_topas_fixtures import make_prefix, make_request, make_snapshot, make_task
from topas.engine.snapshot import StageRecord
from topas.engine.snapshot import StageStatus as S
from topas.estimators import MonteCarloLP
from topas.estimators.copula import norm_cdf
from topas.policies import make_policy

CHAIN = {"a": ("A", (), S.DONE), "b": ("B", ("a",), S.DONE), "c": ("C", ("b",), S.READY)}


def pools() -> dict:
    """Pools of the three stage kinds: output tokens 100..1000 for a and b; c takes 1-10 s."""
    return {
        ("A", "a"): [StageRecord("t", "a", "A", 1, 100 * k, 1.0, 1.0) for k in range(1, 11)],
        ("B", "b"): [StageRecord("t", "b", "B", 1, 100 * k, 1.0, 1.0) for k in range(1, 11)],
        ("C", "c"): [StageRecord("t", "c", "C", 1, 100, float(k), float(k)) for k in range(1, 11)],
    }


def done_chain(task_id: int, tok_a: int, tok_b: int, arrival_s: float = 0.0):
    t = make_task(task_id, CHAIN, arrival_s=arrival_s)
    t.stages["a"].output_tokens, t.stages["b"].output_tokens = tok_a, tok_b
    t.stages_done = 2
    return t


def trained(correlated_training: bool, hist: dict) -> tuple[MonteCarloLP, object]:
    """An estimator that has seen 40 tasks whose stages a and b are equally hard (or
    oppositely hard)."""
    mc = MonteCarloLP(n_samples=4000, seed=1, correlated=True)
    prefixes = [make_prefix(a, 100, True) for a in "ABC"]
    train = [
        done_chain(
            100 + i,
            100 * (i % 10 + 1),
            100 * (i % 10 + 1) if correlated_training else 100 * (10 - i % 10),
        )
        for i in range(40)
    ]
    snap = make_snapshot(tasks=train, prefixes=prefixes, hist=hist)
    for t in train:
        mc.entry(snap, t)
    return mc, prefixes


def test_norm_cdf_matches_the_error_function():
    xs = np.linspace(-6, 6, 241)
    want = np.array([0.5 * (1 + math.erf(x / math.sqrt(2))) for x in xs])
    assert np.max(np.abs(norm_cdf(xs) - want)) < 2e-7


def test_the_factor_learns_within_task_correlation_and_only_that():
    hist = pools()
    mc, _ = trained(True, hist)
    # 40 pairs (80 ordered) of equal scores, shrunk by 80 / (80 + 20)
    assert mc.copula.a2 == pytest.approx(0.8)
    mc_anti, _ = trained(False, hist)
    assert mc_anti.copula.a2 == 0.0


def test_a_hard_start_lengthens_the_rest_and_an_easy_one_shortens_it():
    hist = pools()
    mc, prefixes = trained(True, hist)
    indep = MonteCarloLP(n_samples=4000, seed=1)
    hard, easy = done_chain(1, 1000, 1000), done_chain(2, 100, 100)
    snap = make_snapshot(tasks=[hard, easy], prefixes=prefixes, hist=hist)
    base = indep.expected_remaining_s(snap, hard)
    assert base == pytest.approx(5.5, rel=0.05)  # c's pool mean, whatever a and b showed
    assert indep.expected_remaining_s(snap, easy) == pytest.approx(base, rel=0.02)
    assert mc.expected_remaining_s(snap, hard) > base + 2.0
    assert mc.expected_remaining_s(snap, easy) < base - 2.0


def test_without_correlation_the_samples_are_the_independent_ones_exactly():
    hist = pools()
    mc, prefixes = trained(False, hist)
    indep = MonteCarloLP(n_samples=4000, seed=1)
    t = done_chain(1, 1000, 1000)
    snap = make_snapshot(tasks=[t], prefixes=prefixes, hist=hist)
    assert mc.expected_remaining_s(snap, t) == indep.expected_remaining_s(snap, t)


def test_parallel_stages_sharing_a_factor_have_a_smaller_maximum():
    # a fan-out of 8 unstarted stages of one kind: with a2 > 0 and nothing observed their
    # marginals are unchanged but they move together, so E[max] falls toward the mean
    hist = pools()
    mc, prefixes = trained(True, hist)
    fan = make_task(3, {f"m{k}": ("C", (), S.READY) for k in range(8)}, kind="c")
    snap = make_snapshot(tasks=[fan], prefixes=prefixes, hist=hist)
    indep = MonteCarloLP(n_samples=4000, seed=1).expected_remaining_s(snap, fan)
    corr = mc.expected_remaining_s(snap, fan)
    assert indep > 8.5  # the max of 8 independent draws of 1..10 s
    assert 5.5 < corr < indep - 0.8


PREFIXES = [make_prefix(a, 100, True) for a in "ABC"]


def train_policy(pol, hist: dict, n_tasks: int = 40) -> None:
    """The policy's estimator learns from ``n_tasks`` tasks whose stages a and b are equally
    hard."""
    train = [done_chain(100 + i, 100 * (i % 10 + 1), 100 * (i % 10 + 1)) for i in range(n_tasks)]
    snap0 = make_snapshot(tasks=train, prefixes=PREFIXES, hist=hist)
    for t in train:
        pol.mc.entry(snap0, t)


def hard_and_easy_waiting(hist: dict):
    """Two tasks wait with stage c ready and room for one: task 1 (5 s older) was hard in a
    and b, task 2 easy."""
    hard, easy = done_chain(1, 1000, 1000, 0.0), done_chain(2, 100, 100, 5.0)
    reqs = [
        make_request(1, hard, "c", 1000, 100, ready_s=6.0),
        make_request(2, easy, "c", 1000, 100, ready_s=6.0),
    ]
    return make_snapshot(
        time_s=7.0,
        budget=300 + 1000 + 600,
        prefixes=PREFIXES,
        waiting=reqs,
        tasks=[hard, easy],
        hist=hist,
    )


def test_correlated_residuals_let_a_size_rank_put_the_easy_task_first():
    # the two tasks look alike to the independent estimator (same pool for c), so the size
    # rank keeps arrival order (the hard, older task); the correlated one sees that the
    # younger task was easy so far
    hist = pools()
    for residual, want in (("independent", (1,)), ("correlated", (2,))):
        pol = make_policy(
            "topas",
            seed=1,
            off="size_gated",
            rank_key="remaining",
            size_weight=10,
            residual=residual,
            n_samples=4000,
        )
        train_policy(pol, hist)
        assert pol.decide(hard_and_easy_waiting(hist)).admit == want, residual


def test_size_gate_uses_the_size_key_only_once_correlation_is_learned():
    hist = pools()
    for n_train, want in ((0, (1,)), (40, (2,))):
        pol = make_policy(
            "topas",
            seed=1,
            rank_key="remaining",
            size_weight=10,
            residual="correlated",
            n_samples=4000,
            size_gate=0.5,
        )
        train_policy(pol, hist, n_train)
        # untrained: a2 = 0 < 0.5, so arrival order; trained: a2 = 0.8, the size key
        assert pol.size_key_on() == (n_train > 0)
        assert pol.decide(hard_and_easy_waiting(hist)).admit == want
    with pytest.raises(ValueError, match="size_gate"):
        make_policy("topas", seed=1, off="size_gated", size_gate=0.5)  # needs residual=correlated


def groupchat_finishes(n_tasks: int, **params) -> list[float]:
    """Task finish times (s) of the flagship with ``size_gated`` reverted plus ``params`` on
    groupchat (rate 0.15, seed 1): the gates' scenarios compare whole schedules."""
    from topas.api import simulate

    res = simulate(
        "groupchat",
        "topas",
        n_tasks=n_tasks,
        rate=0.15,
        seed=1,
        policy_params={"off": "size_gated", **params},
    )
    return [round(t.finished_s, 9) for t in res.tasks]


def test_size_cv_gate_is_the_flagship_when_closed_and_the_size_key_when_open():
    """``size_cv``: the size rank key only while the run's tasks' first-sight E[LP] differ by
    at least that coefficient of variation.  Groupchat's tasks (3-10 rounds) differ by about
    0.35: a gate of 10 never opens (exactly the flagship with size_gated reverted), a gate of 0.05 opens
    after ten tasks (then exactly the ungated size key once every task has been seen)."""

    def run(**kw):
        return groupchat_finishes(40, **kw)

    size = {"rank_key": "remaining", "size_weight": 10.0}
    flagship, ungated = run(), run(**size)
    assert flagship != ungated  # the size key changes the order here
    assert run(**size, size_cv=10.0) == flagship
    gated = run(**size, size_cv=0.05)
    assert gated != flagship
    pol = make_policy("topas", seed=1, off="size_gated", **size, size_cv=0.3)
    pol._first_lp = (9, 9.0, 9.0 * 4)  # nine tasks, CV 1.73: too few to open
    assert not pol.size_key_on()
    pol._first_lp = (10, 10.0, 10.0 * 1.1)  # CV 0.32
    assert pol.size_key_on()
    pol._first_lp = (10, 10.0, 10.0 * 1.05)  # CV 0.22
    assert not pol.size_key_on()
    with pytest.raises(ValueError, match="size_cv"):
        make_policy("topas", seed=1, off="size_gated", size_cv=-1.0)


def test_spearman_rank_correlation():
    from topas.policies.topas.aging import spearman

    assert spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 35.0, 90.0]) == pytest.approx(1.0)
    assert spearman([1.0, 2.0, 3.0, 4.0], [9.0, 5.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0  # constant: no correlation
    # ties take their mean rank: ranks (0.5, 0.5, 2) against (0, 1, 2)
    assert spearman([5.0, 5.0, 7.0], [1.0, 2.0, 3.0]) == pytest.approx(0.8660254, abs=1e-6)


def test_size_corr_gate_opens_once_predictions_have_proved_right():
    """``size_corr``: the size rank key only while the rank correlation between the finished
    tasks' first-sight E[LP] and their time from then to finish is at least the gate.  A
    gate of 1 never opens on groupchat (exactly the flagship with size_gated reverted); a gate of 0.3
    opens once 20 tasks have finished (groupchat's round counts are known at arrival)."""

    def run(**kw):
        return groupchat_finishes(60, **kw)

    size = {"rank_key": "remaining", "size_weight": 10.0}
    flagship = run()
    assert run(**size) != flagship  # the size key changes the order here
    assert run(**size, size_corr=1.0) == flagship
    assert run(**size, size_corr=0.3) != flagship
    pol = make_policy("topas", seed=1, off="size_gated", **size, size_corr=0.5)
    assert not pol.size_key_on()  # nothing has finished
    pol._pred_corr = 0.6
    assert pol.size_key_on()
    pol._pred_corr = 0.4
    assert not pol.size_key_on()
    with pytest.raises(ValueError, match="size_corr"):
        make_policy("topas", seed=1, off="size_gated", size_corr=1.5)


def test_size_corr_window_pairs_first_sight_estimates_with_times_to_finish():
    """The gate's data: a task seen first at time t with E[LP] l that is gone from a later
    snapshot at time T adds (l, T - t); the correlation is computed from 20 tasks on."""
    from test_topas_fixtures import make_snapshot, make_task
    from topas.engine.snapshot import StageStatus as S

    pol = make_policy("topas", seed=1, off="size_gated", rank_key="remaining", size_corr=0.5)
    hist: dict = {}
    for k in range(19):
        pol._first_seen[k] = (float(k), float(k))
    snap = make_snapshot(time_s=100.0, tasks=[make_task(99, {"a": ("A", (), S.READY)})], hist=hist)
    pol._run_id = snap.run_key
    pol.observe_finishes(snap)
    assert len(pol._pred_pairs) == 19 and pol._pred_corr == -1.0  # too few yet
    assert pol._pred_pairs[3] == (3.0, 97.0)
    pol._first_seen[19] = (19.0, 19.0)
    pol.observe_finishes(snap)
    # longer predictions were first seen later, so they finish sooner: rank correlation -1
    assert pol._pred_corr == pytest.approx(-1.0)
    assert not pol.size_key_on()
