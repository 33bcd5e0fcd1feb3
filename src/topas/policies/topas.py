"""TOPAS: task-oriented, prefix-aware scheduling (spec: shared/spec/topas.md, docs/topas.md).

At every event TOPAS chooses a post-decision state ``S' = (R', Q')`` maximising

    Score(S' | S_t) = J_admit^age - J_move - J_redo - J_revoke + V_reuse      (seconds)

* ``J_admit^age = sum_r g_i(t) * Delta(r | H_i, t)``: ``Delta`` is the reduction of the task's
  expected longest remaining path ``L_i = E[LP(G_i, Z_i)]`` from starting ``r``'s stage now
  instead of after the deferral ``D_t`` (:mod:`topas.estimators`); gains of several
  requests of one task are conditional on those admitted before (``H_i``), and
  ``g_i(t) = 1 + rho * log(1 + (t - tau_i) / H_age)``.
* ``J_move = (sum_{a in R_out} c_out(a) + sum_{a in R_in} c_in(a)) * |T_in|``: ``c_in`` is the
  swap-in time ``mu * l_a / B_swap`` when a host copy exists, else the prefill recompute time
  of the prefix; ``c_out`` is ``mu * l_a / B_swap`` when evicting needs a transfer (a host tier
  and no host copy yet), else 0 (**choice**: a free drop costs no link time).
* ``J_redo = sum_{r in P} T_decode * y_r(t)`` (SGLang re-decode; ``T_decode`` = one decode
  step of the current batch), or the prefill time of prompt + generated tokens (vLLM).
* ``J_revoke = sum_{r in P} lambda_r``: the credit recorded at admission
  (``Decision.credit`` -> ``RequestState.credit_s``).
* ``V_reuse = beta * sum_{a in R'} n_a(t) * mu * l_a / B_swap``: one-hop look-ahead.

The search: GREEDYPACK(R) admits compatible waiting requests by highest aged conditional gain
while they fit (at most ``K`` admits; every running request of an agent left out of ``R`` is
preempted, at most ``K``); every subset of the active agents ``A_t`` is tried when
``|A_t| <= M``, else a hierarchical local search from ``R_t``.  The arg-max is committed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from topas.engine.decision import Decision
from topas.engine.snapshot import Location, Phase, RequestState, Snapshot, StageStatus
from topas.estimators import EmpiricalResidual, MonteCarloLP, TrueResidual
from topas.policies import register
from topas.policies.base import AdmissionPlan, expected_call_output

#: defaults chosen by benchmarks/sweep_topas.py (see docs/topas.md)
DEFAULTS = dict(M=6, K=8, beta=1.0, rho=1.0, H_age=None)


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

    def key(self) -> tuple:
        # ties: fewer preemptions, then fewer evictions (do not disturb the engine for nothing)
        return (round(self.score, 9), -len(self.preempt), -len(self.evict), len(self.admit))


class _Cand:
    """A waiting request as GREEDYPACK sees it."""

    __slots__ = ("req", "agent", "tokens", "gain", "task_id", "stage", "l_i", "age_w")

    def __init__(self, req: RequestState, tokens: int, gain: float, l_i: float,
                 age_w: float) -> None:
        self.req = req
        self.agent = req.agent
        self.tokens = tokens
        self.gain = gain  #: aged gain g_i * Delta(r | {}) (s)
        self.task_id = req.task_id
        self.stage = req.stage
        self.l_i = l_i
        self.age_w = age_w


class Topas:
    """The TOPAS scheduler.  Parameters (paper symbols):

    ``M`` -- enumerate every prefix subset when ``|A_t| <= M``; ``K`` -- max admits and max
    preemptions per decision; ``beta`` -- weight of ``V_reuse``; ``rho`` -- aging strength;
    ``H_age`` -- aging time scale in seconds (``None``: running median of completed stage
    service times, the spec's choice); ``n_samples`` -- Monte Carlo rows ``S``;
    ``reserve_ratio`` -- KV headroom for expected remaining output (as ``AdmissionPlan``);
    ``reuse`` / ``aging`` / ``move`` / ``redo`` / ``revoke`` -- switch a Score term off
    (ablations).
    """

    def __init__(self, seed: int = 0, M: int = DEFAULTS["M"], K: int = DEFAULTS["K"],
                 beta: float = DEFAULTS["beta"], rho: float = DEFAULTS["rho"],
                 H_age: float | None = DEFAULTS["H_age"], n_samples: int = 64,
                 reserve_ratio: float = 0.5, reuse: bool = True, aging: bool = True,
                 move: bool = True, redo: bool = True, revoke: bool = True,
                 name: str = "topas") -> None:
        if M < 0 or K < 1:
            raise ValueError(f"topas: M={M} must be >= 0 and K={K} >= 1")
        if beta < 0 or rho < 0:
            raise ValueError(f"topas: beta={beta} and rho={rho} must be >= 0")
        if H_age is not None and not H_age > 0:
            raise ValueError(f"topas: H_age={H_age} must be > 0 seconds or None")
        self.name = name
        self.M, self.K, self.beta, self.rho, self.H_age = M, K, beta, rho, H_age
        self.reserve_ratio = reserve_ratio
        self.reuse, self.aging = reuse, aging
        self.use_move, self.use_redo, self.use_revoke = move, redo, revoke
        self.seed = seed
        self.mc = MonteCarloLP(EmpiricalResidual(), n_samples=n_samples, seed=seed)
        self._lookahead: dict[int, tuple[int, tuple[str, ...]]] = {}
        self._median: tuple[int, float] = (-1, 0.0)
        self.last: Choice | None = None  #: the committed choice (for tests and traces)

    # ------------------------------------------------------------------ per-decision inputs
    def h_age(self, snap: Snapshot) -> float:
        """``H_age`` in seconds: fixed, or the running median of stage service times."""
        if self.H_age is not None:
            return self.H_age
        n = sum(len(v) for v in snap.history.values())
        if n != self._median[0]:
            vals = [r.service_s for recs in snap.history.values() for r in recs[-64:]]
            med = float(np.median(vals)) if vals else snap.cost.call_time_alone(512, 256)
            self._median = (n, max(med, 1e-3))
        return self._median[1]

    def age_weight(self, snap: Snapshot, arrival_s: float, h_age: float) -> float:
        """``g_i(t) = 1 + rho * log(1 + (t - tau_i) / H_age)``."""
        if not self.aging or self.rho == 0:
            return 1.0
        return 1.0 + self.rho * math.log1p(max(0.0, snap.time_s - arrival_s) / h_age)

    def deferral_s(self, snap: Snapshot, out_mean: Callable[[str], float]) -> float:
        """``D_t``: expected time to the next admission opportunity -- the smallest expected
        remaining service among running requests (an empty engine: the shortest expected
        call among waiting requests)."""
        cost = snap.cost
        if snap.running:
            ctx = sum(r.prefix_tokens + r.prompt_tokens + r.generated_tokens
                      for r in snap.running)
            step = cost.decode_step_time(len(snap.running), ctx)
            best = math.inf
            for r in snap.running:
                mean = out_mean(r.agent)
                left = max(mean - r.generated_tokens, 0.25 * mean)
                t = left * step
                if r.phase != Phase.DECODE:
                    t += cost.prefill_time(max(1, r.prompt_tokens - r.prefilled_tokens),
                                           r.prefix_tokens)
                best = min(best, t)
            return best
        best = math.inf
        for r in snap.waiting:
            step = cost.decode_step_time(1, r.prefix_tokens + r.prompt_tokens)
            best = min(best, out_mean(r.agent) * step)
        return best if best < math.inf else 1.0

    def lookahead_agents(self, snap: Snapshot) -> dict[str, int]:
        """``n_a(t)``: next-hop stages of agent ``a`` not ready yet whose only unfinished
        predecessors are running now (admitted or between calls of a ReAct stage)."""
        counts: dict[str, int] = {}
        cache = self._lookahead
        for tid, ts in snap.tasks.items():
            hit = cache.get(tid)
            if hit is None or hit[0] != ts.version:
                agents = []
                for st in ts.stages.values():
                    if st.status != StageStatus.PENDING:
                        continue
                    preds = [ts.stages[d] for d in st.deps
                             if ts.stages[d].status != StageStatus.DONE]
                    if preds and all(p.status in (StageStatus.RUNNING, StageStatus.TOOL)
                                     for p in preds):
                        agents.append(st.agent)
                hit = (ts.version, tuple(agents))
                cache[tid] = hit
            for a in hit[1]:
                counts[a] = counts.get(a, 0) + 1
        if len(cache) > 4 * len(snap.tasks) + 64:
            for tid in [t for t in cache if t not in snap.tasks]:
                del cache[tid]
        return counts

    # ------------------------------------------------------------------ the decision
    def decide(self, snap: Snapshot) -> Decision:
        self.last = None
        if not snap.waiting:
            return Decision()
        ctx = _Context(self, snap)
        best = self.search(ctx)
        self.last = best
        if best is None or not (best.admit or best.preempt or best.evict):
            return Decision()
        return Decision(admit=best.admit, preempt=best.preempt, evict=best.evict,
                        credit=dict(best.credit))

    def search(self, ctx: "_Context") -> Choice | None:
        agents = sorted(ctx.active)
        if len(agents) <= self.M:
            best: Choice | None = None
            for n in range(len(agents) + 1):
                for sub in itertools.combinations(agents, n):
                    best = ctx.better(best, ctx.greedypack(frozenset(sub)))
            return best
        return self.hierarchical(ctx, agents)

    def hierarchical(self, ctx: "_Context", agents: list[str]) -> Choice | None:
        """Local search from ``R_t``: greedy single additions, pairs when singles stall, then
        repair by single drops and swaps, until no move improves the Score."""
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
            for moves in (
                (cur_set | {a} for a in outside),
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


class _Context:
    """Everything GREEDYPACK needs for one decision, computed once."""

    def __init__(self, pol: Topas, snap: Snapshot) -> None:
        self.pol = pol
        self.snap = snap
        cost = snap.cost
        self.plan = AdmissionPlan(snap, pol.reserve_ratio)
        out_cache: dict[str, float] = {}

        def out_mean(agent: str) -> float:
            v = out_cache.get(agent)
            if v is None:
                v = out_cache[agent] = expected_call_output(snap, agent)
            return v

        self.free0 = self.plan.free
        self.resident0 = frozenset(a for a, p in snap.prefixes.items()
                                   if p.location == Location.DEVICE)
        # a prefix being swapped in or recomputed cannot be evicted this decision
        self.pinned = frozenset(a for a in self.resident0
                                if snap.prefixes[a].transfer in ("in", "compute"))
        self.running_by_agent: dict[str, list[RequestState]] = {}
        for r in snap.running:
            self.running_by_agent.setdefault(r.agent, []).append(r)
        self.active = set(self.resident0) | set(self.running_by_agent)
        self.active |= {r.agent for r in snap.waiting}
        self.defer_s = pol.deferral_s(snap, out_mean)
        h_age = pol.h_age(snap)
        # J_redo per running request
        if snap.running:
            ctx_tok = sum(r.prefix_tokens + r.prompt_tokens + r.generated_tokens
                          for r in snap.running)
            t_dec = cost.decode_step_time(len(snap.running), ctx_tok)
        else:
            t_dec = 0.0
        self.redo: dict[int, float] = {}
        for r in snap.running:
            if snap.config.preemption == "vllm":
                n = r.prompt_tokens + r.generated_tokens
                self.redo[r.request_id] = cost.prefill_time(n, r.prefix_tokens) if n else 0.0
            else:
                self.redo[r.request_id] = t_dec * r.generated_tokens
        self.release = {r.request_id: r.kv_tokens + self.plan.reserve(r) for r in snap.running}
        # prefix move costs (s)
        host_tier = snap.config.host_capacity_tokens > 0
        self.c_in: dict[str, float] = {}
        self.c_out: dict[str, float] = {}
        for a in self.active:
            p = snap.prefixes[a]
            if p.on_host:
                self.c_in[a] = cost.swap_time(p.tokens)
            else:
                self.c_in[a] = cost.prefill_time(p.tokens) if p.tokens else 0.0
            self.c_out[a] = cost.swap_time(p.tokens) if (host_tier and not p.on_host) else 0.0
        # V_reuse weight per agent: beta * n_a * mu * l_a / B_swap
        self.reuse: dict[str, float] = {}
        if pol.reuse and pol.beta > 0:
            for a, n in pol.lookahead_agents(snap).items():
                if a in snap.prefixes:
                    self.reuse[a] = pol.beta * n * cost.swap_time(snap.prefixes[a].tokens)
        # candidates with unconditional aged gains
        pol.mc.forget_finished(snap.tasks)
        gen = {(r.task_id, r.stage): r.generated_tokens for r in snap.running}
        self.entries = {}
        self.weights: dict[int, float] = {}
        cands: list[_Cand] = []
        self.by_task: dict[int, list[_Cand]] = {}
        for r in snap.waiting:
            ts = snap.tasks[r.task_id]
            e = self.entries.get(r.task_id)
            if e is None:
                e = self.entries[r.task_id] = pol.mc.entry(snap, ts, gen)
                self.weights[r.task_id] = pol.age_weight(snap, ts.arrival_s, h_age)
            w = self.weights[r.task_id]
            delta, l_now = self.delta(e, r.stage, ())
            c = _Cand(r, self.plan.request_tokens(r) + self.plan.reserve(r), w * delta, l_now, w)
            cands.append(c)
            self.by_task.setdefault(r.task_id, []).append(c)
        # highest gain first; ties: shorter expected remaining path, then oldest
        cands.sort(key=lambda c: (-c.gain, c.l_i, c.req.seq))
        self.cands = cands
        self.multi = {t for t, cs in self.by_task.items() if len(cs) > 1}
        self.max_batch = snap.config.max_batch_requests

    def delta(self, e, stage: str, admitted: tuple[str, ...]) -> tuple[float, float]:
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
        preempt: list[int] = []
        free = self.free0
        for a, rs in self.running_by_agent.items():
            if a not in allowed:
                for r in rs:
                    preempt.append(r.request_id)
                    free += self.release[r.request_id]
        if len(preempt) > pol.K:
            return None
        evict = [a for a in self.resident0 if a not in allowed]
        for a in evict:
            free += snap.prefixes[a].tokens
        resident = set(self.resident0 & allowed)
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
            if c.task_id in self.multi:
                # later requests of this task get their gain conditional on this admission
                hs = task_stages.setdefault(c.task_id, [])
                hs.append(c.stage)
                if gains is None:
                    gains = {}
                e = self.entries[c.task_id]
                for o in self.by_task[c.task_id]:
                    if o.req.request_id not in done:
                        d, _ = self.delta(e, o.stage, tuple(hs))
                        gains[o.req.request_id] = o.age_w * d
                order = sorted((x for x in cands if x.req.request_id not in done),
                               key=lambda x: (-gains.get(x.req.request_id, x.gain), x.l_i,
                                              x.req.seq))
                i = 0
            elif new_prefix:
                i = 0  # requests of this agent skipped before may fit now
                order = [x for x in order if x.req.request_id not in done]
        # Score terms (seconds)
        r_in = resident - self.resident0
        t_in = {c.task_id for c in self.cands if c.agent in r_in and c.req.request_id in done}
        j_move = 0.0
        if pol.use_move and r_in:
            moved = sum(self.c_in[a] for a in r_in) + sum(self.c_out[a] for a in evict)
            j_move = moved * len(t_in)
        j_redo = sum(self.redo[r] for r in preempt) if pol.use_redo else 0.0
        j_revoke = 0.0
        if pol.use_revoke and preempt:
            by_id = {r.request_id: r for r in snap.running}
            j_revoke = sum(by_id[r].credit_s for r in preempt)
        v_reuse = sum(self.reuse.get(a, 0.0) for a in resident)
        score = j_admit - j_move - j_redo - j_revoke + v_reuse
        return Choice(score, tuple(admitted), tuple(preempt), tuple(sorted(evict)),
                      tuple(credit), frozenset(resident),
                      (j_admit, j_move, j_redo, j_revoke, v_reuse))


class TopasOracle(Topas):
    """TOPAS with the true residual service of every stage (clairvoyant; for reports)."""

    def bind_oracle(self, fn: Callable) -> None:
        self.mc = MonteCarloLP(TrueResidual(fn), n_samples=1, seed=self.seed)


@register("topas", "TOPAS: Score = aged task-progress gain - prefix moves - redo - revoke + "
          "one-hop reuse, GREEDYPACK + prefix-set search", source="TOPAS (arXiv 2608.25523)")
def _topas(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, **params)


@register("topas-base", "TOPAS without the reuse term and without aging (paper's TOPAS-base)",
          source="TOPAS ablation")
def _topas_base(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, reuse=False, aging=False, name="topas-base", **params)


@register("topas-noreuse", "TOPAS without V_reuse", source="TOPAS ablation")
def _topas_noreuse(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, reuse=False, name="topas-noreuse", **params)


@register("topas-noaging", "TOPAS without aging (g_i = 1)", source="TOPAS ablation")
def _topas_noaging(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, aging=False, name="topas-noaging", **params)


@register("topas-oracle", "TOPAS with the true residual service times instead of estimates "
          "(clairvoyant upper reference)", source="TOPAS, oracle residuals")
def _topas_oracle(seed: int = 0, **params) -> Topas:
    return TopasOracle(seed=seed, name="topas-oracle", **params)
