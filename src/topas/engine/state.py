"""The engine rules both engines share: one definition, two users.

The simulator (:mod:`topas.engine.simulator`) owns its state and advances it with an event
heap; the vLLM scheduler (:mod:`topas.integrations.vllm.scheduler`) mirrors vLLM's requests.
What a policy sees and what a decision may do must not depend on which one runs, so the
rules live here and both engines call them:

* :class:`EngineState` -- the tasks, agent prefixes, stage history and run identity a
  snapshot shows, with the stage transitions (ready, running, requeued, a call finished, a
  stage completed: its :class:`~topas.engine.snapshot.StageRecord` enters the history) and
  the held-context life cycle (offered at a call's finish, held by a decision until a time,
  released, expired, or consumed by the stage's next call);
* :func:`kv_footprint` -- the KV accounting: resident prefixes once, admitted requests'
  own blocks, live held contexts; and each prefix's users;
* :func:`check` -- the whole decision validated up front against the state it was made on
  (ids, batch cap, evictions of prefixes in use, the KV budget after the decision); it returns
  the :class:`Effects` to apply or raises :class:`~topas.engine.decision.DecisionError`, so
  nothing is ever half-applied;
* :func:`idle_fallback` -- what an idle engine does when the policy admits nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from topas.engine.decision import Decision, DecisionError
from topas.engine.snapshot import (
    EngineConfig,
    HeldContext,
    Location,
    PrefixState,
    RequestState,
    Snapshot,
    StageRecord,
    StageState,
    StageStatus,
    TaskState,
)
from topas.workflow.model import round_up_to_blocks

Key = tuple[int, str]  #: (task id, stage name): a held context's key


def held_live(h: HeldContext, now: float) -> bool:
    """A held context counts against the budget (and keeps its prefix) until ``expires_s``;
    one offered at ``now`` (``expires_s == since_s == now``) is not held yet."""
    return h.expires_s > now


@dataclass(frozen=True, slots=True)
class KVFootprint:
    """KV tokens in use and, per agent, the requests and live held contexts using its prefix."""

    used_tokens: int
    users: dict[str, int]


def kv_footprint(
    prefixes: Mapping[str, PrefixState],
    running: Iterable[RequestState],
    held: Mapping[Key, HeldContext],
    now: float,
) -> KVFootprint:
    """The one definition of KV use: every resident prefix once however many requests share
    it, each admitted request's own (block-rounded) tokens, each live held context."""
    users: dict[str, int] = {}
    used = 0
    for r in running:
        used += r.kv_tokens
        users[r.agent] = users.get(r.agent, 0) + 1
    for h in held.values():
        if held_live(h, now):
            used += h.tokens
            users[h.agent] = users.get(h.agent, 0) + 1
    used += sum(p.tokens for p in prefixes.values() if p.location == Location.DEVICE)
    return KVFootprint(used, users)


@dataclass(frozen=True, slots=True)
class Effects:
    """A checked decision, in the order an engine applies it."""

    release: tuple[Key, ...]
    preempt: tuple[int, ...]
    drop: tuple[str, ...]
    evict: tuple[str, ...]
    hold: Mapping[Key, float]
    load: tuple[str, ...]
    credit: Mapping[int, float]
    admit: tuple[int, ...]
    cache_priority: Mapping[int, float]
    used_after_tokens: int  #: KV tokens in use once it is applied


def check(
    d: Decision,
    *,
    now: float,
    config: EngineConfig,
    used_kv: int,
    prefixes: Mapping[str, PrefixState],
    waiting: Mapping[int, RequestState],
    running: Mapping[int, RequestState],
    held: Mapping[Key, HeldContext],
) -> Effects:
    """Validate decision ``d`` against an engine state (a snapshot's, in mappings by id) as a
    whole; the effects to apply, or :class:`DecisionError` naming the first problem."""
    if len(set(d.admit)) != len(d.admit):
        raise DecisionError(f"admits a request twice: {list(d.admit)}")
    for rid in d.admit:
        if rid not in waiting:
            raise DecisionError(f"admits request {rid}, which is not waiting")
    for rid in d.preempt:
        if rid not in running:
            raise DecisionError(f"preempts request {rid}, which is not running")
    for a in (*d.load, *d.evict, *d.drop):
        if a not in prefixes:
            raise DecisionError(f"names unknown prefix {a!r}")
    for key in (*d.hold, *d.release):
        if key not in held:
            raise DecisionError(f"holds/releases context {key}, which is not held")
    for rid in d.credit:
        if rid not in running and rid not in waiting:
            raise DecisionError(f"credits request {rid}, which is not active")
    for rid, prio in d.cache_priority.items():
        if rid not in running and rid not in waiting:
            raise DecisionError(f"gives a cache priority to request {rid}, which is not active")
        if not math.isfinite(prio):
            raise DecisionError(f"cache priority {prio!r} of request {rid} is not finite")
    batch = len(running) - len(d.preempt) + len(d.admit)
    if batch > config.max_batch_requests:
        raise DecisionError(
            f"batch of {batch} exceeds max_batch_requests={config.max_batch_requests}"
        )
    admit_agents = {waiting[r].agent for r in d.admit}
    for a in (*d.evict, *d.drop):
        p = prefixes[a]
        if p.location != Location.DEVICE:
            raise DecisionError(f"evicts prefix {a!r}, which is not resident")
        if p.transfer == "in":
            raise DecisionError(f"evicts prefix {a!r} while it is being swapped in")
        # a held context needs its prefix (a radix-tree child / a hash-chained block)
        users = (
            p.users
            - sum(1 for r in d.preempt if running[r].agent == a)
            - sum(1 for k in d.release if held[k].agent == a and held_live(held[k], now))
            + sum(
                1
                for k, until in d.hold.items()
                if held[k].agent == a and until > now >= held[k].expires_s
            )
        )
        if users > 0 or a in admit_agents or p.transfer == "compute":
            raise DecisionError(
                f"evicts prefix {a!r}, which admitted requests or held contexts use"
            )

    # the footprint after the decision, computed before anything changes
    used = used_kv
    held_after: set[Key] = set()
    for key, h in held.items():
        active = held_live(h, now)
        after = key not in d.release and d.hold.get(key, h.expires_s) > now
        used += (after - active) * h.tokens
        if after:
            held_after.add(key)
    for rid in d.preempt:
        used -= running[rid].kv_tokens
    leaving = set(d.drop) | set(d.evict)
    for a in leaving:
        used -= prefixes[a].tokens
    for a in set(d.load) | admit_agents:
        if a in leaving or prefixes[a].location != Location.DEVICE:
            used += prefixes[a].tokens
    for rid in d.admit:
        r = waiting[rid]
        used += round_up_to_blocks(r.prompt_tokens + r.generated_tokens, config.block_size)
        key = (r.task_id, r.stage)
        if key in held_after:  # the request takes over its held context's memory
            used -= held[key].tokens
            held_after.discard(key)
    if used > config.kv_budget_tokens:
        raise DecisionError(
            f"needs {used} KV tokens after the decision, budget is {config.kv_budget_tokens}"
        )
    return Effects(
        tuple(d.release),
        tuple(d.preempt),
        tuple(d.drop),
        tuple(d.evict),
        d.hold,
        tuple(d.load),
        d.credit,
        tuple(d.admit),
        d.cache_priority,
        used,
    )


def check_snapshot(d: Decision, snap: Snapshot) -> Effects:
    """:func:`check` against the state a snapshot shows."""
    return check(
        d,
        now=snap.time_s,
        config=snap.config,
        used_kv=snap.used_kv_tokens,
        prefixes=snap.prefixes,
        waiting={r.request_id: r for r in snap.waiting},
        running={r.request_id: r for r in snap.running},
        held=snap.held,
    )


def idle_fallback(snap: Snapshot) -> Decision:
    """An idle engine whose policy admits nothing: release every held context and admit the
    oldest waiting request (the vLLM scheduler's liveness guard; the simulator raises
    ``PolicyStalled`` instead, so a policy that relies on it is found in tests)."""
    if not snap.waiting:
        return Decision(release=tuple(snap.held))
    oldest = min(snap.waiting, key=lambda r: (r.ready_s, r.seq))
    return Decision(admit=(oldest.request_id,), release=tuple(snap.held))


class EngineState:
    """What both engines keep the same way: unfinished tasks, agent prefixes, the stage
    history estimators learn from, and the run's identity (``Snapshot.run_id``)."""

    __slots__ = ("config", "tasks", "prefixes", "history", "history_records", "run_id")

    def __init__(self, config: EngineConfig, prefixes: dict[str, PrefixState] | None = None):
        self.config = config
        self.tasks: dict[int, TaskState] = {}
        self.prefixes: dict[str, PrefixState] = prefixes if prefixes is not None else {}
        self.history: dict[tuple[str, str], list[StageRecord]] = {}
        self.history_records = 0
        self.run_id = object()

    # -- stage transitions ---------------------------------------------------------------
    @staticmethod
    def stage_ready(ts: TaskState, st: StageState, ready_s: float) -> None:
        """A call of ``st`` is ready (its first call: the stage's ready time is now)."""
        st.status = StageStatus.READY
        if st.ready_s is None:
            st.ready_s = ready_s
        ts.version += 1

    @staticmethod
    def stage_running(ts: TaskState, st: StageState, now: float) -> None:
        """A call of ``st`` was admitted (its first: the stage's service starts)."""
        if st.status != StageStatus.RUNNING:
            st.status = StageStatus.RUNNING
            ts.version += 1
        if st.started_s is None:
            st.started_s = now

    @staticmethod
    def stage_requeued(ts: TaskState, st: StageState) -> None:
        """A call of ``st`` was preempted: ready again."""
        st.status = StageStatus.READY
        ts.version += 1

    @staticmethod
    def call_finished(
        ts: TaskState, st: StageState, generated_tokens: int, tool_until_s: float | None = None
    ) -> None:
        """A call of ``st`` finished: one more round; the stage waits on its tool (until
        ``tool_until_s`` when the engine knows it) unless it is then completed."""
        st.rounds_done += 1
        st.output_tokens += generated_tokens
        st.status = StageStatus.TOOL
        st.tool_until_s = tool_until_s
        ts.version += 1

    def stage_completed(
        self, ts: TaskState, st: StageState, now: float, record: bool = True
    ) -> StageRecord | None:
        """``st`` is done (at ``now`` unless a done time is known): the task counts it and,
        with ``record``, its :class:`StageRecord` enters the history."""
        st.status = StageStatus.DONE
        if st.done_s is None:
            st.done_s = now
        st.tool_until_s = None
        ts.stages_done += 1
        ts.version += 1
        if not record:
            return None
        rec = StageRecord.completed(ts.workflow, st, st.done_s)
        self.history.setdefault((st.agent, st.kind), []).append(rec)
        self.history_records += 1
        return rec

    # -- held contexts -------------------------------------------------------------------
    @staticmethod
    def offered(
        task_id: int, stage: str, agent: str, tokens: int, now: float, computed_tokens: int = 0
    ) -> HeldContext:
        """A finished call's context, offered to the next decision (held only if it says so)."""
        return HeldContext(task_id, stage, agent, tokens, now, now, computed_tokens)

    @staticmethod
    def held_until(h: HeldContext, until: float) -> HeldContext:
        """``h`` held (or re-held) until ``until``."""
        return HeldContext(
            h.task_id, h.stage, h.agent, h.tokens, h.since_s, float(until), h.computed_tokens
        )

    def footprint(
        self, running: Iterable[RequestState], held: Mapping[Key, HeldContext], now: float
    ) -> KVFootprint:
        return kv_footprint(self.prefixes, running, held, now)
