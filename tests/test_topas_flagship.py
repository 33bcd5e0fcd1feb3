"""The flagship ``topas``: one hand-built scenario per departure from the paper in which that
departure's defining choice is visible (the flagship against itself with the departure
reverted through ``off=``), and the all-off identity with ``topas-paper``."""

from __future__ import annotations

import dataclasses

from test_topas_fixtures import make_prefix, make_request, make_snapshot, make_task
from test_topas_scenarios import aging_state, diamond_state, move_state, preempt_state
from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.engine.snapshot import HeldContext
from topas.engine.snapshot import StageStatus as S
from topas.policies import make_policy
from topas.policies.topas import DEPARTURES, Context, flagship_params

PROFILE = get_profile(DEFAULT_PROFILE)


def decide(snap, off: str = "", **params):
    pol = make_policy("topas", seed=0, off=off, **params)
    return pol.decide(snap)


def test_all_departures_off_is_the_paper_policy():
    off = "+".join(DEPARTURES)
    for snap in (aging_state(), diamond_state(), move_state(), preempt_state(10, 0.0)):
        assert decide(snap, off=off) == make_policy("topas-paper", seed=0).decide(snap)
    assert flagship_params(tuple(DEPARTURES)) == {
        k: v for _, p in DEPARTURES.values() for k, v in p.items()
    }


def test_no_preempt_keeps_the_running_request():
    snap = preempt_state(10, 0.0)
    d = decide(snap, off="no_preempt+hol_block", H_age=10.0)
    assert d.preempt == (1,) and d.admit == (2,)
    d = decide(snap, off="hol_block", H_age=10.0)
    assert d.preempt == () and d.admit == ()


def small_requests_state(n: int = 4):
    """``n`` one-stage tasks of a resident agent, all fitting at once."""
    tasks = [make_task(i, {"a": ("A", (), S.READY)}, arrival_s=float(i)) for i in range(1, n + 1)]
    reqs = [
        make_request(i, t, "a", 500, 2000, ready_s=float(i)) for i, t in enumerate(tasks, start=1)
    ]
    return make_snapshot(
        time_s=10.0, prefixes=[make_prefix("A", 2000, True)], waiting=reqs, tasks=tasks
    )


def test_uncapped_admits_every_request_that_fits():
    assert len(decide(small_requests_state()).admit) == 4
    assert len(decide(small_requests_state(), off="uncapped").admit) == 2  # the paper's K=2


def test_rank_priority_weights_tasks_by_how_many_younger_tasks_wait():
    snap = small_requests_state(3)
    pol = make_policy("topas", seed=0)
    ctx = Context(pol, snap)
    assert ctx.weights == {1: 3.0, 2: 2.0, 3: 1.0}  # 1 + rho * younger, rho = 1
    pol = make_policy("topas", seed=0, off="rank_priority")
    ctx = Context(pol, snap)
    assert ctx.weights[1] > ctx.weights[2] > ctx.weights[3]
    assert ctx.weights[1] - ctx.weights[3] < 1.0  # log aging: 10 s of age barely counts


def blocked_pair():
    """The oldest task's 6k request and a younger task's 1k one (tasks, then requests)."""
    old = make_task(1, {"a": ("A", (), S.READY)}, arrival_s=0.0)
    young = make_task(2, {"a": ("A", (), S.READY)}, arrival_s=5.0)
    r_old = make_request(1, old, "a", 6000, 2000, ready_s=0.0)
    r_young = make_request(2, young, "a", 1000, 2000, ready_s=5.0)
    return old, young, r_old, r_young


def hol_state():
    """The oldest task's request (6k tokens) does not fit; a younger 1k one does."""
    old, young, r_old, r_young = blocked_pair()
    running = make_task(3, {"a": ("A", (), S.READY)}, arrival_s=-10.0)
    r_run = make_request(3, running, "a", 3000, 2000, running=True, generated=10)
    return make_snapshot(
        time_s=10.0,
        budget=2000 + 3010 + 3500,
        prefixes=[make_prefix("A", 2000, True, users=1)],
        running=[r_run],
        waiting=[r_old, r_young],
        tasks=[old, young, running],
    )


def test_hol_block_keeps_memory_for_the_blocked_oldest_request():
    assert decide(hol_state()).admit == ()
    assert decide(hol_state(), off="hol_block").admit == (2,)


def group_state():
    """Both prefixes resident; tasks 1 and 3 (oldest and third) wait on agent X, tasks 2 and
    4 on agent Y; the free KV fits two requests."""
    tasks = [
        make_task(i, {"s": ("X" if i % 2 else "Y", (), S.READY)}, arrival_s=float(i))
        for i in (1, 2, 3, 4)
    ]
    reqs = [make_request(t.task_id, t, "s", 1000, 2000, ready_s=t.arrival_s) for t in tasks]
    return make_snapshot(
        time_s=10.0,
        budget=4000 + 2 * (1000 + 153) + 300,
        prefixes=[make_prefix("X", 2000, True), make_prefix("Y", 2000, True)],
        waiting=reqs,
        tasks=tasks,
    )


def test_group_density_packs_one_agents_group_together():
    # rank weights 4, 3, 2, 1: X's group carries 6 of them per 2 requests, Y's 4
    assert sorted(decide(group_state()).admit) == [1, 3]
    # by gain alone the two oldest tasks go first, one request of each agent
    assert sorted(decide(group_state(), off="group_density").admit) == [1, 2]


def held_state():
    """Task 1's call just ended in a tool call, offering its 3k-token context; task 2's 3k
    request waits.  The free KV (3.6k of 20k) fits one of the two."""
    t1 = make_task(1, {"s": ("A", (), S.TOOL)}, arrival_s=0.0)
    t2 = make_task(2, {"s": ("A", (), S.READY)}, arrival_s=5.0)
    r2 = make_request(2, t2, "s", 3000, 1000, ready_s=6.0)
    h = HeldContext(1, "s", "A", 3000, since_s=8.0, expires_s=8.0)
    # another agent's prefix, kept by a live context of a third task, fills the rest
    t3 = make_task(3, {"z": ("Z", (), S.TOOL)}, arrival_s=1.0)
    hz = HeldContext(3, "z", "Z", 1000, since_s=2.0, expires_s=60.0)
    # and a running request keeps the engine busy (an idle engine would release every hold)
    t4 = make_task(4, {"r": ("A", (), S.READY)}, arrival_s=-1.0)
    r4 = make_request(4, t4, "r", 500, 1000, running=True, generated=10)
    s = make_snapshot(
        time_s=8.0,
        budget=20000 + 510 + 16,
        waiting=[r2],
        running=[r4],
        tasks=[t1, t2, t3, t4],
        held={(1, "s"): h, (3, "z"): hz},
        prefixes=[make_prefix("A", 1000, True, users=1), make_prefix("Z", 14400, True, users=1)],
    )
    return dataclasses.replace(s, used_kv_tokens=1000 + 14400 + 1000 + 510)


def test_holds_first_keeps_the_older_tasks_context_before_admitting():
    d = decide(held_state(), reserve_ratio=0)
    assert (1, "s") in d.hold and d.admit == ()
    d = decide(held_state(), reserve_ratio=0, holds="after")  # topas-hold's order
    assert d.hold == {} and d.admit == (2,)
    d = decide(held_state(), off="holds", reserve_ratio=0)  # the paper: never holds
    assert d.hold == {} and d.admit == (2,)


def test_reserve_keeps_more_headroom():
    pol = make_policy("topas", seed=0)
    assert pol.reserve_ratio == 0.6
    assert make_policy("topas", seed=0, off="reserve").reserve_ratio == 0.5


def test_backfill_admits_past_the_blocked_request_only_what_does_not_delay_it():
    # hol_state with 1.5k more free tokens: when the running request finishes, the blocked
    # 6k request fits with room to spare beside it, where the young 1k request fits too
    snap = dataclasses.replace(
        hol_state(),
        config=dataclasses.replace(hol_state().config, kv_budget_tokens=2000 + 3010 + 5000),
    )
    assert decide(snap, off="backfill").admit == ()  # head-of-line blocking alone: it waits
    assert decide(snap).admit == (2,)  # the flagship backfills
    # in hol_state the room beside the blocked request is too small: admitting the young
    # request (expected to outlast the running one) would delay the blocked one
    assert decide(hol_state()).admit == ()


def held_shadow_state():
    """hol_state's blocked 6k request and young 1k one, with two running requests: a ReAct
    stage's second call (3.2k of KV, finishing first; its context will be held) and a
    single-call stage (2k); 4,790 tokens free."""
    old, young, r_old, r_young = blocked_pair()
    t_react = make_task(3, {"a": ("A", (), S.READY)}, arrival_s=-10.0)
    r_react = make_request(3, t_react, "a", 3000, 2000, running=True, generated=200)
    r_react.round_index = 1
    t_one = make_task(4, {"a": ("A", (), S.READY)}, arrival_s=-9.0)
    r_one = make_request(4, t_one, "a", 2000, 2000, running=True, generated=10)
    return make_snapshot(
        time_s=10.0,
        budget=2000 + 3200 + 2010 + 4790,
        prefixes=[make_prefix("A", 2000, True, users=2)],
        running=[r_react, r_one],
        waiting=[r_old, r_young],
        tasks=[old, young, t_react, t_one],
    )


def test_held_shadow_counts_a_held_context_as_not_freed():
    # counting the ReAct call's 3.2k as freed when it finishes, the blocked request fits
    # then with room to spare beside it, where the young request fits: it is backfilled
    assert decide(held_shadow_state(), off="held_shadow").admit == (2,)
    # its context stays held (only its output headroom comes back): the blocked request fits
    # only once the single-call request finishes too, with too little room beside it
    assert decide(held_shadow_state()).admit == ()
    # a first call of a stage kind never seen making several calls counts as freed
    snap = held_shadow_state()
    snap.running[0].round_index = 0
    assert decide(snap).admit == (2,)
    # with only the ReAct call running nothing would ever free enough by that count: every
    # call's KV counts, and the young request is backfilled beside the blocked one as before
    alone = dataclasses.replace(
        held_shadow_state(),
        running=held_shadow_state().running[:1],
        config=dataclasses.replace(held_shadow_state().config, kv_budget_tokens=5200 + 4800),
        used_kv_tokens=5200,
    )
    assert decide(alone).admit == decide(alone, off="held_shadow").admit == (2,)
    assert decide(alone, off="backfill").admit == ()


def size_state():
    """The older task 1 has three chained stages left, the younger task 2 one stage; the free
    KV fits one request."""
    t1 = make_task(
        1,
        {"a": ("A", (), S.READY), "b": ("A", ("a",), S.PENDING), "c": ("A", ("b",), S.PENDING)},
        arrival_s=0.0,
    )
    t2 = make_task(2, {"a": ("A", (), S.READY)}, arrival_s=1.0)
    reqs = [
        make_request(1, t1, "a", 1000, 2000, ready_s=0.0),
        make_request(2, t2, "a", 1000, 2000, ready_s=1.0),
    ]
    return make_snapshot(
        time_s=2.0,
        budget=2000 + 1000 + 153 + 500,
        prefixes=[make_prefix("A", 2000, True)],
        waiting=reqs,
        tasks=[t1, t2],
    )


#: the size key with its gates open from the start (the flagship's ``size_gated`` opens them
#: only on evidence) and no tail guard
UNGATED = {"size_gate": 0.0, "size_corr": 0.0, "tail_q": 0.0}


def test_rank_key_remaining_puts_the_shorter_task_first():
    assert decide(size_state()).admit == (1,)  # rank by arrival: the older task
    assert decide(size_state(), rank_key="remaining", size_weight=1e6, **UNGATED).admit == (2,)
    # a predicted finish: one second of arrival outweighs a tiny size weight
    assert decide(size_state(), rank_key="finish", size_weight=1e-9, **UNGATED).admit == (1,)


def test_tail_q_puts_a_task_older_than_the_runs_tail_ahead_of_the_size_rank():
    # ten tasks of the same run (one history object) are seen to finish by 60 s, 59.1-60 s
    # after they arrived; task 1 (three stages left) is then 60 s old, task 2 (one) 30 s
    def state(time_s, tasks_extra=(), hist=None):
        t1 = make_task(
            1,
            {"a": ("A", (), S.READY), "b": ("A", ("a",), S.PENDING), "c": ("A", ("b",), S.PENDING)},
            arrival_s=0.0,
        )
        t2 = make_task(2, {"a": ("A", (), S.READY)}, arrival_s=30.0)
        reqs = [
            make_request(1, t1, "a", 1000, 2000, ready_s=0.0),
            make_request(2, t2, "a", 1000, 2000, ready_s=30.0),
        ]
        return make_snapshot(
            time_s=time_s,
            budget=2000 + 1000 + 153 + 500,
            prefixes=[make_prefix("A", 2000, True)],
            waiting=reqs,
            tasks=[t1, t2, *tasks_extra],
            hist=hist,
        )

    def run(**params):
        pol = make_policy(
            "topas", seed=0, rank_key="remaining", size_weight=1e6, **{**UNGATED, **params}
        )
        hist: dict = {}
        others = [
            make_task(100 + k, {"a": ("A", (), S.RUNNING)}, arrival_s=k * 0.1) for k in range(10)
        ]
        pol.decide(state(0.0 + 1e-3, others, hist))
        snap = state(60.0, (), hist)
        for t in others:
            assert t.task_id not in snap.tasks
        return pol.decide(snap).admit

    assert run() == (2,)  # the size rank alone: the shorter, younger task
    assert run(tail_q=0.5) == (1,)  # task 1 is older than the run's median JCT
    assert make_policy("topas", seed=0, off="size_gated").tail_q == 0.0
    assert make_policy("topas", seed=0).tail_q == 0.6  # the flagship's size_gated guard


def test_size_gated_ranks_by_size_only_once_size_estimates_have_proved_right():
    # the gates start closed (nothing finished, no correlation learned): arrival rank, the
    # older task 1 first, as with the departure reverted
    assert decide(size_state()).admit == (1,)
    assert decide(size_state(), off="size_gated").admit == (1,)
    # once finished tasks have shown first-sight E[LP] to rank times to finish well, the
    # size key puts the younger task with one stage left (task 2) first
    for off, want in (("", (2,)), ("size_gated", (1,))):
        pol = make_policy("topas", seed=0, off=off)
        snap = size_state()
        pol._run_id = snap.run_key  # the same run: the learned correlation is kept
        pol._pred_corr = 0.9
        assert pol.decide(snap).admit == want, off


def conversation_state(cached: int):
    """small_requests_state(3) plus a running first call of agent A that found ``cached``
    context tokens in the engine's cache (a conversation an earlier stage of A left there)."""
    t0 = make_task(0, {"a": ("A", (), S.RUNNING)}, arrival_s=0.0)
    run = make_request(9, t0, "a", 500, 2000, running=True)
    run.cached_tokens = cached
    snap = small_requests_state(3)
    return dataclasses.replace(snap, running=[run], tasks={**snap.tasks, 0: t0})


def test_cache_priority_keeps_conversation_agents_contexts_oldest_task_longest():
    """Once a stage's first call of agent A has found cached context (A continues a
    conversation), the flagship gives each admitted call of A a cache priority falling with
    its task's arrival (1 / (1 + arrival_s)); before that, and without the departure, none."""
    d = decide(conversation_state(cached=400))
    assert d.admit == (1, 2, 3)
    assert d.cache_priority == {1: 1 / 2, 2: 1 / 3, 3: 1 / 4}
    assert decide(conversation_state(cached=0)).cache_priority == {}
    # "all" (a probe, docs/topas.md): every admitted call, conversation or not
    assert decide(conversation_state(cached=0), cache_priority="all").cache_priority == {
        1: 1 / 2,
        2: 1 / 3,
        3: 1 / 4,
    }
    assert decide(conversation_state(cached=400), off="cache_priority").cache_priority == {}
    # the learned agents last for the run: a later snapshot of it needs no new hit
    pol = make_policy("topas", seed=0)
    snap = conversation_state(cached=400)
    pol.decide(snap)
    later = conversation_state(cached=0)
    later = dataclasses.replace(later, history=snap.history)  # the same run
    assert pol.decide(later).cache_priority == {1: 1 / 2, 2: 1 / 3, 3: 1 / 4}
    fresh = dataclasses.replace(conversation_state(cached=0), history={})  # a new run
    assert pol.decide(fresh).cache_priority == {}


def test_cache_priority_gives_the_flagship_more_conversation_hits_and_only_there():
    """On group chats the priorities keep the oldest tasks' conversations cached: more of their
    prompts are found in the cache than with LRU alone (seed 1; the measured mean-JCT effect is
    in docs/topas.md).  On a ReAct workload no first call finds a conversation, so no decision
    carries a priority and the run is the same."""
    from topas.api import sample_tasks
    from topas.engine.simulator import Simulator

    def hits(workload: str, n: int, rate: float, off: str):
        wl, tasks = sample_tasks(workload, n, rate, 1)
        seen = []
        pol = make_policy("topas", seed=1, off=off)
        decide0 = pol.decide

        def spy(snap):
            d = decide0(snap)
            seen.append(bool(d.cache_priority))
            return d

        pol.decide = spy
        res = Simulator(tasks, {a.name: a for a in wl.agents}, PROFILE, pol, seed=1).run()
        return res.counters.context_hit_tokens, any(seen), [t.finished_s for t in res.tasks]

    on, used, _ = hits("groupchat", 40, 0.0625, "")
    off, used_off, _ = hits("groupchat", 40, 0.0625, "cache_priority")
    assert used and not used_off
    assert on > off * 1.05
    tl_on = hits("metagpt-tl", 12, 0.0075, "")
    tl_off = hits("metagpt-tl", 12, 0.0075, "cache_priority")
    assert not tl_on[1] and tl_on == tl_off


def phase_state(n_x: int = 14, y_prefix: int = 8000):
    """Agents X and Y resident (8k-token prefixes, nothing running); task 1 (the oldest) and
    ``n_x - 1`` younger tasks wait on X with 1k-token prompts, task 2 on Y.  The free KV fits
    all of X's requests, or Y's and all but one of X's."""
    ids = [1, *range(3, n_x + 2)]
    tasks = [make_task(i, {"s": ("X", (), S.READY)}, arrival_s=float(i)) for i in ids]
    ty = make_task(2, {"s": ("Y", (), S.READY)}, arrival_s=2.0)
    reqs = [make_request(t.task_id, t, "s", 1000, 8000, ready_s=t.arrival_s) for t in tasks]
    ry = make_request(2, ty, "s", 1000, y_prefix, ready_s=2.0)
    return make_snapshot(
        time_s=20.0,
        prefixes=[make_prefix("X", 8000, True), make_prefix("Y", y_prefix, True)],
        waiting=sorted([*reqs, ry], key=lambda r: r.ready_s),
        tasks=[*tasks, ty],
    )


def test_phases_admit_only_the_oldest_tasks_agent_while_its_queue_fills_memory():
    """X's 14 requests (14k tokens, over half the 24.8k its prefix alone leaves) can fill the
    memory and Y's resident prefix holds more than 30 % of the memory left for requests: a
    phase on X admits only X's requests, so Y's prefix goes idle.  Without the departure Y's
    request (task 2, the second oldest) takes memory and the last X request waits."""
    snap = phase_state()
    d = decide(snap)
    assert 2 not in d.admit and len(d.admit) == 14
    d = decide(snap, off="phases")
    assert 2 in d.admit and len(d.admit) == 14
    # the phase lasts while X has waiting requests, even once the oldest request is Y's
    pol = make_policy("topas", seed=0)
    assert pol.phase_agent(snap) == "X"
    rest = [r for r in snap.waiting if r.request_id in (2, 15)]
    later = dataclasses.replace(snap, waiting=rest)  # the same run (same history object)
    assert pol.phase_agent(later) == "X"
    assert pol.decide(later).admit == (15,)
    # ... and ends when X's queue is empty: Y's request is then admitted
    assert pol.decide(dataclasses.replace(snap, waiting=rest[:1])).admit == (2,)


def test_phases_start_only_when_the_queue_is_deep_and_the_other_prefixes_are_worth_evicting():
    pol = make_policy("topas", seed=0)
    assert pol.phase_agent(phase_state()) == "X"
    assert pol.phase_agent(phase_state(n_x=7)) is None  # fewer than phase_min = 8 requests
    assert pol.phase_agent(phase_state(n_x=8)) is None  # 8k tokens: under half of 24.8k
    assert pol.phase_agent(phase_state(y_prefix=2000)) is None  # Y's 2k: under 30 % of 22.8k
    assert make_policy("topas", seed=0, phase_min=20).phase_agent(phase_state()) is None
    assert make_policy("topas", seed=0, off="phases").phase_agent(phase_state()) is None


def test_phases_never_hide_the_next_call_of_a_held_context():
    snap = phase_state()
    ry = next(r for r in snap.waiting if r.agent == "Y")
    held = {(2, "s"): HeldContext(2, "s", "Y", 1000, since_s=15.0, expires_s=30.0)}
    view = make_policy("topas", seed=0).phase_view(dataclasses.replace(snap, held=held))
    assert ry in view.waiting and len(view.waiting) == 15
    view = make_policy("topas", seed=0).phase_view(snap)
    assert ry not in view.waiting and len(view.waiting) == 14


def cohort_state(budget: int, outs=(256,) * 8, finishing: bool = False):
    """Ten waiting 1k-token calls of agent A (2k prefix, resident) whose last eight calls
    generated ``outs`` tokens; with ``finishing``, a running call of A 6 tokens from its end.
    The output reserve (0.6 of 256 = 153 tokens a call) lets all ten in."""
    from test_topas_fixtures import history

    tasks = [make_task(i, {"a": ("A", (), S.READY)}, arrival_s=float(i)) for i in range(1, 11)]
    reqs = [make_request(i, t, "a", 1000, 2000, ready_s=float(i)) for i, t in enumerate(tasks, 1)]
    hist = {("A", "a"): [r for o in outs for r in history("A", "a", [10.0], out=o)]}
    running = []
    if finishing:
        t0 = make_task(0, {"a": ("A", (), S.RUNNING)}, arrival_s=0.0)
        running = [make_request(99, t0, "a", 1000, 2000, running=True, generated=250)]
        tasks.append(t0)
    return make_snapshot(
        time_s=20.0,
        budget=budget,
        prefixes=[make_prefix("A", 2000, True, users=len(running))],
        running=running,
        waiting=reqs,
        tasks=tasks,
        hist=hist,
    )


def test_peak_fit_keeps_a_fixed_length_cohort_within_memory_all_the_way():
    """Ten calls of 1,008 KV tokens and 256 output tokens each, admitted together, grow
    together: 10 x (1,008 + 256 + a partial block) overflows 11.7k free tokens although the
    reserves (153 each) fit.  ``peak_fit`` admits nine; without it all ten go in and the
    engine would have to preempt one near the end."""
    assert len(decide(cohort_state(13_700)).admit) == 9
    assert len(decide(cohort_state(13_700), off="peak_fit").admit) == 10
    # a call finishing in 6 steps gives back its KV before the cohort peaks: all ten fit
    assert len(decide(cohort_state(2000 + 1250 + 16 + 10 * 1161, finishing=True)).admit) == 10
    # outputs of varying length are not predictable: the reserves alone decide, as before
    varied = (150, 350) * 4
    assert len(decide(cohort_state(13_700, outs=varied)).admit) == 10


def test_predictable_output_and_peak_excess():
    from topas.policies.topas.flagship import peak_excess, predictable_output

    assert predictable_output(cohort_state(13_700), "A") == 256
    assert predictable_output(cohort_state(13_700, outs=(256,) * 7), "A") is None  # < 8 seen
    assert predictable_output(cohort_state(13_700, outs=(150, 350) * 4), "A") is None
    # one request, 10 tokens to go, 16-token reserve, 1k KV: peak at step 9 is 9 + 16 - 16
    assert peak_excess([(10, 1000, 16)], 16) == 9
    # a second one finishing at step 5 gives back 500 + 16 before the first peaks
    assert peak_excess([(10, 1000, 16), (5, 500, 16)], 16) == max(2 * 4, 9 - 516)
    assert peak_excess([], 16) == 0
    # the sorted sweep equals evaluating every step
    import random

    rng = random.Random(0)
    for _ in range(200):
        its = [
            (rng.randint(1, 60), rng.randint(0, 900), rng.randint(16, 90))
            for _ in range(rng.randint(0, 8))
        ]
        brute = max(
            [0]
            + [
                sum((k + 16 - res) if rest > k else (-kv - res) for rest, kv, res in its)
                for k in range(0, 61)
            ]
        )
        assert peak_excess(its, 16) == brute


def room_state():
    """Idle resident prefixes A and B (3k each) and C's (3k) with its running call; task 2's
    call waits on D, whose 5k prefix is on the host: it fits only once both A and B go."""
    t0 = make_task(1, {"c": ("C", (), S.RUNNING)}, arrival_s=0.0)
    t1 = make_task(2, {"d": ("D", (), S.READY)}, arrival_s=1.0)
    run = make_request(1, t0, "c", 500, 3000, running=True, generated=50)
    w = make_request(2, t1, "d", 500, 5000, ready_s=1.0)
    return make_snapshot(
        time_s=5.0,
        budget=10240,
        prefixes=[
            make_prefix("A", 3000, True),
            make_prefix("B", 3000, True),
            make_prefix("C", 3000, True),
            make_prefix("D", 5000, False),
        ],
        running=[run],
        waiting=[w],
        tasks=[t0, t1],
    )


def test_room_moves_let_the_local_search_evict_several_idle_prefixes():
    """With more agents than M the search is local: adding D alone does not fit, and
    dropping A or B, or swapping one of them for D, frees too little, so without the
    departure nothing is admitted.  A make-room move (D added, every prefix the state does
    not use dropped) finds the exhaustive search's answer."""
    snap = room_state()
    exact = decide(snap, off="room_moves")  # M = 6: every prefix subset is tried
    assert exact.admit == (2,) and set(exact.evict) == {"A", "B"}
    assert decide(snap, off="room_moves", M=1).admit == ()
    d = decide(snap, M=1)
    assert d.admit == exact.admit and set(d.evict) == set(exact.evict)
