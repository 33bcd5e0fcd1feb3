"""The per-decision context: GREEDYPACK's inputs for one event, computed once.

For every waiting request it holds a candidate (:class:`_Cand`) with its unconditional aged
gain ``g_i * Delta(r | {})``; the conditional gains ``Delta(r | H_i)`` of further requests of
a task admitted in the same decision (:meth:`Context.cond_gain`); the candidates' order
(by gain, optionally in agent groups, with head-of-line blocking and backfilling); and the
per-running-request and per-agent inputs of the Score's terms (:mod:`.terms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from topas.engine.snapshot import Location, RequestState, Snapshot, TaskState
from topas.estimators import TaskMC
from topas.policies.base import expected_call_output
from topas.policies.topas.search import GreedyPack
from topas.policies.topas.terms import TaskInfo, running_left_s

if TYPE_CHECKING:
    from topas.policies.topas.policy import Topas


class _Cand:
    """A waiting request as GREEDYPACK sees it."""

    __slots__ = ("req", "agent", "tokens", "gain", "task_id", "stage", "l_i", "age_w")

    def __init__(
        self, req: RequestState, tokens: int, gain: float, l_i: float, age_w: float
    ) -> None:
        self.req = req
        self.agent = req.agent
        self.tokens = tokens
        self.gain = gain  #: aged gain g_i * Delta(r | {}) (s)
        self.task_id = req.task_id
        self.stage = req.stage
        self.l_i = l_i
        self.age_w = age_w


class Context(GreedyPack):
    """Everything GREEDYPACK needs for one decision, computed once (GREEDYPACK itself and
    the Score of a packed state: :class:`~topas.policies.topas.search.GreedyPack`).

    Per-decision cost is what bounds decision time, so everything that survives between
    events is cached on the policy (``Topas._task_info``, :meth:`Topas._move_costs`) and
    only O(running + waiting) cheap lookups remain here.
    """

    def __init__(self, pol: Topas, snap: Snapshot) -> None:
        self.pol = pol
        self.snap = snap
        pol._new_run_check(snap)
        ratio = pol.reserve_ratio
        out_cache: dict[str, float] = {}
        rsv_cache: dict[str, int] = {}

        def out_mean(agent: str) -> float:
            v = out_cache.get(agent)
            if v is None:
                v = out_cache[agent] = expected_call_output(snap, agent)
            return v

        step = snap.config.block_size

        def reserve(r: RequestState) -> int:
            # the same headroom AdmissionPlan keeps (tokens): output_reserve with the expected
            # output part ``int(ratio * E[out])`` memoised per agent (called O(queue) times)
            base = rsv_cache.get(r.agent)
            if base is None:
                base = rsv_cache[r.agent] = int(ratio * out_mean(r.agent)) if ratio > 0 else 0
            v = base - r.generated_tokens
            return v if v > step else step

        self.reserve = reserve
        running = snap.running
        prefixes = snap.prefixes
        self.free0 = snap.free_kv_tokens - sum(map(reserve, running)) - pol._committed_tokens
        self.resident0 = frozenset(a for a, p in prefixes.items() if p.location == Location.DEVICE)
        self.running_by_agent: dict[str, list[RequestState]] = {}
        for r in running:
            self.running_by_agent.setdefault(r.agent, []).append(r)
        # a prefix being swapped in or recomputed, or one a held context continues (users
        # beyond its running requests), cannot be evicted this decision
        self.pinned = frozenset(
            a
            for a in self.resident0
            if prefixes[a].transfer in ("in", "compute")
            or prefixes[a].users > len(self.running_by_agent.get(a, ()))
            or a in pol._committed_agents
        )
        waiting_agents = {r.agent for r in snap.waiting}
        self.active = set(self.resident0) | set(self.running_by_agent) | waiting_agents
        # the running requests' decode step and expected remaining service (s): D_t reads
        # them, and backfilling's shadow time (computed once per decision)
        self.running_left = running_left_s(snap, out_mean) if running else (0.0, [])
        self.defer_s = pol.deferral_s(snap, out_mean, self.running_left[1])
        # H_age feeds only log aging and revoke_value="current" (rank aging never reads it)
        h_age = (
            pol.h_age(snap)
            if (pol.aging and pol.rho != 0 and pol.age_form == "log")
            or (pol.use_revoke and pol.revoke_value == "current")
            else 1.0
        )
        # J_redo and the KV a preemption gives back, and J_revoke, per running request
        self.redo, self.release = pol.preemption_costs(snap, reserve)
        self.revoke = pol.revoke_costs(snap, self.defer_s, h_age)
        # prefix move costs (s)
        self.c_in, self.c_out = pol._move_costs(snap, self.active)
        # V_reuse weight per agent: beta * n_a * mu * l_a / B_swap
        self.reuse = pol.reuse_value(snap)
        # candidates with unconditional aged gains
        self.entries: dict[int, TaskMC] = {}
        self.weights: dict[int, float] = {}
        cands: list[_Cand] = []
        self.by_task: dict[int, list[_Cand]] = {}
        held = snap.held
        blocks = snap.blocks  # whole KV blocks (one rounding rule: Snapshot.blocks)
        now = snap.time_s
        tasks = snap.tasks
        weights, entries, by_task = self.weights, self.entries, self.by_task
        gen = None
        floor = pol.min_gain_s
        task_info = pol._task_info

        def build(ts: TaskState) -> TaskInfo:
            # the task's Monte Carlo entry for its current version (generated tokens of the
            # running requests collected once per decision, when first needed)
            nonlocal gen
            if gen is None:
                gen = {(q.task_id, q.stage): q.generated_tokens for q in running}
            return pol._build_task_info(snap, ts, gen)

        aged = pol.aging and pol.rho != 0
        # rank aging: g_i = 1 + rho * younger_i (see Aging.task_ranks)
        rank = pol.task_ranks(snap, build) if aged and pol.age_form == "rank" else None
        for r in snap.waiting:
            tid = r.task_id
            info = task_info.get(tid)
            ts = tasks[tid]
            if info is None or info.version != ts.version:
                info = build(ts)
            e = info.entry
            w = weights.get(tid)
            if w is None:
                entries[tid] = e
                # g_i(t) (see Topas.age_weight)
                if rank is not None:
                    w = weights[tid] = 1.0 + pol.rho * rank[tid]
                else:
                    w = weights[tid] = (
                        (1.0 + pol.rho * math.log1p(max(0.0, now - ts.arrival_s) / h_age))
                        if aged
                        else 1.0
                    )
            if info.chain:
                # the only ready stage, nothing running: deferring shifts every path by D_t
                delta, l_now = self.defer_s, info.l_i
            else:
                delta, l_now = self.delta(e, r.stage, ())
            gen_t = r.generated_tokens
            tokens = blocks(r.prompt_tokens + gen_t)
            if held:
                h = held.get((tid, r.stage))
                if h is not None and h.expires_s > now:
                    tokens -= h.tokens
            # reserve(r), inlined: this loop runs over the whole waiting queue every event
            base = rsv_cache.get(r.agent)
            if base is None:
                base = rsv_cache[r.agent] = int(ratio * out_mean(r.agent)) if ratio > 0 else 0
            rsv = base - gen_t
            g = w * delta
            c = _Cand(
                r, tokens + (rsv if rsv > step else step), floor if floor > g else g, l_now, w
            )
            cands.append(c)
            cs = by_task.get(tid)
            if cs is None:
                by_task[tid] = [c]
            else:
                cs.append(c)
        self.multi = {t for t, cs in self.by_task.items() if len(cs) > 1}
        if pol.joint_gain:
            for t in self.multi:
                # complementary ready stages (e.g. both branches before a join): each one's
                # marginal gain can be ~0 while starting all of them gains D_t, so the first
                # admission of such a task is valued at its share of the joint gain
                e = self.entries[t]
                cs = self.by_task[t]
                share = self.joint_share(e, len(cs))
                for c in cs:
                    c.gain = max(c.gain, c.age_w * share)
        # highest gain first; ties: shorter expected remaining path, then oldest
        cands.sort(key=lambda c: (-c.gain, c.l_i, c.req.seq))
        if pol.group_agents != "none":
            # Parrot's co-scheduling: each candidate is followed by every other candidate of
            # its agent (the shared prefix is made resident once and serves them all in one
            # batch); groups keep the order of their best candidate
            groups: dict[str, list[_Cand]] = {}
            for c in cands:
                groups.setdefault(c.agent, []).append(c)
            mode = pol.group_agents
            if mode != "best":

                def value(a: str) -> float:
                    g = groups[a]
                    v = sum(c.gain for c in g)
                    if mode == "density":
                        kv = sum(c.tokens for c in g)
                        if a not in self.resident0:
                            kv += snap.prefixes[a].tokens
                        v /= max(kv, 1)
                    return v

                order_a = sorted(groups, key=lambda a: -value(a))
                groups = {a: groups[a] for a in order_a}
            cands = [c for g in groups.values() for c in g]
        if pol.hol_block:
            cands = self.head_of_line(cands, out_mean if pol.backfill else None)
        self.cands = cands
        self.max_batch = snap.config.max_batch_requests
        # smallest KV need of a positive-gain candidate per agent (tokens, prefix excluded):
        # a prefix set whose free budget is below every such need admits nothing
        self.min_need: dict[str, int] = {}
        for c in cands:
            if c.gain > 0 or c.task_id in self.multi:
                m = self.min_need.get(c.agent)
                if m is None or c.tokens < m:
                    self.min_need[c.agent] = c.tokens
        self.fixed = self.resident0 | set(self.running_by_agent)
        # the K largest positive gains per agent (cands are sorted by gain), for upper_bound
        self.top_gains: dict[str, list[float]] = {}
        for c in cands:
            if c.gain > 0:
                lst = self.top_gains.setdefault(c.agent, [])
                if len(lst) < pol.K:
                    lst.append(c.gain)
        self._fixed_memo = {}
        self._memo = {}

    def head_of_line(
        self, cands: list[_Cand], out_mean: Callable[[str], float] | None = None
    ) -> list[_Cand]:
        """The candidates before the first one that cannot fit even if every earlier one is
        admitted and every idle prefix is evicted (``hol_block``): memory that frees up then
        goes to that request, not to requests it outranks (head-of-line blocking, as FCFS,
        Parrot and SPF admit).  With ``out_mean`` (``backfill``), later candidates that do
        not delay the blocked one follow them (:meth:`backfill`)."""
        snap = self.snap
        prefixes = snap.prefixes
        free = self.free0
        evictable = {
            a: prefixes[a].tokens
            for a in self.resident0
            if a not in self.pinned and a not in self.running_by_agent
        }
        free += sum(evictable.values())
        resident = set(self.resident0)
        batch = len(snap.running)
        for i, c in enumerate(cands):
            need = c.tokens
            if c.agent in evictable:
                free -= evictable.pop(c.agent)  # now needed: it stays resident
            elif c.agent not in resident:
                need += prefixes[c.agent].tokens
            if need > free or batch >= snap.config.max_batch_requests:
                if out_mean is None or batch >= snap.config.max_batch_requests:
                    return cands[:i]
                return cands[:i] + self.backfill(
                    need, cands[i + 1 :], free, resident, evictable, batch, out_mean
                )
            resident.add(c.agent)
            free -= need
            batch += 1
        return cands

    def backfill(
        self,
        head_need: int,
        rest: list[_Cand],
        free: int,
        resident: set[str],
        evictable: dict[str, int],
        batch: int,
        out_mean: Callable[[str], float],
    ) -> list[_Cand]:
        """EASY backfilling behind the blocked head (it needs ``head_need`` tokens, ``free``
        are free with every idle prefix evicted).  Its *shadow time* ``T`` is when the running
        requests, finishing in order of expected remaining service, will have freed enough
        for it; the memory then left beside it is the *extra*.  A later candidate is kept if
        it fits now and either is expected to finish by ``T`` (prefill plus expected output
        at the current batch's decode step) or fits in the extra, which it then uses up.  So
        memory goes to the head when it is expected to be free, and is not left idle until
        then.  Estimates in seconds from the cost model."""
        snap = self.snap
        cost = snap.cost
        if not snap.running:
            return []  # nothing running frees memory: the head waits for holds or prefixes
        step, lefts = self.running_left
        # a finished request gives back its KV and the output headroom kept for it (free
        # excludes both)
        shadow, avail = None, free
        if self.pol.held_shadow:
            # what a finishing call really returns: a call of a multi-round stage keeps its
            # context (held) and gives back only its output headroom
            shadow, avail = shadow_time(
                lefts, [self.freed_at_finish(r) for r in snap.running], free, head_need
            )
        if shadow is None:
            # by that count nothing running frees enough (or it is not used): every running
            # call's KV counts, so work beside a head that waits for holds or prefixes is
            # bounded by the memory it would leave, not stopped
            shadow, avail = shadow_time(
                lefts, [r.kv_tokens + self.reserve(r) for r in snap.running], free, head_need
            )
        if shadow is None:
            return []  # nothing running frees enough: the head waits for holds or prefixes
        extra = avail - head_need
        out: list[_Cand] = []
        max_batch = snap.config.max_batch_requests
        for c in rest:
            if batch >= max_batch:
                break
            need = c.tokens
            prefix_from_evictable = c.agent in evictable
            if not prefix_from_evictable and c.agent not in resident:
                need += snap.prefixes[c.agent].tokens
            take = need + (evictable[c.agent] if prefix_from_evictable else 0)
            if take > free:
                continue
            dur = cost.prefill_time(max(1, c.req.prompt_tokens), c.req.prefix_tokens) + (
                out_mean(c.agent) * step
            )
            if dur > shadow:
                if take > extra:
                    continue
                extra -= take
            free -= take
            if prefix_from_evictable:
                evictable.pop(c.agent)
            resident.add(c.agent)
            batch += 1
            out.append(c)
        return out

    def freed_at_finish(self, r: RequestState) -> int:
        """KV tokens the running request ``r`` returns when it finishes (``held_shadow``): its
        output headroom, plus its own KV unless its stage makes more calls -- it is not its
        first, or its (agent, stage kind) has had multi-round stages in the last 20 records
        -- since that context is then held for the next call."""
        back = self.reserve(r)
        if r.round_index > 0:
            return back
        t = self.snap.tasks.get(r.task_id)
        kind = t.stages[r.stage].kind if t is not None else ""
        key = (r.agent, kind)
        recs = self.snap.history.get(key, ())
        # memoised per run by the record count (the history is append-only)
        hit = self.pol._multi_round.get(key)
        if hit is None or hit[0] != len(recs):
            hit = self.pol._multi_round[key] = (len(recs), any(x.rounds > 1 for x in recs[-20:]))
        return back if hit[1] else back + r.kv_tokens

    def joint_share(self, e: TaskMC, n_ready: int) -> float:
        """``(L_i(none started) - L_i(all ready started)) / n``: a task's gain from starting all
        of its ``n`` ready stages now, shared equally (seconds)."""
        now = self.snap.time_s
        l_none = e.expected_lp(now, list(e.ready), self.defer_s)
        l_all = e.expected_lp(now)
        return max(0.0, l_none - l_all) / max(1, n_ready)

    def cond_gain(self, c: _Cand, admitted: tuple[str, ...]) -> float:
        """Aged gain of ``c`` given the stages of its task admitted before it in this decision
        (``g_i * Delta(r | H_i)``, floored at ``min_gain_s``; see ``Context.__init__``)."""
        if not admitted:
            return c.gain
        d, _ = self.delta(self.entries[c.task_id], c.stage, admitted)
        return max(c.age_w * d, self.pol.min_gain_s)

    def delta(self, e: TaskMC, stage: str, admitted: tuple[str, ...]) -> tuple[float, float]:
        """``Delta(r | H) = L_i(H) - L_i(H + {r})`` and ``L_i(H + {r})`` (seconds)."""
        now = self.snap.time_s
        k = e.index.get(stage)
        if k is None or k not in e.ready:
            return 0.0, 0.0
        if len(e.ready) == 1 and not e.running:
            # every unfinished stage descends from this one: deferring shifts all paths by D
            l_now = e.expected_lp(now)
            return self.defer_s, l_now
        done = {e.index[s] for s in admitted if s in e.index}
        waiting_h = [v for v in e.ready if v not in done]
        l_h = e.expected_lp(now, waiting_h, self.defer_s)
        l_hr = e.expected_lp(now, [v for v in waiting_h if v != k], self.defer_s)
        return max(0.0, l_h - l_hr), l_hr


def shadow_time(
    lefts: list[float], freed: list[int], free: int, need: int
) -> tuple[float | None, int]:
    """EASY backfilling's shadow time: running requests finish in order of expected remaining
    service ``lefts`` (s), each returning ``freed`` tokens to the ``free`` ones; the first
    time at which ``need`` tokens are free, and the tokens free then (None and ``free`` if
    that never happens)."""
    avail = free
    for t, tok in sorted(zip(lefts, freed)):
        avail += tok
        if avail >= need:
            return t, avail
    return None, free
