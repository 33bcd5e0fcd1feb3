"""TOPAS with held contexts: ``topas-hold`` (our extension, docs/extensions.md) and the
flagship ``topas`` (``DEPARTURES`` below, docs/topas.md).

``holds`` chooses when contexts are held: ``"after"`` (``topas-hold``: around TOPAS's
admissions, as described below), ``"first"`` (the flagship: offered contexts, oldest task
first, take the free KV before the search, which packs admissions into what is left; the
release rules below still apply) or ``"off"`` (the paper's TOPAS).

TOPAS as the paper describes it never keeps a ReAct call's context KV while its stage waits
on a tool, so the next call re-prefills it; Continuum does keep it (``Decision.hold``) and wins
on the MetaGPT workloads.  ``topas-hold`` takes TOPAS's decision unchanged and adds:

* **Hold.**  For each context offered this event (``snapshot.held`` entries with
  ``expires_s <= time_s``: a call just finished into a tool call) choose a TTL ``tau`` that
  maximises Continuum's utility ``P(T <= tau) * reload_s - (h / B) * w * E[min(T, tau)]``
  (:func:`topas.policies.continuum.best_ttl_s`), where ``T`` is the tool duration,
  ``reload_s`` the prefill time of the context's ``h`` tokens after the agent prefix
  (``snapshot.cost.prefill_time``), ``B`` the KV budget and ``w`` = ``memory_weight``.  So a
  context is held when the expected tool delay is short relative to re-prefilling it.  Tool
  durations are learned online exactly as Continuum learns them (its ``observe``; the gap
  between a call's finish and the next call of its stage becoming ready), with Continuum's
  exponential cold-start model until ``min_samples`` exist.  **Choice**: unlike Continuum,
  the benefit has no queueing term -- TOPAS's own admission decides when the next call runs.
* **Fit.**  A held context must fit the free KV after TOPAS's decision (its preemptions,
  evictions and admissions), with every running and admitted request keeping the same
  output reservation as everywhere else (:func:`topas.policies.base.output_reserve` through
  :class:`~topas.policies.base.AdmissionPlan`).  Contexts are considered oldest task first.
* **Release.**  When the oldest waiting request that TOPAS did not admit does not fit for lack
  of memory, and releasing live held contexts of *younger* tasks (youngest first) makes it
  fit, they are released and that request is admitted in the same decision (credit 0: TOPAS
  granted it no gain).  No new context of a task younger than that request is held.  When the
  engine would otherwise run nothing, contexts of any task may be released and none is newly
  held (work conservation).

``cache_priority`` ranks what the engine's context cache keeps in free memory
(``Decision.cache_priority``): ``"conversations"`` (the flagship) gives the admitted calls of
agents seen continuing a conversation (a stage's first call found cached context) a priority
``1 / (1 + task arrival)``, so the youngest tasks' cached conversations are trimmed first;
``"all"`` does so for every call; ``"off"`` leaves the cache to LRU.

``phase_depth`` > 0 turns on prefix phases (:meth:`TopasHold.phase_agent`): while one agent's
deep queue is served alone, the other agents drain and their prefixes can be evicted, so a
memory-bound batch grows.  ``peak_fit`` checks the exact future KV peak of requests whose
agent's output length is predictable and drops admissions that would overflow it
(:meth:`TopasHold.peak_fit`).

TOPAS's parameters pass through unchanged; ``memory_weight``, ``cold_mean_s``, ``max_ttl_s``,
``min_samples``, ``slack_s`` are Continuum's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from topas.engine.decision import Decision
from topas.engine.snapshot import HeldContext, Location, RequestState, Snapshot, StageStatus
from topas.policies import register
from topas.policies.base import AdmissionPlan
from topas.policies.continuum import Continuum, reload_s
from topas.policies.params import Param, choice, flag, integer, real, subset, with_defaults
from topas.policies.parrot import program_fcfs_queue
from topas.policies.topas.policy import Topas


def arrival_priority(snap: Snapshot, reqs: Iterable[RequestState]) -> dict[int, float]:
    """Cache priorities for the requests ``reqs``: ``1 / (1 + arrival_s)`` of each one's
    task (positive, so above any request without one, and falling with arrival, so the engine
    trims the youngest tasks' cached contexts first and the oldest tasks, which every
    task-ordered admission serves first, find theirs)."""
    tasks = snap.tasks
    out: dict[int, float] = {}
    for r in reqs:
        t = tasks.get(r.task_id)
        out[r.request_id] = 1.0 / (1.0 + max(0.0, t.arrival_s if t is not None else snap.time_s))
    return out


#: predictable_output's memo: agent -> (history object, record count, result)
_PREDICTABLE: dict[str, tuple[object, int, float | None]] = {}


def predictable_output(snap: Snapshot, agent: str) -> float | None:
    """The output length (tokens) of ``agent``'s calls when it is predictable, else None:
    its last 16 completed stages of every kind (8 at least) were single calls whose outputs
    all lie within 5 % of their mean (fixed-length generations, chain3 or dag4)."""
    n = snap.history_records
    if n is None:
        n = sum(map(len, snap.history.values()))
    got = _PREDICTABLE.get(agent)
    if got is not None and got[0] is snap.history and got[1] == n:
        return got[2]
    outs: list[int] = []
    single = True
    for (a, _kind), recs in snap.history.items():
        if a == agent:
            for x in recs[-16:]:
                single = single and x.rounds == 1
                outs.append(x.output_tokens)
    val = None
    if single and len(outs) >= 8:
        m = sum(outs) / len(outs)
        if m > 0 and max(outs) <= 1.05 * m and min(outs) >= 0.95 * m:
            val = m
    if len(_PREDICTABLE) > 4096:
        _PREDICTABLE.clear()
    _PREDICTABLE[agent] = (snap.history, n, val)
    return val


def peak_excess(items: Iterable[tuple[int, int, int]], step: int) -> int:
    """Largest growth (tokens) beyond their reserves of requests ``(remaining output tokens,
    KV tokens given back at finish, reserve tokens)`` over the decode steps to come: at step
    ``k`` one still running has grown by ``k`` tokens and may have opened a block, one that
    has finished has given back its KV and needs no reserve.  The peak is just before a
    finish, so only those steps (and step 0) are evaluated."""
    its = sorted(items)
    alive = len(its)
    const = sum(step - res for _, _, res in its)  # of the requests still running
    worst = 0
    i = 0
    for rest, _, _ in [(1, 0, 0), *its]:
        k = rest - 1
        while i < len(its) and its[i][0] <= k:  # finished by step k
            _, kv, res = its[i]
            alive -= 1
            const -= kv + step  # its step - res leaves, its -kv - res comes in
            i += 1
        g = alive * k + const
        if g > worst:
            worst = g
    return worst


class TopasHold(Topas):
    """TOPAS whose decision is extended with context holds and pressure releases."""

    #: TOPAS's parameters and Continuum's tool-duration learner's (topas.policies.params)
    PARAMS: tuple[Param, ...] = (
        *Topas.PARAMS,
        *(p for p in Continuum.PARAMS if p.name not in ("reserve_ratio", "window")),
        choice(
            "holds",
            "after",
            ("off", "after", "first"),
            "when contexts are held: around TOPAS's admissions, before them, or never",
        ),
        real(
            "phase_depth",
            0.0,
            "prefix phases: when the oldest task's agent has waiting requests whose KV fills "
            "at least this share of the memory its prefix alone leaves, only that agent's "
            "requests are admitted until none of them waits (0: off)",
            hi=100.0,
        ),
        integer(
            "phase_min",
            8,
            "prefix phases start only on an agent with at least this many waiting requests",
            lo=1,
            hi=1_000_000,
        ),
        real(
            "phase_gain",
            0.3,
            "prefix phases start only when evicting the other resident prefixes would grow "
            "the memory left for requests by at least this share",
            hi=100.0,
        ),
        flag(
            "peak_fit",
            False,
            "admissions are dropped from the end until the batch's expected KV peak fits, "
            "counting the exact output still to come of requests whose agent's output length "
            "is predictable (fixed-length calls)",
        ),
        choice(
            "cache_priority",
            "off",
            ("off", "conversations", "all"),
            "the engine's context cache keeps admitted calls' contexts in free memory by "
            "their task's arrival, oldest longest (Decision.cache_priority): for agents seen "
            "continuing a conversation, for every call, or never (LRU only)",
        ),
    )

    def __init__(
        self,
        seed: int = 0,
        memory_weight: float = 1.0,
        cold_mean_s: float = 1.0,
        max_ttl_s: float = 30.0,
        min_samples: int = 3,
        slack_s: float = 0.05,
        holds: str = "after",
        cache_priority: str = "off",
        phase_depth: float = 0.0,
        phase_min: int = 8,
        phase_gain: float = 0.3,
        peak_fit: bool = False,
        name: str = "topas-hold",
        **params: Any,
    ) -> None:
        super().__init__(seed=seed, name=name, **params)
        if holds not in ("off", "after", "first"):
            raise ValueError(f"{name}: holds={holds!r} must be 'off', 'after' or 'first'")
        if cache_priority not in ("off", "conversations", "all"):
            raise ValueError(
                f"{name}: cache_priority={cache_priority!r} must be 'off', 'conversations' or 'all'"
            )
        if not (phase_depth >= 0 and phase_gain >= 0):
            raise ValueError(
                f"{name}: phase_depth={phase_depth} and phase_gain={phase_gain} must be >= 0"
            )
        #: drop admissions whose predictable outputs would overflow the KV (:meth:`peak_fit`)
        self.peak_fit_on = bool(peak_fit)
        #: prefix phases (see :meth:`phase_view`): 0 turns them off
        if phase_min < 1:
            raise ValueError(f"{name}: phase_min={phase_min} must be >= 1")
        self.phase_depth, self.phase_min, self.phase_gain = phase_depth, phase_min, phase_gain
        self._phase_run: object = None
        self._phase_agent: str | None = None
        #: "conversations": admitted calls of agents seen continuing a conversation get a
        #: cache priority that falls with their task's arrival, so the engine trims the
        #: youngest tasks' cached contexts first; "all": every admitted call does
        self.cache_priority = cache_priority
        self._conv_run: object = None
        self._conv_agents: set[str] = set()
        #: "after": holds fit around TOPAS's admissions; "first": holds are decided before
        #: admission and the search packs into what they leave; "off": the paper's TOPAS
        self.holds = holds
        # the tool-duration learner (and its parameter checks) is Continuum's
        self.tools = Continuum(
            seed=seed,
            memory_weight=memory_weight,
            cold_mean_s=cold_mean_s,
            max_ttl_s=max_ttl_s,
            min_samples=min_samples,
            slack_s=slack_s,
        )

    # -- the TTL ----------------------------------------------------------------------------
    def ttl_s(self, snap: Snapshot, key: tuple[int, str]) -> float:
        """TTL (s) to hold the offered context ``key``; 0 means do not hold."""
        h = snap.held[key]
        # only the re-prefill a hit saves: TOPAS's own admission decides when the call runs
        return self.tools.ttl_for_benefit(snap, h, reload_s(snap, h))

    # -- the decision -----------------------------------------------------------------------
    def _offered(
        self, snap: Snapshot, arrival: Callable[[int], tuple[float, int]]
    ) -> list[tuple[tuple[int, str], HeldContext]]:
        """Contexts offered this event whose stage is in its tool call, oldest task first."""
        now, tasks = snap.time_s, snap.tasks
        return sorted(
            (
                (k, h)
                for k, h in snap.held.items()
                if h.expires_s <= now
                and k[0] in tasks
                and tasks[k[0]].stages[k[1]].status == StageStatus.TOOL
            ),
            key=lambda kv: arrival(kv[0][0]),
        )

    def conversation_agents(self, snap: Snapshot) -> set[str]:
        """Agents seen in this run continuing a conversation: a stage's first call found
        context tokens in the engine's cache, which only an earlier stage of the same agent
        in the task can have left there (``RequestState.cached_tokens``)."""
        if self._conv_run is not snap.run_key:
            self._conv_run, self._conv_agents = snap.run_key, set()
        seen = self._conv_agents
        if len(seen) < len(snap.prefixes):
            for r in snap.running:
                if r.round_index == 0 and r.cached_tokens > 0:
                    seen.add(r.agent)
        return seen

    def phase_agent(self, snap: Snapshot) -> str | None:
        """The agent of the current prefix phase, or None (no phase).

        A phase serves one agent's queue exhaustively: it lasts while that agent has waiting
        requests.  A new one starts, on the agent of the oldest task's waiting request ``a``,
        only when (1) ``a``'s waiting requests' KV (prompt and generated tokens) is at least
        ``phase_depth`` times the memory ``a``'s prefix alone would leave (its queue can fill
        a batch by itself) and (2) the other resident prefixes are at least ``phase_gain``
        times the memory the resident prefixes leave now (evicting them pays: the batch can
        grow by that share).  While a phase lasts the other agents' running requests finish
        and are not replaced, so their prefixes go idle and are evicted for ``a``'s requests:
        on a memory-bound engine the batch grows, where keeping every agent's prefix resident
        and every agent running locks memory into prefixes."""
        if self.phase_depth <= 0 or not snap.waiting:
            return None
        if self._phase_run is not snap.run_key:
            self._phase_run, self._phase_agent = snap.run_key, None
        cur = self._phase_agent
        if cur is not None and any(r.agent == cur for r in snap.waiting):
            return cur
        self._phase_agent = None
        a = program_fcfs_queue(snap)[0].agent  # the oldest task's first waiting request
        prefixes = snap.prefixes
        budget = snap.kv_budget_tokens
        mine = [r.prompt_tokens + r.generated_tokens for r in snap.waiting if r.agent == a]
        if len(mine) < self.phase_min:
            return None
        need = sum(mine)
        if need < self.phase_depth * max(1, budget - prefixes[a].tokens):
            return None
        resident = {x: p.tokens for x, p in prefixes.items() if p.location == Location.DEVICE}
        total = sum(resident.values())
        other = total - resident.get(a, 0)
        if other < self.phase_gain * max(1, budget - total):
            return None
        self._phase_agent = a
        return a

    def phase_view(self, snap: Snapshot) -> Snapshot:
        """``snap`` with only the phase agent's waiting requests (itself when no phase)."""
        a = self.phase_agent(snap)
        if a is None:
            return snap
        held = snap.held

        def keep(r: RequestState) -> bool:
            # a call whose context is held continues its stage: never hidden (its KV is
            # in memory already, and holding it through the phase would only waste it)
            return r.agent == a or (r.task_id, r.stage) in held

        wp = snap.waiting_program
        return replace(
            snap,
            waiting=[r for r in snap.waiting if keep(r)],
            waiting_program=None if wp is None else [r for r in wp if keep(r)],
            waiting_ready_sum_s=None,
        )

    def peak_fit(self, snap: Snapshot, d: Decision) -> Decision:
        """``d`` with admissions dropped from its end until the batch's expected KV peak fits
        (``peak_fit``; a no-op when off).

        The output reserve keeps ``reserve_ratio`` of each request's expected output, which
        is enough when requests are at staggered points of their outputs but not when a cohort
        admitted together grows together: with fixed output lengths (chain3, dag4) the
        engine then runs out of KV and preempts.  For requests whose agent's output length is
        predictable (:func:`predictable_output`) the exact future is known: each grows by one
        token per decode step (plus a partly filled block) until it finishes and gives back
        its KV.  The decision is kept only while, at every step ``k`` up to the last finish,
        that growth beyond the reserves already counted fits the memory the decision leaves
        (its reserve accounting: :class:`~topas.policies.base.AdmissionPlan`).  Requests of
        other agents count as their reserves, as before.  An engine that would otherwise run
        nothing keeps its first admission."""
        if not self.peak_fit_on or not d.admit:
            return d
        exact: dict[str, float | None] = {}

        def out(agent: str) -> float | None:
            if agent not in exact:
                exact[agent] = predictable_output(snap, agent)
            return exact[agent]

        waiting = {r.request_id: r for r in snap.waiting}
        admitted = [waiting[rid] for rid in d.admit]
        if all(out(r.agent) is None for r in admitted):
            return d  # no admitted request has a predictable output: nothing to check
        step = snap.config.block_size
        plan = AdmissionPlan(snap, self.reserve_ratio)
        pre = set(d.preempt)
        items: list[tuple[int, int, int]] = []  # (remaining output, KV freed at finish, reserve)
        prefixes = snap.prefixes
        held = snap.held
        now = snap.time_s
        # the memory the decision leaves under the reserve accounting
        slack = snap.free_kv_tokens
        for r in snap.running:
            if r.request_id in pre:
                slack += r.kv_tokens
                continue
            res = plan.reserve(r)
            slack -= res
            m = out(r.agent)
            if m is not None:
                items.append((max(1, int(m) - r.generated_tokens), r.kv_tokens, res))
        for a in d.evict:
            slack += prefixes[a].tokens
        for k in d.hold:
            h = held.get(k)
            if h is not None and h.expires_s <= now:
                slack -= h.tokens  # an offered context, newly held
        for k in d.release:
            slack += held[k].tokens
        # per admission: its (remaining output, KV, reserve) if predictable, and its need
        new: list[tuple[int, int, int] | None] = []
        needs: list[int] = []
        loaded: set[str] = set()
        for r in admitted:
            kv, res = plan.request_tokens(r), plan.reserve(r)
            m = out(r.agent)
            new.append(None if m is None else (max(1, int(m) - r.generated_tokens), kv, res))
            n = kv + res
            if prefixes[r.agent].location != Location.DEVICE and r.agent not in loaded:
                loaded.add(r.agent)
                n += prefixes[r.agent].tokens
            needs.append(n)
            slack -= n
        floor = 1 if len(snap.running) == len(pre) else 0
        keep = len(d.admit)
        while keep > floor:
            its = items + [x for x in new[:keep] if x is not None]
            if peak_excess(its, step) <= slack:
                break
            keep -= 1
            slack += needs[keep]
        if keep == len(d.admit):
            return d
        dropped = set(d.admit[keep:])
        return replace(
            d,
            admit=d.admit[:keep],
            credit={k: v for k, v in d.credit.items() if k not in dropped},
            cache_priority={k: v for k, v in d.cache_priority.items() if k not in dropped},
        )

    def decide(self, snap: Snapshot) -> Decision:
        return self.peak_fit(snap, self._decide_phase(snap))

    def _decide_phase(self, snap: Snapshot) -> Decision:
        view = self.phase_view(snap)
        if view is not snap:
            # tool delays are learned from the whole queue (the view hides other agents')
            self.tools.observe(snap)
            snap = view
            d = self._decide_holds(snap, observed=True)
        else:
            d = self._decide_holds(snap)
        if self.cache_priority == "off":
            return d
        conv = self.conversation_agents(snap) if self.cache_priority == "conversations" else None
        if not d.admit or conv is not None and not conv:
            return d
        waiting = {r.request_id: r for r in snap.waiting}
        mine = [waiting[rid] for rid in d.admit]
        if conv is not None:
            mine = [r for r in mine if r.agent in conv]
        if not mine:
            return d
        return replace(d, cache_priority=arrival_priority(snap, mine))

    def _decide_holds(self, snap: Snapshot, observed: bool = False) -> Decision:
        if self.holds == "off":
            return super().decide(snap)
        if not observed:
            self.tools.observe(snap)
        now = snap.time_s
        tasks = snap.tasks

        def arrival(task_id: int) -> tuple[float, int]:
            t = tasks.get(task_id)
            return (t.arrival_s if t is not None else now, task_id)

        early: dict[tuple[int, str], float] = {}
        plan0: AdmissionPlan | None = None
        offered: list[tuple[tuple[int, str], HeldContext]] | None = None
        if self.holds == "first" and snap.held:
            # hold first: offered contexts (oldest task first) take the free KV before the
            # search packs admissions into what is left
            plan0 = AdmissionPlan(snap, self.reserve_ratio)
            free = plan0.free
            used = 0
            agents: set[str] = set()
            offered = self._offered(snap, arrival)  # the same list after the search
            for key, h in offered:
                if h.agent not in plan0.resident:
                    continue
                tau = self.ttl_s(snap, key)
                if tau > 0 and h.tokens <= free - used:
                    used += h.tokens
                    agents.add(h.agent)
                    early[key] = now + tau + self.tools.slack_s
            self._committed_tokens, self._committed_agents = used, frozenset(agents)
        try:
            base = super().decide(snap)
        finally:
            self._committed_tokens, self._committed_agents = 0, frozenset()
        if not snap.held:
            return base

        # the post-decision accounting of TOPAS's choice, with AdmissionPlan's reservations
        # (plan0 is still the untouched pre-decision plan: only its free budget was read)
        plan = plan0 if plan0 is not None else AdmissionPlan(snap, self.reserve_ratio)
        by_id = {r.request_id: r for r in snap.running}
        for rid in base.preempt:
            r = by_id[rid]
            plan.free += r.kv_tokens + plan.reserve(r)
            plan.batch -= 1
        plan.needed = {r.agent for r in snap.running if r.request_id not in base.preempt}
        for a in base.evict:
            plan.resident.discard(a)
            plan.free += snap.prefixes[a].tokens
        plan.evicted = list(base.evict)
        waiting = {r.request_id: r for r in snap.waiting}
        for rid in base.admit:
            r = waiting[rid]
            plan.free -= plan.need(r)
            plan.resident.add(r.agent)
            plan.needed.add(r.agent)
            plan.batch += 1
        plan.admitted = list(base.admit)
        for key in early:
            plan.free -= snap.held[key].tokens

        # release: the oldest request TOPAS left waiting, if only younger held contexts keep
        # it out
        extra: list[int] = []
        release: list[tuple[int, str]] = []
        admitted_ids = set(base.admit)
        left = [r for r in snap.waiting if r.request_id not in admitted_ids]
        blocked: RequestState | None = min(
            left, key=lambda r: (arrival(r.task_id), r.seq), default=None
        )
        if blocked is not None and plan.batch < snap.config.max_batch_requests:
            need = plan.need(blocked)
            if need > plan.free:
                mine = arrival(blocked.task_id)
                idle = plan.batch == 0  # the engine would run nothing: any hold may go
                live = sorted(
                    (
                        k
                        for k, h in snap.held.items()
                        if (h.expires_s > now or k in early)
                        and (idle or arrival(k[0]) > mine)
                        and k != (blocked.task_id, blocked.stage)
                        and k[0] in tasks
                        and tasks[k[0]].stages[k[1]].status == StageStatus.TOOL
                    ),
                    key=lambda k: arrival(k[0]),
                    reverse=True,
                )
                gain = 0
                chosen: list[tuple[int, str]] = []
                for k in live:
                    if need <= plan.free + gain:
                        break
                    chosen.append(k)
                    gain += snap.held[k].tokens
                if chosen and need <= plan.free + gain:
                    plan.free += gain
                    if plan.try_admit(blocked, evict=False):
                        release = [k for k in chosen if k not in early]
                        for k in chosen:
                            early.pop(k, None)
                        extra.append(blocked.request_id)
                    else:  # cannot happen (need fits); keep the contexts then
                        plan.free -= gain
            else:
                blocked = None  # TOPAS left it waiting by choice, not for lack of memory
        # hold: contexts offered now, oldest task first, while they fit the free budget
        hold: dict[tuple[int, str], float] = dict(early)
        admitted_keys = {(waiting[rid].task_id, waiting[rid].stage) for rid in plan.admitted}
        if offered is None:
            offered = self._offered(snap, arrival)
        for key, h in offered:
            if key in admitted_keys or key in hold:
                continue  # its next call starts now, or held before admission
            if (
                blocked is not None
                and not extra
                and (plan.batch == 0 or arrival(key[0]) > arrival(blocked.task_id))
            ):
                continue  # memory is short for an older task, or for an idle engine
            if h.agent not in plan.resident:
                continue  # TOPAS evicts its prefix: the context would be unusable
            tau = self.ttl_s(snap, key)
            if tau > 0 and h.tokens <= plan.free:
                plan.free -= h.tokens
                hold[key] = now + tau + self.tools.slack_s
        if not hold and not release:
            return base
        credit = dict(base.credit)
        for rid in extra:
            credit[rid] = 0.0
        return Decision(
            admit=base.admit + tuple(extra),
            preempt=base.preempt,
            evict=tuple(plan.evicted),
            drop=base.drop,
            load=base.load,
            hold=hold,
            release=tuple(release),
            credit=credit,
        )


@register(
    "topas-hold",
    "TOPAS + context reuse: hold a ReAct call's KV through its tool call "
    "when the learned tool delay is short vs re-prefilling it (Continuum's TTL), release "
    "under memory pressure from older tasks",
    source="our extension (docs/extensions.md)",
    params=TopasHold.PARAMS,
)
def _topas_hold(seed: int = 0, **params: Any) -> TopasHold:
    return TopasHold(seed=seed, **params)


@register(
    "topas-aged-revoke",
    "TOPAS with revoke_value='current': a preemption swap also "
    "pays the aged gain the displaced request would have if waiting (review question 2)",
    source="our extension (docs/topas.md, review question 2)",
    params=with_defaults(Topas.PARAMS, {"revoke_value": "current"}),
)
def _topas_aged_revoke(seed: int = 0, **params: Any) -> Topas:
    params.setdefault("revoke_value", "current")
    return Topas(seed=seed, name="topas-aged-revoke", **params)


#: The flagship's departures from the paper, each ``name -> (flagship params, paper params)``.
#: ``topas`` is ``topas-paper`` (the same Score and search) with every one of them switched on;
#: switching all of them off gives ``topas-paper`` exactly.  Chosen on seeds 1 and 2 only
#: (``benchmarks/paired.py --seeds 1,2``); docs/topas.md gives the measured effect of each.
DEPARTURES: dict[str, tuple[dict[str, object], dict[str, object]]] = {
    # a ReAct call's context is part of the prefix state: hold it through the tool call
    # (Continuum's TTL) *before* admission; release younger tasks' holds for the oldest
    # blocked request and every hold when the engine would idle
    "holds": ({"holds": "first"}, {"holds": "off"}),
    # with contexts held, preempting is a net loss: never preempt
    "no_preempt": ({"max_preempt": 0}, {"max_preempt": None}),
    # no cap on admissions per decision (the paper's K=2 throttles fan-out stages)
    "uncapped": ({"K": 256}, {"K": 2}),
    # strict-ish task priority: g_i = 1 + rho * (unfinished tasks younger than i) instead of
    # log aging (log aging with per-request Delta acts like processor sharing across tasks)
    "rank_priority": ({"age_form": "rank", "rho": 1.0}, {"age_form": "log", "rho": 0.25}),
    # prefix-group admission: candidates of one agent are packed together, groups ordered by
    # aged gain per KV token (the group's requests plus its prefix when not resident)
    "group_density": ({"group_agents": "density"}, {"group_agents": "none"}),
    # head-of-line blocking: nothing is admitted past the first candidate that cannot fit
    # (memory that frees up goes to it, so big requests and fan-out stages are not starved)
    "hol_block": ({"hol_block": True}, {"hol_block": False}),
    # more KV headroom for expected output (0.6 instead of 0.5): fewer engine preemptions
    "reserve": ({"reserve_ratio": 0.6}, {"reserve_ratio": 0.5}),
    # EASY backfilling behind head-of-line blocking: a later candidate is admitted when it is
    # expected to finish before the blocked request could fit, or fits beside it then (big
    # single requests no longer leave the engine idle: plan-execute-hard)
    "backfill": ({"backfill": True}, {"backfill": False}),
    # backfilling's shadow time counts what a finishing call really returns: a call of a
    # multi-round stage keeps its context held and gives back only its output headroom (if
    # by that count nothing running frees enough, every call's KV counts): MetaGPT-SOP
    "held_shadow": ({"held_shadow": True}, {"held_shadow": False}),
    # the engine's context cache (finished calls' KV in free memory) trims the youngest tasks'
    # contexts first instead of the least recently finished (Decision.cache_priority, SGLang's
    # priority eviction): the oldest tasks' conversations survive until their next call
    "cache_priority": ({"cache_priority": "conversations"}, {"cache_priority": "off"}),
    # prefix phases: when the oldest task's agent has a queue that can fill memory by itself
    # (8 requests or more, KV at least half of what its prefix alone leaves) and the other
    # resident prefixes hold at least 30 % more memory than the requests have, only that
    # agent's requests (and continuations of held contexts) are admitted until its queue is
    # empty; the other agents drain, their prefixes are evicted, the batch grows (chain3)
    "phases": ({"phase_depth": 0.5}, {"phase_depth": 0.0}),
    # a batch of fixed-length calls admitted together grows together past the output reserve
    # and the engine preempts: with predictable output lengths the exact future KV peak is
    # checked, and admissions that would overflow it wait (chain3, dag4)
    "peak_fit": ({"peak_fit": True}, {"peak_fit": False}),
    # the local search (more than M agents compete, dag10wide) also tries one agent added
    # with every prefix the current state leaves unused dropped: loading a prefix that does
    # not fit beside the idle ones may need several evicted, which no single swap does
    "room_moves": ({"room_moves": True}, {"room_moves": False}),
    # a size-aware rank used only where size estimates are trustworthy: tasks are ranked by
    # arrival + 3 * E[LP] (E[LP] on residuals correlated within a task, review H1) only while
    # the run's work is seen to be correlated within tasks (a^2 >= 0.2: hardness revealed by
    # finished stages, mapreduce-hard) or its first-sight E[LP] has ranked the finished
    # tasks' times to finish well (Spearman >= 0.8, groupchat); a task older than the 0.6
    # quantile of the run's JCTs ranks first (bounds the overtaking); otherwise arrival rank
    "size_gated": (
        {
            "residual": "correlated",
            "rank_key": "remaining",
            "size_weight": 3.0,
            "size_gate": 0.2,
            "size_corr": 0.8,
            "tail_q": 0.6,
        },
        {
            "residual": "independent",
            "rank_key": "arrival",
            "size_weight": 1.0,
            "size_gate": 0.0,
            "size_corr": 0.0,
            "tail_q": 0.0,
        },
    ),
}


def flagship_params(off: tuple[str, ...] = ()) -> dict[str, object]:
    """The flagship's parameters, with the departures named in ``off`` reverted to the
    paper's values (for ablations)."""
    unknown = [d for d in off if d not in DEPARTURES]
    if unknown:
        raise ValueError(f"departures {unknown}: unknown (known: {', '.join(DEPARTURES)})")
    out: dict[str, object] = {}
    for name, (on, paper) in DEPARTURES.items():
        out.update(paper if name in off else on)
    return out


@register(
    "topas",
    "TOPAS, our flagship: the paper's Score and prefix-set search plus context "
    "holds before admission, no preemption, uncapped admissions, rank task priority, "
    "prefix-group packing by gain per KV token, head-of-line blocking with backfilling "
    "(a shadow time that counts held contexts), conversations cached by task age, "
    "prefix phases, an exact KV-peak check for fixed-length calls, "
    "make-room moves in the prefix-set search, "
    "a size-aware rank gated on trustworthy size estimates",
    source="TOPAS (arXiv 2608.25523) + our departures (docs/topas.md)",
    # the flagship's defaults are the departures; ``off`` reverts some of them
    params=(
        *with_defaults(TopasHold.PARAMS, flagship_params()),
        subset(
            "off",
            (),
            DEPARTURES,
            "departures reverted to the paper's choice, joined by + (e.g. off=holds+reserve)",
        ),
    ),
)
def _topas(seed: int = 0, **params: Any) -> TopasHold:
    # ``params`` come checked and converted by make_policy (``off``: a tuple of departures)
    off = params.pop("off", ())
    return TopasHold(seed=seed, name="topas", **{**flagship_params(off), **params})
