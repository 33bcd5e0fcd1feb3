"""What a router sees and returns.

A router is pure: :meth:`Router.route` gets a :class:`RouteRequest` (the call to place) and
a :class:`ClusterView` (every replica's load and residency at that instant) and returns a
replica id.  The simulator's cluster (``engine/cluster.py``) and the HTTP router service
(``integrations/router_service.py``) build the same views, so a router never knows which
engine it serves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from topas.engine.cost import CostModel
from topas.engine.snapshot import Location, PrefixState

__all__ = ["ClusterView", "ReplicaView", "RouteRequest", "Router", "RouterError"]


class RouterError(ValueError):
    """A router returned something that is not a replica of the cluster."""


@dataclass(frozen=True)
class RouteRequest:
    """One LLM call to place.  Units: tokens and seconds."""

    task_id: int
    workflow: str
    stage: str
    agent: str
    round_index: int
    prompt_tokens: int  #: dynamic prompt after the agent's prefix
    prefix_tokens: int  #: the agent's static prefix
    time_s: float
    task_arrival_s: float
    #: the replica that ran the task's first call (None for a task's first call)
    home: int | None = None
    #: the replica that ran this stage's previous round, where its context is (None if none)
    context_at: int | None = None
    #: mean output tokens of the agent's finished calls so far (None before the first)
    expected_output_tokens: float | None = None


@dataclass(frozen=True)
class ReplicaView:
    """One replica's load and residency at the routing instant."""

    replica_id: int
    running: int  #: requests admitted
    waiting: int  #: requests queued
    queued_prompt_tokens: int  #: tokens the queued requests still have to prefill
    used_kv_tokens: int
    kv_budget_tokens: int
    prefixes: Mapping[str, PrefixState]
    #: tokens of a (task, stage) context this replica holds or caches (0 if none)
    context_tokens: Callable[[tuple[int, str]], int]
    cost: CostModel

    @property
    def outstanding(self) -> int:
        return self.running + self.waiting

    @property
    def free_kv_tokens(self) -> int:
        return self.kv_budget_tokens - self.used_kv_tokens

    def prefix_resident(self, agent: str) -> bool:
        p = self.prefixes.get(agent)
        return p is not None and p.location == Location.DEVICE

    def prefix_on_host(self, agent: str) -> bool:
        p = self.prefixes.get(agent)
        return p is not None and (p.location == Location.HOST or p.on_host)

    def cached_tokens(self, req: RouteRequest) -> int:
        """Tokens of ``req``'s prompt (prefix + dynamic) this replica would not recompute."""
        if not self.prefix_resident(req.agent):
            return 0
        ctx = min(self.context_tokens((req.task_id, req.stage)), max(req.prompt_tokens - 1, 0))
        return req.prefix_tokens + ctx


@dataclass(frozen=True)
class ClusterView:
    time_s: float
    replicas: Sequence[ReplicaView]
    routed: int  #: calls routed so far


class Router:
    """Base class: subclasses set ``name`` and implement :meth:`route`."""

    name = "router"

    def route(self, req: RouteRequest, view: ClusterView) -> int:  # pragma: no cover
        raise NotImplementedError
