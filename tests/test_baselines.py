"""Baseline policies: each one's defining choice decides a small hand-built scenario.

Snapshots are built by hand (the records are the engine's own classes); the Continuum tests
run tiny simulations because its defining choice is a time-to-live across events.
"""

from __future__ import annotations

import math

import pytest

from kv_checks import assert_kv_accounted
from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.engine.decision import Decision
from topas.engine.simulator import Simulator
from topas.engine.snapshot import (
    EngineConfig,
    HeldContext,
    Location,
    Phase,
    PrefixState,
    RequestState,
    Snapshot,
    StageState,
    StageStatus,
    TaskState,
)
from topas.policies import make_policy
from topas.policies.continuum import best_ttl_prefix, best_ttl_s
from topas.policies.dfs_weight import dfs_weight_order
from topas.policies.kvflow import steps_to_execution
from topas.policies.lpm import lpm_order
from topas.policies.parrot import parrot_order
from topas.workflow.model import Agent, Call, Stage, Task

PROFILE = get_profile(DEFAULT_PROFILE)
COST = PROFILE.cost_model()
BASELINES = [
    "fcfs",
    "spf",
    "srpt",
    "lpm",
    "dfs-weight",
    "parrot-fcfs",
    "autellix-las",
    "kvflow",
    "continuum",
]


# ---------------------------------------------------------------------------- builders
def prefix(
    agent: str,
    tokens: int,
    where: Location = Location.DEVICE,
    last_used_s: float = 0.0,
    users: int = 0,
) -> PrefixState:
    p = PrefixState(agent, tokens)
    p.location = where
    p.ready = where == Location.DEVICE
    p.on_host = where == Location.HOST
    p.last_used_s = last_used_s
    p.users = users
    return p


def task(
    tid: int, arrival_s: float, stages: list[tuple[str, str, tuple[str, ...], StageStatus]]
) -> TaskState:
    """``stages``: (name, agent, deps, status) in a topological order."""
    succs: dict[str, list[str]] = {n: [] for n, *_ in stages}
    for n, _, deps, _ in stages:
        for d in deps:
            succs[d].append(n)
    sts = {}
    for n, a, deps, status in stages:
        s = StageState(n, n, a, deps, tuple(succs[n]))
        s.status = status
        sts[n] = s
    ts = TaskState(tid, "test", arrival_s, sts, tuple(n for n, *_ in stages))
    ts.stages_done = sum(s.status == StageStatus.DONE for s in sts.values())
    return ts


_rid = [0]
#: one history object: stateful policies treat snapshots sharing it as one run
_ONE_RUN: dict = {}


def req(
    tid: int,
    stage: str,
    agent: str,
    ready_s: float,
    prompt: int = 500,
    prefix_tokens: int = 0,
    round_index: int = 0,
    running: bool = False,
) -> RequestState:
    _rid[0] += 1
    r = RequestState(
        _rid[0], tid, stage, agent, round_index, prompt, prefix_tokens, ready_s, seq=_rid[0]
    )
    if running:
        r.phase = Phase.DECODE
        r.admitted_s = ready_s
        r.kv_tokens = prompt
    return r


def snap(
    time_s: float,
    prefixes: list[PrefixState],
    tasks: list[TaskState],
    waiting: list[RequestState],
    running: list[RequestState] = (),
    held: list[HeldContext] = (),
    budget: int = 32_768,
    host: int = 1 << 20,
) -> Snapshot:
    pmap = {p.agent: p for p in prefixes}
    used = sum(p.tokens for p in prefixes if p.location == Location.DEVICE)
    used += sum(r.kv_tokens for r in running)
    used += sum(h.tokens for h in held if h.expires_s > time_s)
    return Snapshot(
        time_s=time_s,
        event="test",
        config=EngineConfig(budget, host_capacity_tokens=host),
        cost=COST,
        used_kv_tokens=used,
        prefixes=pmap,
        running=tuple(running),
        waiting=tuple(sorted(waiting, key=lambda r: r.seq)),
        tasks={t.task_id: t for t in tasks},
        held={(h.task_id, h.stage): h for h in held},
        history=_ONE_RUN,
    )


def one_stage(tid: int, arrival: float, agent: str, status=StageStatus.READY) -> TaskState:
    return task(tid, arrival, [("s", agent, (), status)])


def decide(name: str, s: Snapshot, **params) -> Decision:
    return make_policy(name, seed=0, **params).decide(s)


# ---------------------------------------------------------------------------- LPM
def test_lpm_admits_cached_prefix_before_older_request():
    # budget fits one more request: the older one needs its 3k prefix, the newer one hits
    old = req(1, "s", "cold", ready_s=0.0)
    new = req(2, "s", "warm", ready_s=1.0)
    s = snap(
        2.0,
        [prefix("cold", 3000, Location.NONE), prefix("warm", 3000, users=1)],
        [one_stage(1, 0.0, "cold"), one_stage(2, 1.0, "warm")],
        [old, new],
        running=[req(3, "s", "warm", 0.5, prompt=2000, running=True)],
        budget=8000,
    )
    assert decide("lpm", s).admit == (new.request_id,)
    assert decide("fcfs", s).admit == ()  # FCFS: the old request blocks the queue


def test_lpm_in_queue_check_moves_duplicate_uncached_prefix_back():
    a1 = req(1, "s", "x", 0.0, prefix_tokens=2000)
    a2 = req(2, "s", "x", 0.1, prefix_tokens=2000)
    b = req(3, "s", "y", 0.2, prefix_tokens=16)  # shares < 32 tokens: never deprioritized
    b2 = req(4, "s", "y", 0.3, prefix_tokens=16)
    tasks = [one_stage(i, 0.0, a) for i, a in ((1, "x"), (2, "x"), (3, "y"), (4, "y"))]
    s = snap(
        1.0,
        [prefix("x", 2000, Location.NONE), prefix("y", 16, Location.NONE)],
        tasks,
        [a1, a2, b, b2],
    )
    assert [r.request_id for r in lpm_order(s)] == [
        a1.request_id,
        b.request_id,
        b2.request_id,
        a2.request_id,
    ]


def test_lpm_falls_back_to_fcfs_above_128_waiting():
    warm = prefix("warm", 1000)
    cold = prefix("cold", 1000, Location.NONE)
    waiting = [req(i, "s", "cold" if i < 100 else "warm", ready_s=float(i)) for i in range(129)]
    tasks = [one_stage(i, 0.0, r.agent) for i, r in enumerate(waiting)]
    s = snap(200.0, [warm, cold], tasks, waiting)
    assert lpm_order(s) == sorted(waiting, key=lambda r: r.ready_s)
    s_small = snap(200.0, [warm, cold], tasks[:128], waiting[:128])
    assert lpm_order(s_small)[0].agent == "warm"


def test_lpm_counts_held_context_as_cached():
    a = req(1, "s", "x", 0.0)
    b = req(2, "s", "x", 0.5)  # its previous call's 1500-token context is held
    h = HeldContext(2, "s", "x", 1500, since_s=0.0, expires_s=10.0)
    s = snap(
        1.0, [prefix("x", 1000)], [one_stage(1, 0.0, "x"), one_stage(2, 0.0, "x")], [a, b], held=[h]
    )
    assert [r.request_id for r in lpm_order(s)] == [b.request_id, a.request_id]


# ---------------------------------------------------------------------------- DFS-weight
def test_dfs_weight_serves_heaviest_subtree_first_and_uncached_last():
    root_r = req(1, "s", "cold", 0.0)  # oldest, no cached match: goes last
    a = req(2, "s", "big", 1.0)  # longest match (3000) but alone in its subtree
    b1 = req(3, "s", "small", 2.0)
    b2 = req(4, "s", "small", 3.0)
    tasks = [one_stage(i + 1, 0.0, r.agent) for i, r in enumerate([root_r, a, b1, b2])]
    prefixes = [prefix("cold", 500, Location.NONE), prefix("big", 3000), prefix("small", 1000)]
    s = snap(5.0, prefixes, tasks, [root_r, a, b1, b2])
    ids = [r.request_id for r in dfs_weight_order(s)]
    assert ids == [b1.request_id, b2.request_id, a.request_id, root_r.request_id]
    # LPM on the same queue prefers the longest match
    assert lpm_order(s)[0].request_id == a.request_id


def test_dfs_weight_emits_context_children_before_their_agent_node():
    plain = req(1, "s", "x", 0.0)
    ctx = req(2, "s", "x", 1.0, round_index=1)
    h = HeldContext(2, "s", "x", 800, since_s=0.5, expires_s=9.0)
    s = snap(
        2.0,
        [prefix("x", 1000)],
        [one_stage(1, 0.0, "x"), one_stage(2, 0.0, "x")],
        [plain, ctx],
        held=[h],
    )
    assert [r.request_id for r in dfs_weight_order(s)] == [ctx.request_id, plain.request_id]


# ---------------------------------------------------------------------------- Parrot
def test_parrot_serves_earliest_task_first_not_earliest_request():
    # task 1 arrived first; its second stage became ready after task 2's first stage
    t1 = task(1, 0.0, [("a", "x", (), StageStatus.DONE), ("b", "y", ("a",), StageStatus.READY)])
    t2 = one_stage(2, 1.0, "z")
    r2 = req(2, "s", "z", ready_s=1.0)
    r1 = req(1, "b", "y", ready_s=5.0)
    prefixes = [prefix("x", 100), prefix("y", 100), prefix("z", 100)]
    s = snap(6.0, prefixes, [t1, t2], [r2, r1], budget=900)  # room for one request
    assert decide("parrot-fcfs", s).admit == (r1.request_id,)
    assert decide("fcfs", s).admit == (r2.request_id,)


def test_parrot_batches_requests_sharing_a_prefix():
    r1 = req(1, "s", "x", 0.0)
    r2 = req(2, "s", "y", 0.1)
    r3 = req(3, "s", "x", 0.2)
    tasks = [one_stage(1, 0.0, "x"), one_stage(2, 1.0, "y"), one_stage(3, 2.0, "x")]
    s = snap(3.0, [prefix("x", 100), prefix("y", 100)], tasks, [r1, r2, r3])
    assert [r.request_id for r in parrot_order(s)] == [r1.request_id, r3.request_id, r2.request_id]


# ---------------------------------------------------------------------------- Autellix
def _autellix_history(mode: str, thresholds_s=(6.0,)):
    """Task A: two parallel 5 s branches then a join (critical path 5 s, total 10 s).
    Task B: a 7 s stage then a second one (critical path = total = 7 s).  At t=7 both have a
    request waiting; B's became ready first."""
    pol = make_policy(
        "autellix-las", seed=0, mode=mode, thresholds_s=thresholds_s, starvation_ratio=None
    )
    prefixes = [prefix("x", 100, users=3)]
    budget = 100 + 3000  # the two running... then room for a single 2000-token request
    ta = task(
        1,
        0.0,
        [
            ("l", "x", (), StageStatus.RUNNING),
            ("r", "x", (), StageStatus.RUNNING),
            ("j", "x", ("l", "r"), StageStatus.PENDING),
        ],
    )
    tb = task(
        2, 0.0, [("p", "x", (), StageStatus.RUNNING), ("q", "x", ("p",), StageStatus.PENDING)]
    )
    run = [
        req(1, "l", "x", 0.0, running=True, prompt=10),
        req(1, "r", "x", 0.0, running=True, prompt=10),
        req(2, "p", "x", 0.0, running=True, prompt=10),
    ]
    assert pol.decide(snap(0.0, prefixes, [ta, tb], [], running=run, budget=budget)).empty
    # t=5: A's branches finish (its join is not ready in this hand-made history until t=7)
    for n in ("l", "r"):
        ta.stages[n].status = StageStatus.DONE
    pol.decide(snap(5.0, [prefix("x", 100, users=1)], [ta, tb], [], running=run[2:], budget=budget))
    tb.stages["p"].status = StageStatus.DONE
    tb.stages["q"].status = StageStatus.READY
    ta.stages["j"].status = StageStatus.READY
    rb = req(2, "q", "x", 7.0, prompt=2000)
    ra = req(1, "j", "x", 7.0, prompt=2000)
    s7 = snap(7.0, [prefix("x", 100)], [ta, tb], [rb, ra], budget=budget)
    return pol, s7, ra, rb


def test_autellix_atlas_serves_least_critical_path_service():
    pol, s7, ra, rb = _autellix_history("atlas")
    assert pol.decide(s7).admit == (ra.request_id,)  # cp 5 s < 7 s, although B is older
    assert pol.service.critical_path_s(s7.tasks[1])["j"] == pytest.approx(5.0)
    assert pol.service.critical_path_s(s7.tasks[2])["q"] == pytest.approx(7.0)
    assert decide("fcfs", s7).admit == (rb.request_id,)


def test_autellix_plas_counts_total_service_instead():
    pol, s7, ra, rb = _autellix_history("plas")
    assert pol.decide(s7).admit == (rb.request_id,)  # total 7 s < 10 s
    assert pol.service.task_total_s(s7.tasks[1]) == pytest.approx(10.0)


def test_autellix_same_queue_keeps_arrival_order():
    # 5 s and 7 s fall into one default queue [4, 8): discretisation leaves FCFS order
    pol, s7, ra, rb = _autellix_history("atlas", thresholds_s=(0.5, 1, 2, 4, 8, 16))
    assert pol.decide(s7).admit == (rb.request_id,)


# ---------------------------------------------------------------------------- KVFlow
def _kvflow_scene():
    # task 1 runs agent z now; agent "soon" runs next (ste 1); agent "never" has no future
    t1 = task(
        1,
        0.0,
        [
            ("a", "z", (), StageStatus.RUNNING),
            ("b", "soon", ("a",), StageStatus.PENDING),
            ("c", "later", ("b",), StageStatus.PENDING),
        ],
    )
    t2 = one_stage(2, 1.0, "new")
    running = req(1, "a", "z", 0.0, prompt=1000, running=True)
    waiting = req(2, "s", "new", 1.0, prompt=1000)
    prefixes = [
        prefix("z", 1000, users=1, last_used_s=0.0),
        prefix("soon", 2000, last_used_s=1.0),  # least recently used
        prefix("never", 2000, last_used_s=5.0),
        prefix("new", 2000, Location.NONE),
        prefix("later", 500, Location.HOST),
    ]
    # used: 1000 + 2000 + 2000 + 1000 = 6000; the new request needs 2000 + 1000 (+ reserve)
    return snap(6.0, prefixes, [t1, t2], [waiting], running=[running], budget=8500)


def test_kvflow_steps_to_execution_follow_the_dag():
    ste = steps_to_execution(_kvflow_scene())
    assert ste["z"] == 0 and ste["soon"] == 1 and ste["later"] == 2 and ste["new"] == 0
    assert math.isinf(ste["never"])


def test_kvflow_evicts_the_prefix_used_farthest_in_the_future():
    s = _kvflow_scene()
    assert decide("kvflow", s, reserve_ratio=0).evict == ("never",)
    assert decide("fcfs", s, reserve_ratio=0).evict == ("soon",)  # LRU


def test_kvflow_prefetches_next_step_agent_from_host():
    t1 = task(
        1,
        0.0,
        [
            ("a", "z", (), StageStatus.RUNNING),
            ("b", "next", ("a",), StageStatus.PENDING),
            ("c", "far", ("b",), StageStatus.PENDING),
        ],
    )
    prefixes = [
        prefix("z", 1000, users=1),
        prefix("next", 2000, Location.HOST),
        prefix("far", 2000, Location.HOST),
    ]
    s = snap(1.0, prefixes, [t1], [], running=[req(1, "a", "z", 0.0, running=True)])
    d = decide("kvflow", s)
    assert d.load == ("next",)  # the agent two steps away is not prefetched
    assert decide("kvflow", s, prefetch_steps=2).load == ("next", "far")
    assert decide("fcfs", s).empty


# ---------------------------------------------------------------------------- Continuum
def _react_run(policy: str, tool_s: float, **params):
    agents = {"w": Agent("w", 1000)}
    stage = Stage("s", "w", (Call(3000, 40, tool_s), Call(3200, 40, tool_s), Call(3400, 40)))
    tasks = [Task(0, 0.0, (stage,))]
    held_at_return = []

    def watch(s: Snapshot, d: Decision) -> None:
        # every KV token in use belongs to a resident prefix, a running call or a live pin
        # (an expired pin must give its memory back)
        assert_kv_accounted(s)
        for r in s.waiting:
            if r.round_index > 0:
                h = s.held.get((r.task_id, r.stage))
                held_at_return.append(h is not None and h.expires_s > s.time_s)

    # the engine without its context cache: holding is then the only way to reuse a context
    res = Simulator(
        tasks,
        agents,
        PROFILE,
        make_policy(policy, seed=0, **params),
        on_decision=watch,
        context_cache=False,
    ).run()
    return held_at_return, res


def test_continuum_keeps_context_through_short_tool_call_not_long_one():
    short, res_short = _react_run("continuum", 0.3)
    long_, res_long = _react_run("continuum", 100.0)  # beyond max_ttl_s = 30 s
    assert short == [True, True]
    assert long_ == [False, False]
    fcfs, res_fcfs = _react_run("fcfs", 0.3)
    assert fcfs == [False, False]
    # keeping the context skipped re-prefilling it
    assert res_short.counters.prefill_tokens < res_fcfs.counters.prefill_tokens


def test_continuum_ttl_from_observed_tool_durations():
    assert best_ttl_s([0.2, 0.3, 0.25], benefit_s=1.0, cost_rate=0.05, max_ttl_s=30) == 0.3
    # long tools: the memory held costs more than a reload saves
    assert best_ttl_s([40.0, 50.0, 60.0], benefit_s=1.0, cost_rate=0.05, max_ttl_s=100) == 0.0
    # bimodal: cover the short mode only
    assert best_ttl_s([0.2] * 8 + [60.0] * 2, benefit_s=1.0, cost_rate=0.05, max_ttl_s=100) == 0.2
    # learned online: after observing long tools, a new context is not pinned at all
    pol = make_policy("continuum", seed=0)
    pol.samples[("w", "s")] = [90.0] * 5
    h = HeldContext(1, "s", "w", 3000, since_s=1.0, expires_s=1.0)
    s = snap(1.0, [prefix("w", 1000)], [one_stage(1, 0.0, "w", StageStatus.TOOL)], [], held=[h])
    pol.observe(s)  # starts the run; then inject what it would have learned
    pol.samples[("w", "s")] = [90.0] * 5
    assert pol.ttl_s(s, h) == 0.0
    assert pol.decide(s).hold == {}
    pol.samples[("w", "s")] = [0.5] * 5
    assert pol.decide(s).hold == {(1, "s"): pytest.approx(1.0 + 0.5 + pol.slack_s)}


def test_continuum_ttl_scan_matches_the_loop_exactly():
    # the policy's scan (kept-sorted samples, prefix sums, from the largest TTL down, early
    # stop) returns bit for bit what best_ttl_s's loop does, ties and duplicates included
    import random
    from bisect import bisect_right
    from itertools import accumulate

    rng = random.Random(13)
    for _ in range(3000):
        n = rng.randint(1, 70)
        if rng.random() < 0.4:
            xs = [rng.choice([0.0, 0.5, 1.0, 2.0, 30.0, 31.0]) for _ in range(n)]
        else:
            xs = [rng.expovariate(1 / rng.choice([0.1, 1.0, 5.0, 20.0])) for _ in range(n)]
        benefit = rng.choice([0.0, rng.random(), 10 * rng.random(), 1e6 * rng.random()])
        cost = rng.choice([0.0, 0.01 * rng.random(), rng.random(), 10 * rng.random()])
        max_ttl = rng.choice([0.0, 1.0, 5.0, 30.0])
        srt = sorted(xs)
        got = best_ttl_prefix(
            srt, bisect_right(srt, max_ttl), list(accumulate(srt, initial=0.0)), n, benefit, cost
        )
        assert repr(got) == repr(best_ttl_s(xs, benefit, cost, max_ttl))


def test_continuum_unpins_younger_program_under_pressure():
    # an old program's request waits; a younger program's context is pinned in its tool call
    t_old = one_stage(1, 0.0, "x")
    t_young = one_stage(2, 5.0, "x", StageStatus.TOOL)
    h = HeldContext(2, "s", "x", 3000, since_s=6.0, expires_s=20.0)
    r = req(1, "s", "x", 7.0, prompt=3000)
    s = snap(8.0, [prefix("x", 1000)], [t_old, t_young], [r], held=[h], budget=6000)
    d = decide("continuum", s, reserve_ratio=0)
    assert d.release == ((2, "s"),) and d.admit == (r.request_id,)


# ---------------------------------------------------------------------------- SPF
def test_spf_serves_task_with_shortest_expected_remaining_path():
    long_t = task(
        1,
        0.0,
        [
            ("a", "x", (), StageStatus.READY),
            ("b", "x", ("a",), StageStatus.PENDING),
            ("c", "x", ("b",), StageStatus.PENDING),
        ],
    )
    short_t = one_stage(2, 1.0, "x")
    r_long = req(1, "a", "x", 0.0)
    r_short = req(2, "s", "x", 1.0)
    s = snap(2.0, [prefix("x", 1000)], [long_t, short_t], [r_long, r_short], budget=1900)
    pol = make_policy("spf", seed=0)
    rem = pol.remaining_s(s)
    assert rem[2] < rem[1]
    assert pol.decide(s).admit == (r_short.request_id,)
    assert decide("fcfs", s).admit == (r_long.request_id,)


# ---------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_runs_toy_chain_under_contention(name):
    from topas.api import simulate

    res = simulate("toy-chain", name, n_tasks=20, rate=3.0, seed=2)
    assert len(res.tasks) == 20
    assert all(t.jct_s >= t.lower_bound_s - 1e-9 for t in res.tasks)
    # small budget, no host tier, blocks: prefixes must be evicted and dropped
    res2 = simulate(
        "toy-chain",
        name,
        n_tasks=12,
        rate=3.0,
        seed=3,
        host_tier=False,
        block_size=16,
        kv_budget_tokens=12_000,
    )
    assert len(res2.tasks) == 12
