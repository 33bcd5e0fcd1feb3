"""Routers for a cluster of engine replicas: pure functions of a cluster view (see
``routing/base.py``), shared by the simulator's cluster and the HTTP router service."""

from __future__ import annotations

from collections.abc import Callable

from topas.routing.base import ClusterView, ReplicaView, Router, RouteRequest, RouterError
from topas.routing.routers import (
    LeastOutstanding,
    PrefixAffinity,
    RoundRobin,
    TaskAffinity,
    TopasRouter,
)

#: router name -> factory (keyword parameters as documented on each class)
ROUTERS: dict[str, Callable[..., Router]] = {
    "round-robin": RoundRobin,
    "least-outstanding": LeastOutstanding,
    "prefix-affinity": PrefixAffinity,
    "task-affinity": TaskAffinity,
    "topas": TopasRouter,
}


#: the router ``topas run --replicas N`` uses unless ``--router`` names another
DEFAULT_ROUTER = "topas"

#: one line per router, for ``topas list``
ROUTER_SUMMARIES: dict[str, str] = {
    "round-robin": "the k-th call to replica k mod N (HTTP balancers' default)",
    "least-outstanding": "fewest running + queued requests (llm-d / Envoy least-request)",
    "prefix-affinity": "largest cached share of the prompt unless load is imbalanced "
    "(SGLang router cache-aware)",
    "task-affinity": "a task stays where its contexts are unless overloaded (Autellix)",
    "topas": "earliest expected finish of the call (queue, prefix miss, prefill, decode) "
    "plus the delay it imposes on the replica's other requests",
}


def make_router(name: str, **params) -> Router:
    """A router by name; an unknown name or parameter is a one-line ValueError."""
    if name not in ROUTERS:
        raise ValueError(f"router {name!r}: unknown; choose from {', '.join(ROUTERS)}")
    try:
        return ROUTERS[name](**params)
    except TypeError as e:
        raise ValueError(f"router {name!r}: bad parameters {params}: {e}") from None
    except ValueError as e:
        raise ValueError(f"router {name!r}: {e}") from None


def parse_router_params(items: list[str] | None) -> dict:
    """``["k=v", ...]`` (``--router-param``) -> ``{k: v}`` with v an int, else a float, else
    the string; ``make_router`` checks names and ranges."""
    from topas.policies.params import key_value_pairs

    out: dict = {}
    for key, raw in key_value_pairs(items, "--router-param").items():
        val: object = raw
        for conv in (int, float):
            try:
                val = conv(raw)
                break
            except ValueError:
                pass
        out[key] = val
    return out


__all__ = [
    "DEFAULT_ROUTER",
    "ROUTERS",
    "ROUTER_SUMMARIES",
    "ClusterView",
    "ReplicaView",
    "RouteRequest",
    "Router",
    "RouterError",
    "make_router",
    "parse_router_params",
]
