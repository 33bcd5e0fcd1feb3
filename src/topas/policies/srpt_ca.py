"""SRPT-CA: contention-aware shortest remaining processing first (review item 3).

The review of the TOPAS paper (spec section 5, item 3) asks for "a simple contention-aware
SRPT variant" as a comparator, because the paper's motivating toy favours plain SRPT.  This is
it: SPF's order (the task's expected longest remaining path ``L_i``, seconds, from the very
estimator TOPAS and SPF use, :class:`topas.estimators.MonteCarloLP`), except that a request
whose agent prefix is not resident is charged the time to make it resident,

    key(r) = L_i + c_in(a(r))      c_in(a) = 0                      if a is resident (or
                                                                     already made resident
                                                                     by this decision)
                                            = mu * l_a / B_swap      if a host copy exists
                                            = prefill time of l_a    otherwise (recompute)

so SRPT does not switch agents (and pay a prefix move plus the batch it splits) for a task
that is only marginally shorter.  Once a decision has admitted a request of an agent, that
agent's prefix counts as resident for the rest of the decision, so its other requests are no
longer charged (the charge is a one-off per agent and decision).

Everything else is SPF: no preemption, head-of-line blocking on the first request that does
not fit, idle prefixes evicted LRU first (:class:`topas.policies.base.AdmissionPlan`).
**Choice**: the charge is the move-in time only; swap-out of the LRU victim is not charged
(with a host copy, or no host tier, dropping is free in this engine).
"""

from __future__ import annotations

from topas.engine.decision import Decision
from topas.engine.snapshot import Location, RequestState, Snapshot
from topas.policies import register
from topas.policies.base import AdmissionPlan
from topas.policies.params import real
from topas.policies.spf import SPF


def residency_cost_s(snap: Snapshot, agent: str) -> float:
    """``c_in(a)`` in seconds: 0 when resident, swap-in time with a host copy, else the
    prefill time of recomputing the prefix."""
    p = snap.prefixes[agent]
    if p.location == Location.DEVICE:
        return 0.0
    if p.on_host or p.location == Location.HOST:
        return snap.cost.swap_time(p.tokens)
    return snap.cost.prefill_time(p.tokens) if p.tokens > 0 else 0.0


@register(
    "srpt-ca",
    "contention-aware SRPT: SPF's E[LP] order plus the time to make a "
    "non-resident agent prefix resident (swap-in or recompute); LRU eviction",
    source="review of TOPAS, section 5 item 3 (our design)",
)
class SRPTContentionAware(SPF):
    """SPF whose order key adds the prefix residency cost ``c_in(a)`` (seconds)."""

    name = "srpt-ca"
    PARAMS = (
        *SPF.PARAMS,
        real(
            "switch_weight",
            1.0,
            "weight of the prefix residency cost c_in in the order key (0: SPF's order)",
            hi=1e6,
        ),
    )

    def __init__(
        self,
        seed: int = 0,
        reserve_ratio: float = 0.5,
        n_samples: int = 64,
        switch_weight: float = 1.0,
    ) -> None:
        if switch_weight < 0:
            raise ValueError(f"srpt-ca: switch_weight={switch_weight} must be >= 0")
        super().__init__(seed=seed, reserve_ratio=reserve_ratio, n_samples=n_samples)
        #: multiplies c_in; 0 gives SPF's order exactly
        self.switch_weight = switch_weight

    def order_keys(self, snap: Snapshot) -> dict[int, float]:
        """``L_i + switch_weight * c_in(a(r))`` (s) per waiting request id, with the snapshot's
        residency (for tests and traces; :meth:`decide` updates it as it admits)."""
        rem = self.remaining_s(snap)
        return {
            r.request_id: rem[r.task_id] + self.switch_weight * residency_cost_s(snap, r.agent)
            for r in snap.waiting
        }

    def decide(self, snap: Snapshot) -> Decision:
        self.tick(snap)
        if not snap.waiting:
            return Decision()
        rem = self.remaining_s(snap)
        # per agent, its requests in SPF order; the next request overall is the agent head with
        # the smallest key, so each step is O(agents), not O(waiting)
        queues: dict[str, list[RequestState]] = {}
        for r in sorted(snap.waiting, key=lambda q: (rem[q.task_id], q.ready_s, q.seq)):
            queues.setdefault(r.agent, []).append(r)
        charge = {a: self.switch_weight * residency_cost_s(snap, a) for a in queues}
        pos = dict.fromkeys(queues, 0)
        plan = AdmissionPlan(snap, self.reserve_ratio)
        while True:
            best: tuple[tuple[float, float, int], str, RequestState] | None = None
            for a, q in queues.items():
                i = pos[a]
                if i >= len(q):
                    continue
                r = q[i]
                key = (
                    rem[r.task_id] + (0.0 if a in plan.resident else charge[a]),
                    r.ready_s,
                    r.seq,
                )
                if best is None or key < best[0]:
                    best = (key, a, r)
            if best is None:
                break
            _, a, r = best
            if not plan.try_admit(r):
                break  # head-of-line blocking, as SPF
            pos[a] += 1
        return plan.decision()
