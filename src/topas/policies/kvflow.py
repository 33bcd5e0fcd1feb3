"""KVFlow: workflow-aware prefix eviction and prefetch (Pan et al., arXiv 2507.07400).

KVFlow replaces LRU with an eviction order derived from the workflow.  It abstracts the
agents' execution schedule as an *Agent Step Graph* and gives every agent a
**steps-to-execution** value: 0 for an agent executing now, and for a later agent the number
of steps before it can run.  The KV of agents with larger values is evicted first (LRU breaks
ties); agents due at the next step have their prefixes **prefetched** from the CPU tier in the
background, so their requests do not stall on a cache miss.  Request order is unchanged
(FCFS); KVFlow is a cache manager on top of SGLang's scheduler.

Mapping onto this engine: each unfinished stage ``v`` of every task gets
``ste(v) = 0`` if it is ready, running or in a tool call, else
``ste(v) = 1 + max_{unfinished u in deps(v)} ste(u)`` (it needs all its predecessors); an
agent's value is the minimum over all tasks' unfinished stages of that agent, and infinity if
no unfinished stage uses it.  Eviction of idle device prefixes goes by (largest value, least
recently used).  After admission, prefixes of agents with ``0 < ste <= prefetch_steps`` that
have a host copy are swapped in, if they fit in free memory or by evicting idle prefixes with
a strictly larger value.
"""

from __future__ import annotations

import math

from topas.engine.decision import Decision
from topas.engine.snapshot import Location, Snapshot, StageStatus
from topas.policies import register
from topas.policies.base import AdmissionPlan, fcfs_queue
from topas.policies.params import RESERVE_RATIO, integer

_ACTIVE = (StageStatus.READY, StageStatus.RUNNING, StageStatus.TOOL)


def steps_to_execution(snap: Snapshot) -> dict[str, float]:
    """Agent -> steps before its next execution (``math.inf`` when no task will use it)."""
    ste_agent: dict[str, float] = {a: math.inf for a in snap.prefixes}
    for task in snap.tasks.values():
        ste: dict[str, float] = {}
        for name in task.order:
            st = task.stages[name]
            if st.status == StageStatus.DONE:
                continue
            if st.status in _ACTIVE:
                v = 0.0
            else:
                v = 1.0 + max((ste[d] for d in st.deps if d in ste), default=-1.0)
            ste[name] = v
            if v < ste_agent.get(st.agent, math.inf):
                ste_agent[st.agent] = v
    return ste_agent


class KVFlowPlan(AdmissionPlan):
    """AdmissionPlan whose eviction order is by steps-to-execution instead of recency."""

    def __init__(self, snap: Snapshot, ste: dict[str, float], reserve_ratio: float) -> None:
        super().__init__(snap, reserve_ratio)
        self.ste = ste

    def lru_order(self) -> list[str]:
        if self._lru is None:
            idle = [
                p
                for a, p in self.snap.prefixes.items()
                if a in self.resident and p.users == 0 and p.transfer is None
            ]
            idle.sort(key=lambda p: (-self.ste.get(p.agent, math.inf), p.last_used_s))
            self._lru = [p.agent for p in idle]
        return self._lru

    def prefetch(self, agent: str) -> bool:
        """Make ``agent`` resident without admitting anything, evicting only idle prefixes
        whose next use is strictly farther away."""
        need = self.snap.prefixes[agent].tokens
        mine = self.ste.get(agent, math.inf)
        if need > self.free and not self.make_room(
            need, lambda a: self.ste.get(a, math.inf) > mine
        ):
            return False
        self.free -= need
        self.resident.add(agent)
        self.needed.add(agent)  # do not evict it again for a later prefetch
        return True


@register(
    "kvflow",
    "KVFlow: FCFS requests; evict prefixes with the most steps to next "
    "execution first; prefetch next-step agents' prefixes from the host tier",
    source="KVFlow (Pan et al., arXiv 2507.07400)",
)
class KVFlow:
    """Workflow-aware residency: steps-to-execution eviction and next-step prefetch."""

    name = "kvflow"
    PARAMS = (
        RESERVE_RATIO,
        integer(
            "prefetch_steps",
            1,
            "prefetch prefixes of agents due within this many steps",
            hi=1_000_000,
        ),
    )

    def __init__(self, seed: int = 0, reserve_ratio: float = 0.5, prefetch_steps: int = 1) -> None:
        if prefetch_steps < 0:
            raise ValueError(f"prefetch_steps {prefetch_steps}: must be >= 0")
        self.reserve_ratio = reserve_ratio
        self.prefetch_steps = prefetch_steps

    def decide(self, snap: Snapshot) -> Decision:
        ste = steps_to_execution(snap)
        plan = KVFlowPlan(snap, ste, self.reserve_ratio)
        plan.admit_in_order(fcfs_queue(snap))
        load: list[str] = []
        due = sorted((v, a) for a, v in ste.items() if 0 < v <= self.prefetch_steps)
        for _, a in due:
            p = snap.prefixes[a]
            if a in plan.resident or not p.on_host or p.transfer is not None:
                continue
            if p.location != Location.HOST:
                continue
            if plan.prefetch(a):
                load.append(a)
        if not plan.admitted and not plan.evicted and not load:
            return Decision()
        return plan.decision(load=tuple(load))
