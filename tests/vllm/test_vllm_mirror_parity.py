"""Step-by-step parity of the two engines' state (issue 15).

The simulator runs a workload; at every decision the requests it shows (waiting, running)
and the decision it applies are replayed into the vLLM scheduler's
:class:`~topas.integrations.vllm.mirror.RequestMirror` as vLLM would show them (tagged
requests in ``Scheduler.requests`` with their status and token counts; a finished request
leaves that dict).  After every step the mirror's tasks, stages and stage history must equal
the simulator's snapshot, field by field: both engines change them only through
:class:`~topas.engine.state.EngineState`'s transitions, and this test is what keeps it so.
(The whole scheduler on a real vLLM engine is tested end to end in test_vllm_state.py.)
"""

from __future__ import annotations

import math
from dataclasses import astuple

import pytest

pytestmark = pytest.mark.vllm

#: stage fields both engines must agree on.  Not compared: ``tool_until_s`` (the simulator
#: knows when a tool returns, vLLM never does) and ``TaskState.version`` (a cache key whose
#: increments are engine-private)
STAGE_FIELDS = ("status", "rounds_done", "output_tokens", "ready_s", "started_s", "done_s")


class _Params:
    def __init__(self, tag: dict) -> None:
        self.extra_args = tag


class _FakeRequest:
    """What the mirror reads of a ``vllm.v1.request.Request`` (compat.REQUEST_ATTRS)."""

    def __init__(self, request_id: str, prompt_len: int, tag: dict) -> None:
        from vllm.v1.request import RequestStatus

        self.request_id = request_id
        self.prompt_token_ids = [0] * prompt_len
        self.num_prompt_tokens = prompt_len
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.num_preemptions = 0
        self.sampling_params = _Params(tag)
        self.status = RequestStatus.WAITING

    def is_finished(self) -> bool:
        from vllm.v1.request import RequestStatus

        return RequestStatus.is_finished(self.status)


def _stage_view(ts) -> dict:
    return {n: tuple(getattr(st, f) for f in STAGE_FIELDS) for n, st in ts.stages.items()}


def _history(hist) -> list:
    return sorted(astuple(r) for recs in hist.values() for r in recs)


def _replay(workload: str, policy: str, seed: int) -> tuple[int, list[str]]:
    from vllm.v1.request import RequestStatus

    from topas.api import sample_tasks
    from topas.engine.cost import DEFAULT_PROFILE, get_profile
    from topas.engine.simulator import Simulator
    from topas.engine.snapshot import StageStatus
    from topas.engine.state import EngineState
    from topas.integrations.vllm.mirror import RequestMirror
    from topas.integrations.vllm.tags import make_tag
    from topas.policies import make_policy
    from topas.workflow.model import Agent

    wl, tasks = sample_tasks(workload, 6, None, seed=seed)
    profile = get_profile(DEFAULT_PROFILE)
    by_id = {t.task_id: t for t in tasks}
    block = profile.block_size
    # the mirror keeps whole blocks of a tagged prefix, as vLLM's prefix cache does: the
    # simulator's agents get prefixes of whole blocks so both count the same prompt tokens
    agents = {
        ag.name: Agent(ag.name, max(block, ag.prefix_tokens // block * block)) for ag in wl.agents
    }
    steps: list[tuple] = []

    def record(snap, dec) -> None:
        reqs = {}
        for status, group in (("waiting", snap.waiting), ("running", snap.running)):
            for r in group:
                reqs[r.request_id] = (status, r.task_id, r.stage, r.agent, r.round_index,
                                      r.prompt_tokens, r.generated_tokens, r.prefilled_tokens,
                                      r.preemptions)  # fmt: skip
        tasks_now = {
            tid: (ts.workflow, ts.arrival_s, ts.stages_done, _stage_view(ts))
            for tid, ts in snap.tasks.items()
        }
        done_now = {
            tid: sorted(n for n, st in ts.stages.items() if st.status == StageStatus.DONE)
            for tid, ts in snap.tasks.items()
        }
        steps.append(
            (
                snap.time_s,
                reqs,
                tuple(dec.admit),
                tuple(dec.preempt),
                tasks_now,
                done_now,
                _history(snap.history),
            )  # fmt: skip
        )

    sim = Simulator(tasks, agents, profile, make_policy(policy, seed=0), seed=seed,
                    on_decision=record)  # fmt: skip
    res = sim.run()
    out_tokens = {r.request_id: r.output_tokens for r in res.requests}

    state = EngineState(sim.config)
    stats = {"bad_tags": 0, "finished": 0, "aborted": 0}
    mirror = RequestMirror(state, block, 0.0, stats, lambda *a, **k: None)
    fakes: dict[str, _FakeRequest] = {}
    problems: list[str] = []

    def sync(live_ids, now) -> None:
        for vid in list(fakes):
            if vid not in live_ids:  # finished: vLLM removes it from Scheduler.requests
                f = fakes.pop(vid)
                f.status = RequestStatus.FINISHED_STOPPED
                f.num_output_tokens = out_tokens[int(vid)]
        mirror.sync({vid: fakes[vid] for vid in live_ids}, now, math.inf)

    def compare(k, now, tasks_now, history) -> None:
        tid_of = {int(key): tid for key, tid in mirror.task_ids.items()}
        for stid, (wf, arr, n_done, stages) in tasks_now.items():
            mt = mirror.tasks.get(tid_of.get(stid, -1))
            if mt is None:
                problems.append(f"step {k} t={now}: task {stid} missing on the vLLM side")
                continue
            got = (mt.workflow, mt.arrival_s, mt.stages_done, _stage_view(mt))
            if got != (wf, arr, n_done, stages):
                diff = {n: (v, got[3].get(n)) for n, v in stages.items() if got[3].get(n) != v}
                problems.append(f"step {k} t={now:.3f}: task {stid} (sim, vllm): {diff or got}")
        for stid, mtid in tid_of.items():  # tasks the simulator finished: all stages done
            mt = mirror.tasks.get(mtid)
            if stid not in tasks_now and mt is not None and mt.stages_done != len(mt.stages):
                problems.append(f"step {k}: finished task {stid} open on the vLLM side")
        if _history(state.history) != history:
            problems.append(f"step {k} t={now}: history differs")

    for k, (now, reqs, admit, preempt, tasks_now, done_now, history) in enumerate(steps):
        for rid, (status, stid, stage, agent, rnd, prompt, gen, prefilled, npre) in reqs.items():
            vid = str(rid)
            f = fakes.get(vid)
            if f is None:
                task = by_id[stid]
                spec = next(s for s in task.stages if s.name == stage)
                tag = make_tag(
                    task=str(stid),
                    stage=stage,
                    agent=agent,
                    prefix_tokens=agents[agent].prefix_tokens,
                    round_index=rnd,
                    workflow=task.workflow,
                    kind=spec.template,
                    dag=[(s.name, s.agent, s.template, s.deps) for s in task.stages],
                    done=done_now[stid],
                    arrival_s=task.arrival_s,
                    final=rnd + 1 == len(spec.calls),
                )
                f = fakes[vid] = _FakeRequest(vid, agents[agent].prefix_tokens + prompt, tag)
            f.status = RequestStatus.RUNNING if status == "running" else RequestStatus.WAITING
            f.num_output_tokens, f.num_preemptions = gen, npre
            f.num_computed_tokens = (agents[agent].prefix_tokens + prefilled
                                     if status == "running" else 0)  # fmt: skip
        sync(set(fakes) & {str(r) for r in reqs}, now)
        compare(k, now, tasks_now, history)
        # the decision, as vLLM applies it: admitted requests run, preempted ones wait
        for rid in admit:
            fakes[str(rid)].status = RequestStatus.RUNNING
        for rid in preempt:
            f = fakes[str(rid)]
            f.status, f.num_computed_tokens = RequestStatus.PREEMPTED, 0
            f.num_preemptions += 1
        sync(set(fakes), now)
    # the last finishes: nothing is live any more
    sync(set(), sim.now)
    hist_end = _history(sim.state.history)
    if _history(state.history) != hist_end:
        problems.append("history differs at the end")
    if any(t.stages_done != len(t.stages) for t in mirror.tasks.values()):
        problems.append("a task is open on the vLLM side at the end")
    assert stats["aborted"] == 0 and stats["bad_tags"] == 0
    assert len(hist_end) == sum(len(t.stages) for t in tasks)
    return len(steps), problems


@pytest.mark.parametrize(
    "workload,policy",
    [("metagpt-tl", "fcfs"), ("metagpt-tl", "topas"), ("dag4", "continuum"), ("react", "lpm")],
)
def test_vllm_mirror_and_simulator_agree_at_every_step(workload, policy):
    n_steps, problems = _replay(workload, policy, seed=3)
    assert n_steps > 20
    assert problems == [], problems[:5]
