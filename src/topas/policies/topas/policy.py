"""The TOPAS policy: its parameters, the decision, and the paper's variants (``topas-paper``,
``topas-base``, ``topas-noreuse``, ``topas-noaging``, ``topas-oracle``).

A decision builds the per-event :class:`~topas.policies.topas.context.Context` (the
candidates and the inputs of the Score's terms, :mod:`.terms` and :mod:`.aging`), searches
the post-decision states (:mod:`.search`) and commits the arg-max.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from topas.engine.decision import Decision
from topas.engine.snapshot import Snapshot
from topas.estimators import EmpiricalResidual, MonteCarloLP, TrueResidual
from topas.policies import register
from topas.policies.base import AdmissionPlan
from topas.policies.params import Param, without
from topas.policies.parrot import task_fcfs_key
from topas.policies.topas.aging import Aging
from topas.policies.topas.context import Context
from topas.policies.topas.parameters import DEFAULTS, PARAMS
from topas.policies.topas.search import Choice, exhaustive
from topas.policies.topas.search import hierarchical as local_search
from topas.policies.topas.terms import Terms
from topas.workflow.model import Task


class Topas(Aging, Terms):
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

    #: declared parameters (topas.policies.topas.parameters)
    PARAMS: tuple[Param, ...] = PARAMS

    def __init__(
        self,
        seed: int = 0,
        M: int = DEFAULTS["M"],
        K: int = DEFAULTS["K"],
        beta: float = DEFAULTS["beta"],
        rho: float = DEFAULTS["rho"],
        H_age: float | None = DEFAULTS["H_age"],
        n_samples: int = 64,
        reserve_ratio: float = 0.5,
        reuse: bool = True,
        aging: bool = True,
        move: bool = True,
        redo: bool = True,
        revoke: bool = True,
        min_gain_s: float = DEFAULTS["min_gain_s"],
        joint_gain: bool = DEFAULTS["joint_gain"],
        redo_cost: str = "engine",
        revoke_value: str = "credit",
        max_preempt: int | None = None,
        age_form: str = "log",
        hol_block: bool = False,
        group_agents: str = "none",
        rank_key: str = "arrival",
        size_weight: float = 1.0,
        backfill: bool = False,
        held_shadow: bool = False,
        tail_q: float = 0.0,
        room_moves: bool = False,
        residual: str = "independent",
        size_gate: float = 0.0,
        size_cv: float = 0.0,
        size_corr: float = 0.0,
        name: str = "topas-paper",
    ) -> None:
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
            raise ValueError(f"topas: revoke_value={revoke_value!r} must be 'credit' or 'current'")
        if max_preempt is not None and max_preempt < 0:
            raise ValueError(f"topas: max_preempt={max_preempt} must be >= 0 or None (= K)")
        if age_form not in ("log", "rank"):
            raise ValueError(f"topas: age_form={age_form!r} must be 'log' or 'rank'")
        self.max_preempt = K if max_preempt is None else max_preempt
        self.hol_block = bool(hol_block)
        self.backfill = bool(backfill)
        self.held_shadow = bool(held_shadow)
        if group_agents not in ("none", "best", "density"):
            raise ValueError(
                f"topas: group_agents={group_agents!r} must be 'none', 'best' or 'density'"
            )
        self.group_agents = group_agents
        self.age_form = age_form
        if rank_key not in ("arrival", "finish", "remaining"):
            raise ValueError(
                f"topas: rank_key={rank_key!r} must be 'arrival', 'finish' or 'remaining'"
            )
        if not size_weight >= 0:
            raise ValueError(f"topas: size_weight={size_weight} must be >= 0")
        self.rank_key, self.size_weight = rank_key, size_weight
        if not 0 <= tail_q < 1:
            raise ValueError(f"topas: tail_q={tail_q} must be in [0, 1)")
        self.tail_q = tail_q
        self.room_moves = bool(room_moves)
        #: tail_q > 0: arrival time of every unfinished task seen (also sorted), and the sorted
        #: JCTs (s) of the tasks seen to finish (a task finishes when it leaves ``snap.tasks``)
        self._live_arrivals = {}
        self._live_sorted = []
        self._done_jcts = []
        #: held_shadow: (agent, stage kind) -> (record count, recent multi-round stages)
        self._multi_round = {}
        #: rank_key != "arrival": task id -> its rank key (s), set when its E[LP] is estimated
        self._rank_keys = {}
        #: KV tokens and prefixes a subclass has already committed in this decision (holds
        #: decided before admission); the search packs into what is left
        self._committed_tokens = 0
        self._committed_agents = frozenset()
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
            raise ValueError(f"topas: residual={residual!r} must be 'independent' or 'correlated'")
        self.residual = residual
        if not 0 <= size_gate <= 1 or (size_gate > 0 and residual != "correlated"):
            raise ValueError(
                f"topas: size_gate={size_gate} must be in [0, 1] and needs residual='correlated'"
            )
        self.size_gate = size_gate
        if not 0 <= size_cv < float("inf"):
            raise ValueError(f"topas: size_cv={size_cv} must be a finite number >= 0")
        self.size_cv = size_cv
        if not 0 <= size_corr <= 1:
            raise ValueError(f"topas: size_corr={size_corr} must be in [0, 1]")
        self.size_corr = size_corr
        #: size_corr: per unfinished task (first-sight time (s), first-sight E[LP] (s)); the
        #: finished tasks' (E[LP], time to finish) pairs, the last 200; their rank correlation
        self._first_seen = {}
        self._pred_pairs = []
        self._pred_corr = -1.0
        #: size_cv: (count, sum, sum of squares) of the run's tasks' first-sight E[LP] (s)
        self._first_lp = (0, 0.0, 0.0)
        self.mc = MonteCarloLP(
            EmpiricalResidual(), n_samples=n_samples, seed=seed, correlated=residual == "correlated"
        )
        self._lookahead = {}
        self._la_counts = {}  #: n_a(t) summed over ``_lookahead``
        self._la_versions = {}
        self._median = (-1, 0.0)
        #: per task: its Monte Carlo entry for its current version (terms.TaskInfo)
        self._task_info = {}
        #: per agent: its prefix move costs c_in, c_out (s) for its prefix state
        self._moves = {}
        self._run_id = -1
        #: (unfinished task ids, task id -> number of younger unfinished tasks) for rank aging
        self._rank = ((), {})
        self.last: Choice | None = None  #: the committed choice (for tests and traces)

    # ------------------------------------------------------------------ caches between events
    def _new_run_check(self, snap: Snapshot) -> None:
        """Drop every cache when a new run starts (a new ``snap.run_key``) and forget tasks
        that finished (bounded memory)."""
        if snap.run_key is not self._run_id:  # identity: ids are reused after GC
            self._run_id = snap.run_key
            self._task_info.clear()
            self._moves.clear()
            self._lookahead.clear()
            self._la_counts.clear()
            self._la_versions = {}
            self._median = (-1, 0.0)
            self._rank = ((), {})
            self._rank_keys.clear()
            self._first_lp = (0, 0.0, 0.0)
            self._first_seen.clear()
            self._pred_pairs.clear()
            self._pred_corr = -1.0
            self._live_arrivals.clear()
            self._live_sorted.clear()
            self._done_jcts.clear()
            self._multi_round.clear()
        if len(self._task_info) > 2 * len(snap.tasks) + 64:
            for tid in [t for t in self._task_info if t not in snap.tasks]:
                del self._task_info[tid]
                self._rank_keys.pop(tid, None)
            self.mc.forget_finished(snap.tasks)

    # ------------------------------------------------------------------ the decision
    def decide(self, snap: Snapshot) -> Decision:
        self.last = None
        if not snap.waiting:
            return Decision()
        ctx = Context(self, snap)
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
        return Decision(
            admit=best.admit, preempt=best.preempt, evict=best.evict, credit=dict(best.credit)
        )

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

    def search(self, ctx: Context) -> Choice | None:
        """The arg-max state: every prefix subset of the active agents when at most ``M``
        compete, else the hierarchical local search."""
        agents = sorted(ctx.active)
        if len(agents) <= self.M:
            return exhaustive(ctx, agents, self.max_preempt)
        return self.hierarchical(ctx, agents)

    def hierarchical(self, ctx: Context, agents: list[str]) -> Choice | None:
        """Local search from ``R_t`` (:func:`topas.policies.topas.search.hierarchical`)."""
        return local_search(ctx, agents, self.room_moves)


class TopasOracle(Topas):
    """TOPAS with the true residual service of every stage (clairvoyant; for reports)."""

    def bind_oracle(self, fn: Callable[[int], Task]) -> None:
        self.mc = MonteCarloLP(TrueResidual(fn), n_samples=1, seed=self.seed)


@register(
    "topas-paper",
    "TOPAS as the paper specifies it: Score = aged task-progress gain - "
    "prefix moves - redo - revoke + one-hop reuse, GREEDYPACK + prefix-set search",
    source="TOPAS (arXiv 2608.25523)",
    params=Topas.PARAMS,
)
def _topas_paper(seed: int = 0, **params: Any) -> Topas:
    return Topas(seed=seed, **params)


@register(
    "topas-base",
    "TOPAS without the reuse term and without aging (paper's TOPAS-base)",
    source="TOPAS ablation",
    params=without(Topas.PARAMS, "reuse", "aging"),
)
def _topas_base(seed: int = 0, **params: Any) -> Topas:
    return Topas(seed=seed, reuse=False, aging=False, name="topas-base", **params)


@register(
    "topas-noreuse",
    "TOPAS without V_reuse",
    source="TOPAS ablation",
    params=without(Topas.PARAMS, "reuse"),
)
def _topas_noreuse(seed: int = 0, **params: Any) -> Topas:
    return Topas(seed=seed, reuse=False, name="topas-noreuse", **params)


@register(
    "topas-noaging",
    "TOPAS without aging (g_i = 1)",
    source="TOPAS ablation",
    params=without(Topas.PARAMS, "aging"),
)
def _topas_noaging(seed: int = 0, **params: Any) -> Topas:
    return Topas(seed=seed, aging=False, name="topas-noaging", **params)


@register(
    "topas-oracle",
    "TOPAS with the true residual service times instead of estimates (clairvoyant upper reference)",
    source="TOPAS, oracle residuals",
    params=Topas.PARAMS,
)
def _topas_oracle(seed: int = 0, **params: Any) -> Topas:
    return TopasOracle(seed=seed, name="topas-oracle", **params)
