"""Parrot-FCFS: application-level FCFS with shared-prefix co-scheduling (Parrot, OSDI'24).

Parrot ("Efficient Serving of LLM-based Applications with Semantic Variable", Lin et al.,
OSDI 2024) sees the request DAG of each application and schedules at the application level:
requests of the application that arrived first go first, whatever order its stages became
ready in, so an old task's later stages are not stuck behind newer tasks' first stages.  When
it dispatches a request it co-schedules the other ready requests that share its prompt
prefix, so the prefix is computed (here: made resident) once and served to all of them in
one batch.

Order: waiting requests sorted by (task arrival ``tau_i``, request ready time); walking that
list, each request is followed at once by every other waiting request of the same agent
(the shared prefix ``l_a``).  Admission stops at the first request that does not fit; idle
prefixes are evicted LRU first.  Parrot's multi-engine placement and its latency/throughput
hints have no counterpart on one engine and are not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence

from topas.engine.snapshot import RequestState, Snapshot
from topas.policies import register
from topas.policies.base import OrderedAdmission


def task_fcfs_key(snap: Snapshot, r: RequestState) -> tuple[float, int, float, int]:
    """(task arrival, task id, request ready time, engine sequence): program-level FCFS."""
    t = snap.tasks.get(r.task_id)
    arrival = t.arrival_s if t is not None else r.ready_s
    return (arrival, r.task_id, r.ready_s, r.seq)


def program_fcfs_queue(snap: Snapshot) -> Sequence[RequestState]:
    """Waiting requests in :func:`task_fcfs_key` order: the engine's own index when it keeps
    one (``Snapshot.waiting_program``), so a long queue is not sorted at every event."""
    if snap.waiting_program is not None:
        return snap.waiting_program
    return sorted(snap.waiting, key=lambda r: task_fcfs_key(snap, r))


def parrot_order(snap: Snapshot) -> list[RequestState]:
    """Task-level FCFS, each request followed by the waiting requests sharing its prefix."""
    base = program_fcfs_queue(snap)
    by_agent: dict[str, list[RequestState]] = {}
    for r in base:
        by_agent.setdefault(r.agent, []).append(r)
    out: list[RequestState] = []
    grouped: set[str] = set()
    for r in base:
        if r.agent in grouped:
            continue
        grouped.add(r.agent)
        out.extend(by_agent[r.agent])
    return out


@register(
    "parrot-fcfs",
    "Parrot: task-level FCFS (earliest task first), ready requests "
    "sharing a prefix co-scheduled, LRU prefix eviction",
    source="Parrot, OSDI'24 (Lin et al.)",
)
class ParrotFCFS(OrderedAdmission):
    """Application-level FCFS with prefix-sharing groups; head-of-line blocking admission."""

    name = "parrot-fcfs"

    def order(self, snap: Snapshot) -> list[RequestState]:
        return parrot_order(snap)
