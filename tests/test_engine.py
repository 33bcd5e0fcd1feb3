"""Hand-built scenarios with timelines computed by hand from the cost model."""

from __future__ import annotations

import math

import pytest

from kv_checks import assert_kv_accounted
from topas.engine.bounds import task_lower_bound
from topas.engine.cost import get_profile
from topas.engine.decision import Decision, DecisionError
from topas.engine.simulator import Simulator
from topas.engine.snapshot import Location, Phase
from topas.policies import make_policy
from topas.workflow.model import Agent, Call, Stage, Task

PROFILE = get_profile("a100-80g/qwen2.5-32b")
COST = PROFILE.cost_model()


def one_call_task(tid: int, agent: str, prompt: int, out: int, at: float = 0.0) -> Task:
    return Task(tid, at, (Stage("s", agent, (Call(prompt, out),)),))


def run(tasks, agents, policy="fcfs", **kw):
    sim = Simulator(
        tasks,
        {a.name: a for a in agents},
        PROFILE,
        make_policy(policy) if isinstance(policy, str) else policy,
        **kw,
    )
    return sim, sim.run()


def test_single_request_timeline_matches_cost_model():
    P, p, y = 3000, 500, 200
    _, res = run([one_call_task(0, "A", p, y)], [Agent("A", P)])
    # prefix recomputed by prefill, then the prompt after it, first token, y-1 decode steps
    expect = (
        COST.prefill_time(P, 0)
        + COST.prefill_time(p, P)
        + COST.decode_run_time(1, P + p + 1, y - 1)
    )
    assert res.tasks[0].jct_s == pytest.approx(expect, rel=1e-12)
    r = res.requests[0]
    assert r.first_token_s == pytest.approx(COST.prefill_time(P, 0) + COST.prefill_time(p, P))
    assert res.counters.decode_tokens == y
    assert res.counters.recomputed_prefix_tokens == P
    # lower bound assumes the prefix is already resident
    lb = COST.prefill_time(p, P) + COST.decode_run_time(1, P + p + 1, y - 1)
    assert res.tasks[0].lower_bound_s == pytest.approx(lb)
    assert res.tasks[0].jct_s > res.tasks[0].lower_bound_s


def test_decode_closed_form_equals_stepwise_sum():
    for batch, ctx, n in [(1, 4000, 700), (64, 64 * 3000, 300), (300, 1000, 2000), (7, 7, 1)]:
        brute = sum(COST.decode_step_time(batch, ctx + batch * k) for k in range(n))
        assert COST.decode_run_time(batch, ctx, n) == pytest.approx(brute, rel=1e-12)
        t = brute * 0.6
        k = COST.decode_steps_within(batch, ctx, t, n)
        assert COST.decode_run_time(batch, ctx, k) <= t < COST.decode_run_time(batch, ctx, k + 1)


def test_decode_steps_within_equals_bisection():
    # the guess-first search returns what a plain bisection over [0, max_steps] does
    import random

    rng = random.Random(7)
    for _ in range(3000):
        batch, mx = rng.randint(1, 256), rng.randint(1, 5000)
        ctx = rng.randint(batch, 2_000_000)
        h = rng.random() * rng.choice([0.01, 0.1, 1.0, 10.0, 100.0])
        if COST.decode_run_time(batch, ctx, mx) <= h:
            want = mx
        else:
            lo, hi = 0, mx
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if COST.decode_run_time(batch, ctx, mid) <= h else (lo, mid)
            want = lo
        assert COST.decode_steps_within(batch, ctx, h, mx) == want


def test_time_scaled_profile_multiplies_every_iteration_time():
    # compute-bound prefill, memory-bound decode and the fixed overhead all scale alike
    slow = PROFILE.time_scaled(1.37).cost_model()
    for lin, pairs, reads in [(4096, 4096 * 3000, 0), (64, 64 * 8000, 64 * 8000), (1, 1, 1)]:
        assert slow.iteration_time(lin, pairs, reads) == pytest.approx(
            1.37 * COST.iteration_time(lin, pairs, reads), rel=1e-12
        )
    assert slow.swap_time(1000) == pytest.approx(COST.swap_time(1000))
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="time factor"):
            PROFILE.time_scaled(bad)


def test_two_agents_share_nothing_but_batch_together():
    """Two requests of different agents that both fit: their prefixes are recomputed in one
    iteration, the prompts in the next, then they decode as a batch of two."""
    PA, PB, p, y = 2000, 3000, 400, 100
    _, res = run(
        [one_call_task(0, "A", p, y), one_call_task(1, "B", p, y)], [Agent("A", PA), Agent("B", PB)]
    )
    cost = COST
    pa, ra = cost.prefill_chunk_terms(PA, 0)
    pb, rb = cost.prefill_chunk_terms(PB, 0)
    t1 = cost.iteration_time(PA + PB, pa + pb, ra + rb)
    qa, sa = cost.prefill_chunk_terms(p, PA)
    qb, sb = cost.prefill_chunk_terms(p, PB)
    t2 = cost.iteration_time(2 * p, qa + qb, sa + sb)
    t3 = cost.decode_run_time(2, PA + p + 1 + PB + p + 1, y - 1)
    assert [t.jct_s for t in sorted(res.tasks, key=lambda t: t.task_id)] == pytest.approx(
        [t1 + t2 + t3] * 2
    )
    assert res.counters.batch_time_product / res.counters.busy_s == pytest.approx(2.0)


def test_alternating_agents_without_host_tier_recompute_prefixes():
    """Budget fits one agent's prefix + request only: A, B, A in sequence, each switch
    recomputes the incoming prefix (no host tier), as an LRU engine does."""
    PA, PB, p, y = 8000, 8000, 1000, 50
    agents = [Agent("A", PA), Agent("B", PB)]
    tasks = [
        one_call_task(0, "A", p, y),
        one_call_task(1, "B", p, y, 0.001),
        one_call_task(2, "A", p, y, 0.002),
    ]
    budget = PA + p + y + 300
    _, res = run(tasks, agents, kv_budget_tokens=budget, host_tier=False)
    assert res.counters.recomputed_prefix_tokens == PA + PB + PA
    assert res.counters.prefix_misses == 3
    fins = sorted(t.finished_s for t in res.tasks)
    assert fins[0] < fins[1] < fins[2]


def test_swap_in_from_host_tier_timeline():
    """A runs, B evicts A to the host tier (swap-out), then A comes back by swap-in: the
    swap-in waits behind the swap-out on the serial host link."""
    PA, PB, p, y = 8000, 8000, 1000, 50
    agents = [Agent("A", PA), Agent("B", PB)]
    tasks = [
        one_call_task(0, "A", p, y),
        one_call_task(1, "B", p, y, 0.001),
        one_call_task(2, "A", p, y, 0.002),
    ]
    budget = PA + p + y + 300
    sim, res = run(tasks, agents, kv_budget_tokens=budget, record_timeline=True)
    assert res.counters.recomputed_prefix_tokens == PA + PB  # A is swapped back, not recomputed
    assert res.counters.swap_out_bytes == (PA + PB) * COST.mu  # A, then B, go to the host
    assert res.counters.swap_in_bytes == PA * COST.mu
    recs = {r.task_id: r for r in res.requests}
    # task 2 is admitted when task 1 finishes (B is evicted then); A's host copy arrives
    # after the serial link finishes B's swap-out and A's swap-in
    t1_end = recs[1].finished_s
    a_out_end = recs[0].finished_s + COST.swap_time(PA)  # A's swap-out started at B's admission
    b_out_start = t1_end
    link_free = max(b_out_start, a_out_end) + COST.swap_time(PB)
    a_in_done = link_free + COST.swap_time(PA)
    expect_t2 = a_in_done + COST.prefill_time(p, PA) + COST.decode_run_time(1, PA + p + 1, y - 1)
    assert recs[2].finished_s == pytest.approx(expect_t2, rel=1e-9)


class _PreemptOnce:
    """FCFS, but preempts request 1 at the first decision after it has decoded >= k tokens."""

    name = "preempt-once"

    def __init__(self, k: int):
        self.k = k
        self.done = False
        self.fcfs = make_policy("fcfs", reserve_ratio=0.0)

    def decide(self, snap):
        if not self.done:
            for r in snap.running:
                if r.request_id == 1 and r.generated_tokens >= self.k:
                    self.done = True
                    return Decision(preempt=(1,))
        return self.fcfs.decide(snap)


@pytest.mark.parametrize("mode", ["sglang", "vllm"])
def test_preemption_semantics(mode):
    """Task 0's request (id 1) is preempted when task 1 arrives after it decoded k tokens.
    SGLang re-decodes the k tokens; vLLM re-prefills prompt + k and keeps them."""
    P, p, y = 2000, 500, 400
    agents = [Agent("A", P)]
    t_arr = COST.prefill_time(P, 0) + COST.prefill_time(p, P) + 0.5
    tasks = [one_call_task(0, "A", p, y), one_call_task(1, "A", 100, 10, t_arr)]
    pol = _PreemptOnce(k=5)
    sim, res = run(tasks, agents, policy=pol, preemption=mode)
    k_seen = [r for r in res.requests if r.task_id == 0][0]
    assert k_seen.preemptions == 1
    assert res.counters.preemptions == 1
    # decode tokens: task 0 produced y (+ the redone ones under sglang), task 1 produced 10
    produced_before = res.counters.recomputed_tokens
    if mode == "sglang":
        assert res.counters.decode_tokens > y + 10
        # redo = prompt prefill (p) + tokens generated before the preemption
        gen_before = res.counters.decode_tokens - y - 10
        assert produced_before == p + gen_before
        assert gen_before >= 5
    else:
        assert res.counters.decode_tokens == y + 10
        assert produced_before == p
        # re-prefill covers prompt + generated tokens: prefill counter includes them
        assert res.counters.prefill_tokens > 2 * p + 100


def test_decision_errors_are_raised_not_clipped():
    class Greedy:
        name = "greedy"

        def decide(self, snap):
            return Decision(admit=tuple(r.request_id for r in snap.waiting))

    agents = [Agent("A", 1000)]
    tasks = [one_call_task(i, "A", 3000, 100) for i in range(4)]
    with pytest.raises(DecisionError, match="needs .* KV tokens"):
        run(tasks, agents, policy=Greedy(), kv_budget_tokens=8000)

    class BadEvict:
        name = "bad-evict"

        def decide(self, snap):
            return Decision(admit=tuple(r.request_id for r in snap.waiting), evict=("A",))

    with pytest.raises(DecisionError, match="not resident|use"):
        run([one_call_task(0, "A", 100, 10)], agents, policy=BadEvict())

    class Ghost:
        name = "ghost"

        def decide(self, snap):
            return Decision(admit=(999,))

    with pytest.raises(DecisionError, match="999"):
        run([one_call_task(0, "A", 100, 10)], agents, policy=Ghost())


def test_react_stage_tool_delay_and_held_context():
    """A 2-call stage: the second call is ready tool_delay after the first finishes. A policy
    that holds the context makes the second call prefill only its new tokens."""
    P = 1000
    calls = (Call(500, 100, 2.0), Call(800, 50))
    task = Task(0, 0.0, (Stage("s", "A", calls),))

    class Holder:
        name = "holder"

        def __init__(self):
            self.fcfs = make_policy("fcfs", reserve_ratio=0.0)

        def decide(self, snap):
            d = self.fcfs.decide(snap)
            hold = {
                k: snap.time_s + 10.0 for k, h in snap.held.items() if h.expires_s <= snap.time_s
            }
            return Decision(admit=d.admit, evict=d.evict, hold=hold)

    # without the engine's context cache: only the policy's hold reuses the context
    _, plain = run([task], [Agent("A", P)], context_cache=False)
    _, held = run([task], [Agent("A", P)], policy=Holder(), context_cache=False)
    r0, r1 = sorted(plain.requests, key=lambda r: r.round_index)
    assert r1.ready_s == pytest.approx(r0.finished_s + 2.0)
    # second call: plain prefills 800 tokens after the prefix, held only 800-599 after 1599
    # (the first call's last output token was never fed back: 500 + 100 - 1 tokens have KV)
    t_plain = COST.prefill_time(800, P) + COST.decode_run_time(1, P + 801, 49)
    t_held = COST.prefill_time(201, P + 599) + COST.decode_run_time(1, P + 801, 49)
    assert r1.finished_s - r1.ready_s == pytest.approx(t_plain)
    h1 = sorted(held.requests, key=lambda r: r.round_index)[1]
    assert h1.finished_s - h1.ready_s == pytest.approx(t_held)
    assert held.tasks[0].jct_s < plain.tasks[0].jct_s


def test_context_cache_keeps_an_unheld_context_until_its_room_is_needed():
    """With ``context_cache`` (vLLM's APC, SGLang's radix cache) a finished call's context
    stays in free memory: the stage's next call prefills only its new tokens, unless another
    request needed that memory in between (then it is evicted and prefilled again)."""
    P = 1000
    task = Task(0, 0.0, (Stage("s", "A", (Call(500, 100, 2.0), Call(800, 50))),))
    _, off = run([task], [Agent("A", P)], context_cache=False)
    _, on = run([task], [Agent("A", P)])  # the default
    t_plain = COST.prefill_time(800, P) + COST.decode_run_time(1, P + 801, 49)
    t_cached = COST.prefill_time(201, P + 599) + COST.decode_run_time(1, P + 801, 49)
    r1 = {r.round_index: r for r in off.requests}[1]
    c1 = {r.round_index: r for r in on.requests}[1]
    assert r1.finished_s - r1.ready_s == pytest.approx(t_plain)
    assert c1.finished_s - c1.ready_s == pytest.approx(t_cached)
    assert off.counters.context_hit_tokens == 0 and on.counters.context_hit_tokens == 599
    # with blocks of 16 only whole computed blocks are reused: 599 -> 592
    _, blk = run([task], [Agent("A", P)], context_cache=True, block_size=16)
    assert blk.counters.context_hit_tokens == 592
    assert {r.round_index: r.cached_tokens for r in blk.requests} == {0: 0, 1: 592}
    # a flood during the tool call: B's request (2,736 prompt + 100 output tokens) leaves
    # 4,000 - 1,000 - 2,836 = 164 tokens free, so the cached context (which takes no budget)
    # gives up its tail and keeps its leading 164 tokens, which the next call finds; nothing
    # else is disturbed
    budget = 4000
    flood = Task(1, 1.0, (Stage("f", "B", (Call(budget - P - 200 - 64, 100),)),))
    _, fl = run(
        [task, flood],
        [Agent("A", P), Agent("B", 0)],
        context_cache=True,
        kv_budget_tokens=budget,
        block_size=1,
    )
    assert fl.counters.context_hit_tokens == 164
    assert {(r.task_id, r.round_index): r.cached_tokens for r in fl.requests} == {
        (0, 0): 0,
        (0, 1): 164,
        (1, 0): 0,
    }


def test_hold_expiry_does_not_touch_the_next_offered_context():
    """A hold whose expiry falls exactly when the stage's next call finishes (and offers its
    own context) must not release that new, never-held context (regression: the old expiry
    event freed its tokens and took a prefix user that was never counted)."""
    P = 1000
    task = Task(
        0, 0.0, (Stage("s", "A", (Call(500, 100, 2.0), Call(800, 50, 2.0), Call(900, 20))),)
    )

    class HoldUntil:
        name = "hold-until"

        def __init__(self, until):
            self.fcfs = make_policy("fcfs", reserve_ratio=0.0)
            self.until = until

        def decide(self, snap):
            d = self.fcfs.decide(snap)
            offered = [k for k, h in snap.held.items() if h.expires_s <= snap.time_s]
            hold = {k: self.until for k in offered if self.until > snap.time_s}
            return Decision(admit=d.admit, evict=d.evict, hold=hold)

    _, first = run([task], [Agent("A", P)], policy=HoldUntil(1e9))
    t2 = {r.round_index: r for r in first.requests}[1].finished_s
    _, res = run(
        [task],
        [Agent("A", P)],
        policy=HoldUntil(t2),
        on_decision=lambda snap, dec: assert_kv_accounted(snap),
    )
    assert len(res.requests) == 3


def test_held_context_keeps_its_prefix_resident():
    """A held context continues its prefix's KV (radix-tree child, hash-chained blocks): while
    it is held the prefix counts a user and cannot be evicted; released, it can."""
    P = 1000
    task = Task(0, 0.0, (Stage("s", "A", (Call(500, 100, 5.0), Call(800, 50))),))
    seen = []

    class HoldThenEvict:
        name = "hold-then-evict"

        def __init__(self, release: bool):
            self.fcfs = make_policy("fcfs", reserve_ratio=0.0)
            self.release = release

        def decide(self, snap):
            d = self.fcfs.decide(snap)
            offered = {k for k, h in snap.held.items() if h.expires_s <= snap.time_s}
            live = tuple(k for k, h in snap.held.items() if h.expires_s > snap.time_s)
            if offered:
                return Decision(admit=d.admit, hold={k: snap.time_s + 10.0 for k in offered})
            p = snap.prefixes["A"]
            if live and p.location == Location.DEVICE and not snap.running:
                seen.append(p.users)
                return Decision(evict=("A",), release=live if self.release else ())
            return d

    with pytest.raises(DecisionError, match="held contexts use"):
        run([task], [Agent("A", P)], policy=HoldThenEvict(release=False))
    assert seen == [1]  # the held context is the prefix's one user
    _, res = run([task], [Agent("A", P)], policy=HoldThenEvict(release=True))
    assert len(res.requests) == 2  # releasing the context frees the prefix for eviction


def test_engine_evicts_idle_prefix_before_preempting_on_decode_oom():
    """Decode runs out of KV while an idle prefix is resident: the engine drops the idle
    prefix (LRU) rather than preempting the running request."""
    agents = [Agent("A", 4000), Agent("B", 4000)]
    tasks = [one_call_task(0, "B", 100, 5), one_call_task(1, "A", 500, 3000, 1.0)]
    budget = 4000 + 4000 + 600 + 1000  # A's request outgrows what B's idle prefix leaves
    _, res = run(
        tasks,
        agents,
        policy=make_policy("fcfs", reserve_ratio=0.0),
        kv_budget_tokens=budget,
        host_tier=False,
    )
    assert res.counters.preemptions == 0
    assert res.counters.peak_kv_tokens <= budget


def test_lower_bound_for_dag_is_longest_path():
    agents = {"A": Agent("A", 1000), "B": Agent("B", 1000)}
    stages = (
        Stage("a", "A", (Call(100, 10),)),
        Stage("b", "B", (Call(100, 500),), deps=("a",)),
        Stage("c", "A", (Call(100, 20),), deps=("a",)),
        Stage("d", "B", (Call(100, 10),), deps=("b", "c")),
    )
    t = Task(0, 0.0, stages)
    lb = task_lower_bound(t, agents, COST)
    one = {
        n: COST.call_time_alone(100, o, 1000)
        for n, o in [("a", 10), ("b", 500), ("c", 20), ("d", 10)]
    }
    assert lb == pytest.approx(one["a"] + max(one["b"], one["c"]) + one["d"])
    assert math.isfinite(lb)


def test_snapshot_hides_truth_and_tracks_prefix_state():
    seen = []

    class Spy:
        name = "spy"

        def __init__(self):
            self.fcfs = make_policy("fcfs")

        def decide(self, snap):
            # records are live engine objects: read them during the decision only
            seen.append(
                (
                    snap.event,
                    len(snap.waiting),
                    snap.prefixes["A"].location,
                    [r.phase for r in snap.waiting],
                )
            )
            for r in (*snap.running, *snap.waiting):
                assert not hasattr(r, "out_total") and not hasattr(r, "output_tokens")
            return self.fcfs.decide(snap)

    run([one_call_task(0, "A", 100, 20)], [Agent("A", 500)], policy=Spy())
    event, n_waiting, loc, phases = seen[0]
    assert event == "arrival" and n_waiting == 1
    assert loc == Location.NONE
    assert phases == [Phase.WAITING]
    assert seen[-1][0] == "finish"


@pytest.mark.parametrize("workload", ["metagpt-tl", "toy-chain"])
@pytest.mark.parametrize("rate", [1e-300, 1e-12, float("inf"), float("nan"), 0.0, -1.0])
def test_rates_whose_arrival_times_lose_precision_are_rejected(workload, rate):
    """A rate so low that arrival times pass 1e9 s (float64 clock resolution worse than
    ~1e-7 s: JCTs below their lower bounds by rounding), or not a positive finite number, is
    a ValueError naming the rate, never a run."""
    from topas.api import sample_tasks

    with pytest.raises(ValueError, match=f"rate {rate!r}"):
        sample_tasks(workload, 20, rate, 0)


def test_simulator_rejects_arrival_times_beyond_the_clock_resolution():
    with pytest.raises(ValueError, match="arrival time"):
        run([one_call_task(0, "A", 100, 10, at=1e300)], [Agent("A", 100)])
    sample_ok = run([one_call_task(0, "A", 100, 10, at=1e8)], [Agent("A", 100)])[1]
    assert sample_ok.tasks[0].jct_s >= sample_ok.tasks[0].lower_bound_s * (1 - 1e-9)


@pytest.mark.parametrize("policy", ["continuum", "topas", "autellix-las", "spf"])
def test_a_policy_object_reused_for_a_second_run_starts_afresh(policy):
    """Snapshot.run_id: a policy keeps per-run caches (learned tool times, estimates, LAS
    service) and must drop them when a new engine run starts; a second run with the same
    object gives the first run's result, and so does each replica of a cluster."""
    from topas.api import sample_tasks

    wl, tasks = sample_tasks("metagpt-tl", 6, None, 1)
    agents = {a.name: a for a in wl.agents}
    prof = get_profile("a100-80g/qwen2.5-32b")
    pol = make_policy(policy, seed=1)
    runs = [Simulator(tasks, agents, prof, pol, seed=1).run() for _ in range(2)]
    fresh = Simulator(tasks, agents, prof, make_policy(policy, seed=1), seed=1).run()
    key = [(t.task_id, t.finished_s) for t in fresh.tasks]
    assert [(t.task_id, t.finished_s) for t in runs[0].tasks] == key
    assert [(t.task_id, t.finished_s) for t in runs[1].tasks] == key


def test_a_bad_credit_rejects_the_whole_decision_before_any_of_it_applies():
    """engine/state.check validates everything up front: an admission next to a credit for a
    request that does not exist must not have been applied when the error is raised."""
    seen = []

    class AdmitAndBadCredit:
        name = "bad-credit"

        def decide(self, snap):
            seen.append(snap)
            return Decision(admit=tuple(r.request_id for r in snap.waiting), credit={999: 1.0})

    sim = Simulator(
        [one_call_task(0, "A", 100, 10)], {"A": Agent("A", 1000)}, PROFILE, AdmitAndBadCredit()
    )
    with pytest.raises(DecisionError, match="credits request 999"):
        sim.run()
    assert not sim.running and len(sim.waiting) == 1 and sim.used_kv == 0


def test_check_returns_the_footprint_the_engine_then_reports():
    from topas.engine.state import check_snapshot

    checked = []

    class Checked:
        name = "checked-fcfs"

        def __init__(self):
            self.inner = make_policy("fcfs")

        def decide(self, snap):
            d = self.inner.decide(snap)
            checked.append(check_snapshot(d, snap).used_after_tokens)
            return d

    tasks = [one_call_task(i, "A", 500, 5, at=100.0 * i) for i in range(3)]
    run(tasks, [Agent("A", 1000)], policy=Checked())
    # each arrival finds the engine idle: the first admission needs prefix + prompt
    assert checked[0] == 1000 + 500


def _conversation(shared: int = 1000) -> Task:
    """A (prompt 1000) -> B -> A again, whose prompt starts with A's first 1000 tokens."""
    return Task(
        0,
        0.0,
        (
            Stage("a1", "A", (Call(1000, 100),)),
            Stage("b", "B", (Call(1200, 100),), deps=("a1",)),
            Stage(
                "a2", "A", (Call(1500, 50),), deps=("b",), shares_with="a1", shared_tokens=shared
            ),
        ),
    )


def test_context_cache_finds_a_conversation_the_same_agent_saw_in_an_earlier_stage():
    """Automatic prefix caching across stages: ``a2`` begins with the conversation ``a1`` saw
    (``shares_with``), so with the context cache its first call prefills only the rest;
    without it, or once the cached context had to make room, all of it (as vLLM would)."""
    P = 800
    agents = [Agent("A", P), Agent("B", 0)]
    _, off = run([_conversation()], agents, context_cache=False)
    _, on = run([_conversation()], agents)
    hit = {r.stage: r.cached_tokens for r in on.requests}
    assert hit == {"a1": 0, "b": 0, "a2": 1000}
    assert {r.stage: r.cached_tokens for r in off.requests}["a2"] == 0
    assert on.counters.context_hit_tokens == 1000 and off.counters.context_hit_tokens == 0
    a2_on = next(r for r in on.requests if r.stage == "a2")
    a2_off = next(r for r in off.requests if r.stage == "a2")
    # a2's wait for A's prefix is the same; only its own prefill shrinks
    assert a2_on.finished_s - a2_on.admitted_s == pytest.approx(
        COST.prefill_time(500, P + 1000) + COST.decode_run_time(1, P + 1501, 49)
    )
    assert a2_off.finished_s - a2_off.admitted_s == pytest.approx(
        COST.prefill_time(1500, P) + COST.decode_run_time(1, P + 1501, 49)
    )
    # never more than the shared tokens, however long the earlier context
    _, part = run([_conversation(shared=300)], agents)
    assert {r.stage: r.cached_tokens for r in part.requests}["a2"] == 300
    # the bound credits the same tokens, so it stays below the JCT
    for res in (on, off, part):
        assert res.tasks[0].lower_bound_s <= res.tasks[0].jct_s
    # b's request needs most of the free memory the cached context sat in: once b has
    # decoded, 2,900 - 800 - 1,300 = 800 tokens are free, so a1's context (1,099 tokens)
    # gives up its tail and a2 finds its leading 800
    _, tight = run([_conversation()], agents, kv_budget_tokens=2900, block_size=1)
    assert {r.stage: r.cached_tokens for r in tight.requests}["a2"] == 800
    # in blocks of 16 it gives up whole blocks: 2,912 - 800 - 1,312 (b in blocks) = 800
    # free tokens keep 50 of the context's 69 blocks; one token fewer keeps 49
    for budget, hit in ((2912, 800), (2911, 784)):
        _, t16 = run([_conversation()], agents, kv_budget_tokens=budget, block_size=16)
        assert {r.stage: r.cached_tokens for r in t16.requests}["a2"] == hit, budget


class _PriorityFCFS:
    """FCFS that gives every admitted request its task's cache priority from ``prio``."""

    name = "fcfs-cache-priority"

    def __init__(self, prio: dict[int, float]) -> None:
        self.fcfs = make_policy("fcfs", reserve_ratio=0.0)
        self.prio = prio

    def decide(self, snap):
        d = self.fcfs.decide(snap)
        tasks = {r.request_id: r.task_id for r in snap.waiting}
        pr = {rid: self.prio[tasks[rid]] for rid in d.admit if self.prio.get(tasks[rid])}
        return Decision(admit=d.admit, evict=d.evict, cache_priority=pr)


def _two_react_tasks_and_a_flood(budget: int = 6000):
    """Tasks 0 and 1 (agent A, prefix 1,000) each make a call, wait 5 s on a tool, call again;
    task 1's first call decodes longer, so its context is cached after task 0's.  At t = 6 s,
    both contexts cached (600 and 610 tokens), a flood (agent B) takes all but 650 tokens of
    the free memory: one context stays whole, the other keeps its leading 40 or 50 tokens."""
    t0 = Task(0, 0.0, (Stage("s", "A", (Call(500, 100, 5.0), Call(800, 50))),))
    t1 = Task(1, 0.001, (Stage("s", "A", (Call(500, 110, 5.0), Call(800, 50))),))
    flood = Task(2, 6.0, (Stage("f", "B", (Call(budget - 1000 - 650 - 100, 100),)),))
    return [t0, t1, flood], [Agent("A", 1000), Agent("B", 0)]


def _second_call_hits(policy, budget: int = 6000) -> dict[int, int]:
    tasks, agents = _two_react_tasks_and_a_flood(budget)
    _, res = run(tasks, agents, policy=policy, kv_budget_tokens=budget, block_size=1)
    return {r.task_id: r.cached_tokens for r in res.requests if r.round_index == 1}


def test_context_cache_trims_lower_cache_priorities_first():
    """Decision.cache_priority (SGLang's priority eviction): without priorities the cache trims
    the least recently finished context (task 0's) first; when task 0's calls carry a higher
    priority than task 1's, task 1's context is trimmed instead and task 0's next call finds
    all of its context.  Equal priorities are LRU again."""
    lru = _second_call_hits(make_policy("fcfs", reserve_ratio=0.0))
    assert lru == {0: 40, 1: 609}  # task 1's context (the most recent) kept whole
    prio = _second_call_hits(_PriorityFCFS({0: 2.0, 1: 1.0}))
    assert prio == {0: 599, 1: 50}  # the same 650 tokens, task 0's context kept whole
    assert _second_call_hits(_PriorityFCFS({0: 1.0, 1: 1.0})) == lru
    # a priority on task 0 only (task 1 has none, i.e. 0) protects task 0 as well
    assert _second_call_hits(_PriorityFCFS({0: 0.5})) == prio


@pytest.mark.parametrize(
    "prio, match",
    [({999: 1.0}, "cache priority to request 999"), (None, "is not finite")],
)
def test_a_bad_cache_priority_rejects_the_whole_decision(prio, match):
    class Bad:
        name = "bad-cache-priority"

        def decide(self, snap):
            ids = tuple(r.request_id for r in snap.waiting)
            return Decision(admit=ids, cache_priority=prio or {ids[0]: float("nan")})

    sim = Simulator([one_call_task(0, "A", 100, 10)], {"A": Agent("A", 1000)}, PROFILE, Bad())
    with pytest.raises(DecisionError, match=match):
        sim.run()
    assert not sim.running and sim.used_kv == 0
