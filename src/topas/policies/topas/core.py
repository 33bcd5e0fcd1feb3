"""The typed host class of TOPAS's parts.

:class:`~topas.policies.topas.policy.Topas` is assembled from mixins (:mod:`.aging`,
:mod:`.terms`) that read the policy's parameters and keep caches between events.  They all
subclass :class:`TopasCore`, which declares those attributes with their types (set in
``Topas.__init__``, reset by ``Topas._new_run_check``), so each mixin is checked on its own
and a newcomer finds every piece of the policy's state in one place.  Methods one mixin calls
on another are declared here only for the type checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topas.engine.snapshot import Snapshot
    from topas.estimators import MonteCarloLP
    from topas.policies.topas.search import Choice
    from topas.policies.topas.terms import TaskInfo, _MoveCost


class TopasCore:
    """The attributes every part of TOPAS reads (parameters: ``Topas``'s docstring)."""

    # -- parameters (paper symbols and the flagship's departures) ---------------------------
    name: str
    seed: int
    M: int
    K: int
    beta: float
    rho: float
    H_age: float | None
    reserve_ratio: float
    reuse: bool
    aging: bool
    use_move: bool
    use_redo: bool
    use_revoke: bool
    min_gain_s: float
    joint_gain: bool
    redo_cost: str
    revoke_value: str
    max_preempt: int
    age_form: str
    hol_block: bool
    backfill: bool
    held_shadow: bool
    group_agents: str
    rank_key: str
    size_weight: float
    tail_q: float
    room_moves: bool
    residual: str
    size_gate: float
    size_cv: float
    size_corr: float
    #: the E[LP] estimator (Monte Carlo over the stages' residual services)
    mc: MonteCarloLP

    # -- caches between events (cleared when a new run starts) ------------------------------
    _run_id: object  #: ``Snapshot.run_key`` of the run these caches belong to
    #: per task: its Monte Carlo entry for its current version
    _task_info: dict[int, TaskInfo]
    #: per agent: its prefix move costs c_in, c_out (s) for its prefix state
    _moves: dict[str, _MoveCost]
    #: per task: the agents of its next-hop stages, for V_reuse's look-ahead (at the version
    #: ``_la_versions`` holds for it)
    _lookahead: dict[int, tuple[str, ...]]
    _la_counts: dict[str, int]  #: n_a(t) summed over ``_lookahead``
    _la_versions: dict[int, int]  #: task id -> the version ``_lookahead`` holds for it
    _median: tuple[int, float]  #: (history length, running median service time (s))
    #: rank aging: (the key of the memo, task id -> number of unfinished tasks ranked after)
    _rank: tuple[tuple[object, ...], dict[int, int]]
    _rank_keys: dict[int, float]  #: size rank key (s) per task
    _first_lp: tuple[int, float, float]  #: (count, sum, sum of squares) of first-sight E[LP]
    #: size_corr: first sight (time, E[LP]) per unfinished task; the finished tasks'
    #: (E[LP], time to finish) pairs; their rank correlation (-1 until 20)
    _first_seen: dict[int, tuple[float, float]]
    _pred_pairs: list[tuple[float, float]]
    _pred_corr: float
    _live_arrivals: dict[int, float]  #: tail_q: arrival time of every unfinished task seen
    _live_sorted: list[float]  #: tail_q: the values of ``_live_arrivals``, sorted
    _done_jcts: list[float]  #: tail_q: sorted JCTs (s) of the tasks seen to finish
    #: held_shadow: (agent, stage kind) -> (its record count, whether any of its last 20
    #: records made several calls)
    _multi_round: dict[tuple[str, str], tuple[int, bool]]
    #: KV tokens and prefixes committed earlier in this decision (holds decided first)
    _committed_tokens: int
    _committed_agents: frozenset[str]
    last: Choice | None  #: the committed choice (for tests and traces)

    if TYPE_CHECKING:
        # defined by one mixin, called from another

        def age_weight(self, snap: Snapshot, arrival_s: float, h_age: float) -> float: ...
