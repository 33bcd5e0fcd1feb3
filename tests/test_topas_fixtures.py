"""Hand-built snapshots for the TOPAS and estimator tests (no simulator involved)."""

from __future__ import annotations

from topas.engine.cost import get_profile
from topas.engine.snapshot import (
    EngineConfig,
    Location,
    Phase,
    PrefixState,
    RequestState,
    Snapshot,
    StageRecord,
    StageState,
    StageStatus,
    TaskState,
)

COST = get_profile("a100-80g/qwen2.5-32b").cost_model()


def make_task(
    task_id: int,
    stages: dict[str, tuple[str, tuple[str, ...], StageStatus]],
    arrival_s: float = 0.0,
    version: int = 1,
    kind: str | None = None,
) -> TaskState:
    """``stages``: name -> (agent, deps, status); stage kind = name unless ``kind``."""
    succ: dict[str, list[str]] = {n: [] for n in stages}
    for n, (_, deps, _) in stages.items():
        for d in deps:
            succ[d].append(n)
    sts = {}
    for n, (agent, deps, status) in stages.items():
        st = StageState(n, kind or n, agent, deps, tuple(succ[n]))
        st.status = status
        sts[n] = st
    # stages are given in a topological order
    ts = TaskState(task_id, "test", arrival_s, sts, tuple(stages))
    ts.version = version
    return ts


def make_request(
    rid: int,
    task: TaskState,
    stage: str,
    prompt: int,
    prefix: int,
    ready_s: float = 0.0,
    running: bool = False,
    generated: int = 0,
    credit: float = 0.0,
) -> RequestState:
    st = task.stages[stage]
    r = RequestState(rid, task.task_id, stage, st.agent, 0, prompt, prefix, ready_s, seq=rid)
    if running:
        r.phase = Phase.DECODE
        r.generated_tokens = generated
        r.prefilled_tokens = prompt
        r.kv_tokens = prompt + generated
        r.admitted_s = ready_s
        st.status = StageStatus.RUNNING
        st.started_s = ready_s
    r.credit_s = credit
    return r


def make_prefix(
    agent: str,
    tokens: int,
    resident: bool,
    on_host: bool = True,
    users: int = 0,
    last_used_s: float = 0.0,
) -> PrefixState:
    p = PrefixState(agent, tokens)
    p.location = Location.DEVICE if resident else (Location.HOST if on_host else Location.NONE)
    p.on_host = on_host
    p.ready = resident
    p.users = users
    p.last_used_s = last_used_s
    return p


def history(
    agent: str, kind: str, services: list[float], rounds: int = 1, out: int = 200
) -> list[StageRecord]:
    return [StageRecord("test", kind, agent, rounds, out, s, s) for s in services]


def make_snapshot(
    *,
    time_s: float = 0.0,
    budget: int = 32768,
    prefixes=(),
    running=(),
    waiting=(),
    tasks=(),
    hist=None,
    held=None,
    preemption: str = "sglang",
    max_batch: int = 256,
) -> Snapshot:
    prefixes = {p.agent: p for p in prefixes}
    for r in running:
        prefixes[r.agent].users += 0  # users are set by the caller
    used = sum(p.tokens for p in prefixes.values() if p.location == Location.DEVICE)
    used += sum(r.kv_tokens for r in running)
    cfg = EngineConfig(
        kv_budget_tokens=budget,
        max_batch_requests=max_batch,
        preemption=preemption,
        host_capacity_tokens=10**6,
    )
    return Snapshot(
        time_s=time_s,
        event="test",
        config=cfg,
        cost=COST,
        used_kv_tokens=used,
        prefixes=prefixes,
        running=tuple(running),
        waiting=tuple(waiting),
        tasks={t.task_id: t for t in tasks},
        held=held or {},
        history=hist if hist is not None else {},
    )
