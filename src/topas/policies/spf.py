"""SPF / SRPT: the task with the shortest expected remaining processing goes first.

The progress-first baseline of the TOPAS paper: waiting requests are ordered by their task's
expected longest remaining path ``L_i`` (seconds), computed by the very estimator TOPAS uses
(:class:`topas.estimators.MonteCarloLP`, the estimator behind
``topas.estimators.expected_remaining_s``: empirical residuals per (agent, stage kind) with a
cost-model prior, Monte Carlo ``E[LP]``), so a comparison with TOPAS isolates the policy, not
the estimate.  Ties keep arrival order.  It is re-evaluated at every event, so it is
"remaining" (SRPT) at task level; on a chain it equals shortest-remaining-processing-time.
It does not preempt running requests and ignores prefix locality: admission follows the
order while requests fit (head-of-line blocking) and idle prefixes are evicted LRU first.
``srpt`` is an alias.
"""

from __future__ import annotations

from topas.engine.decision import Decision
from topas.engine.snapshot import RequestState, Snapshot
from topas.estimators import MonteCarloLP
from topas.policies import register
from topas.policies.base import AdmissionPlan
from topas.policies.params import N_SAMPLES, RESERVE_RATIO, Param


class SPF:
    """Shortest expected remaining task first (``L_i`` from the TOPAS estimator)."""

    name = "spf"
    PARAMS: tuple[Param, ...] = (RESERVE_RATIO, N_SAMPLES)

    def __init__(self, seed: int = 0, reserve_ratio: float = 0.5, n_samples: int = 64) -> None:
        self.reserve_ratio = reserve_ratio
        # one estimator per run, seeded by the run (common random numbers per task)
        self.estimator = MonteCarloLP(n_samples=n_samples, seed=seed)
        self._decisions = 0

    def remaining_s(self, snap: Snapshot) -> dict[int, float]:
        """``L_i`` (s) of every task with a waiting request."""
        out: dict[int, float] = {}
        for r in snap.waiting:
            if r.task_id not in out:
                out[r.task_id] = self.estimator.expected_remaining_s(snap, snap.tasks[r.task_id])
        return out

    def order(self, snap: Snapshot) -> list[RequestState]:
        rem = self.remaining_s(snap)
        return sorted(snap.waiting, key=lambda r: (rem[r.task_id], r.ready_s, r.seq))

    def tick(self, snap: Snapshot) -> None:
        """Per-decision bookkeeping: keep the estimator's per-task cache bounded."""
        self._decisions += 1
        if self._decisions % 256 == 0:
            self.estimator.forget_finished(snap.tasks)

    def decide(self, snap: Snapshot) -> Decision:
        self.tick(snap)
        if not snap.waiting:
            return Decision()
        plan = AdmissionPlan(snap, self.reserve_ratio)
        plan.admit_in_order(self.order(snap))
        return plan.decision()


register(
    "spf",
    "shortest expected remaining task first (TOPAS's E[LP] estimate), LRU prefix eviction",
    source="TOPAS paper baseline (SPF/SRPT)",
)(SPF)


@register(
    "srpt",
    "alias of spf: shortest expected remaining processing (task level)",
    source="TOPAS paper baseline (SPF/SRPT)",
)
class SRPT(SPF):
    name = "srpt"
