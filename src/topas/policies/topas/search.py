"""The search over post-decision states (docs/topas.md).

GREEDYPACK(R) admits compatible waiting requests by highest aged conditional gain while they
fit (at most ``K`` admits; every running request of an agent left out of ``R`` is preempted,
at most ``K``); every subset of the active agents ``A_t`` is tried when ``|A_t| <= M``
(:func:`exhaustive`), else a hierarchical local search from ``R_t`` (:func:`hierarchical`).
The arg-max is committed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topas.engine.snapshot import RequestState, Snapshot
    from topas.policies.topas.context import Context, _Cand
    from topas.policies.topas.policy import Topas


@dataclass(frozen=True, slots=True)
class Choice:
    """One evaluated post-decision state."""

    score: float
    admit: tuple[int, ...]
    preempt: tuple[int, ...]
    evict: tuple[str, ...]
    credit: tuple[tuple[int, float], ...]
    resident: frozenset[str]
    terms: tuple[float, float, float, float, float]  #: admit, move, redo, revoke, reuse

    def key(self) -> tuple[float, int, int, int]:
        # ties: fewer preemptions, then fewer evictions (do not disturb the engine for nothing)
        return (round(self.score, 9), -len(self.preempt), -len(self.evict), len(self.admit))


class GreedyPack:
    """GREEDYPACK and the Score of the states it packs, over one decision's
    :class:`~topas.policies.topas.context.Context` (a mixin of it: these methods read the
    context's fields -- ``pol``, ``snap``, ``cands``, ``free0``, ``resident0``, ``pinned``,
    ``running_by_agent``, the terms' inputs -- and its memo ``_memo``)."""

    # -- set by Context.__init__ (the meaning of each: there) --------------------------------
    pol: Topas
    snap: Snapshot
    cands: list[_Cand]  #: GREEDYPACK's candidates, in packing order
    by_task: dict[int, list[_Cand]]
    multi: set[int]  #: tasks with several ready candidates (conditional gains)
    free0: int  #: free KV tokens before the decision, output reservations kept
    resident0: frozenset[str]
    pinned: frozenset[str]  #: resident prefixes this decision cannot evict
    fixed: frozenset[str]  #: agents resident or running
    running_by_agent: dict[str, list[RequestState]]
    min_need: dict[str, int]
    top_gains: dict[str, list[float]]
    max_batch: int
    redo: dict[int, float]  #: J_redo per running request (s)
    release: dict[int, int]  #: KV tokens preempting a running request gives back
    revoke: dict[int, float]  #: J_revoke per running request (s)
    c_in: dict[str, float]  #: prefix move-in cost (s)
    c_out: dict[str, float]  #: prefix move-out cost (s)
    reuse: dict[str, float]  #: V_reuse weight per agent (s)
    #: GREEDYPACK's memos: per core (the allowed agents that are resident or running) its
    #: preemptions, evictions and free KV tokens (None: more preemptions than allowed); per
    #: (core, agents that can admit) the packed state
    _fixed_memo: dict[frozenset[str], tuple[list[int], list[str], int] | None]
    _memo: dict[tuple[frozenset[str], frozenset[str]], Choice | None]

    if TYPE_CHECKING:

        def cond_gain(self, c: _Cand, admitted: tuple[str, ...]) -> float: ...

    def better(self, a: Choice | None, b: Choice | None) -> Choice | None:
        if b is None:
            return a
        if a is None:
            return b
        # an engine left idle with requests waiting is the last resort (work conservation)
        ka = (self._busy(a),) + a.key()
        kb = (self._busy(b),) + b.key()
        return b if kb > ka else a

    def _busy(self, c: Choice) -> bool:
        return bool(c.admit) or len(self.snap.running) > len(c.preempt)

    def greedypack(self, allowed: frozenset[str]) -> Choice | None:
        """GREEDYPACK(R): the post-decision state for the prefix set ``allowed``."""
        pol, snap = self.pol, self.snap
        allowed = allowed | self.pinned
        # agents that are resident or running fix preemptions, evictions and the free budget;
        # any other agent matters only if one of its candidates can fit, so prefix sets that
        # differ only by agents that cannot admit anything give the same state (memoised)
        core = allowed & self.fixed
        fixed_memo = self._fixed_memo
        if core in fixed_memo:
            hit = fixed_memo[core]
        else:
            preempt = [
                r.request_id
                for a, rs in self.running_by_agent.items()
                if a not in allowed
                for r in rs
            ]
            if len(preempt) > pol.max_preempt:
                hit = None
            else:
                free = self.free0
                for rid in preempt:
                    free += self.release[rid]
                evict = [a for a in self.resident0 if a not in allowed]
                for a in evict:
                    free += snap.prefixes[a].tokens
                hit = (preempt, evict, free)
            fixed_memo[core] = hit
        if hit is None:
            return None
        preempt, evict, free0 = hit
        min_need = self.min_need
        prefixes = snap.prefixes
        useful = frozenset(
            a
            for a in allowed
            if a in min_need and min_need[a] + (0 if a in core else prefixes[a].tokens) <= free0
        )
        key = (core, useful)
        if key in self._memo:
            return self._memo[key]
        choice = self._pack(useful, core, list(preempt), evict, free0)
        self._memo[key] = choice
        return choice

    def upper_bound(self, allowed: frozenset[str]) -> float:
        """An upper bound (s) on the Score of any state GREEDYPACK can reach with prefix set
        ``allowed``: the ``K`` largest unconditional gains of its agents, all their reuse
        value, minus the redo and revoke of the preemptions the set forces (moves >= 0).
        Conditional gains of tasks with several ready requests can exceed their
        unconditional ones, so with such tasks the bound is infinite."""
        if self.multi:
            return math.inf
        allowed = allowed | self.pinned
        pol = self.pol
        pre = [
            r.request_id for a, rs in self.running_by_agent.items() if a not in allowed for r in rs
        ]
        if len(pre) > pol.max_preempt:
            return -math.inf
        lost = 0.0
        for rid in pre:
            if pol.use_redo:
                lost += self.redo[rid]
            if pol.use_revoke:
                lost += self.revoke[rid]
        gains: list[float] = []
        for a in allowed:
            g = self.top_gains.get(a)
            if g:
                gains.extend(g)
        if len(gains) > pol.K:
            gains.sort(reverse=True)
            del gains[pol.K :]
        return sum(gains) + sum(self.reuse.get(a, 0.0) for a in allowed) - lost

    def _pack(
        self,
        allowed: frozenset[str],
        core: frozenset[str],
        preempt: list[int],
        evict: list[str],
        free: int,
    ) -> Choice:
        """GREEDYPACK's admission loop and Score for the agents ``allowed`` to admit, after
        the preemptions and evictions fixed by the prefix set."""
        pol, snap = self.pol, self.snap
        resident = set(self.resident0 & core)
        if not allowed:
            return self._score([], preempt, evict, resident, 0.0, [], set())
        # nothing smaller than this can be admitted (need >= tokens), so stop below it
        floor = min(self.min_need[a] for a in allowed)
        batch = len(snap.running) - len(preempt)
        admitted: list[int] = []
        done: set[int] = set()
        credit: list[tuple[int, float]] = []
        task_stages: dict[int, list[str]] = {}
        j_admit = 0.0
        cands = self.cands
        gains = None  # conditional gains, copied on the first multi-request task admitted
        i = 0
        order = cands
        while i < len(order) and len(admitted) < pol.K and batch < self.max_batch:
            c = order[i]
            i += 1
            if c.agent not in allowed or c.req.request_id in done:
                continue
            g = c.gain if gains is None else gains.get(c.req.request_id, c.gain)
            if g <= 0:
                if gains is None:
                    break  # sorted by gain: nothing better follows
                continue
            need = c.tokens + (0 if c.agent in resident else snap.prefixes[c.agent].tokens)
            if need > free:
                continue
            free -= need
            batch += 1
            admitted.append(c.req.request_id)
            done.add(c.req.request_id)
            credit.append((c.req.request_id, g))
            j_admit += g
            new_prefix = c.agent not in resident
            resident.add(c.agent)
            if free < floor:
                break  # nothing else fits (every need >= its tokens >= floor)
            if c.task_id in self.multi:
                # later requests of this task get their gain conditional on this admission
                hs = task_stages.setdefault(c.task_id, [])
                hs.append(c.stage)
                if gains is None:
                    gains = {}
                for o in self.by_task[c.task_id]:
                    if o.req.request_id not in done:
                        gains[o.req.request_id] = self.cond_gain(o, tuple(hs))
                if pol.group_agents == "none":  # grouped: the order is fixed for the decision
                    order = sorted(
                        (x for x in cands if x.req.request_id not in done),
                        key=lambda x: (-gains.get(x.req.request_id, x.gain), x.l_i, x.req.seq),
                    )
                    i = 0
            elif new_prefix:
                i = 0  # requests of this agent skipped before may fit now
                order = [x for x in order if x.req.request_id not in done]
        return self._score(admitted, preempt, evict, resident, j_admit, credit, done)

    def _score(
        self,
        admitted: list[int],
        preempt: list[int],
        evict: list[str],
        resident: set[str],
        j_admit: float,
        credit: list[tuple[int, float]],
        done: set[int],
    ) -> Choice:
        """The Score terms (seconds) of a packed state."""
        pol = self.pol
        r_in = resident - self.resident0
        j_move = 0.0
        if pol.use_move and r_in:
            t_in = {c.task_id for c in self.cands if c.agent in r_in and c.req.request_id in done}
            moved = sum(self.c_in[a] for a in r_in) + sum(self.c_out[a] for a in evict)
            j_move = moved * len(t_in)
        j_redo = sum(self.redo[r] for r in preempt) if pol.use_redo else 0.0
        j_revoke = 0.0
        if pol.use_revoke and preempt:
            j_revoke = sum(self.revoke[r] for r in preempt)
        v_reuse = sum(self.reuse.get(a, 0.0) for a in resident)
        score = j_admit - j_move - j_redo - j_revoke + v_reuse
        return Choice(
            score,
            tuple(admitted),
            tuple(preempt),
            tuple(sorted(evict)),
            tuple(credit),
            frozenset(resident),
            (j_admit, j_move, j_redo, j_revoke, v_reuse),
        )


def exhaustive(ctx: Context, agents: list[str], max_preempt: int) -> Choice | None:
    """The best GREEDYPACK state over every subset of ``agents`` (sorted), visited by size
    then in ``itertools.combinations`` order (ties go to the first visited)."""
    # the full set is usually the arg-max: a subset whose Score upper bound is below
    # it cannot win (nor tie), so it is skipped; the visiting order and hence the
    # tie-breaks are those of plain enumeration
    full = ctx.greedypack(frozenset(agents))
    bar = full.score - 1e-6 if full is not None and ctx._busy(full) else None
    # a set that leaves out the agent of a running request preempts it; with no
    # preemption allowed GREEDYPACK rejects such a set, so it is skipped here
    must = frozenset(ctx.running_by_agent) - ctx.pinned if max_preempt == 0 else frozenset()
    # so only the supersets of ``must`` are enumerated: ``must`` plus each combination of the
    # other agents, by size then in combinations order -- the order in which they come in the
    # plain enumeration (two sets of one size are ordered by the first agent in which they
    # differ, and that is never one of ``must``)
    others = [a for a in agents if a not in must]
    best: Choice | None = None
    for n in range(len(others) + 1):
        for sub in itertools.combinations(others, n):
            s = must.union(sub)
            if bar is not None and ctx.upper_bound(s) < bar:
                continue
            best = ctx.better(best, ctx.greedypack(s))
    return best


def hierarchical(ctx: Context, agents: list[str], room_moves: bool = False) -> Choice | None:
    """Local search from ``R_t``: greedy single additions, pairs when singles stall, then
    repair by single drops and swaps, until no move improves the Score.

    ``room_moves``: when singles stall, first try adding one agent while dropping every
    resident prefix that the current state does not use (no running request, held context
    or admission of its agent): a single swap frees one prefix, and loading a large one may
    take several."""
    if room_moves:
        busy = frozenset(ctx.running_by_agent) | ctx.pinned
        agent_of = {c.req.request_id: c.agent for c in ctx.cands}
    cur_set = frozenset(ctx.resident0)
    cur = ctx.greedypack(cur_set)
    best = cur
    seen = {cur_set}

    def try_sets(sets: Iterable[frozenset[str]]) -> tuple[frozenset[str], Choice] | None:
        found = None
        for s in sets:
            if s in seen:
                continue
            seen.add(s)
            c = ctx.greedypack(s)
            if c is not None and (found is None or c.key() > found[1].key()):
                found = (s, c)
        return found

    improved = True
    rounds = 0
    while improved and rounds < 4 * len(agents) + 4:
        improved = False
        rounds += 1
        outside = [a for a in agents if a not in cur_set]
        inside = [a for a in agents if a in cur_set]
        room: Iterable[frozenset[str]] = ()
        if room_moves:
            used = busy if best is None else cur_set & (busy | {agent_of[r] for r in best.admit})
            room = (used | {a} for a in outside)
        for moves in (
            (cur_set | {a} for a in outside),
            room,
            (cur_set | {a, b} for a, b in itertools.combinations(outside, 2)),
            (cur_set - {a} for a in inside),
            ((cur_set - {a}) | {b} for a in inside for b in outside),
        ):
            found = try_sets(moves)
            if found is not None and (best is None or found[1].key() > best.key()):
                cur_set, best = found
                improved = True
                break
    return best
