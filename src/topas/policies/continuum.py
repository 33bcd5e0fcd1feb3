"""Continuum: KV time-to-live through tool calls, program-level FCFS (Li et al., 2025).

Continuum ("Efficient and Robust Multi-Turn LLM Agent Scheduling with KV Cache
Time-to-Live", arXiv 2511.02230) keeps ("pins") the KV of a call that ends in a tool call
resident for a time-to-live ``tau``, so the next call of the same program skips prefilling
its context and does not queue again.  ``tau`` maximises

    U(tau) = P(T <= tau) * Benefit  -  Cost(tau)

where ``T`` is the tool-call duration, ``P`` its empirical CDF (Continuum learns per-tool
histories; cold start assumes an exponential duration), ``Benefit`` the time a kept context
saves and ``Cost`` the memory the pin occupies.  When the TTL expires the KV is released, so
an unexpectedly long tool cannot squat on memory; under memory pressure pins are undone
iteratively.  Requests are ordered program-level FCFS (by task arrival).

Terms here, all in seconds (our choices where the paper's summary is not specific):

* ``Benefit = reload_s + queue_s``: ``reload_s`` -- prefilling the context again after the
  agent prefix (cost model; this engine has no host tier for contexts); ``queue_s`` -- the
  mean time the currently waiting requests have waited (the re-queueing a pin avoids).
* ``Cost(tau) = memory_weight * (tokens / B) * E[min(T, tau)]``: holding ``tokens`` of the
  KV budget ``B`` for the expected pin time takes that fraction of the engine for that long.
* Tool durations are observed per (agent, stage kind) as the gap between a call's finish and
  the next call of its stage becoming ready; with fewer than ``min_samples`` the exponential
  cold-start model with mean ``cold_mean_s`` is used, under which ``U`` is monotone, so the
  TTL is either 0 or ``max_ttl_s``.
* Memory pressure: when the oldest program's request does not fit, pins of younger programs
  (still in their tool call) are released youngest first; if it still does not fit and the
  engine would otherwise run nothing, older programs' pins are released too (**choice**: work
  conservation -- an idle engine must not wait for TTLs to expire).  Prefix residency is the engine
  default (LRU).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from topas.engine.decision import Decision
from topas.engine.snapshot import HeldContext, Phase, RequestState, Snapshot, StageStatus
from topas.policies import register
from topas.policies.base import AdmissionPlan
from topas.policies.params import RESERVE_RATIO, integer, real
from topas.policies.parrot import program_fcfs_queue


def best_ttl_s(
    samples: Sequence[float], benefit_s: float, cost_rate: float, max_ttl_s: float
) -> float:
    """``argmax_tau F(tau) * benefit_s - cost_rate * E[min(T, tau)]`` over the empirical
    distribution ``samples`` of tool durations (s); 0 when no ``tau`` has positive utility.
    The maximum lies at a sample point: ``F`` only jumps there and the cost grows between."""
    return best_ttl_sorted(
        sorted(x for x in samples if x <= max_ttl_s), len(samples), benefit_s, cost_rate
    )


def best_ttl_sorted(xs: Sequence[float], n_all: int, benefit_s: float, cost_rate: float) -> float:
    """:func:`best_ttl_s` given ``xs``, the samples <= ``max_ttl_s`` in ascending order, and
    ``n_all``, the number of all samples (a policy that keeps its samples sorted as they
    arrive skips the sort at every decision)."""
    if not xs or n_all == 0:
        return 0.0
    best_tau, best_u = 0.0, 0.0
    below = 0.0  # sum of samples <= tau
    last = len(xs) - 1
    for i, tau in enumerate(xs):
        below += tau
        if i < last and xs[i + 1] == tau:
            continue
        k = i + 1  # samples <= tau
        exp_hold = (below + (n_all - k) * tau) / n_all
        u = k / n_all * benefit_s - cost_rate * exp_hold
        if u > best_u:
            best_tau, best_u = tau, u
    return best_tau


def best_ttl_prefix(
    xs: Sequence[float],
    m: int,
    cum: Sequence[float],
    n_all: int,
    benefit_s: float,
    cost_rate: float,
) -> float:
    """:func:`best_ttl_sorted` of ``xs[:m]``, given ``cum[i] = xs[0] + ... + xs[i-1]``
    added left to right from 0.0 (``accumulate(xs, initial=0.0)``, the loop's ``below``),
    scanning from the largest TTL down: every candidate's utility is computed with the same
    floats as the loop, and the scan stops once ``F(tau) * benefit_s`` (which bounds the
    utility of that TTL and of every smaller one) falls below the best utility found, so a
    long queue (a large benefit: the largest TTL wins) costs one or two steps, not a loop
    over all samples.  Ties go to the smaller TTL, as in the loop.  Needs samples >= 0 and a
    finite benefit >= 0 and cost rate >= 0; otherwise the loop decides."""
    if not m or n_all == 0:
        return 0.0
    if not (xs[0] >= 0.0 and 0.0 <= benefit_s < math.inf and 0.0 <= cost_rate < math.inf):
        return best_ttl_sorted(xs[:m], n_all, benefit_s, cost_rate)
    best_tau, best_u = 0.0, None
    nxt = None  # xs[i + 1]
    for i in range(m - 1, -1, -1):
        tau = xs[i]
        if nxt == tau:
            continue  # not the last of its run of equal samples
        nxt = tau
        k = i + 1
        pb = k / n_all * benefit_s
        if best_u is not None and pb < best_u:
            break
        u = pb - cost_rate * ((cum[k] + (n_all - k) * tau) / n_all)
        if best_u is None or u >= best_u:
            best_tau, best_u = tau, u
    return best_tau if best_u is not None and best_u > 0.0 else 0.0


def reload_s(snap: Snapshot, h: HeldContext) -> float:
    """Seconds to prefill the context ``h`` again if it is not held."""
    prefix = snap.prefixes[h.agent].tokens
    return snap.cost.prefill_time(h.tokens, prefix) if h.tokens > 0 else 0.0


def mean_queue_s(snap: Snapshot) -> float:
    """Mean time the waiting requests have waited so far (s)."""
    n = len(snap.waiting)
    if not n:
        return 0.0
    if snap.waiting_ready_sum_s is not None:
        return max(0.0, snap.time_s - snap.waiting_ready_sum_s / n)
    now = snap.time_s
    return sum(now - r.ready_s for r in snap.waiting) / n


@register(
    "continuum",
    "Continuum: program-level FCFS; keep a call's KV through its tool "
    "call for a TTL set by reload + queueing saved vs memory held; LRU eviction",
    source="Continuum (Li et al., arXiv 2511.02230)",
)
class Continuum:
    """Tool-call TTL pinning of contexts with program-level FCFS admission."""

    name = "continuum"
    PARAMS = (
        RESERVE_RATIO,
        real(
            "memory_weight",
            1.0,
            "weight of the memory a held context occupies against the reload time it saves",
            hi=1e6,
        ),
        real(
            "cold_mean_s",
            1.0,
            "assumed mean tool duration (s) before min_samples are observed",
            hi=86_400.0,
        ),
        real("max_ttl_s", 30.0, "longest a context is held (s)", hi=86_400.0),
        integer(
            "min_samples",
            3,
            "tool durations observed before the learned distribution replaces the cold-start model",
            lo=1,
            hi=1_000_000,
        ),
        integer(
            "window", 64, "recent tool durations kept per (agent, stage kind)", lo=1, hi=1_000_000
        ),
        real("slack_s", 0.05, "added to each TTL (s)", hi=3_600.0),
    )

    def __init__(
        self,
        seed: int = 0,
        reserve_ratio: float = 0.5,
        memory_weight: float = 1.0,
        cold_mean_s: float = 1.0,
        max_ttl_s: float = 30.0,
        min_samples: int = 3,
        window: int = 64,
        slack_s: float = 0.05,
    ) -> None:
        for name, v in (
            ("memory_weight", memory_weight),
            ("cold_mean_s", cold_mean_s),
            ("max_ttl_s", max_ttl_s),
            ("slack_s", slack_s),
        ):
            if v < 0:
                raise ValueError(f"{name} {v}: must be >= 0")
        if min_samples < 1 or window < 1:
            raise ValueError(f"min_samples {min_samples} / window {window}: must be >= 1")
        self.reserve_ratio = reserve_ratio
        self.memory_weight = memory_weight
        self.cold_mean_s = cold_mean_s
        self.max_ttl_s = max_ttl_s
        self.min_samples = min_samples
        self.window = window
        self.slack_s = slack_s
        self._run_id: object = -1
        self._reset()

    def _reset(self) -> None:
        #: (task, stage) -> (tool start s, (agent, kind)) for stages now in a tool call
        self._tool_start: dict[tuple[int, str], tuple[float, tuple[str, str]]] = {}
        #: (agent, stage kind) -> observed tool durations (s), most recent last
        self.samples: dict[tuple[str, str], list[float]] = {}
        #: (agent, stage kind) -> [that ``samples`` list, the same values in ascending
        #: order, their prefix sums (``best_ttl_prefix``) or None], kept up to date by
        #: ``observe``;
        #: rebuilt when ``samples`` holds another list or another length (set from outside:
        #: replace a list, do not edit it in place)
        self._sorted: dict[tuple[str, str], list[Any]] = {}  # [xs, sorted xs, prefix sums | None]
        #: the largest waiting ``seq`` observed, and the waiting requests seen by (task,
        #: stage): with ``Snapshot.waiting_fcfs`` a decision looks only at new requests and at
        #: those whose stage's tool start it records again (below), not at the whole queue
        self._seen_seq = -1
        self._seen_by_key: dict[tuple[int, str], RequestState] = {}

    # -- learning tool durations ----------------------------------------------------------
    def observe(self, snap: Snapshot) -> None:
        if snap.run_key is not self._run_id:  # identity: ids are reused after GC
            self._reset()
            self._run_id = snap.run_key
        added = []
        for key, h in snap.held.items():
            if key not in self._tool_start and key[0] in snap.tasks:
                kind = snap.tasks[key[0]].stages[key[1]].kind
                self._tool_start[key] = (h.since_s, (h.agent, kind))
                added.append(key)
        for r in self._to_observe(snap, added):
            key = (r.task_id, r.stage)
            got = self._tool_start.get(key)
            if got is None or r.round_index == 0 or r.ready_s < got[0]:
                continue
            hist = self.samples.setdefault(got[1], [])
            entry = self._sorted_samples(got[1], hist)
            x = r.ready_s - got[0]
            hist.append(x)
            if entry is not None:
                srt = entry[1]
                insort(srt, x)
                entry[2] = None
                if len(hist) > self.window:
                    del srt[bisect_left(srt, hist[0])]
            if len(hist) > self.window:
                del hist[0]
            del self._tool_start[key]
        if len(self._tool_start) > 4 * max(16, len(snap.tasks)):
            self._tool_start = {k: v for k, v in self._tool_start.items() if k[0] in snap.tasks}

    def _to_observe(self, snap: Snapshot, added: list[tuple[int, str]]) -> Sequence[RequestState]:
        """The waiting requests whose outcome in ``observe`` can differ from the previous
        decision's, in queue order: all of them unless the queue is in ``seq`` order
        (``waiting_fcfs``); then the tail of new ones plus the seen ones still waiting whose
        stage's tool start was just recorded (again: a context still held after its stage's
        next call was observed is recorded anew), so a long queue costs nothing.  Any other
        seen request finds the same tool start as before, or none."""
        w = snap.waiting
        if not snap.waiting_fcfs:
            return w
        seen = self._seen_seq
        i = len(w)
        while i > 0 and w[i - 1].seq > seen:
            i -= 1
        new = w[i:]
        by_key = self._seen_by_key
        old = []
        for key in added:
            r = by_key.get(key)
            if r is not None and r.phase == Phase.WAITING and r.seq <= seen:
                old.append(r)
        for r in new:
            by_key[(r.task_id, r.stage)] = r
        if new:
            self._seen_seq = new[-1].seq
        if len(by_key) > 4 * len(w) + 64:
            self._seen_by_key = {k: r for k, r in by_key.items() if r.phase == Phase.WAITING}
        if not old:
            return new
        return sorted([*old, *new], key=lambda r: r.seq)

    def _sorted_samples(self, key: tuple[str, str], xs: Sequence[float]) -> list[Any] | None:
        """The ``_sorted`` entry of ``xs`` (``samples[key]``): ``xs`` in ascending order,
        kept incrementally, and its prefix sums once computed.  None if ``xs`` holds a NaN."""
        got = self._sorted.get(key)
        if got is None or got[0] is not xs or len(got[1]) != len(xs):
            if not isinstance(xs, list) or any(x != x for x in xs):
                return None  # NaN does not sort: best_ttl_s's own order, every time
            got = self._sorted[key] = [xs, sorted(xs), None]
        return got

    # -- the TTL ----------------------------------------------------------------------------
    def ttl_s(self, snap: Snapshot, h: HeldContext, queue_s: float | None = None) -> float:
        """Continuum's ``tau*`` for the context ``h`` (0 means: do not pin): the benefit of
        a hit is the reload it saves plus the queueing a re-admission would see
        (``queue_s``, :func:`mean_queue_s`; computed here when not given)."""
        if queue_s is None:
            queue_s = mean_queue_s(snap)
        return self.ttl_for_benefit(snap, h, reload_s(snap, h) + queue_s)

    def ttl_for_benefit(self, snap: Snapshot, h: HeldContext, benefit_s: float) -> float:
        """The TTL maximising ``P(T <= tau) * benefit_s - cost_rate * E[min(T, tau)]`` over
        the tool durations learned for ``h``'s (agent, stage kind)."""
        cost_rate = self.memory_weight * h.tokens / snap.kv_budget_tokens
        task = snap.tasks.get(h.task_id)
        kind = task.stages[h.stage].kind if task is not None else ""
        xs = self.samples.get((h.agent, kind), ())
        if len(xs) >= self.min_samples:
            # the samples are kept sorted (and their prefix sums until they change), so a
            # decision neither sorts nor loops over them: exactly best_ttl_s's result
            entry = self._sorted_samples((h.agent, kind), xs)
            if entry is None or self.max_ttl_s != self.max_ttl_s:
                return best_ttl_s(xs, benefit_s, cost_rate, self.max_ttl_s)
            srt = entry[1]
            if entry[2] is None:
                entry[2] = list(accumulate(srt, initial=0.0))
            return best_ttl_prefix(
                srt, bisect_right(srt, self.max_ttl_s), entry[2], len(xs), benefit_s, cost_rate
            )
        # cold start, T ~ Exp(mean m): U(tau) = (1 - e^{-tau/m}) (Benefit - cost_rate * m)
        return self.max_ttl_s if benefit_s > cost_rate * self.cold_mean_s else 0.0

    # -- the decision -----------------------------------------------------------------------
    def decide(self, snap: Snapshot) -> Decision:
        self.observe(snap)
        now = snap.time_s
        if not snap.waiting and not snap.held:
            return Decision()
        plan = AdmissionPlan(snap, self.reserve_ratio)

        def arrival(task_id: int) -> tuple[float, int]:
            t = snap.tasks.get(task_id)
            return (t.arrival_s if t is not None else now, task_id)

        # pins: new candidates (just finished calls) in program order, while they fit
        new_pins: dict[tuple[int, str], tuple[float, int]] = {}
        queue_s = None  # the same for every candidate: computed once, when first needed
        held = snap.held
        for key, h in sorted(held.items(), key=lambda kv: arrival(kv[0][0])) if held else ():
            if h.expires_s > now:
                continue
            if queue_s is None:
                queue_s = mean_queue_s(snap)
            tau = self.ttl_s(snap, h, queue_s)
            if tau > 0 and h.tokens <= plan.free and h.agent in plan.resident:
                plan.free -= h.tokens
                plan.needed.add(h.agent)  # a held context keeps its prefix resident
                new_pins[key] = (now + tau + self.slack_s, h.tokens)
        # request id -> agent of every request considered below (read for those admitted)
        admitted_agents: dict[int, str] = {}

        def drop_new_pin(k: tuple[int, str]) -> None:
            # the memory comes back; its prefix is needed only if something else needs it
            plan.free += new_pins.pop(k)[1]
            agent = snap.held[k].agent
            if (
                all(r.agent != agent for r in snap.running)
                and all(snap.held[o].agent != agent for o in new_pins)
                and all(admitted_agents[rid] != agent for rid in plan.admitted)
            ):
                plan.needed.discard(agent)

        # pins that may be undone under pressure: their stage is still in its tool call
        old_pins = {
            key: h.tokens
            for key, h in held.items()
            if h.expires_s > now
            and key[0] in snap.tasks
            and snap.tasks[key[0]].stages[key[1]].status == StageStatus.TOOL
        }
        release: list[tuple[int, str]] = []

        def undo_pins_for(r: RequestState, only_younger: bool) -> bool:
            """Undo pins (of programs younger than ``r``'s, or of any) youngest first until
            ``r`` is admitted; returns whether it was."""
            if not new_pins and not old_pins:
                return False
            mine = arrival(r.task_id)
            for k in sorted(
                (k for k in (*new_pins, *old_pins) if not only_younger or arrival(k[0]) > mine),
                key=lambda k: arrival(k[0]),
                reverse=True,
            ):
                if k in new_pins:
                    drop_new_pin(k)
                else:
                    old_pins.pop(k)
                    plan.release_hold(k)
                    release.append(k)
                if plan.try_admit(r):
                    return True
            return False

        for r in program_fcfs_queue(snap):
            admitted_agents[r.request_id] = r.agent
            if plan.try_admit(r) or undo_pins_for(r, only_younger=True):
                continue
            # work conservation: the engine would idle while pins of *older* programs keep
            # this request out (e.g. cold-start TTLs); undo those too
            if plan.batch == 0:
                undo_pins_for(r, only_younger=False)
            break  # head-of-line blocking, as in FCFS
        return plan.decision(hold={k: v[0] for k, v in new_pins.items()}, release=tuple(release))
