"""FCFS: requests in the order they became ready (vLLM's and SGLang's default)."""

from __future__ import annotations

from topas.engine.decision import Decision
from topas.engine.snapshot import Snapshot
from topas.policies import register
from topas.policies.base import AdmissionPlan


@register("fcfs", "first come, first served: admit ready requests in arrival order, "
          "head-of-line blocking, LRU prefix eviction", source="vLLM / SGLang default")
class FCFS:
    """Admit waiting requests oldest first while they fit; the first one that does not fit
    blocks the ones behind it (vLLM's FCFS).  Residency: LRU eviction of idle prefixes."""

    name = "fcfs"

    def __init__(self, seed: int = 0, reserve_ratio: float = 0.5) -> None:
        self.reserve_ratio = reserve_ratio

    def decide(self, snap: Snapshot) -> Decision:
        if not snap.waiting:
            return Decision()
        plan = AdmissionPlan(snap, self.reserve_ratio)
        plan.admit_in_order(sorted(snap.waiting, key=lambda r: (r.ready_s, r.seq)))
        return plan.decision()
