"""What a run produces, whichever engine ran it: per-request and per-task records, engine
counters and the run's result (the simulator and the vLLM driver both fill these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

__all__ = [
    "EngineCounters",
    "PrefixIn",
    "PrefixOut",
    "Preempted",
    "RequestRecord",
    "RequestSpan",
    "SimResult",
    "TaskRecord",
    "TimelineEvent",
]


@dataclass
class RequestRecord:
    request_id: int
    task_id: int
    stage: str
    agent: str
    round_index: int
    prompt_tokens: int
    output_tokens: int
    ready_s: float
    admitted_s: float
    first_token_s: float
    finished_s: float
    preemptions: int
    prefix_hit: bool
    #: dynamic prompt tokens found in KV at the final admission (a held or cached context)
    cached_tokens: int = 0
    #: dynamic prompt tokens prefilled by the final admission (``cached + computed == prompt``;
    #: output tokens a ``vllm`` preemption recomputes are not counted)
    computed_tokens: int = 0


@dataclass
class TaskRecord:
    task_id: int
    workflow: str
    arrival_s: float
    finished_s: float
    lower_bound_s: float
    n_requests: int

    @property
    def jct_s(self) -> float:
        return self.finished_s - self.arrival_s


@dataclass
class EngineCounters:
    iterations: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    busy_s: float = 0.0
    batch_time_product: float = 0.0  #: sum of batch size x iteration time
    prefix_hits: int = 0
    prefix_misses: int = 0
    swap_in_bytes: int = 0
    swap_out_bytes: int = 0
    recomputed_prefix_tokens: int = 0
    recomputed_tokens: int = 0  #: prefill + decode work redone because of preemption
    context_hit_tokens: int = 0  #: prompt tokens after the prefix found cached at admission
    preemptions: int = 0
    engine_preemptions: int = 0
    decisions: int = 0
    peak_kv_tokens: int = 0


# -- the Gantt-chart timeline (``record_timeline=True``): tuples with named fields, tagged by
# their first field, so code that reads them as plain tuples keeps working
class PrefixIn(NamedTuple):
    """``agent``'s prefix became resident at ``time_s`` (``how``: ``"in"`` for a swap-in,
    ``"compute"`` for a recompute, ``"ready"`` when it was resident at once)."""

    kind: Literal["prefix-in"]
    agent: str
    time_s: float
    how: str


class PrefixOut(NamedTuple):
    """``agent``'s prefix left the device at ``time_s`` (``how``: ``"drop"`` or ``"swap"``)."""

    kind: Literal["prefix-out"]
    agent: str
    time_s: float
    how: str


class Preempted(NamedTuple):
    """Request ``request_id`` was preempted at ``time_s``."""

    kind: Literal["preempt"]
    request_id: int
    time_s: float


class RequestSpan(NamedTuple):
    """Request ``request_id`` finished at ``finished_s``, first admitted at ``first_admit_s``."""

    kind: Literal["request"]
    request_id: int
    task_id: int
    stage: str
    agent: str
    first_admit_s: float
    finished_s: float


TimelineEvent = PrefixIn | PrefixOut | Preempted | RequestSpan


@dataclass
class SimResult:
    policy: str
    profile: str
    seed: int
    tasks: list[TaskRecord]
    requests: list[RequestRecord]
    counters: EngineCounters
    decision_s: list[float]
    makespan_s: float
    wall_s: float
    kv_trace: list[tuple[float, int]] = field(default_factory=list)
    timeline: list[TimelineEvent] = field(default_factory=list)
