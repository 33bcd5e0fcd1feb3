"""What a policy sees: the engine snapshot.

A policy is a pure function ``decide(snapshot) -> Decision``.  The snapshot is what a real
serving engine can know at a scheduling event: the KV budget and what occupies it, the
resident and host-tier prefixes, the running requests with their progress, the ready waiting
requests, each task's DAG status and the history of completed stage service times.  It does
*not* contain true output lengths or round counts (those live in the engine's private
trajectory tables).

The per-request / per-stage / per-prefix records are ``__slots__`` classes owned by the
engine that built the snapshot (the simulator or the vLLM adapter).  To keep decisions cheap
on long runs they are shared, not copied: a policy must treat every record as read-only.  The
engine only changes them between decisions, never during one.

Units: tokens for KV, seconds for time, bytes and bytes/s for transfers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from topas.workflow.model import round_up_to_blocks

if TYPE_CHECKING:  # pragma: no cover
    from topas.engine.cost import CostModel


class Phase(IntEnum):
    WAITING = 0  #: ready, not admitted (new or preempted)
    LOADING = 1  #: admitted, waiting for its agent prefix to be swapped in
    PREFILL = 2  #: admitted, prefilling (chunked)
    DECODE = 3  #: admitted, generating
    DONE = 4


class StageStatus(IntEnum):
    PENDING = 0  #: some dependency not done
    READY = 1  #: a call of this stage waits for admission
    RUNNING = 2  #: a call of this stage is admitted
    TOOL = 3  #: between calls, waiting on a tool
    DONE = 4


class Location(IntEnum):
    NONE = 0  #: not cached anywhere: making it resident means recomputing it by prefill
    HOST = 1  #: in the host tier only: can be swapped in
    DEVICE = 2  #: resident in GPU KV memory (counts against the budget)


class RequestState:
    """One LLM call as the engine tracks it.  Read-only to policies.

    ``prompt_tokens`` is the dynamic prompt (the agent prefix is not included; it is
    ``prefix_tokens`` and is shared).  ``kv_tokens`` is the request's own KV footprint now
    (dynamic prompt tokens allocated so far + generated tokens; with a block size, rounded up
    to whole blocks).  ``credit_s`` is the admission credit a policy recorded for it through
    ``Decision.credit`` (TOPAS's revoke ledger); it survives preemption.  ``cache_priority``
    is the retention priority a policy gave it through ``Decision.cache_priority`` (default
    0): its context, once cached, is kept longer than lower-priority ones.
    """

    __slots__ = (
        "request_id",
        "task_id",
        "stage",
        "agent",
        "round_index",
        "prompt_tokens",
        "prefix_tokens",
        "cached_tokens",
        "generated_tokens",
        "prefilled_tokens",
        "kv_tokens",
        "phase",
        "ready_s",
        "admitted_s",
        "first_token_s",
        "finished_s",
        "preemptions",
        "credit_s",
        "cache_priority",
        "seq",
    )

    def __init__(
        self,
        request_id: int,
        task_id: int,
        stage: str,
        agent: str,
        round_index: int,
        prompt_tokens: int,
        prefix_tokens: int,
        ready_s: float,
        seq: int = 0,
    ) -> None:
        self.request_id = request_id
        self.task_id = task_id
        self.stage = stage
        self.agent = agent
        self.round_index = round_index
        self.prompt_tokens = prompt_tokens
        self.prefix_tokens = prefix_tokens
        #: dynamic prompt tokens already in KV from a held context (skip prefill for them)
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.prefilled_tokens = 0
        self.kv_tokens = 0
        self.phase = Phase.WAITING
        self.ready_s = ready_s
        self.admitted_s: float | None = None
        self.first_token_s: float | None = None
        self.finished_s: float | None = None
        self.preemptions = 0
        self.credit_s = 0.0
        self.cache_priority = 0.0
        #: engine arrival order of this request into the waiting queue (ties in FCFS)
        self.seq = seq

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"Request({self.request_id}, task={self.task_id}, stage={self.stage!r}, "
            f"agent={self.agent!r}, phase={self.phase.name}, gen={self.generated_tokens})"
        )


class StageState:
    """Status of one stage of a task.  Read-only to policies.

    ``rounds_done`` counts completed calls; the total number of calls is not known to policies.
    ``service_s`` accumulates time since the stage first became ready (including queueing).
    """

    __slots__ = (
        "name",
        "kind",
        "agent",
        "deps",
        "succs",
        "status",
        "rounds_done",
        "ready_s",
        "started_s",
        "done_s",
        "output_tokens",
        "tool_until_s",
    )

    def __init__(
        self, name: str, kind: str, agent: str, deps: tuple[str, ...], succs: tuple[str, ...]
    ) -> None:
        self.name = name
        self.kind = kind
        self.agent = agent
        self.deps = deps
        self.succs = succs
        self.status = StageStatus.PENDING
        self.rounds_done = 0
        self.ready_s: float | None = None
        self.started_s: float | None = None
        self.done_s: float | None = None
        self.output_tokens = 0
        self.tool_until_s: float | None = None


class TaskState:
    """A task's DAG status.  ``version`` increases whenever anything in it changes, so a
    policy may cache per-task work keyed by ``(task_id, version)``."""

    __slots__ = (
        "task_id",
        "workflow",
        "arrival_s",
        "stages",
        "order",
        "version",
        "done_s",
        "stages_done",
    )

    def __init__(
        self,
        task_id: int,
        workflow: str,
        arrival_s: float,
        stages: dict[str, StageState],
        order: tuple[str, ...],
    ) -> None:
        self.task_id = task_id
        self.workflow = workflow
        self.arrival_s = arrival_s
        self.stages = stages
        #: stage names in a topological order
        self.order = order
        self.version = 0
        self.done_s: float | None = None
        self.stages_done = 0


class PrefixState:
    """An agent prefix.  ``users`` counts admitted requests and held contexts that need it
    resident (a prefix with users cannot be evicted: a held context's KV continues the
    prefix's, as a radix-tree child or a hash-chained block does).  ``transfer`` is ``"in"``/``"out"`` while a swap is under
    way (its tokens count against the budget until a swap-out completes)."""

    __slots__ = (
        "agent",
        "tokens",
        "location",
        "on_host",
        "transfer",
        "last_used_s",
        "users",
        "ready",
    )

    def __init__(self, agent: str, tokens: int) -> None:
        self.agent = agent
        self.tokens = tokens
        self.location = Location.NONE
        #: a copy exists in the host tier (a device-resident prefix may also have one)
        self.on_host = False
        self.transfer: str | None = None
        self.last_used_s = -1.0
        self.users = 0
        #: resident *and* usable (swap-in or recompute finished)
        self.ready = False


@dataclass(frozen=True, slots=True)
class HeldContext:
    """The KV of a finished call kept resident while its stage waits on a tool, so the next
    call of the stage skips prefilling it (Continuum).  Released at ``expires_s``.

    ``tokens`` is its memory footprint (block-rounded).  ``computed_tokens`` is how many of
    its dynamic tokens have KV: prompt + output - 1 (the last sampled token was never fed
    back).  The next call is credited only whole computed blocks of it
    (:func:`~topas.engine.simulator.context_credit`), as vLLM's and SGLang's caches do."""

    task_id: int
    stage: str
    agent: str
    tokens: int
    since_s: float
    expires_s: float
    computed_tokens: int = 0


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One completed stage execution, for estimators (``F_{a(v),v}`` in the paper)."""

    workflow: str
    kind: str
    agent: str
    rounds: int
    output_tokens: int
    service_s: float  #: from first admission to completion (queueing before start excluded)
    span_s: float  #: from ready to completion

    @classmethod
    def completed(cls, workflow: str, st: StageState, done_s: float) -> StageRecord:
        """The record of stage ``st`` done at ``done_s`` (both engines build it here): at
        least one round, service from its first admission (or ``done_s``), span from its
        ready time (or its start)."""
        start = st.started_s if st.started_s is not None else done_s
        ready = st.ready_s if st.ready_s is not None else start
        return cls(
            workflow,
            st.kind,
            st.agent,
            max(1, st.rounds_done),
            st.output_tokens,
            done_s - start,
            done_s - ready,
        )


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Engine constants a policy may need to reason about feasibility."""

    kv_budget_tokens: int
    block_size: int = 1
    max_batch_requests: int = 256
    prefill_chunk_tokens: int = 8192
    preemption: str = "sglang"  #: "sglang" (re-decode) or "vllm" (recompute by prefill)
    host_capacity_tokens: int = 0  #: 0 means no host tier


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a policy may look at, at one scheduling event."""

    time_s: float
    event: str  #: what triggered this decision ("arrival", "finish", "tool", ...)
    config: EngineConfig
    cost: CostModel
    #: KV tokens in use now: resident prefixes + admitted requests + held contexts
    used_kv_tokens: int
    prefixes: Mapping[str, PrefixState]
    running: Sequence[RequestState]  #: admitted (loading, prefill or decode), admission order
    waiting: Sequence[RequestState]  #: ready, not admitted, in queue order (oldest first)
    tasks: Mapping[int, TaskState]  #: unfinished tasks
    held: Mapping[tuple[int, str], HeldContext]
    #: completed stage executions per (agent, stage kind), oldest first (append-only)
    history: Mapping[tuple[str, str], Sequence[StageRecord]]
    host_used_tokens: int = 0
    #: ``waiting`` is sorted by ``(ready_s, seq)`` (the simulator guarantees it: both grow
    #: together, and a preempted request keeps its own), so FCFS-ordered policies may use it
    #: as it is instead of sorting a long queue at every event
    waiting_fcfs: bool = False
    #: when the engine keeps it (the simulator does): ``waiting`` in program-level FCFS
    #: order, by (task arrival, task id, ready time, seq) (``policies.parrot.task_fcfs_key``)
    waiting_program: Sequence[RequestState] | None = None
    #: when the engine keeps it (the simulator does): the sum of ``ready_s`` over ``waiting``
    #: (s), so the mean time the queue has waited costs O(1) on a long queue
    waiting_ready_sum_s: float | None = None
    #: when the engine counts them (the simulator does): the number of records in
    #: ``history`` (all keys), so statistics memoised on the append-only history are
    #: looked up in O(1) instead of recounted at every event
    history_records: int | None = None
    #: an object unique to the engine run this snapshot belongs to (compared by identity:
    #: policies reset their per-run caches when it changes); None: ``history`` stands for it
    run_id: object = None

    @property
    def run_key(self) -> object:
        """What identifies this snapshot's run: ``run_id``, else the ``history`` object."""
        return self.run_id if self.run_id is not None else self.history

    @property
    def kv_budget_tokens(self) -> int:
        return self.config.kv_budget_tokens

    @property
    def free_kv_tokens(self) -> int:
        return self.config.kv_budget_tokens - self.used_kv_tokens

    def blocks(self, tokens: int) -> int:
        """Round ``tokens`` up to whole KV blocks (in tokens)."""
        return round_up_to_blocks(tokens, self.config.block_size)
