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
  step of the current batch) plus, by default (``redo_cost="engine"``, **choice**), the prefill
  time of the prompt tokens already prefilled, which this engine also redoes; or the prefill
  time of prompt + generated tokens (vLLM).
* ``J_revoke = sum_{r in P} lambda_r``: the credit recorded at admission
  (``Decision.credit`` -> ``RequestState.credit_s``).
* ``V_reuse = beta * sum_{a in R'} n_a(t) * mu * l_a / B_swap``: one-hop look-ahead.

The search: GREEDYPACK(R) admits compatible waiting requests by highest aged conditional gain
while they fit (at most ``K`` admits; every running request of an agent left out of ``R`` is
preempted, at most ``K``); every subset of the active agents ``A_t`` is tried when
``|A_t| <= M``, else a hierarchical local search from ``R_t``.  The arg-max is committed.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from topas.engine.decision import Decision
from topas.engine.snapshot import Location, Phase, RequestState, Snapshot, StageStatus
from topas.estimators import EmpiricalResidual, MonteCarloLP, TrueResidual
from topas.policies import register
from topas.policies.base import AdmissionPlan, expected_call_output
from topas.policies.params import N_SAMPLES, RESERVE_RATIO, choice, flag, integer, real, without
from topas.policies.parrot import task_fcfs_key
from topas.workflow.model import round_up_to_blocks

#: defaults chosen by benchmarks/sweep_topas.py (see docs/topas.md)
DEFAULTS = dict(M=6, K=2, beta=10.0, rho=0.25, H_age=None, min_gain_s=1e-3, joint_gain=True)


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


def running_left_s(snap: Snapshot, out_mean: Callable[[str], float]
                   ) -> tuple[float, list[float]]:
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
            t += cost.prefill_time(max(1, r.prompt_tokens - r.prefilled_tokens),
                                   r.prefix_tokens)
        lefts.append(t)
    return step, lefts


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
    (ablations); ``redo_cost`` -- what ``J_redo`` charges for a preemption: ``"engine"``
    (default, **choice**: the work this engine really redoes -- under SGLang semantics the
    prompt tokens already prefilled plus the generated tokens decoded again, under vLLM's the
    prefill of prompt + generated) or ``"decode"`` (the paper's ``T_decode * y_r`` only,
    which assumes the prompt's KV survives the preemption).

    Departures the flagship ``topas`` switches on (defaults: the paper's choice;
    ``topas.policies.topas.DEPARTURES``): ``max_preempt`` -- max preemptions per decision
    (``None``: ``K``); ``age_form`` -- ``"log"`` (the paper's ``g_i``) or ``"rank"``
    (``g_i = 1 + rho * number of unfinished tasks younger than i``); ``group_agents`` --
    ``"none"`` (GREEDYPACK by gain), ``"best"`` (Parrot's co-scheduling: each candidate's
    agent group follows it) or ``"density"`` (agent groups ordered by summed aged gain per KV
    token, the prefix counted when not resident); ``hol_block`` -- admit nothing past the
    first candidate that cannot fit even with every idle prefix evicted.
    """

    #: declared parameters (topas.policies.params)
    PARAMS = (
        integer("M", DEFAULTS["M"], "enumerate every prefix subset when at most M agents "
                "compete (2^M Score evaluations)", hi=16),
        integer("K", DEFAULTS["K"], "max admissions (and preemptions) per decision", lo=1,
                hi=1_000_000),
        real("beta", DEFAULTS["beta"], "weight of the reuse term V_reuse", hi=1e6),
        real("rho", DEFAULTS["rho"], "aging strength", hi=1e6),
        real("H_age", DEFAULTS["H_age"], "aging time scale (s); none: running median of stage "
             "service times", lo_open=True, hi=1e9, nullable=True),
        N_SAMPLES,
        RESERVE_RATIO,
        flag("reuse", True, "the V_reuse term (false: ablation)"),
        flag("aging", True, "aging g_i (false: g_i = 1)"),
        flag("move", True, "the J_move term (prefix move-in/out time)"),
        flag("redo", True, "the J_redo term (work a preemption redoes)"),
        flag("revoke", True, "the J_revoke term (gain a preemption takes back)"),
        real("min_gain_s", DEFAULTS["min_gain_s"], "admit nothing whose gain is below this "
             "(s)", hi=3_600.0),
        flag("joint_gain", DEFAULTS["joint_gain"], "gain of requests of one task counted "
             "jointly"),
        choice("redo_cost", "engine", ("engine", "decode"), "what J_redo charges: the work "
               "this engine redoes, or the paper's decode time only"),
        choice("revoke_value", "credit", ("credit", "current"), "a preemption revokes the "
               "credited gain, or the displaced request's current aged gain"),
        integer("max_preempt", None, "max preemptions per decision (none: K)", hi=1_000_000,
                nullable=True),
        choice("age_form", "log", ("log", "rank"), "log: the paper's g_i; rank: 1 + rho * "
               "unfinished younger tasks"),
        choice("rank_key", "arrival", ("arrival", "finish", "remaining"), "what rank aging "
               "ranks tasks by: arrival time, or arrival + size_weight * E[LP] with E[LP] "
               "estimated when the task is first seen (finish) or at its latest state "
               "change (remaining; a large size_weight gives SRPT order)"),
        real("size_weight", 1.0, "seconds of arrival one second of expected path is worth in "
             "the rank key (rank_key finish or remaining)", hi=1e6),
        real("size_gate", 0.0, "with a size rank key and residual=correlated: use the "
             "size key only while the learned within-task correlation a^2 is at least this "
             "(0: always)", hi=1.0),
        real("tail_q", 0.0, "with rank aging: a task older than this quantile of the "
             "run's finished tasks' JCTs ranks ahead of every task that is not, oldest first "
             "(bounds overtaking by a size rank key; 0: off)", hi=0.999),
        flag("hol_block", False, "admit nothing past the first candidate that cannot fit"),
        flag("backfill", False, "with hol_block: admit a later candidate past the blocked "
             "one when it is expected to finish before the blocked one could fit, or fits "
             "beside it then (EASY backfilling)"),
        choice("group_agents", "none", ("none", "best", "density"), "GREEDYPACK order: by "
               "gain, agent groups following candidates, or groups by gain per KV token"),
        choice("residual", "independent", ("independent", "correlated"), "E[LP]'s stage "
               "residuals: independent (the paper), or correlated within a task by a factor "
               "learned online (topas.estimators.copula, review H1)"),
    )

    def __init__(self, seed: int = 0, M: int = DEFAULTS["M"], K: int = DEFAULTS["K"],
                 beta: float = DEFAULTS["beta"], rho: float = DEFAULTS["rho"],
                 H_age: float | None = DEFAULTS["H_age"], n_samples: int = 64,
                 reserve_ratio: float = 0.5, reuse: bool = True, aging: bool = True,
                 move: bool = True, redo: bool = True, revoke: bool = True,
                 min_gain_s: float = DEFAULTS["min_gain_s"],
                 joint_gain: bool = DEFAULTS["joint_gain"], redo_cost: str = "engine",
                 revoke_value: str = "credit", max_preempt: int | None = None,
                 age_form: str = "log", hol_block: bool = False, group_agents: str = "none",
                 rank_key: str = "arrival", size_weight: float = 1.0, backfill: bool = False,
                 tail_q: float = 0.0, residual: str = "independent", size_gate: float = 0.0,
                 name: str = "topas-paper") -> None:
        if M < 0 or K < 1:
            raise ValueError(f"topas: M={M} must be >= 0 and K={K} >= 1")
        if beta < 0 or rho < 0:
            raise ValueError(f"topas: beta={beta} and rho={rho} must be >= 0")
        if H_age is not None and not H_age > 0:
            raise ValueError(f"topas: H_age={H_age} must be > 0 seconds or None")
        if min_gain_s < 0:
            raise ValueError(f"topas: min_gain_s={min_gain_s} must be >= 0 seconds")
        if redo_cost not in ("engine", "decode"):
            raise ValueError(f"topas: redo_cost={redo_cost!r} must be 'engine' or 'decode'")
        if revoke_value not in ("credit", "current"):
            raise ValueError(f"topas: revoke_value={revoke_value!r} must be 'credit' or "
                             "'current'")
        if max_preempt is not None and max_preempt < 0:
            raise ValueError(f"topas: max_preempt={max_preempt} must be >= 0 or None (= K)")
        if age_form not in ("log", "rank"):
            raise ValueError(f"topas: age_form={age_form!r} must be 'log' or 'rank'")
        self.max_preempt = K if max_preempt is None else max_preempt
        self.hol_block = bool(hol_block)
        self.backfill = bool(backfill)
        if group_agents not in ("none", "best", "density"):
            raise ValueError(f"topas: group_agents={group_agents!r} must be 'none', 'best' "
                             "or 'density'")
        self.group_agents = group_agents
        self.age_form = age_form
        if rank_key not in ("arrival", "finish", "remaining"):
            raise ValueError(f"topas: rank_key={rank_key!r} must be 'arrival', 'finish' or "
                             "'remaining'")
        if not size_weight >= 0:
            raise ValueError(f"topas: size_weight={size_weight} must be >= 0")
        self.rank_key, self.size_weight = rank_key, size_weight
        if not 0 <= tail_q < 1:
            raise ValueError(f"topas: tail_q={tail_q} must be in [0, 1)")
        self.tail_q = tail_q
        #: tail_q > 0: arrival time of every unfinished task seen, and the sorted JCTs (s) of
        #: the tasks seen to finish (a task finishes when it leaves ``snap.tasks``)
        self._live_arrivals: dict[int, float] = {}
        self._done_jcts: list[float] = []
        #: rank_key != "arrival": task id -> its rank key (s), set when its E[LP] is estimated
        self._rank_keys: dict[int, float] = {}
        #: KV tokens and prefixes a subclass has already committed in this decision (holds
        #: decided before admission); the search packs into what is left
        self._committed_tokens = 0
        self._committed_agents: frozenset[str] = frozenset()
        self.redo_cost = redo_cost
        self.revoke_value = revoke_value
        self.min_gain_s = min_gain_s
        self.joint_gain = joint_gain
        self.name = name
        self.M, self.K, self.beta, self.rho, self.H_age = M, K, beta, rho, H_age
        self.reserve_ratio = reserve_ratio
        self.reuse, self.aging = reuse, aging
        self.use_move, self.use_redo, self.use_revoke = move, redo, revoke
        self.seed = seed
        if residual not in ("independent", "correlated"):
            raise ValueError(f"topas: residual={residual!r} must be 'independent' or "
                             "'correlated'")
        self.residual = residual
        if not 0 <= size_gate <= 1 or (size_gate > 0 and residual != "correlated"):
            raise ValueError(f"topas: size_gate={size_gate} must be in [0, 1] and needs "
                             "residual='correlated'")
        self.size_gate = size_gate
        self.mc = MonteCarloLP(EmpiricalResidual(), n_samples=n_samples, seed=seed,
                               correlated=residual == "correlated")
        self._lookahead: dict[int, tuple[int, tuple[str, ...]]] = {}
        self._la_counts: dict[str, int] = {}  #: n_a(t) summed over ``_lookahead``
        self._median: tuple[int, float] = (-1, 0.0)
        #: per task: (version, TaskMC, chain, L_i) -- ``chain``: one ready stage and nothing
        #: running, so every request's gain is exactly D_t and L_i does not age
        self._task_info: dict[int, tuple[int, object, bool, float]] = {}
        #: per agent: ((tokens, on_host, host tier), c_in, c_out) in seconds
        self._moves: dict[str, tuple[tuple[int, bool, bool], float, float]] = {}
        self._run_id = -1
        #: (unfinished task ids, task id -> number of younger unfinished tasks) for rank aging
        self._rank: tuple[tuple, dict[int, int]] = ((), {})
        self.last: Choice | None = None  #: the committed choice (for tests and traces)

    # ------------------------------------------------------------------ per-decision inputs
    def h_age(self, snap: Snapshot) -> float:
        """``H_age`` in seconds: fixed, or the running median of stage service times."""
        if self.H_age is not None:
            return self.H_age
        n = sum(map(len, snap.history.values()))
        if n != self._median[0]:
            vals = sorted(r.service_s for recs in snap.history.values() for r in recs[-64:])
            if vals:
                m = len(vals) // 2
                med = vals[m] if len(vals) % 2 else (vals[m - 1] + vals[m]) / 2
            else:
                med = snap.cost.call_time_alone(512, 256)
            self._median = (n, max(med, 1e-3))
        return self._median[1]

    # ------------------------------------------------------------------ caches between events
    def _new_run_check(self, snap: Snapshot) -> None:
        """Drop every cache when a new run starts (a new history object) and forget tasks
        that finished (bounded memory)."""
        if snap.run_key is not self._run_id:  # identity: ids are reused after GC
            self._run_id = snap.run_key
            self._task_info.clear()
            self._moves.clear()
            self._lookahead.clear()
            self._la_counts.clear()
            self._median = (-1, 0.0)
            self._rank = ((), {})
            self._rank_keys.clear()
            self._live_arrivals.clear()
            self._done_jcts.clear()
        if len(self._task_info) > 2 * len(snap.tasks) + 64:
            for tid in [t for t in self._task_info if t not in snap.tasks]:
                del self._task_info[tid]
                self._rank_keys.pop(tid, None)
            self.mc.forget_finished(snap.tasks)

    def size_key_on(self) -> bool:
        """Whether the size rank key is used now: always, or (``size_gate``) while the
        estimator's learned within-task correlation is at least ``size_gate``."""
        if self.size_gate <= 0:
            return True
        cop = self.mc.copula
        return cop is not None and cop.a2 >= self.size_gate

    def tail_age_s(self, snap: Snapshot) -> float:
        """``tail_q``: the age (s) past which a task ranks first -- that quantile of the JCTs
        of the tasks finished so far in this run (inf until 10 have finished)."""
        live, done = self._live_arrivals, self._done_jcts
        tasks = snap.tasks
        if len(live) != len(tasks) or any(t not in tasks for t in live):
            now = snap.time_s
            for tid in [t for t in live if t not in tasks]:
                bisect.insort(done, now - live.pop(tid))
            for tid, ts in tasks.items():
                if tid not in live:
                    live[tid] = ts.arrival_s
        if len(done) < 10:
            return math.inf
        return done[min(len(done) - 1, int(self.tail_q * len(done)))]

    def _build_task_info(self, snap: Snapshot, ts, gen) -> tuple[int, object, bool, float]:
        """The task's Monte Carlo entry for its current version (see ``_task_info``)."""
        e = self.mc.entry(snap, ts, gen)
        chain = len(e.ready) == 1 and not e.running
        info = (ts.version, e, chain, e.expected_lp(snap.time_s) if chain else 0.0)
        self._task_info[ts.task_id] = info
        if self.rank_key != "arrival" and self.age_form == "rank" and (
                self.rank_key == "remaining" or ts.task_id not in self._rank_keys):
            lp = info[3] if chain else e.expected_lp(snap.time_s)
            self._rank_keys[ts.task_id] = ts.arrival_s + self.size_weight * lp
        return info

    def _move_costs(self, snap: Snapshot, agents: Iterable[str]
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
            if hit is None or hit[0] != key:
                cin = cost.swap_time(p.tokens) if p.on_host else (
                    cost.prefill_time(p.tokens) if p.tokens else 0.0)
                cout = cost.swap_time(p.tokens) if (host_tier and not p.on_host) else 0.0
                hit = self._moves[a] = (key, cin, cout)
            c_in[a] = hit[1]
            c_out[a] = hit[2]
        return c_in, c_out

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
            return min(running_left_s(snap, out_mean)[1])
        best = math.inf
        for r in snap.waiting:
            step = cost.decode_step_time(1, r.prefix_tokens + r.prompt_tokens)
            best = min(best, out_mean(r.agent) * step)
        return best if best < math.inf else 1.0

    def lookahead_agents(self, snap: Snapshot) -> dict[str, int]:
        """``n_a(t)``: next-hop stages of agent ``a`` not ready yet whose only unfinished
        predecessors are running now (admitted or between calls of a ReAct stage).

        Each task's contribution is cached by its version and the totals are kept up to
        date incrementally, so an event costs one version check per unfinished task."""
        cache = self._lookahead
        counts = self._la_counts
        tasks = snap.tasks
        for tid, ts in tasks.items():
            hit = cache.get(tid)
            if hit is not None and hit[0] == ts.version:
                continue
            agents = []
            for st in ts.stages.values():
                if st.status != StageStatus.PENDING:
                    continue
                preds = [ts.stages[d] for d in st.deps
                         if ts.stages[d].status != StageStatus.DONE]
                if preds and all(p.status in (StageStatus.RUNNING, StageStatus.TOOL)
                                 for p in preds):
                    agents.append(st.agent)
            if hit is not None:
                for a in hit[1]:
                    counts[a] -= 1
            for a in agents:
                counts[a] = counts.get(a, 0) + 1
            cache[tid] = (ts.version, tuple(agents))
        if len(cache) > len(tasks):  # finished tasks: their stages count no more
            for tid in [t for t in cache if t not in tasks]:
                for a in cache.pop(tid)[1]:
                    counts[a] -= 1
        return {a: n for a, n in counts.items() if n > 0}

    # ------------------------------------------------------------------ the decision
    def decide(self, snap: Snapshot) -> Decision:
        self.last = None
        if not snap.waiting:
            return Decision()
        ctx = _Context(self, snap)
        best = self.search(ctx)
        self.last = best
        if not snap.running and (best is None or not best.admit):
            # work conservation: an empty engine never waits while requests do (the Score can
            # see no positive state, e.g. a prefix of nearly the whole budget that the
            # search's output reservation cannot fit); admit the oldest task's request that
            # fits alone, as the engine's default admission would
            fallback = self.idle_admission(snap)
            if fallback is not None:
                return fallback
        if best is None or not (best.admit or best.preempt or best.evict):
            return Decision()
        return Decision(admit=best.admit, preempt=best.preempt, evict=best.evict,
                        credit=dict(best.credit))

    def idle_admission(self, snap: Snapshot) -> Decision | None:
        """For an empty engine: the oldest task's waiting request that fits (evicting idle
        prefixes LRU first, one block of headroom if that is all there is), credit 0; None
        if none fits."""
        plan = AdmissionPlan(snap, self.reserve_ratio)
        plan.free -= self._committed_tokens
        plan.needed |= self._committed_agents
        for r in sorted(snap.waiting, key=lambda q: task_fcfs_key(snap, q)):
            if plan.try_admit(r):
                return plan.decision(credit={r.request_id: 0.0})
        return None

    def search(self, ctx: _Context) -> Choice | None:
        agents = sorted(ctx.active)
        if len(agents) <= self.M:
            # the full set is usually the arg-max: a subset whose Score upper bound is below
            # it cannot win (nor tie), so it is skipped; the visiting order and hence the
            # tie-breaks are those of plain enumeration
            full = ctx.greedypack(frozenset(agents))
            bar = full.score - 1e-6 if full is not None and ctx._busy(full) else None
            # a set that leaves out the agent of a running request preempts it; with no
            # preemption allowed GREEDYPACK rejects such a set, so it is skipped here
            must = (frozenset(ctx.running_by_agent) - ctx.pinned
                    if self.max_preempt == 0 else frozenset())
            best: Choice | None = None
            for n in range(len(must), len(agents) + 1):
                for sub in itertools.combinations(agents, n):
                    s = frozenset(sub)
                    if must and not must <= s:
                        continue
                    if bar is not None and ctx.upper_bound(s) < bar:
                        continue
                    best = ctx.better(best, ctx.greedypack(s))
            return best
        return self.hierarchical(ctx, agents)

    def hierarchical(self, ctx: _Context, agents: list[str]) -> Choice | None:
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
    """Everything GREEDYPACK needs for one decision, computed once.

    Per-decision cost is what bounds decision time, so everything that survives between
    events is cached on the policy (:meth:`Topas._task_info`, :meth:`Topas._move_costs`) and
    only O(running + waiting) cheap lookups remain here.
    """

    def __init__(self, pol: Topas, snap: Snapshot) -> None:
        self.pol = pol
        self.snap = snap
        cost = snap.cost
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
        self.free0 = (snap.free_kv_tokens - sum(reserve(r) for r in running)
                      - pol._committed_tokens)
        self.resident0 = frozenset(a for a, p in prefixes.items()
                                   if p.location == Location.DEVICE)
        self.running_by_agent: dict[str, list[RequestState]] = {}
        for r in running:
            self.running_by_agent.setdefault(r.agent, []).append(r)
        # a prefix being swapped in or recomputed, or one a held context continues (users
        # beyond its running requests), cannot be evicted this decision
        self.pinned = frozenset(a for a in self.resident0
                                if prefixes[a].transfer in ("in", "compute")
                                or prefixes[a].users > len(self.running_by_agent.get(a, ()))
                                or a in pol._committed_agents)
        waiting_agents = {r.agent for r in snap.waiting}
        self.active = set(self.resident0) | set(self.running_by_agent) | waiting_agents
        self.defer_s = pol.deferral_s(snap, out_mean)
        # H_age feeds only log aging and revoke_value="current" (rank aging never reads it)
        h_age = (pol.h_age(snap) if (pol.aging and pol.rho != 0 and pol.age_form == "log")
                 or (pol.use_revoke and pol.revoke_value == "current") else 1.0)
        # J_redo and the KV a preemption gives back, per running request
        self.redo: dict[int, float] = {}
        self.release: dict[int, int] = {}
        # with no preemption allowed (max_preempt=0) no state that preempts is ever scored:
        # greedypack and upper_bound reject it before reading these, so skip the O(running)
        # cost-model calls
        can_preempt = pol.max_preempt > 0
        if running and can_preempt:
            ctx_tok = 0
            for r in running:
                ctx_tok += r.prefix_tokens + r.prompt_tokens + r.generated_tokens
            t_dec = cost.decode_step_time(len(running), ctx_tok)
            vllm = snap.config.preemption == "vllm"
            engine_redo = pol.redo_cost == "engine"
            for r in running:
                if vllm:
                    n = r.prompt_tokens + r.generated_tokens
                    self.redo[r.request_id] = cost.prefill_time(n, r.prefix_tokens) if n else 0.0
                else:
                    redo = t_dec * r.generated_tokens
                    if engine_redo and r.prefilled_tokens:
                        # SGLang-style re-run: the prompt is prefilled again too
                        redo += cost.prefill_time(r.prefilled_tokens, r.prefix_tokens)
                    self.redo[r.request_id] = redo
                self.release[r.request_id] = r.kv_tokens + reserve(r)
        # J_revoke per running request: the recorded credit, or (revoke_value="current") at
        # least the aged gain the request would have if it were waiting now, g_i(t) * D_t
        self.revoke: dict[int, float] = {}
        if running and pol.use_revoke and can_preempt:
            cur = pol.revoke_value == "current"
            for r in running:
                v = r.credit_s
                if cur:
                    ts = snap.tasks.get(r.task_id)
                    w = pol.age_weight(snap, ts.arrival_s, h_age) if ts is not None else 1.0
                    v = max(v, w * self.defer_s)
                self.revoke[r.request_id] = v
        # prefix move costs (s)
        self.c_in, self.c_out = pol._move_costs(snap, self.active)
        # V_reuse weight per agent: beta * n_a * mu * l_a / B_swap
        self.reuse: dict[str, float] = {}
        if pol.reuse and pol.beta > 0:
            for a, n in pol.lookahead_agents(snap).items():
                if a in prefixes:
                    self.reuse[a] = pol.beta * n * cost.swap_time(prefixes[a].tokens)
        # candidates with unconditional aged gains
        self.entries = {}
        self.weights: dict[int, float] = {}
        cands: list[_Cand] = []
        self.by_task: dict[int, list[_Cand]] = {}
        held = snap.held
        now = snap.time_s
        tasks = snap.tasks
        weights, entries, by_task = self.weights, self.entries, self.by_task
        gen = None
        floor = pol.min_gain_s
        task_info = pol._task_info

        def build(ts):
            # the task's Monte Carlo entry for its current version (generated tokens of the
            # running requests collected once per decision, when first needed)
            nonlocal gen
            if gen is None:
                gen = {(q.task_id, q.stage): q.generated_tokens for q in running}
            return pol._build_task_info(snap, ts, gen)

        aged = pol.aging and pol.rho != 0
        rank: dict[int, int] | None = None
        if aged and pol.age_form == "rank":
            # strict-ish task priority: a task's weight grows with the number of unfinished
            # tasks that arrived after it (g_i = 1 + rho * younger_i)
            # memoised by the set of unfinished tasks (in the snapshot's order)
            by_size = pol.rank_key != "arrival" and pol.size_key_on()
            if by_size:
                # the keys of tasks whose state changed are estimated first (a task never
                # estimated ranks last)
                for r in snap.waiting:
                    ts = tasks[r.task_id]
                    info = task_info.get(r.task_id)
                    if info is None or info[0] != ts.version:
                        build(ts)
                keys = pol._rank_keys
                inf = math.inf
                ids = (tuple(tasks), tuple(keys.get(t, inf) for t in tasks))
            else:
                ids = (tuple(tasks), ())
            late_before = -math.inf
            if pol.tail_q > 0:
                # tasks that arrived before now - tail age rank first, oldest first
                late_before = now - pol.tail_age_s(snap)
                ids = (*ids, sum(1 for t in tasks.values() if t.arrival_s < late_before))
            if pol._rank[0] != ids:
                if not by_size:
                    order = sorted(tasks.values(), key=lambda t: (t.arrival_s, t.task_id))
                elif late_before > -math.inf:
                    order = sorted(tasks.values(), key=lambda t: (
                        (0, t.arrival_s, t.task_id) if t.arrival_s < late_before else
                        (1, keys.get(t.task_id, inf), t.arrival_s, t.task_id)))
                else:
                    order = sorted(tasks.values(), key=lambda t: (
                        keys.get(t.task_id, inf), t.arrival_s, t.task_id))
                n_t = len(order)
                pol._rank = (ids, {t.task_id: n_t - 1 - k for k, t in enumerate(order)})
            rank = pol._rank[1]
        for r in snap.waiting:
            tid = r.task_id
            info = task_info.get(tid)
            ts = tasks[tid]
            if info is None or info[0] != ts.version:
                info = build(ts)
            e = info[1]
            w = weights.get(tid)
            if w is None:
                entries[tid] = e
                # g_i(t) (see Topas.age_weight)
                if rank is not None:
                    w = weights[tid] = 1.0 + pol.rho * rank[tid]
                else:
                    w = weights[tid] = (1.0 + pol.rho * math.log1p(
                        max(0.0, now - ts.arrival_s) / h_age)) if aged else 1.0
            if info[2]:
                # the only ready stage, nothing running: deferring shifts every path by D_t
                delta, l_now = self.defer_s, info[3]
            else:
                delta, l_now = self.delta(e, r.stage, ())
            gen_t = r.generated_tokens
            tokens = r.prompt_tokens + gen_t
            tokens = round_up_to_blocks(tokens, step)
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
            c = _Cand(r, tokens + (rsv if rsv > step else step), floor if floor > g else g,
                      l_now, w)
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
        self._memo: dict[tuple, Choice | None] = {}

    def head_of_line(self, cands: list[_Cand],
                     out_mean: Callable[[str], float] | None = None) -> list[_Cand]:
        """The candidates before the first one that cannot fit even if every earlier one is
        admitted and every idle prefix is evicted (``hol_block``): memory that frees up then
        goes to that request, not to requests it outranks (head-of-line blocking, as FCFS,
        Parrot and SPF admit).  With ``out_mean`` (``backfill``), later candidates that do
        not delay the blocked one follow them (:meth:`backfill`)."""
        snap = self.snap
        prefixes = snap.prefixes
        free = self.free0
        evictable = {a: prefixes[a].tokens for a in self.resident0
                     if a not in self.pinned and a not in self.running_by_agent}
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
                return cands[:i] + self.backfill(need, cands[i + 1:], free, resident,
                                                 evictable, batch, out_mean)
            resident.add(c.agent)
            free -= need
            batch += 1
        return cands

    def backfill(self, head_need: int, rest: list[_Cand], free: int, resident: set[str],
                 evictable: dict[str, int], batch: int, out_mean: Callable[[str], float]
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
        step, lefts = running_left_s(snap, out_mean)
        # a finished request gives back its KV and the output headroom kept for it (free
        # excludes both)
        fin = sorted(zip(lefts, (r.kv_tokens + self.reserve(r) for r in snap.running)))
        shadow, avail = None, free
        for t, tok in fin:
            avail += tok
            if avail >= head_need:
                shadow = t
                break
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
                out_mean(c.agent) * step)
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

    def joint_share(self, e, n_ready: int) -> float:
        """``(L_i(none started) - L_i(all ready started)) / n``: a task's gain from starting all
        of its ``n`` ready stages now, shared equally (seconds)."""
        now = self.snap.time_s
        l_none = e.expected_lp(now, list(e.ready), self.defer_s)
        l_all = e.expected_lp(now)
        return max(0.0, l_none - l_all) / max(1, n_ready)

    def cond_gain(self, c: _Cand, admitted: tuple[str, ...]) -> float:
        """Aged gain of ``c`` given the stages of its task admitted before it in this decision
        (``g_i * Delta(r | H_i)``, floored at ``min_gain_s``; see ``_Context.__init__``)."""
        if not admitted:
            return c.gain
        d, _ = self.delta(self.entries[c.task_id], c.stage, admitted)
        return max(c.age_w * d, self.pol.min_gain_s)

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
        # agents that are resident or running fix preemptions, evictions and the free budget;
        # any other agent matters only if one of its candidates can fit, so prefix sets that
        # differ only by agents that cannot admit anything give the same state (memoised)
        core = allowed & self.fixed
        hit = self._memo.get((core, None))
        if hit is None:
            preempt = [r.request_id for a, rs in self.running_by_agent.items()
                       if a not in allowed for r in rs]
            if len(preempt) > pol.max_preempt:
                self._memo[(core, None)] = (None,)
                return None
            free = self.free0
            for rid in preempt:
                free += self.release[rid]
            evict = [a for a in self.resident0 if a not in allowed]
            for a in evict:
                free += snap.prefixes[a].tokens
            hit = self._memo[(core, None)] = (preempt, evict, free)
        if hit[0] is None:
            return None
        preempt, evict, free0 = hit
        min_need = self.min_need
        prefixes = snap.prefixes
        useful = frozenset(a for a in allowed if a in min_need and min_need[a] + (
            0 if a in core else prefixes[a].tokens) <= free0)
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
        pre = [r.request_id for a, rs in self.running_by_agent.items()
               if a not in allowed for r in rs]
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
            del gains[pol.K:]
        return sum(gains) + sum(self.reuse.get(a, 0.0) for a in allowed) - lost

    def _pack(self, allowed: frozenset[str], core: frozenset[str], preempt: list[int],
              evict: list[str], free: int) -> Choice:
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
                    order = sorted((x for x in cands if x.req.request_id not in done),
                                   key=lambda x: (-gains.get(x.req.request_id, x.gain),
                                                  x.l_i, x.req.seq))
                    i = 0
            elif new_prefix:
                i = 0  # requests of this agent skipped before may fit now
                order = [x for x in order if x.req.request_id not in done]
        return self._score(admitted, preempt, evict, resident, j_admit, credit, done)

    def _score(self, admitted: list[int], preempt: list[int], evict: list[str],
               resident: set[str], j_admit: float, credit: list[tuple[int, float]],
               done: set[int]) -> Choice:
        """The Score terms (seconds) of a packed state."""
        pol = self.pol
        r_in = resident - self.resident0
        t_in = {c.task_id for c in self.cands if c.agent in r_in and c.req.request_id in done}
        j_move = 0.0
        if pol.use_move and r_in:
            moved = sum(self.c_in[a] for a in r_in) + sum(self.c_out[a] for a in evict)
            j_move = moved * len(t_in)
        j_redo = sum(self.redo[r] for r in preempt) if pol.use_redo else 0.0
        j_revoke = 0.0
        if pol.use_revoke and preempt:
            j_revoke = sum(self.revoke[r] for r in preempt)
        v_reuse = sum(self.reuse.get(a, 0.0) for a in resident)
        score = j_admit - j_move - j_redo - j_revoke + v_reuse
        return Choice(score, tuple(admitted), tuple(preempt), tuple(sorted(evict)),
                      tuple(credit), frozenset(resident),
                      (j_admit, j_move, j_redo, j_revoke, v_reuse))


class TopasOracle(Topas):
    """TOPAS with the true residual service of every stage (clairvoyant; for reports)."""

    def bind_oracle(self, fn: Callable) -> None:
        self.mc = MonteCarloLP(TrueResidual(fn), n_samples=1, seed=self.seed)


@register("topas-paper", "TOPAS as the paper specifies it: Score = aged task-progress gain - "
          "prefix moves - redo - revoke + one-hop reuse, GREEDYPACK + prefix-set search",
          source="TOPAS (arXiv 2608.25523)")
def _topas_paper(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, **params)


_topas_paper.PARAMS = Topas.PARAMS


@register("topas-base", "TOPAS without the reuse term and without aging (paper's TOPAS-base)",
          source="TOPAS ablation")
def _topas_base(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, reuse=False, aging=False, name="topas-base", **params)


_topas_base.PARAMS = without(Topas.PARAMS, "reuse", "aging")


@register("topas-noreuse", "TOPAS without V_reuse", source="TOPAS ablation")
def _topas_noreuse(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, reuse=False, name="topas-noreuse", **params)


_topas_noreuse.PARAMS = without(Topas.PARAMS, "reuse")


@register("topas-noaging", "TOPAS without aging (g_i = 1)", source="TOPAS ablation")
def _topas_noaging(seed: int = 0, **params) -> Topas:
    return Topas(seed=seed, aging=False, name="topas-noaging", **params)


_topas_noaging.PARAMS = without(Topas.PARAMS, "aging")


@register("topas-oracle", "TOPAS with the true residual service times instead of estimates "
          "(clairvoyant upper reference)", source="TOPAS, oracle residuals")
def _topas_oracle(seed: int = 0, **params) -> Topas:
    return TopasOracle(seed=seed, name="topas-oracle", **params)


_topas_oracle.PARAMS = Topas.PARAMS
