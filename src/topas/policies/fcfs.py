"""FCFS: requests in the order they became ready (vLLM's and SGLang's default)."""

from __future__ import annotations

from collections.abc import Sequence

from topas.engine.snapshot import RequestState, Snapshot
from topas.policies import register
from topas.policies.base import OrderedAdmission, fcfs_queue


@register(
    "fcfs",
    "first come, first served: admit ready requests in arrival order, "
    "head-of-line blocking, LRU prefix eviction",
    source="vLLM / SGLang default",
)
class FCFS(OrderedAdmission):
    """Admit waiting requests oldest first while they fit; the first one that does not fit
    blocks the ones behind it (vLLM's FCFS).  Residency: LRU eviction of idle prefixes."""

    name = "fcfs"

    def order(self, snap: Snapshot) -> Sequence[RequestState]:
        return fcfs_queue(snap)
