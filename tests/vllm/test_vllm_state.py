"""One engine state for both engines (issue 15): the vLLM scheduler keeps tasks, stages and
history through :class:`~topas.engine.state.EngineState` as the simulator does, validates
every decision with :func:`~topas.engine.state.check_snapshot`, and runs in vLLM's async
scheduler."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from topas.engine.decision import Decision
from topas.engine.snapshot import StageStatus
from topas.engine.state import check_snapshot, kv_footprint

pytestmark = pytest.mark.vllm


class _Recording:
    """Wraps a policy: every snapshot it saw is checked with the engines' shared rules."""

    def __init__(self, inner):
        self.inner = inner
        self.snaps = 0
        self.problems: list[str] = []

    def decide(self, snap):
        d = self.inner.decide(snap)
        self.snaps += 1
        fp = kv_footprint(snap.prefixes, snap.running, snap.held, snap.time_s)
        if fp.used_tokens != snap.used_kv_tokens:
            self.problems.append(f"used {snap.used_kv_tokens} != footprint {fp.used_tokens}")
        for a, p in snap.prefixes.items():
            if p.users != fp.users.get(a, 0):
                self.problems.append(f"prefix {a}: users {p.users} != {fp.users.get(a, 0)}")
        check_snapshot(d, snap)  # raises DecisionError: the policy is valid on this engine
        return d


def _history(hist) -> Counter:
    return Counter(
        (r.workflow, r.kind, r.agent, r.rounds, r.output_tokens)
        for recs in hist.values()
        for r in recs
    )


@pytest.mark.parametrize("policy", ["fcfs", "continuum", "topas"])
def test_same_workload_same_stage_history_on_both_engines(engine, policy):
    """Parity: one MetaGPT task (a DAG of multi-round stages) run on vLLM and on the
    simulator under the same policy ends in the same per-stage state and the same history
    records (rounds and output tokens; times differ by nature), and every snapshot vLLM
    built satisfies the shared KV rule and accepts the policy's decision."""
    from topas.api import sample_tasks
    from topas.engine.cost import get_profile
    from topas.engine.simulator import Simulator
    from topas.integrations.vllm.backends import InProcessBackend
    from topas.integrations.vllm.driver import DriveConfig, drive, scale_tasks
    from topas.policies import make_policy

    eng, sched = engine
    wl, tasks = sample_tasks("metagpt-tl", 1, None, seed=3)
    scaled, agents = scale_tasks(tasks, wl.agents, DriveConfig(token_scale=0.04, time_scale=0.02))
    rec = _Recording(make_policy(policy, seed=0))
    sched.topas_policy = rec
    before = _history(sched._history)
    n0 = len(sched._task_ids)

    class _Backend(InProcessBackend):
        def __init__(self, eng):
            self.engine = eng
            self._seen_first = set()
            self.on_step = None

    res = drive(scaled, agents, _Backend(eng), policy=policy, run_id=f"parity-{policy}")
    sched._sync()  # the scheduler sees the last finish at its next step; there is none
    assert len(res.requests) == sum(t.n_calls for t in scaled)
    vllm_hist = _history(sched._history) - before
    assert rec.problems == [] and rec.snaps > 0
    assert sched.topas_stats["invalid_decisions"] == 0
    assert sched.topas_stats["policy_errors"] == 0
    (tid,) = [sched._task_ids[k] for k in list(sched._task_ids)[n0:]]
    vtask = sched._tasks[tid]

    sim = Simulator(
        scaled, agents, get_profile("cpu/tiny-llama"), make_policy(policy, seed=0), seed=0
    )
    sim.run()
    assert vllm_hist == _history(sim.state.history)
    spec = scaled[0]
    assert vtask.stages_done == len(spec.stages)
    for s in spec.stages:
        st = vtask.stages[s.name]
        assert st.status == StageStatus.DONE, s.name
        assert st.rounds_done == len(s.calls), s.name
        assert st.output_tokens == sum(c.output_tokens for c in s.calls), s.name


class _Invalid:
    """Admits the first waiting request twice: invalid on every step with one waiting."""

    def decide(self, snap):
        if snap.waiting:
            r = snap.waiting[0].request_id
            return Decision(admit=(r, r))
        return Decision()


def test_an_invalid_decision_is_counted_and_the_step_admits_in_arrival_order(engine, caplog):
    from tests.vllm.test_vllm_robust import _prompt, _run, _submit

    eng, sched = engine
    sched.topas_policy = _Invalid()
    for k in range(3):
        _submit(eng, f"inv{k}", _prompt(f"inv{k}"))
    with caplog.at_level("WARNING", logger="vllm.topas"):
        done = _run(eng)
    assert len(done) == 3 and all(n == 2 for _, n in done.values())
    assert sched.topas_stats["invalid_decisions"] >= 1
    lines = [r.getMessage() for r in caplog.records if "invalid decision" in r.getMessage()]
    assert lines and "admits a request twice" in lines[0]
    assert len(lines) <= 1  # rate-limited: one line per interval


def test_the_scheduler_is_vllms_async_one(engine, llm):
    """vLLM runs async scheduling by default (on GPU); a subclass of the synchronous Scheduler
    would silently turn it off, so TopasScheduler subclasses AsyncScheduler.  vLLM's CPU
    platform turns async scheduling off, so here the async scheduler runs in vLLM's
    synchronous engine loop (every test in this folder runs it).  The start-up check finds
    every private part it relies on in the supported version."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    import vllm
    from topas.integrations.vllm.compat import SUPPORTED_VLLM, missing_parts
    from topas.integrations.vllm.scheduler import (
        LPMScheduler,
        TopasScheduler,
        TopasSyncScheduler,
    )

    eng, sched = engine
    assert type(sched) is TopasScheduler and isinstance(sched, AsyncScheduler)
    assert issubclass(LPMScheduler, AsyncScheduler)
    assert issubclass(TopasSyncScheduler, Scheduler)
    assert not issubclass(TopasSyncScheduler, AsyncScheduler)
    assert missing_parts(sched) == []
    assert vllm.__version__ == SUPPORTED_VLLM


def test_a_conversation_finds_its_shared_tokens_in_vllms_prefix_cache(engine):
    """Conversation reuse across stages (``Stage.shares_with``): a lone group-chat task run
    on vLLM finds, for the stages continuing the conversation, the shared prompt tokens in
    vLLM's own prefix cache -- never more than the whole blocks of the shared tokens that the
    simulator credits, and nothing for stages that continue no conversation.  (How long a
    context survives differs: vLLM evicts block by block in its whole pool, the simulator
    whole contexts within the KV budget; so only the bounds and the hits are compared.)"""
    from topas.api import sample_tasks
    from topas.engine.bounds import context_credit
    from topas.engine.cost import get_profile
    from topas.engine.simulator import Simulator
    from topas.integrations.vllm.backends import InProcessBackend
    from topas.integrations.vllm.driver import DriveConfig, drive, scale_tasks
    from topas.policies import make_policy

    eng, sched = engine
    sched.topas_policy = make_policy("fcfs")
    wl, tasks = sample_tasks("groupchat", 8, None, seed=1)
    scaled, agents = scale_tasks(tasks, wl.agents, DriveConfig(token_scale=0.1, time_scale=0.02))
    task = max(scaled, key=lambda t: sum(s.shared_tokens for s in t.stages))
    task = replace(task, task_id=0, arrival_s=0.0)
    prof = get_profile("cpu/tiny-llama")
    by = {s.name: s for s in task.stages}

    def full(s) -> int:  # the engines' whole-block credit of the shared tokens
        src = by[s.shares_with].calls[-1]
        computed = src.prompt_tokens + src.output_tokens - 1
        return context_credit(min(computed, s.shared_tokens), s.calls[0].prompt_tokens, 128)

    assert prof.block_size == 128
    shared = [s for s in task.stages if s.shares_with and full(s) > 0]
    assert len(shared) >= 5

    class _Backend(InProcessBackend):
        def __init__(self, eng):
            self.engine = eng
            self._seen_first = set()
            self.on_step = None

    res = drive([task], agents, _Backend(eng), policy="fcfs", run_id="conversation")
    out = Simulator([task], agents, prof, make_policy("fcfs"), seed=0).run()
    on_vllm = {r.stage: r.cached_tokens for r in res.requests}
    in_sim = {r.stage: r.cached_tokens for r in out.requests}
    for s in task.stages:
        if s.shares_with:
            assert 0 <= on_vllm[s.name] <= full(s) and in_sim[s.name] in (0, full(s)), s.name
        else:
            assert on_vllm[s.name] == 0 and in_sim[s.name] == 0, s.name
    assert sum(on_vllm[s.name] > 0 for s in shared) >= len(shared) // 2
    assert sum(in_sim[s.name] > 0 for s in shared) >= 1


def test_the_flagship_ranks_conversations_in_vllms_cache(engine):
    """The flagship's ``cache_priority`` on the real engine: a group-chat task's later stages
    find their conversation in vLLM's prefix cache (the mirror records the hit past the agent
    prefix as ``cached_tokens``), so the flagship learns its agents continue conversations and
    gives their calls cache priorities, which the scheduler keeps by reordering vLLM's free
    queue; with ``off=cache_priority`` it never does."""
    from topas.api import sample_tasks
    from topas.integrations.vllm.backends import InProcessBackend
    from topas.integrations.vllm.driver import DriveConfig, drive, scale_tasks
    from topas.policies import make_policy

    eng, sched = engine
    wl, tasks = sample_tasks("groupchat", 8, None, seed=1)
    scaled, agents = scale_tasks(tasks, wl.agents, DriveConfig(token_scale=0.1, time_scale=0.02))
    task = max(scaled, key=lambda t: sum(s.shared_tokens for s in t.stages))
    task = replace(task, task_id=0, arrival_s=0.0)

    class _Backend(InProcessBackend):
        def __init__(self, eng):
            self.engine = eng
            self._seen_first = set()
            self.on_step = None

    seen = {}
    for off in ((), ("cache_priority",)):
        sched.topas_policy = make_policy("topas", seed=0, off=off)
        prio = []
        decide0 = sched.topas_policy.decide

        def spy(snap, decide0=decide0, prio=prio):
            d = decide0(snap)
            prio.extend(d.cache_priority.values())
            return d

        sched.topas_policy.decide = spy
        sched.topas_stats["cache_reorders"] = 0
        drive([task], agents, _Backend(eng), policy="topas", run_id=f"conv-prio-{bool(off)}")
        seen[off] = (prio, sched.topas_stats["cache_reorders"], len(sched._refs.ranked))
        assert eng.has_unfinished_requests() is False
        sched.unpin_all()
    prio, reorders, _ = seen[()]
    # one task: every priority is 1 / (1 + its arrival, in seconds since the scheduler began)
    assert prio and len(set(prio)) == 1 and 0 < prio[0] <= 1
    assert reorders > 0
    assert seen[("cache_priority",)][:2] == ([], 0)
