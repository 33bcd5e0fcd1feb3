"""Autellix-LAS: least attained service of the program first (Autellix, Luo et al., 2025).

Autellix treats each agentic program (here: a task) as the unit of scheduling and is
non-clairvoyant: it never predicts lengths, it only measures the service a program has
already received.  A call's priority is its program's attained service:

* **PLAS** (single-threaded programs): the total engine time of all the program's calls so far.
* **ATLAS** (DAG programs): the attained service along the program's critical path,
  ``cp(v) = s(v) + max_{u in deps(v)} cp(u)``, where ``s(v)`` is the engine time of stage
  ``v``'s calls so far; a call of stage ``v`` gets ``cp(v)``.  Parallel branches do not add up.

Priorities are discretised into multi-level queues (thresholds ``thresholds_s``, seconds):
a lower queue is served first and calls in one queue are served in arrival order, which
avoids reordering on every small change.  Anti-starvation: a call that has waited longer than
``starvation_ratio`` times its program's attained service is promoted to the top queue.

Attained service is measured from what the policy sees: between two decisions every admitted
call receives the elapsed time (the simulator decides at every finish and preemption, so this
is exact there).  Residency is the engine default (LRU); admission stops at the first call
that does not fit.  Not modelled: Autellix's preemption of running calls and its multi-engine
load balancer; this baseline reorders admission only.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from topas.engine.decision import Decision
from topas.engine.snapshot import RequestState, Snapshot, TaskState
from topas.policies import register
from topas.policies.base import AdmissionPlan
from topas.policies.params import RESERVE_RATIO, choice, real, reals

#: default queue thresholds (seconds of attained service): 0.5 s doubling to 64 s
DEFAULT_THRESHOLDS_S = tuple(0.5 * 2**k for k in range(8))


class AttainedService:
    """Per-stage attained engine time (seconds) accumulated over successive decisions."""

    def __init__(self) -> None:
        self._run_id: object = -1
        self.reset()

    def reset(self) -> None:
        self.stage_s: dict[tuple[int, str], float] = {}
        self._active: dict[int, tuple[int, str]] = {}
        self._last_s: float | None = None

    def observe(self, snap: Snapshot) -> None:
        """Credit the time since the previous decision to the calls admitted after it."""
        if snap.run_key is not self._run_id:  # a new run (identity: ids are reused after GC)
            self.reset()
            self._run_id = snap.run_key
        if self._last_s is not None:
            dt = snap.time_s - self._last_s
            if dt > 0:
                for key in self._active.values():
                    self.stage_s[key] = self.stage_s.get(key, 0.0) + dt
        self._last_s = snap.time_s
        if len(self.stage_s) > 4 * max(16, len(snap.tasks)):
            self.stage_s = {k: v for k, v in self.stage_s.items() if k[0] in snap.tasks}

    def after(self, snap: Snapshot, decision: Decision) -> None:
        """Remember which calls run until the next decision."""
        gone = set(decision.preempt)
        active = {
            r.request_id: (r.task_id, r.stage) for r in snap.running if r.request_id not in gone
        }
        if decision.admit:
            waiting = {r.request_id: r for r in snap.waiting}
            for rid in decision.admit:
                r = waiting[rid]
                active[rid] = (r.task_id, r.stage)
        self._active = active

    def task_total_s(self, task: TaskState) -> float:
        """PLAS: the program's total attained service."""
        tid = task.task_id
        return sum(self.stage_s.get((tid, s), 0.0) for s in task.stages)

    def critical_path_s(self, task: TaskState) -> dict[str, float]:
        """ATLAS: attained service along the longest dependency chain ending at each stage."""
        tid = task.task_id
        cp: dict[str, float] = {}
        for name in task.order:
            st = task.stages[name]
            cp[name] = self.stage_s.get((tid, name), 0.0) + max(
                (cp[d] for d in st.deps), default=0.0
            )
        return cp


@register(
    "autellix-las",
    "Autellix: least attained service of the task first (ATLAS: "
    "critical-path service for DAGs; PLAS for chains), discretised queues, LRU eviction",
    source="Autellix (Luo et al., arXiv 2502.13965)",
)
class AutellixLAS:
    """Program-level least-attained-service admission order with multi-level queues.

    ``mode`` -- ``"atlas"`` (critical-path attained service; equals PLAS on chains) or
    ``"plas"`` (total attained service).  ``thresholds_s`` -- ascending queue boundaries.
    ``starvation_ratio`` -- promote a call after waiting this many times its program's
    attained service (``None`` disables it).
    """

    name = "autellix-las"
    PARAMS = (
        RESERVE_RATIO,
        choice(
            "mode",
            "atlas",
            ("atlas", "plas"),
            "atlas: critical-path attained service; plas: total attained service",
        ),
        reals("thresholds_s", DEFAULT_THRESHOLDS_S, "ascending queue boundaries (s)", hi=1e9),
        real(
            "starvation_ratio",
            4.0,
            "promote a call after waiting this many times its "
            "program's attained service (none: never)",
            hi=1e6,
            lo_open=True,
            nullable=True,
        ),
    )

    def __init__(
        self,
        seed: int = 0,
        reserve_ratio: float = 0.5,
        mode: str = "atlas",
        thresholds_s: Sequence[float] = DEFAULT_THRESHOLDS_S,
        starvation_ratio: float | None = 4.0,
    ) -> None:
        if mode not in ("atlas", "plas"):
            raise ValueError(f"mode {mode!r}: must be 'atlas' or 'plas'")
        th = tuple(float(x) for x in thresholds_s)
        if any(b <= a for a, b in zip(th, th[1:])) or any(x < 0 for x in th):
            raise ValueError(f"thresholds_s {th}: must be non-negative and strictly ascending")
        if starvation_ratio is not None and starvation_ratio <= 0:
            raise ValueError(f"starvation_ratio {starvation_ratio}: must be > 0 or None")
        self.reserve_ratio = reserve_ratio
        self.mode = mode
        self.thresholds_s = th
        self.starvation_ratio = starvation_ratio
        self.service = AttainedService()

    def priorities(self, snap: Snapshot) -> dict[int, float]:
        """Attained service (s) that orders each waiting request (lower runs first)."""
        out: dict[int, float] = {}
        cache: dict[int, dict[str, float] | float] = {}
        for r in snap.waiting:
            t = snap.tasks[r.task_id]
            if r.task_id not in cache:
                cache[r.task_id] = (
                    self.service.critical_path_s(t)
                    if self.mode == "atlas"
                    else self.service.task_total_s(t)
                )
            v = cache[r.task_id]
            out[r.request_id] = v[r.stage] if isinstance(v, dict) else v
        return out

    def order(self, snap: Snapshot) -> list[RequestState]:
        prio = self.priorities(snap)
        now = snap.time_s

        def key(r: RequestState) -> tuple[int, float, int]:
            s = prio[r.request_id]
            q = bisect_right(self.thresholds_s, s)
            if self.starvation_ratio is not None and now - r.ready_s > self.starvation_ratio * s:
                q = 0
            return (q, r.ready_s, r.seq)

        return sorted(snap.waiting, key=key)

    def decide(self, snap: Snapshot) -> Decision:
        self.service.observe(snap)
        if snap.waiting:
            plan = AdmissionPlan(snap, self.reserve_ratio)
            plan.admit_in_order(self.order(snap))
            dec = plan.decision()
        else:
            dec = Decision()
        self.service.after(snap, dec)
        return dec
