"""The simulator's state, typed once: what its parts (deciding, residency, lifecycle,
iteration) share.

:class:`~topas.engine.simulator.Simulator` mixes the parts in and sets every attribute in
its ``__init__``; each part subclasses :class:`SimCore`, so a type checker knows the
attributes (declared here, never assigned here: a declaration creates no class attribute)
and the methods one part calls on another (declared under ``TYPE_CHECKING`` only, so the
method resolution order at run time is the parts' own).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from topas.engine.cost import CostModel, Profile
from topas.engine.decision import Decision
from topas.engine.jobs import _Job, _PrefixJob
from topas.engine.records import EngineCounters, RequestRecord, TaskRecord, TimelineEvent
from topas.engine.snapshot import (
    EngineConfig,
    HeldContext,
    PrefixState,
    RequestState,
    Snapshot,
    StageRecord,
    TaskState,
)
from topas.engine.state import EngineState
from topas.workflow.model import Agent, Stage, Task

if TYPE_CHECKING:
    from topas.engine.cluster import Cluster

#: a heap entry: (time, sequence number, event kind, payload)
HeapEntry = tuple[float, int, int, object]


class EnginePolicy(Protocol):
    """What the engine needs of a policy (``topas.policies.base.Policy`` is one; the engine
    does not import the policies)."""

    def decide(self, snap: Snapshot, /) -> Decision: ...


class SimCore:
    """The simulator's attributes and the methods its parts call on one another."""

    # configuration
    profile: Profile
    cost: CostModel
    config: EngineConfig
    agents: dict[str, Agent]
    tasks_in: list[Task]
    policy: EnginePolicy
    seed: int
    on_decision: Callable[[Snapshot, Decision], None] | None
    record_timeline: bool
    progress: Callable[[int], None] | None
    context_cache: bool
    # clock, events, identity
    now: float
    _heap: list[HeapEntry]
    _seq: int
    _ids: itertools.count[int]
    _cluster: Cluster | None
    replica_id: int
    _pending_event: str
    _next_task: int
    _instant: float
    _decisions_now: int
    # shared engine state (engine/state.py) and the requests
    state: EngineState
    prefixes: dict[str, PrefixState]
    tasks: dict[int, TaskState]
    history: dict[tuple[str, str], list[StageRecord]]
    running: dict[int, _Job]
    waiting: dict[int, _Job]
    _wreq: dict[int, RequestState]
    _wseq: int
    _wprog_keys: list[tuple[float, int, float, int]]
    _wprog: list[RequestState]
    _waiting_sorted: bool
    _wready_sum: float
    _wprompt: int
    _parked: bool
    prefix_jobs: dict[str, _PrefixJob]
    _truth: dict[int, Task]
    _stage_spec: dict[tuple[int, str], Stage]
    _n_req_done_by_task: dict[int, int]
    # KV, host tier, held and cached contexts
    held: dict[tuple[int, str], HeldContext]
    ctx_cache: OrderedDict[tuple[int, str], tuple[str, int, int]]
    ctx_cache_tokens: int
    ctx_priority: dict[tuple[int, str], float]
    used_kv: int
    host_used: int
    _host_lru: list[str]
    _link_free_s: float
    # what the run records
    counters: EngineCounters
    decision_s: list[float]
    task_records: list[TaskRecord]
    request_records: list[RequestRecord]
    kv_trace: list[tuple[float, int]]
    timeline: list[TimelineEvent]

    if TYPE_CHECKING:
        # simulator.py
        def _push(self, t: float, kind: int, payload: object) -> None: ...
        def _blocks(self, tokens: int) -> int: ...
        def _wprog_key(self, r: RequestState) -> tuple[float, int, float, int]: ...
        def _wprog_add(self, r: RequestState) -> None: ...
        def _note(self, event: str) -> None: ...
        def _kv_changed(self) -> None: ...
        def _schedule_next_arrival(self) -> None: ...
        def _arrive(self, task: Task) -> None: ...
        def _make_ready(self, ts: TaskState, stage: str, round_index: int) -> None: ...
        def _ready_local(
            self, ts: TaskState, stage: str, round_index: int, ready_s: float
        ) -> None: ...
        def _stalled(self) -> None: ...

        # deciding.py
        def _decide(self) -> None: ...
        def _pname(self) -> str: ...

        # residency.py
        def _make_resident(self, agent: str) -> None: ...
        def _drop_prefix(self, agent: str, keep_host_copy: bool) -> None: ...
        def _evict_prefix(self, agent: str) -> None: ...
        def _release_held(self, key: tuple[int, str]) -> None: ...
        def _drop_offers(self) -> None: ...
        def _cache_ctx(self, h: HeldContext) -> None: ...
        def _trim_ctx_cache(self) -> None: ...
        def _trim_victim(self) -> tuple[int, str]: ...
        def _set_ctx_priority(self, r: RequestState) -> None: ...
        def _uncache_agent(self, agent: str) -> None: ...

        # lifecycle.py
        def _admit(self, job: _Job) -> None: ...
        def _preempt(self, job: _Job, by_engine: bool) -> None: ...
        def _finish(self, job: _Job) -> None: ...

        # iteration.py
        def _decode_room(self, decoders: list[_Job]) -> int: ...
        def _engine_preempt(self) -> None: ...
