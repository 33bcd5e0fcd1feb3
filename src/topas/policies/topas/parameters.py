"""TOPAS's parameters: their declarations (names, defaults, ranges, help) and the defaults
chosen by ``benchmarks/sweep_topas.py`` (docs/topas.md)."""

from __future__ import annotations

from typing import TypedDict

from topas.policies.params import (
    N_SAMPLES,
    RESERVE_RATIO,
    Param,
    choice,
    flag,
    integer,
    real,
)


class _Defaults(TypedDict):
    M: int
    K: int
    beta: float
    rho: float
    H_age: float | None
    min_gain_s: float
    joint_gain: bool


#: defaults chosen by benchmarks/sweep_topas.py (see docs/topas.md)
DEFAULTS: _Defaults = {
    "M": 6,
    "K": 2,
    "beta": 10.0,
    "rho": 0.25,
    "H_age": None,
    "min_gain_s": 1e-3,
    "joint_gain": True,
}


#: TOPAS's declared parameters (topas.policies.params), ``Topas.PARAMS``
PARAMS: tuple[Param, ...] = (
    integer(
        "M",
        DEFAULTS["M"],
        "enumerate every prefix subset when at most M agents compete (2^M Score evaluations)",
        hi=16,
    ),
    integer(
        "K", DEFAULTS["K"], "max admissions (and preemptions) per decision", lo=1, hi=1_000_000
    ),
    real("beta", DEFAULTS["beta"], "weight of the reuse term V_reuse", hi=1e6),
    real("rho", DEFAULTS["rho"], "aging strength", hi=1e6),
    real(
        "H_age",
        DEFAULTS["H_age"],
        "aging time scale (s); none: running median of stage service times",
        lo_open=True,
        hi=1e9,
        nullable=True,
    ),
    N_SAMPLES,
    RESERVE_RATIO,
    flag("reuse", True, "the V_reuse term (false: ablation)"),
    flag("aging", True, "aging g_i (false: g_i = 1)"),
    flag("move", True, "the J_move term (prefix move-in/out time)"),
    flag("redo", True, "the J_redo term (work a preemption redoes)"),
    flag("revoke", True, "the J_revoke term (gain a preemption takes back)"),
    real(
        "min_gain_s",
        DEFAULTS["min_gain_s"],
        "admit nothing whose gain is below this (s)",
        hi=3_600.0,
    ),
    flag("joint_gain", DEFAULTS["joint_gain"], "gain of requests of one task counted jointly"),
    choice(
        "redo_cost",
        "engine",
        ("engine", "decode"),
        "what J_redo charges: the work this engine redoes, or the paper's decode time only",
    ),
    choice(
        "revoke_value",
        "credit",
        ("credit", "current"),
        "a preemption revokes the credited gain, or the displaced request's current aged gain",
    ),
    integer(
        "max_preempt",
        None,
        "max preemptions per decision (none: K)",
        hi=1_000_000,
        nullable=True,
    ),
    choice(
        "age_form",
        "log",
        ("log", "rank"),
        "log: the paper's g_i; rank: 1 + rho * unfinished younger tasks",
    ),
    choice(
        "rank_key",
        "arrival",
        ("arrival", "finish", "remaining"),
        "what rank aging "
        "ranks tasks by: arrival time, or arrival + size_weight * E[LP] with E[LP] "
        "estimated when the task is first seen (finish) or at its latest state "
        "change (remaining; a large size_weight gives SRPT order)",
    ),
    real(
        "size_weight",
        1.0,
        "seconds of arrival one second of expected path is worth in "
        "the rank key (rank_key finish or remaining)",
        hi=1e6,
    ),
    real(
        "size_gate",
        0.0,
        "with a size rank key and residual=correlated: use the "
        "size key only while the learned within-task correlation a^2 is at least this "
        "(0: always)",
        hi=1.0,
    ),
    real(
        "size_cv",
        0.0,
        "with a size rank key: use the size key only while the "
        "coefficient of variation of this run's tasks' E[LP] when first seen (10 tasks "
        "or more) is at least this -- task sizes that differ visibly at arrival (0: "
        "always; with size_gate, either opens it)",
        hi=10.0,
    ),
    real(
        "size_corr",
        0.0,
        "with a size rank key: use the size key only while the "
        "rank correlation between this run's finished tasks' E[LP] when first seen and "
        "their time from then to finish (20 tasks or more, the last 200) is at least this "
        "-- size predictions that have proved right (0: always; with the other gates, "
        "any one opens it)",
        hi=1.0,
    ),
    real(
        "tail_q",
        0.0,
        "with rank aging: a task older than this quantile of the "
        "run's finished tasks' JCTs ranks ahead of every task that is not, oldest first "
        "(bounds overtaking by a size rank key; 0: off)",
        hi=0.999,
    ),
    flag(
        "room_moves",
        False,
        "the local search (more than M agents) also tries adding one agent while dropping "
        "every resident prefix the current state does not use (loading a large prefix may "
        "need several idle ones evicted)",
    ),
    flag("hol_block", False, "admit nothing past the first candidate that cannot fit"),
    flag(
        "backfill",
        False,
        "with hol_block: admit a later candidate past the blocked "
        "one when it is expected to finish before the blocked one could fit, or fits "
        "beside it then (EASY backfilling)",
    ),
    flag(
        "held_shadow",
        False,
        "with backfill: a running call of a multi-round stage returns only its output "
        "headroom at its finish when the shadow time is computed (its context stays held); "
        "if by that count nothing running frees enough, the full count is used",
    ),
    choice(
        "group_agents",
        "none",
        ("none", "best", "density"),
        "GREEDYPACK order: by "
        "gain, agent groups following candidates, or groups by gain per KV token",
    ),
    choice(
        "residual",
        "independent",
        ("independent", "correlated"),
        "E[LP]'s stage "
        "residuals: independent (the paper), or correlated within a task by a factor "
        "learned online (topas.estimators.copula, review H1)",
    ),
)
