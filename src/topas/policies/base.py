"""The policy interface, and the default residency behaviour baselines share.

A policy is an object with a ``name`` and a pure ``decide(snapshot) -> Decision``.  It never
imports an engine: the simulator and the vLLM adapter both build a
:class:`~topas.engine.snapshot.Snapshot` and apply the returned
:class:`~topas.engine.decision.Decision`.  Policies may memoise work keyed by what they read
(for example a task's ``version``) but must not depend on anything else.

:class:`AdmissionPlan` is what engines do by default and what most baselines need: admit
requests in the policy's order while they fit, making room by evicting idle prefixes least
recently used first (swapped out when a host tier exists, else dropped), never evicting a
prefix that a running or just-admitted request uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from topas.engine.decision import Decision
from topas.engine.snapshot import Location, RequestState, Snapshot, StageRecord
from topas.policies.params import RESERVE_RATIO, Param

#: default KV reservation for a request's future output when no history exists (tokens)
DEFAULT_OUTPUT_RESERVE_TOKENS = 256


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self, snapshot: Snapshot) -> Decision: ...


_OUT_CACHE: dict[tuple[str, str | None], tuple[object, int, float]] = {}
_LISTS_CACHE: dict[tuple[str, str | None], tuple[object, int, list[Sequence[StageRecord]]]] = {}
_FAST_CACHE: dict[tuple[str, str | None], tuple[object, int, float]] = {}


def expected_call_output(snap: Snapshot, agent: str, kind: str | None = None) -> float:
    """Mean output tokens per call of ``agent`` (optionally one stage kind) over the last 32
    completed stages of each kind; :data:`DEFAULT_OUTPUT_RESERVE_TOKENS` until any exists.
    History is append-only, so the mean is memoised by the history object (compared by
    identity, never by ``id``, which a later run's history could reuse) and its length."""
    key = (agent, kind)
    n_records = snap.history_records
    if n_records is not None:
        # the engine counts the records: the same history and count, the same records
        fast = _FAST_CACHE.get(key)
        if fast is not None and fast[0] is snap.history and fast[1] == n_records:
            return fast[2]
        val = _expected_call_output(snap, agent, kind)
        if len(_FAST_CACHE) > 4096:
            _FAST_CACHE.clear()
        _FAST_CACHE[key] = (snap.history, n_records, val)
        return val
    return _expected_call_output(snap, agent, kind)


def _expected_call_output(snap: Snapshot, agent: str, kind: str | None) -> float:
    key = (agent, kind)
    # the history's lists of this agent (and kind): the same objects until a key is added
    got = _LISTS_CACHE.get(key)
    if got is not None and got[0] is snap.history and got[1] == len(snap.history):
        lists = got[2]
    else:
        lists = [
            recs
            for (a, k), recs in snap.history.items()
            if a == agent and (kind is None or k == kind)
        ]
        if len(_LISTS_CACHE) > 4096:
            _LISTS_CACHE.clear()
        _LISTS_CACHE[key] = (snap.history, len(snap.history), lists)
    seen = sum(map(len, lists))
    if not seen:
        return float(DEFAULT_OUTPUT_RESERVE_TOKENS)
    hit = _OUT_CACHE.get(key)
    if hit is not None and hit[0] is snap.history and hit[1] == seen:
        return hit[2]
    tot = rounds = 0
    for recs in lists:
        for rec in recs[-32:]:
            tot += rec.output_tokens
            rounds += rec.rounds
    val = tot / rounds if rounds else float(DEFAULT_OUTPUT_RESERVE_TOKENS)
    if len(_OUT_CACHE) > 4096:
        _OUT_CACHE.clear()
    _OUT_CACHE[key] = (snap.history, seen, val)
    return val


def output_reserve(snap: Snapshot, r: RequestState, ratio: float, expected_output: float) -> int:
    """KV headroom (tokens) to keep for request ``r``: ``ratio * expected_output`` tokens it
    has not generated yet, and never less than one block, since its next token may need a new
    one.  Without that block an admission can leave the next iteration no room, and the engine
    would have to preempt at once."""
    step = snap.config.block_size
    return max(step, int(ratio * expected_output) - r.generated_tokens)


def fcfs_queue(snap: Snapshot) -> Sequence[RequestState]:
    """Waiting requests in arrival order ``(ready_s, seq)``: the snapshot's own sequence when
    the engine guarantees that order (``Snapshot.waiting_fcfs``), so a long queue is not
    sorted again at every event; sorted otherwise."""
    if snap.waiting_fcfs:
        return snap.waiting
    return sorted(snap.waiting, key=lambda r: (r.ready_s, r.seq))


class AdmissionPlan:
    """Greedy admission with LRU residency, on a copy of the snapshot's accounting.

    ``reserve_ratio`` -- each admitted or running request keeps headroom for
    ``reserve_ratio * expected output`` tokens it has not generated yet (SGLang's
    ``new_token_ratio`` idea), so decodes rarely run out of KV.  0 keeps only one block.
    """

    def __init__(self, snap: Snapshot, reserve_ratio: float = 0.5) -> None:
        self.snap = snap
        self.reserve_ratio = reserve_ratio
        self._out_cache: dict[str, float] = {}
        self.free = snap.free_kv_tokens - self._running_reserve()
        self.admitted: list[int] = []
        self.evicted: list[str] = []
        self.batch = len(snap.running)
        self.needed: set[str] = {r.agent for r in snap.running}
        self.resident: set[str] = {
            a for a, p in snap.prefixes.items() if p.location == Location.DEVICE
        }
        self._lru: list[str] | None = None
        #: per agent, held contexts this decision releases (each was a user of the prefix)
        self._released: dict[str, int] = {}

    # -- accounting -------------------------------------------------------------------------
    def _running_reserve(self) -> int:
        """``sum(self.reserve(r) for r in snap.running)``, with :meth:`reserve` and
        :func:`output_reserve` inlined (every decision pays it; the same integers)."""
        running = self.snap.running
        if not running:
            return 0
        if type(self).reserve is not AdmissionPlan.reserve:  # a subclass's own reserve
            return sum(self.reserve(r) for r in running)
        step = self.snap.config.block_size
        ratio = self.reserve_ratio
        if ratio <= 0:
            return sum(max(step, -r.generated_tokens) for r in running)
        cache = self._out_cache
        keep: dict[str, int] = {}  # agent -> int(ratio * expected output)
        tot = 0
        for r in running:
            k = keep.get(r.agent)
            if k is None:
                exp = cache.get(r.agent)
                if exp is None:
                    exp = cache[r.agent] = expected_call_output(self.snap, r.agent)
                k = keep[r.agent] = int(ratio * exp)
            left = k - r.generated_tokens
            tot += left if left > step else step
        return tot

    def reserve(self, r: RequestState) -> int:
        """Headroom kept for ``r``'s future output: at least one block (its next token may
        open one), so an admission never leaves the next iteration without room."""
        if self.reserve_ratio <= 0:
            return output_reserve(self.snap, r, 0.0, 0.0)
        exp = self._out_cache.get(r.agent)
        if exp is None:
            exp = self._out_cache[r.agent] = expected_call_output(self.snap, r.agent)
        return output_reserve(self.snap, r, self.reserve_ratio, exp)

    def request_tokens(self, r: RequestState) -> int:
        """KV this request takes at admission (context KV it holds is already counted)."""
        held = self.snap.held.get((r.task_id, r.stage))
        have = held.tokens if held is not None and held.expires_s > self.snap.time_s else 0
        return self.snap.blocks(r.prompt_tokens + r.generated_tokens) - have

    def need(self, r: RequestState) -> int:
        """Tokens admitting ``r`` takes from the budget, its prefix included if not resident."""
        n = self.request_tokens(r) + self.reserve(r)
        if r.agent not in self.resident:
            n += self.snap.prefixes[r.agent].tokens
        return n

    def release_hold(self, key: tuple[int, str]) -> None:
        """Account for releasing the live held context ``key`` in this decision: its memory
        comes back, and it no longer keeps its agent's prefix resident."""
        h = self.snap.held[key]
        self.free += h.tokens
        self._released[h.agent] = self._released.get(h.agent, 0) + 1
        self._lru = None

    def lru_order(self) -> list[str]:
        if self._lru is None:
            rel = self._released
            idle = [
                p
                for a, p in self.snap.prefixes.items()
                if a in self.resident and p.users - rel.get(a, 0) == 0 and p.transfer is None
            ]
            idle.sort(key=lambda p: p.last_used_s)
            self._lru = [p.agent for p in idle]
        return self._lru

    # -- actions ----------------------------------------------------------------------------
    def try_admit(self, r: RequestState, evict: bool = True) -> bool:
        """Admit ``r`` if it fits, evicting idle prefixes LRU-first when ``evict``."""
        if self.batch >= self.snap.config.max_batch_requests:
            return False
        need = self.need(r)
        if need > self.free and not (evict and self.make_room(need, lambda a: a != r.agent)):
            if self.batch > 0:
                return False
            # an otherwise empty engine: alone, the request fits with one block of headroom
            # (the engine checks that before a run), however much output is expected --
            # keep only that block rather than leave the engine idle (work conservation)
            need -= self.reserve(r) - self.snap.config.block_size
            if need > self.free and not (evict and self.make_room(need, lambda a: a != r.agent)):
                return False
        self.free -= need
        if r.agent in self.evicted:
            # evicted earlier in this same decision and needed again: keep it resident (the
            # engine rejects evicting a prefix that an admitted request uses); ``need``
            # charged its tokens back, so the budget stays balanced
            self.evicted.remove(r.agent)
        self.resident.add(r.agent)
        self.needed.add(r.agent)
        self.admitted.append(r.request_id)
        self.batch += 1
        return True

    def make_room(self, need: int, may_evict: Callable[[str], bool]) -> bool:
        """Evict idle prefixes in :meth:`lru_order` (skipping needed ones and those
        ``may_evict`` refuses) until ``need`` tokens are free; evict nothing if that cannot
        be reached.  Returns whether ``need`` now fits."""
        victims = []
        gain = 0
        for a in self.lru_order():
            if a in self.needed or not may_evict(a):
                continue
            victims.append(a)
            gain += self.snap.prefixes[a].tokens
            if need <= self.free + gain:
                break
        if need > self.free + gain:
            return False
        for a in victims:
            self.evict(a)
        return True

    def evict(self, agent: str) -> None:
        self.resident.discard(agent)
        self.free += self.snap.prefixes[agent].tokens
        self.evicted.append(agent)
        if self._lru is not None and agent in self._lru:
            self._lru.remove(agent)

    def admit_in_order(
        self,
        ordered: Iterable[RequestState],
        *,
        stop_at_first_blocked: bool = True,
        evict: bool = True,
    ) -> None:
        """Admit ``ordered`` requests while they fit.  With ``stop_at_first_blocked`` the first
        request that does not fit blocks the rest (vLLM's FCFS head-of-line behaviour)."""
        for r in ordered:
            if not self.try_admit(r, evict=evict) and stop_at_first_blocked:
                break

    def decision(self, **extra: Any) -> Decision:
        return Decision(admit=tuple(self.admitted), evict=tuple(self.evicted), **extra)


class OrderedAdmission:
    """Base of policies whose only choice is an order: admit waiting requests in
    :meth:`order` while they fit (head-of-line blocking), default LRU residency."""

    name = ""
    #: declared parameters (topas.policies.params); subclasses with more extend this
    PARAMS: tuple[Param, ...] = (RESERVE_RATIO,)

    def __init__(self, seed: int = 0, reserve_ratio: float = 0.5) -> None:
        self.reserve_ratio = reserve_ratio

    def order(self, snap: Snapshot) -> Sequence[RequestState]:  # pragma: no cover - abstract
        raise NotImplementedError

    def decide(self, snap: Snapshot) -> Decision:
        if not snap.waiting:
            return Decision()
        plan = AdmissionPlan(snap, self.reserve_ratio)
        plan.admit_in_order(self.order(snap))
        return plan.decision()
