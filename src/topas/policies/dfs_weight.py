"""DFS-weight: SGLang's depth-first cache-tree ordering, mapped onto agent prefixes.

SGLang (``schedule_policy.py``, ``CacheAwarePolicy.DFS_WEIGHT``) groups waiting requests by
the radix-tree node where their cached match ends (``req.last_node``), weights every node by
the number of waiting requests that end at it or anywhere below it, and emits the queue by a
depth-first walk from the root that visits heavier children first and emits a node's own
requests after its children's.  Requests with no cached match end at the root and go last.
Unlike LPM there is no large-queue FCFS fallback.

Here the cache tree has three levels: root -> one node per device-resident agent prefix
(``l_a`` tokens) -> one node per active held context of a stage of that agent.  Ties between
children of equal weight (SGLang: dict insertion order of the tree) are broken by the oldest
waiting request below each child, and a node's own requests keep arrival order.  Admission
stops at the first request that does not fit; idle prefixes are evicted LRU first.
"""

from __future__ import annotations

from topas.engine.snapshot import Location, RequestState, Snapshot
from topas.policies import register
from topas.policies.base import OrderedAdmission, fcfs_queue


def dfs_weight_order(snap: Snapshot) -> list[RequestState]:
    """Waiting requests in DFS-weight order."""
    now = snap.time_s
    root: list[RequestState] = []
    # agent node -> (its own requests, {context node key -> requests})
    agent_own: dict[str, list[RequestState]] = {}
    agent_ctx: dict[str, dict[tuple[int, str], list[RequestState]]] = {}
    for r in fcfs_queue(snap):
        if snap.prefixes[r.agent].location != Location.DEVICE:
            root.append(r)
            continue
        key = (r.task_id, r.stage)
        h = snap.held.get(key)
        if h is not None and h.expires_s > now:
            agent_ctx.setdefault(r.agent, {}).setdefault(key, []).append(r)
        else:
            agent_own.setdefault(r.agent, []).append(r)
            agent_ctx.setdefault(r.agent, {})

    def oldest(reqs: list[RequestState]) -> tuple[float, int]:
        return min((q.ready_s, q.seq) for q in reqs)

    agents = []
    for a, ctx in agent_ctx.items():
        own = agent_own.get(a, [])
        below = own + [q for reqs in ctx.values() for q in reqs]
        agents.append((-len(below), oldest(below), a))
    agents.sort()
    out: list[RequestState] = []
    for _, _, a in agents:
        ctx_nodes = sorted(agent_ctx[a].values(), key=lambda reqs: (-len(reqs), oldest(reqs)))
        for reqs in ctx_nodes:  # children before the node's own requests
            out.extend(reqs)
        out.extend(agent_own.get(a, []))
    out.extend(root)
    return out


@register(
    "dfs-weight",
    "SGLang DFS-weight: walk the prefix tree depth first, heavier "
    "subtrees (more waiting requests) first, LRU prefix eviction",
    source="SGLang schedule_policy.py (CacheAwarePolicy.DFS_WEIGHT)",
)
class DFSWeight(OrderedAdmission):
    """SGLang's DFS-weight ordering; head-of-line blocking admission."""

    name = "dfs-weight"

    def order(self, snap: Snapshot) -> list[RequestState]:
        return dfs_weight_order(snap)
