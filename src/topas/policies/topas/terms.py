"""The Score's terms (seconds).  At every event TOPAS chooses a post-decision state
``S' = (R', Q')`` maximising

    Score(S' | S_t) = J_admit^age - J_move - J_redo - J_revoke + V_reuse      (seconds)

* ``J_admit^age = sum_r g_i(t) * Delta(r | H_i, t)``: ``Delta`` is the reduction of the task's
  expected longest remaining path ``L_i = E[LP(G_i, Z_i)]`` from starting ``r``'s stage now
  instead of after the deferral ``D_t`` (:mod:`topas.estimators`); gains of several
  requests of one task are conditional on those admitted before (``H_i``), and
  ``g_i(t) = 1 + rho * log(1 + (t - tau_i) / H_age)`` (:mod:`.aging`).
* ``J_move = (sum_{a in R_out} c_out(a) + sum_{a in R_in} c_in(a)) * |T_in|``: ``c_in`` is the
  swap-in time ``mu * l_a / B_swap`` when a host copy exists, else the prefill recompute time
  of the prefix; ``c_out`` is ``mu * l_a / B_swap`` when evicting needs a transfer (a host tier
  and no host copy yet), else 0 (**choice**: a free drop costs no link time).
* ``J_redo = sum_{r in P} T_decode * y_r(t)`` (SGLang re-decode; ``T_decode`` = one decode
  step of the current batch) plus, by default (``redo_cost="engine"``, **choice**), the prefill
  time of the prompt tokens already prefilled, which this engine also redoes; or the prefill
  time of prompt + generated tokens (vLLM).
* ``J_revoke = sum_{r in P} lambda_r``: the credit recorded at admission
  (``Decision.credit`` -> ``RequestState.credit_s``).
* ``V_reuse = beta * sum_{a in R'} n_a(t) * mu * l_a / B_swap``: one-hop look-ahead.

Here are the per-decision inputs of those terms; the gains ``Delta`` are computed in
:mod:`.context` and the terms of a packed state are summed in :mod:`.search`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter

from topas.engine.snapshot import Phase, RequestState, Snapshot, StageStatus, TaskState
from topas.estimators import TaskMC
from topas.policies.topas.core import TopasCore

#: the statuses of a stage whose successors need not wait for anything else from it to be
#: counted by ``lookahead_agents``: running (admitted or in a tool call) or done
_STARTED_OR_DONE = (StageStatus.RUNNING, StageStatus.TOOL, StageStatus.DONE)
_VERSION = attrgetter("version")


def running_left_s(snap: Snapshot, out_mean: Callable[[str], float]) -> tuple[float, list[float]]:
    """The current batch's decode step time and, per running request (in ``snap.running``
    order), its expected remaining service: expected output still to decode (at least a
    quarter of the mean) at that step, plus the prompt left to prefill.  Seconds."""
    cost = snap.cost
    ctx = sum(r.prefix_tokens + r.prompt_tokens + r.generated_tokens for r in snap.running)
    step = cost.decode_step_time(len(snap.running), ctx)
    lefts = []
    for r in snap.running:
        mean = out_mean(r.agent)
        t = max(mean - r.generated_tokens, 0.25 * mean) * step
        if r.phase != Phase.DECODE:
            t += cost.prefill_time(max(1, r.prompt_tokens - r.prefilled_tokens), r.prefix_tokens)
        lefts.append(t)
    return step, lefts


@dataclass(slots=True)
class TaskInfo:
    """A task's Monte Carlo estimate for one version of its state (cached between events;
    a slots dataclass: the fastest attribute reads, and it is read per waiting request)."""

    version: int  #: ``TaskState.version`` it was built for
    entry: TaskMC  #: the task's Monte Carlo entry (``E[LP]`` with some stages deferred)
    #: one ready stage and nothing running: every request's gain is exactly ``D_t`` and
    #: ``L_i`` does not age
    chain: bool
    l_i: float  #: ``L_i = E[LP]`` now (s) when ``chain``, else 0.0 (not needed)


@dataclass(slots=True)
class _MoveCost:
    """An agent's prefix move costs (s), for the prefix state ``key``."""

    key: tuple[int, bool, bool]  #: (tokens, on_host, host tier)
    c_in: float
    c_out: float


class Terms(TopasCore):
    """The Score-term inputs of :class:`~topas.policies.topas.policy.Topas` (a mixin).

    Reads the policy's parameters (``max_preempt``, ``redo_cost``, ``use_revoke``,
    ``revoke_value``, ``reuse``, ``beta``, ``rank_key``, ``age_form``, ``size_weight``) and
    estimator ``mc``; keeps the caches between events ``_task_info``, ``_moves``,
    ``_lookahead``, ``_la_counts`` and ``_rank_keys`` (set up in ``Topas.__init__``, reset
    by ``_new_run_check``; declared in :class:`TopasCore`)."""

    def _build_task_info(
        self, snap: Snapshot, ts: TaskState, gen: Mapping[tuple[int, str], int]
    ) -> TaskInfo:
        """The task's Monte Carlo entry for its current version (see ``_task_info``)."""
        e = self.mc.entry(snap, ts, gen)
        chain = len(e.ready) == 1 and not e.running
        info = TaskInfo(ts.version, e, chain, e.expected_lp(snap.time_s) if chain else 0.0)
        self._task_info[ts.task_id] = info
        if (
            self.rank_key != "arrival"
            and self.age_form == "rank"
            and (self.rank_key == "remaining" or ts.task_id not in self._rank_keys)
        ):
            lp = info.l_i if chain else e.expected_lp(snap.time_s)
            if ts.task_id not in self._rank_keys:
                n, s1, s2 = self._first_lp
                self._first_lp = (n + 1, s1 + lp, s2 + lp * lp)
                if self.size_corr > 0:
                    self._first_seen[ts.task_id] = (snap.time_s, lp)
            self._rank_keys[ts.task_id] = ts.arrival_s + self.size_weight * lp
        return info

    def _move_costs(
        self, snap: Snapshot, agents: Iterable[str]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """``c_in(a)``: swap-in time ``mu l_a / B_swap`` with a host copy, else the prefix's
        prefill time; ``c_out(a)``: swap-out time when evicting needs a transfer (host tier,
        no host copy yet), else 0.  Seconds; cached per (tokens, host copy, host tier)."""
        host_tier = snap.config.host_capacity_tokens > 0
        c_in: dict[str, float] = {}
        c_out: dict[str, float] = {}
        cost = snap.cost
        for a in agents:
            p = snap.prefixes[a]
            key = (p.tokens, p.on_host, host_tier)
            hit = self._moves.get(a)
            if hit is None or hit.key != key:
                cin = (
                    cost.swap_time(p.tokens)
                    if p.on_host
                    else (cost.prefill_time(p.tokens) if p.tokens else 0.0)
                )
                cout = cost.swap_time(p.tokens) if (host_tier and not p.on_host) else 0.0
                hit = self._moves[a] = _MoveCost(key, cin, cout)
            c_in[a] = hit.c_in
            c_out[a] = hit.c_out
        return c_in, c_out

    def deferral_s(
        self,
        snap: Snapshot,
        out_mean: Callable[[str], float],
        lefts: list[float] | None = None,
    ) -> float:
        """``D_t``: expected time to the next admission opportunity -- the smallest expected
        remaining service among running requests (an empty engine: the shortest expected
        call among waiting requests).  ``lefts``: :func:`running_left_s`'s per-request
        times when the caller has them already."""
        cost = snap.cost
        if snap.running:
            return min(lefts if lefts is not None else running_left_s(snap, out_mean)[1])
        best = math.inf
        for r in snap.waiting:
            step = cost.decode_step_time(1, r.prefix_tokens + r.prompt_tokens)
            best = min(best, out_mean(r.agent) * step)
        return best if best < math.inf else 1.0

    def preemption_costs(
        self, snap: Snapshot, reserve: Callable[[RequestState], int]
    ) -> tuple[dict[int, float], dict[int, int]]:
        """Per running request: ``J_redo`` (s) and the KV tokens preempting it gives back
        (its KV and its output reservation ``reserve``).  Empty with no preemption allowed
        (``max_preempt=0``): no state that preempts is ever scored -- GREEDYPACK and its
        upper bound reject it before reading these -- so the O(running) cost-model calls
        are skipped."""
        redo: dict[int, float] = {}
        release: dict[int, int] = {}
        running = snap.running
        if running and self.max_preempt > 0:
            cost = snap.cost
            ctx_tok = 0
            for r in running:
                ctx_tok += r.prefix_tokens + r.prompt_tokens + r.generated_tokens
            t_dec = cost.decode_step_time(len(running), ctx_tok)
            vllm = snap.config.preemption == "vllm"
            engine_redo = self.redo_cost == "engine"
            for r in running:
                if vllm:
                    n = r.prompt_tokens + r.generated_tokens
                    redo[r.request_id] = cost.prefill_time(n, r.prefix_tokens) if n else 0.0
                else:
                    t = t_dec * r.generated_tokens
                    if engine_redo and r.prefilled_tokens:
                        # SGLang-style re-run: the prompt is prefilled again too
                        t += cost.prefill_time(r.prefilled_tokens, r.prefix_tokens)
                    redo[r.request_id] = t
                release[r.request_id] = r.kv_tokens + reserve(r)
        return redo, release

    def revoke_costs(self, snap: Snapshot, defer_s: float, h_age: float) -> dict[int, float]:
        """``J_revoke`` per running request (s): the recorded credit, or
        (``revoke_value="current"``) at least the aged gain the request would have if it
        were waiting now, ``g_i(t) * D_t``.  Empty when the term is off or no preemption is
        allowed."""
        revoke: dict[int, float] = {}
        running = snap.running
        if running and self.use_revoke and self.max_preempt > 0:
            cur = self.revoke_value == "current"
            for r in running:
                v = r.credit_s
                if cur:
                    ts = snap.tasks.get(r.task_id)
                    w = self.age_weight(snap, ts.arrival_s, h_age) if ts is not None else 1.0
                    v = max(v, w * defer_s)
                revoke[r.request_id] = v
        return revoke

    def reuse_value(self, snap: Snapshot) -> dict[str, float]:
        """``V_reuse`` weight per agent (s): ``beta * n_a * mu * l_a / B_swap`` (empty when
        the term is off)."""
        out: dict[str, float] = {}
        if self.reuse and self.beta > 0:
            prefixes = snap.prefixes
            cost = snap.cost
            for a, n in self.lookahead_agents(snap).items():
                if a in prefixes:
                    out[a] = self.beta * n * cost.swap_time(prefixes[a].tokens)
        return out

    def lookahead_agents(self, snap: Snapshot) -> dict[str, int]:
        """``n_a(t)``: next-hop stages of agent ``a`` not ready yet whose only unfinished
        predecessors are running now (admitted or between calls of a ReAct stage).

        Each task's contribution is cached by its version and the totals are kept up to
        date incrementally, so an event costs one version check per unfinished task (a
        comparison of two task -> version maps, in C: the changed tasks are the items that
        differ; the order they are recounted in does not matter)."""
        cache = self._lookahead
        counts = self._la_counts
        tasks = snap.tasks
        versions = dict(zip(tasks, map(_VERSION, tasks.values())))
        running, tool, pending = StageStatus.RUNNING, StageStatus.TOOL, StageStatus.PENDING
        seen_versions = self._la_versions
        if versions == seen_versions:
            return {a: n for a, n in counts.items() if n > 0}
        for tid, _ in versions.items() - seen_versions.items():
            ts = tasks[tid]
            hit = cache.get(tid)
            # such a stage is a successor of a running one whose other dependencies are
            # all running or done: only the running stages' successors are examined (a
            # pending stage is visited once; the agents' order does not matter, they are
            # counted)
            agents = []
            stages = ts.stages
            seen: set[str] = set()
            for st in stages.values():
                status = st.status
                if status != running and status != tool:
                    continue
                for name in st.succs:
                    nxt = stages[name]
                    if nxt.status != pending or name in seen:
                        continue
                    seen.add(name)
                    if all(stages[d].status in _STARTED_OR_DONE for d in nxt.deps):
                        agents.append(nxt.agent)
            if hit is not None:
                for a in hit:
                    counts[a] -= 1
            for a in agents:
                counts[a] = counts.get(a, 0) + 1
            cache[tid] = tuple(agents)
        if len(cache) > len(tasks):  # finished tasks: their stages count no more
            for tid in [t for t in cache if t not in tasks]:
                for a in cache.pop(tid):
                    counts[a] -= 1
        self._la_versions = versions
        return {a: n for a, n in counts.items() if n > 0}
