"""One hand-built scenario per Score term in which that term flips the TOPAS decision."""

from __future__ import annotations

from test_topas_fixtures import history, make_prefix, make_request, make_snapshot, make_task
from topas.engine.snapshot import StageStatus as S
from topas.policies import make_policy


def decide(name, snap, **params):
    pol = make_policy(name, seed=0, **params)
    return pol.decide(snap), pol.last


# -- V_reuse ---------------------------------------------------------------------------------
def reuse_state():
    """TeamLeader (20k-token prefix) is idle but two tasks' Engineer stages are about to
    finish, after which their TeamLeader stages become ready.  A new task's request of
    agent X only fits if TeamLeader is evicted."""
    hist = {("E", "eng"): history("E", "eng", [0.5] * 8, out=8)}
    t1 = make_task(1, {"eng": ("E", (), S.READY), "tl2": ("TL", ("eng",), S.PENDING)})
    t3 = make_task(3, {"eng": ("E", (), S.READY), "tl2": ("TL", ("eng",), S.PENDING)})
    t2 = make_task(2, {"x": ("X", (), S.READY)})
    r1 = make_request(1, t1, "eng", 500, 2000, running=True, generated=5)
    r3 = make_request(3, t3, "eng", 500, 2000, running=True, generated=5)
    r2 = make_request(2, t2, "x", 1000, 9000)
    prefixes = [
        make_prefix("TL", 20000, True, on_host=True),
        make_prefix("E", 2000, True, users=2),
        make_prefix("X", 9000, False, on_host=True),
    ]
    return make_snapshot(
        prefixes=prefixes, running=[r1, r3], waiting=[r2], tasks=[t1, t2, t3], hist=hist
    )


def test_reuse_keeps_the_teamleader_prefix_when_its_next_stages_are_about_to_be_ready():
    dec, ch = decide("topas-paper", reuse_state())
    assert dec.admit == () and "TL" not in dec.evict
    assert "TL" in ch.resident and ch.terms[4] > 0
    dec, ch = decide("topas-noreuse", reuse_state())
    assert dec.admit == (2,) and dec.evict == ("TL",)


# -- aging -----------------------------------------------------------------------------------
def aging_state():
    """Two single-ready-stage tasks of agent A; the budget fits one more request.  The old
    task has the longer remaining path, so without aging the new one (shorter) wins."""
    old = make_task(
        1,
        {"a": ("A", (), S.READY), "b": ("A", ("a",), S.PENDING), "c": ("A", ("b",), S.PENDING)},
        arrival_s=0.0,
        kind="s",
    )
    new = make_task(2, {"a": ("A", (), S.READY)}, arrival_s=995.0, kind="s")
    r_old = make_request(1, old, "a", 3000, 4000, ready_s=0.0)
    r_new = make_request(2, new, "a", 3000, 4000, ready_s=995.0)
    return make_snapshot(
        time_s=1000.0,
        budget=4000 + 3000 + 128 + 2000,
        prefixes=[make_prefix("A", 4000, True)],
        waiting=[r_old, r_new],
        tasks=[old, new],
    )


def test_aging_rescues_a_starving_old_task():
    dec, _ = decide("topas-paper", aging_state())
    assert dec.admit == (1,)
    dec, _ = decide("topas-noaging", aging_state())
    assert dec.admit == (2,)


# -- J_redo and J_revoke ---------------------------------------------------------------------
def preempt_state(generated: int, credit: float, running_arrival_s: float = 990.0):
    """A running request of agent A blocks an old task's request of agent B; admitting B
    needs preempting A's request and evicting A."""
    hist = {
        ("A", "a"): history("A", "a", [60.0] * 8, out=2100),
        ("B", "b"): history("B", "b", [5.0] * 8, out=100),
    }
    t1 = make_task(1, {"a": ("A", (), S.READY)}, arrival_s=running_arrival_s)
    t2 = make_task(2, {"b": ("B", (), S.READY), "b2": ("B", ("b",), S.PENDING)}, arrival_s=950.0)
    r1 = make_request(
        1, t1, "a", 1000, 3000, running=True, generated=generated, ready_s=990.0, credit=credit
    )
    r2 = make_request(2, t2, "b", 1000, 3000, ready_s=950.0)
    prefixes = [make_prefix("A", 3000, True, users=1), make_prefix("B", 3000, False)]
    budget = 3000 + 1000 + generated + 1000 + 3000 // 2
    return make_snapshot(
        time_s=1000.0,
        budget=budget,
        prefixes=prefixes,
        running=[r1],
        waiting=[r2],
        tasks=[t1, t2],
        hist=hist,
    )


def test_redo_cost_stops_preempting_a_nearly_finished_request():
    params = dict(H_age=10.0)
    dec, ch = decide("topas-paper", preempt_state(2000, 0.0), **params)
    assert dec.preempt == () and dec.admit == ()
    dec, ch = decide("topas-paper", preempt_state(2000, 0.0), redo=False, **params)
    assert dec.preempt == (1,) and dec.admit == (2,)


def test_revoke_stops_an_admit_preempt_admit_cycle():
    params = dict(H_age=10.0)
    # little generated (cheap to redo) but a large credit granted when it was admitted
    dec, ch = decide("topas-paper", preempt_state(10, 400.0), **params)
    assert dec.preempt == () and dec.admit == ()
    dec, ch = decide("topas-paper", preempt_state(10, 400.0), revoke=False, **params)
    assert dec.preempt == (1,) and dec.admit == (2,)
    assert ch.terms[3] == 0.0 and ch.terms[2] < 1.0


def test_aged_revoke_stops_swapping_equally_old_tasks():
    """``revoke_value="current"`` (topas-aged-revoke): the running request's revoke is at least
    the aged gain it would have if waiting.  Between two tasks of the same age (its credit
    recorded as 0) plain TOPAS still swaps them -- the waiting one's aged gain beats the
    redo -- the aged revoke cancels that gain and keeps the running one; a truly older
    waiting task still gets its way."""
    params = dict(H_age=10.0)
    dec, _ = decide("topas-paper", preempt_state(10, 0.0, running_arrival_s=950.0), **params)
    assert dec.preempt == (1,) and dec.admit == (2,)
    dec, ch = decide("topas-aged-revoke", preempt_state(10, 0.0, running_arrival_s=950.0), **params)
    assert dec.preempt == () and dec.admit == ()
    dec, ch = decide("topas-aged-revoke", preempt_state(10, 0.0), **params)
    assert dec.preempt == (1,) and dec.admit == (2,)
    assert 0 < ch.terms[3] < ch.terms[0]  # younger running task: revoke below the gain


# -- J_move ----------------------------------------------------------------------------------
def move_state():
    """Two nearly equal-gain tasks; only one request fits.  A is resident, B must be
    recomputed (no host copy).  B's task arrived 0.3 s earlier, so its aged gain is slightly
    higher (by less than the recompute time of B's prefix)."""
    ta = make_task(
        1, {"a": ("A", (), S.READY), "a2": ("A", ("a",), S.PENDING)}, kind="s", arrival_s=100.0
    )
    tb = make_task(2, {"b": ("B", (), S.READY)}, kind="s", arrival_s=99.7)
    ra = make_request(1, ta, "a", 2000, 3000)
    rb = make_request(2, tb, "b", 2000, 3000)
    prefixes = [make_prefix("A", 3000, True), make_prefix("B", 3000, False, on_host=False)]
    return make_snapshot(
        time_s=100.0,
        budget=3000 + 2000 + 128 + 3000 + 500,
        prefixes=prefixes,
        waiting=[ra, rb],
        tasks=[ta, tb],
    )


def test_move_cost_prefers_the_resident_agent_when_gains_tie():
    dec, ch = decide("topas-paper", move_state())
    assert dec.admit == (1,) and dec.evict == ()
    gains = dict(ch.credit)
    assert 0 < ch.terms[0] < 1.0 + gains[1]  # the gains nearly tie
    dec, ch = decide("topas-paper", move_state(), move=False)
    assert dec.admit == (2,)


def test_admission_records_the_granted_credit():
    dec, ch = decide("topas-paper", move_state())
    assert set(dec.credit) == set(dec.admit) and all(v > 0 for v in dec.credit.values())


# -- complementary ready stages (work conservation) ------------------------------------------
def diamond_state():
    """A diamond a -> {b, c} -> d after ``a`` finished: ``b`` and ``c`` have identical
    residuals, so starting either one alone leaves the join waiting on the other (marginal
    gain 0), while starting both gains D_t.  The engine is idle."""
    hist = {("B", "b"): history("B", "b", [20.0] * 8), ("C", "c"): history("C", "c", [20.0] * 8)}
    t = make_task(
        1,
        {
            "a": ("A", (), S.DONE),
            "b": ("B", ("a",), S.READY),
            "c": ("C", ("a",), S.READY),
            "d": ("D", ("b", "c"), S.PENDING),
        },
    )
    rb = make_request(1, t, "b", 1000, 4000)
    rc = make_request(2, t, "c", 1000, 4000)
    prefixes = [make_prefix("B", 4000, True), make_prefix("C", 4000, False)]
    return make_snapshot(time_s=100.0, prefixes=prefixes, waiting=[rb, rc], tasks=[t], hist=hist)


def test_complementary_ready_stages_are_both_started_on_an_idle_engine():
    dec, ch = decide("topas-paper", diamond_state())
    assert sorted(dec.admit) == [1, 2]
    # without the joint share and the work-conserving floor the spec's marginal gains are 0:
    # the Score admits nothing, and only the idle-engine fallback (the oldest task's request
    # that fits, credit 0) keeps the engine from stalling
    dec, ch = decide("topas-paper", diamond_state(), joint_gain=False, min_gain_s=0.0)
    assert ch is None or ch.admit == ()
    assert dec.admit == (1,) and dec.credit == {1: 0.0}


def long_prompt_state(prompt: int):
    """Like ``preempt_state`` but the running request has a long, fully prefilled prompt and
    has generated little: re-decoding is cheap, re-prefilling its prompt is not.  A's calls
    are short (so deferring B costs only a few seconds)."""
    hist = {
        ("A", "a"): history("A", "a", [4.0] * 8, out=40),
        ("B", "b"): history("B", "b", [5.0] * 8, out=100),
    }
    t1 = make_task(1, {"a": ("A", (), S.READY)}, arrival_s=990.0)
    t2 = make_task(2, {"b": ("B", (), S.READY), "b2": ("B", ("b",), S.PENDING)}, arrival_s=950.0)
    r1 = make_request(1, t1, "a", prompt, 3000, running=True, generated=10, ready_s=990.0)
    r2 = make_request(2, t2, "b", 1000, 3000, ready_s=950.0)
    prefixes = [make_prefix("A", 3000, True, users=1), make_prefix("B", 3000, False)]
    budget = 3000 + prompt + 10 + 1000 + 3000 // 2
    return make_snapshot(
        time_s=1000.0,
        budget=budget,
        prefixes=prefixes,
        running=[r1],
        waiting=[r2],
        tasks=[t1, t2],
        hist=hist,
    )


def test_engine_redo_cost_counts_the_prompt_prefill_a_preemption_throws_away():
    """SGLang-style preemption in this engine re-runs the request: its prompt is prefilled
    again.  Charging only the re-decode (the paper's T_decode * y_r, ~0.5 s) lets TOPAS
    preempt a request whose 12k-token prompt was just prefilled for a ~2 s gain; charging
    the engine's real redo (~5 s) stops it; with a short prompt both preempt."""
    params = dict(H_age=10.0)
    dec, ch = decide("topas-paper", long_prompt_state(12000), redo_cost="decode", **params)
    assert dec.preempt == (1,) and dec.admit == (2,)
    dec, ch = decide("topas-paper", long_prompt_state(12000), **params)
    assert dec.preempt == () and dec.admit == ()
    dec, ch = decide("topas-paper", long_prompt_state(1000), **params)
    assert dec.preempt == (1,) and dec.admit == (2,)
