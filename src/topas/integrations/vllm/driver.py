"""``topas drive``: run a workload's tasks against a real vLLM engine and record real JCTs.

The same sampled trajectories as the simulator (``topas.api.sample_tasks`` with the same seed)
are executed for real: dependencies are enforced client-side, a stage's calls run in sequence
with their tool delays as real sleeps, and each call is one request whose prompt is the agent's
prefix token ids followed by the call's dynamic prompt, generating exactly ``output_tokens``
tokens (``min_tokens = max_tokens``, ``ignore_eos``).  Requests carry workflow tags
(:mod:`.tags`) so the engine-side :class:`~.scheduler.TopasScheduler` can schedule them.

``token_scale`` and ``time_scale`` shrink token counts and times (arrivals, tool delays) so a
CPU engine with a tiny model finishes in seconds; prefixes are rounded to whole KV blocks
(vLLM caches only full blocks).  :func:`scale_tasks` is public so the simulator can be run on
exactly the same scaled tasks (fidelity).

Results are a :class:`~topas.engine.simulator.SimResult`, so ``topas.metrics.summarize`` and
``write_results`` give the same tables as ``topas run``.  A client cannot see admission: for a
real engine ``admitted_s`` is recorded as the first-token time.
"""

from __future__ import annotations

import heapq
import json
import os
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from topas.engine.bounds import task_lower_bound
from topas.engine.records import EngineCounters, RequestRecord, SimResult, TaskRecord
from topas.integrations.vllm.backends import Backend, InProcessBackend
from topas.integrations.vllm.tags import make_tag
from topas.workflow.model import Agent, Call, Stage, Task

#: vLLM's CPU KV block size (tokens)
CPU_BLOCK = 128
#: token ids below this are left alone (special tokens of the tiny tokenizer)
_ID_LO = 16


@dataclass(frozen=True, slots=True)
class DriveConfig:
    token_scale: float = 0.25
    time_scale: float = 1.0
    block_size: int = CPU_BLOCK
    vocab: int = 4096
    max_prompt_tokens: int = 6000  #: cap after scaling (the tiny model's context is 16k)
    seed: int = 0


def scale_tasks(
    tasks: Sequence[Task],
    agents: Sequence[Agent],
    cfg: DriveConfig,
) -> tuple[list[Task], dict[str, Agent]]:
    """Scaled copies of ``tasks`` and ``agents``: tokens x ``token_scale`` (prefixes rounded to
    whole blocks, at least one), times x ``time_scale``."""
    if not cfg.token_scale > 0 or not cfg.time_scale >= 0:
        raise ValueError(
            f"scales {cfg.token_scale}, {cfg.time_scale}: token_scale must be > 0 "
            "and time_scale >= 0"
        )
    bs = cfg.block_size
    ag = {
        a.name: Agent(
            a.name,
            max(bs, int(round(a.prefix_tokens * cfg.token_scale / bs)) * bs)
            if a.prefix_tokens > 0
            else 0,
        )
        for a in agents
    }
    out = []
    for t in tasks:
        stages = []
        for s in t.stages:
            calls = tuple(
                Call(
                    min(cfg.max_prompt_tokens, max(1, int(c.prompt_tokens * cfg.token_scale))),
                    max(1, int(c.output_tokens * cfg.token_scale)),
                    c.tool_delay_s * cfg.time_scale,
                )
                for c in s.calls
            )
            stages.append(replace(s, calls=calls))
        first = {s.name: s.calls[0].prompt_tokens for s in stages}
        for k, s in enumerate(stages):
            if s.shares_with:  # the shared part scales too, within both (capped) prompts
                n = min(int(s.shared_tokens * cfg.token_scale), first[s.name], first[s.shares_with])
                stages[k] = (
                    replace(s, shared_tokens=n)
                    if n > 0
                    else replace(s, shares_with="", shared_tokens=0)
                )
        out.append(Task(t.task_id, t.arrival_s * cfg.time_scale, tuple(stages), t.workflow))
    return out, ag


def prefix_ids(agent: str, n: int, vocab: int) -> list[int]:
    """The agent's prefix: the same ids for every request of the agent (seeded by its name)."""
    rng = np.random.default_rng(zlib.crc32(agent.encode()))
    return rng.integers(_ID_LO, vocab, size=n).tolist()


def stage_stream(task_id: int, stage: str, n: int, vocab: int, seed: int) -> list[int]:
    """A stage's dynamic prompt stream: call k uses its first ``prompt_tokens`` ids, so a
    stage's later calls share their leading blocks with earlier ones (ReAct context)."""
    rng = np.random.default_rng([seed, task_id, zlib.crc32(stage.encode())])
    return rng.integers(_ID_LO, vocab, size=n).tolist()


def prompt_stream(
    streams: dict[tuple[int, str], list[int]], task: Task, stage: Stage, vocab: int, seed: int
) -> list[int]:
    """The ids a stage's calls take their dynamic prompts from (memoised in ``streams``): its
    own :func:`stage_stream`, except that a stage continuing a conversation
    (``shares_with``) begins with the ``shared_tokens`` ids the earlier stage's prompt began
    with, so vLLM's prefix cache can find them as the simulator's context cache does."""
    key = (task.task_id, stage.name)
    out = streams.get(key)
    if out is None:
        n = max(c.prompt_tokens for c in stage.calls)
        out = stage_stream(task.task_id, stage.name, n, vocab, seed)
        if stage.shares_with:
            src = next(x for x in task.stages if x.name == stage.shares_with)
            head = prompt_stream(streams, task, src, vocab, seed)[: stage.shared_tokens]
            out = head + out[len(head) :]
        streams[key] = out
    return out


@dataclass
class _Pending:
    task: Task
    stage: Stage
    k: int


def drive(
    tasks: Sequence[Task],
    agents: dict[str, Agent],
    backend: Backend,
    *,
    policy: str,
    seed: int = 0,
    vocab: int = 4096,
    profile=None,
    label: str = "vllm",
    run_id: str | None = None,
) -> SimResult:
    """Execute already-scaled ``tasks`` against ``backend``; returns real JCTs as a SimResult.
    ``profile`` (optional) provides the cost model for the lower bounds."""
    # task ids and request keys must be unique per engine, which may serve several runs
    run = run_id or f"{os.getpid()}.{time.time_ns()}"
    t0 = time.time()
    wall0 = time.perf_counter()
    heap: list[tuple[float, int, str]] = []  # (ready wall time, seq, key)
    pend: dict[str, _Pending] = {}
    ready_at: dict[str, float] = {}
    first: dict[str, float] = {}
    seq = 0
    done_stages: dict[int, set[str]] = {t.task_id: set() for t in tasks}
    remaining_deps = {(t.task_id, s.name): set(s.deps) for t in tasks for s in t.stages}
    succ = {t.task_id: t.successors() for t in tasks}
    task_by_id = {t.task_id: t for t in tasks}
    stage_by = {(t.task_id, s.name): s for t in tasks for s in t.stages}
    streams: dict[tuple[int, str], list[int]] = {}
    records: list[RequestRecord] = []
    ctx_hits = 0  # cached prompt tokens after the agent prefix (a context reused)
    task_finish: dict[int, float] = {}
    nreq: dict[int, int] = {t.task_id: 0 for t in tasks}
    rid = 0

    def push(task: Task, stage: Stage, k: int, at: float) -> None:
        nonlocal seq
        seq += 1
        key = f"{run}:{task.task_id}:{stage.name}:{k}"
        pend[key] = _Pending(task, stage, k)
        heapq.heappush(heap, (at, seq, key))

    for t in tasks:
        for s in t.stages:
            if not s.deps:
                push(t, s, 0, t0 + t.arrival_s)
    total = sum(t.n_calls for t in tasks)
    finished = 0
    while finished < total:
        now = time.time()
        while heap and heap[0][0] <= now:
            _, _, key = heapq.heappop(heap)
            p = pend[key]
            s, c = p.stage, p.stage.calls[p.k]
            stream = prompt_stream(streams, p.task, s, vocab, seed)
            pre = agents[s.agent].prefix_tokens
            prompt = prefix_ids(s.agent, pre, vocab) + stream[: c.prompt_tokens]
            tag = make_tag(
                task=f"{run}:{p.task.task_id}",
                stage=s.name,
                agent=s.agent,
                prefix_tokens=pre,
                round_index=p.k,
                workflow=p.task.workflow,
                kind=s.template,
                dag=[(x.name, x.agent, x.template, x.deps) for x in p.task.stages],
                done=sorted(done_stages[p.task.task_id]),
                arrival_s=t0 + p.task.arrival_s,
                final=p.k + 1 == len(s.calls),
            )
            ready_at[key] = now
            backend.submit(key, prompt, c.output_tokens, tag)
        wait = max(0.0, min(0.05, heap[0][0] - time.time())) if heap else 0.05
        for key, kind, cached, wall in backend.poll(0.0 if backend.busy() else wait):
            if kind == "first":
                first[key] = wall
                continue
            p = pend.pop(key)
            s, c = p.stage, p.stage.calls[p.k]
            tid = p.task.task_id
            finished += 1
            rid += 1
            nreq[tid] += 1
            fin = wall - t0
            ft = first.pop(key, wall) - t0
            pre = agents[s.agent].prefix_tokens
            hit = max(0, min(cached, c.prompt_tokens + pre) - pre)
            ctx_hits += hit
            records.append(
                RequestRecord(
                    rid,
                    tid,
                    s.name,
                    s.agent,
                    p.k,
                    c.prompt_tokens,
                    c.output_tokens,
                    ready_at.pop(key) - t0,
                    ft,
                    ft,
                    fin,
                    0,
                    pre > 0 and cached >= pre,
                    hit,
                    c.prompt_tokens - hit,
                )
            )
            if p.k + 1 < len(s.calls):
                push(p.task, s, p.k + 1, wall + c.tool_delay_s)
                continue
            done_stages[tid].add(s.name)
            for nxt in succ[tid][s.name]:
                deps = remaining_deps[(tid, nxt)]
                deps.discard(s.name)
                if not deps:
                    push(p.task, stage_by[(tid, nxt)], 0, wall)
            if len(done_stages[tid]) == len(task_by_id[tid].stages):
                task_finish[tid] = fin
    wall = time.perf_counter() - wall0
    counters = EngineCounters()
    counters.prefix_hits = sum(1 for r in records if r.prefix_hit)
    counters.prefix_misses = len(records) - counters.prefix_hits
    counters.context_hit_tokens = ctx_hits
    decision_s: list[float] = []
    sched = backend.scheduler() if isinstance(backend, InProcessBackend) else None
    if sched is not None and hasattr(sched, "topas_stats"):
        st = sched.topas_stats
        counters.decisions = st["decisions"]
        counters.preemptions = st["policy_preemptions"]
        if st["decisions"]:
            decision_s = [st["decision_s"] / st["decisions"]] * st["decisions"]
    cost = profile.cost_model() if profile is not None else None
    trecs = [
        TaskRecord(
            t.task_id,
            t.workflow,
            t.arrival_s,
            task_finish[t.task_id],
            task_lower_bound(t, agents, cost, profile.prefill_chunk_tokens, profile.block_size)
            if cost is not None
            else 0.0,
            nreq[t.task_id],
        )
        for t in tasks
    ]
    makespan = max(task_finish.values(), default=0.0)
    return SimResult(
        policy=policy,
        profile=label,
        seed=seed,
        tasks=trecs,
        requests=records,
        counters=counters,
        decision_s=decision_s,
        makespan_s=makespan,
        wall_s=wall,
    )


def make_llm(
    model: str,
    policy: str,
    *,
    kv_cache_bytes: int = 32 << 20,
    seed: int = 0,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 64,
    policy_params: dict | None = None,
    **kw,
):
    """An in-process vLLM ``LLM`` whose scheduler is :class:`TopasScheduler` under ``policy``.

    Sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (engine in this process) and ``TOPAS_POLICY``;
    callers must run under an ``if __name__ == "__main__":`` guard."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["TOPAS_POLICY"] = policy
    os.environ["TOPAS_POLICY_PARAMS"] = json.dumps(policy_params or {})
    os.environ["TOPAS_POLICY_SEED"] = str(seed)
    from topas.integrations.vllm.tiny_model import MAX_POSITIONS
    from vllm import LLM

    # vLLM refuses to start when one max-length request cannot fit the KV cache; 2 KiB/token
    # is the tiny model's mu (bf16), so this is conservative for larger models too.
    # (one block is vLLM's null block)
    max_len = kw.pop(
        "max_model_len", min(MAX_POSITIONS, (kv_cache_bytes // 2048 // CPU_BLOCK - 1) * CPU_BLOCK)
    )
    return LLM(
        model,
        enforce_eager=True,
        kv_cache_memory_bytes=kv_cache_bytes,
        enable_prefix_caching=True,
        max_model_len=max_len,
        seed=seed,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        scheduler_cls="topas.integrations.vllm.scheduler.TopasScheduler",
        **kw,
    )
