"""Expected longest remaining path ``L_i = E[LP(G_i, Z_i)]`` by Monte Carlo.

The expectation is *outside* the longest-path operator: for each of ``S`` sample rows the
finish time of every unfinished stage is computed in reverse-dependency (topological) order,
``f_v = max(o_v, max_{u in deps(v)} f_u) + Z_v`` (``o_v`` a start offset, 0 unless the stage
is deferred), and ``L = mean_s max_v f_v``.  So the critical path may differ between rows and
``E[max] >= max E``.

Common random numbers: each task gets one fixed ``S x |V|`` matrix of uniforms ``U`` for its
whole life, from a generator seeded by ``(seed, task_id)``; a stage's samples are the inverse
empirical CDF of its current residual distribution at ``U[:, v]``.  The residual matrix is
rebuilt only when the task's ``version`` changes (anything in its DAG status changed);
between versions, the residuals of stages that were running are aged by the time elapsed
since they were built (``max(Z - dt, 0)``), which keeps them current without resampling.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import cast

import numpy as np

from topas.engine.snapshot import Snapshot, StageStatus, TaskState
from topas.estimators.copula import TaskFactor
from topas.estimators.residual import EmpiricalResidual, ResidualModel

#: default number of Monte Carlo rows per task
DEFAULT_SAMPLES = 64


class TaskMC:
    """Residual sample matrix of one task version, and ``E[LP]`` under start offsets.

    ``names`` -- unfinished stages in topological order; ``deps[v]`` -- indices (into
    ``names``) of the unfinished dependencies of ``v``; ``ready`` -- indices of stages whose
    next call waits for admission (the only ones a decision can start or defer);
    ``running`` -- indices of stages in progress (admitted or in a tool call).
    """

    __slots__ = (
        "task_id",
        "version",
        "names",
        "index",
        "deps",
        "ready",
        "running",
        "z",
        "built_s",
        "_memo",
        "_memo_key",
    )

    def __init__(
        self,
        task_id: int,
        version: int,
        names: list[str],
        deps: list[tuple[int, ...]],
        ready: tuple[int, ...],
        running: tuple[int, ...],
        z: np.ndarray,
        built_s: float,
        index: dict[str, int] | None = None,
    ) -> None:
        self.task_id = task_id
        self.version = version
        self.names = names
        #: stage name -> its position in ``names`` (``index`` when the caller has it)
        self.index = index if index is not None else {n: k for k, n in enumerate(names)}
        self.deps = deps
        self.ready = ready
        self.running = running
        self.z = z  #: (S, V) residual samples, seconds
        self.built_s = built_s
        self._memo: dict[tuple[object, ...], float] = {}
        self._memo_key = -1.0

    def _z_at(self, now_s: float) -> np.ndarray:
        dt = now_s - self.built_s
        if dt <= 0 or not self.running:
            return self.z
        z = self.z.copy()
        cols = list(self.running)
        z[:, cols] = np.maximum(z[:, cols] - dt, 0.0)
        return z

    def expected_lp(
        self, now_s: float, deferred: Iterable[int] = (), defer_s: float = 0.0
    ) -> float:
        """``E[LP]`` (seconds from now) when stages ``deferred`` start after ``defer_s``."""
        dkey = tuple(sorted(deferred)) if defer_s > 0 else ()
        # without running stages the samples do not age, so results stay valid across events
        if self.running and self._memo_key != now_s:
            self._memo = {}
            self._memo_key = now_s
        key = (dkey, defer_s)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        z = self._z_at(now_s)
        val = longest_path_mean(z, self.deps, {v: defer_s for v in dkey})
        self._memo[key] = val
        return val


def longest_path_mean(
    z: np.ndarray, deps: list[tuple[int, ...]], offsets: Mapping[int, float] | None = None
) -> float:
    """``mean_s max_v f_v`` with ``f_v = max(o_v, max_{u in deps[v]} f_u) + z[s, v]``.

    ``z`` is ``(S, V)`` with columns in a topological order of ``deps``.
    """
    n_s, n_v = z.shape
    if n_v == 0:
        return 0.0
    if not offsets:
        if all(not d for d in deps):
            return _mean_row_max(z)
        if not deps[0] and all(d == (v,) for v, d in enumerate(deps[1:])):
            # a chain (each stage waits on the one before): f_v = f_{v-1} + z_v is a running
            # sum, which np.add.accumulate adds left to right exactly as the loop below
            # does; the loop's first column is z_0 + 0.0, hence the + 0.0 (it only turns
            # -0.0 into 0.0, and a running sum from there never meets -0.0 again): the
            # same bits in two numpy calls instead of one or two per stage
            return _mean_row_max(np.add.accumulate(z + 0.0, axis=1))
    offsets = offsets or {}
    finish = np.empty_like(z)
    for v in range(n_v):
        d = deps[v]
        o = offsets.get(v, 0.0)
        if not d:
            np.add(z[:, v], o, out=finish[:, v])
            continue
        s = finish[:, d[0]]
        if len(d) > 1:
            s = finish[:, d].max(axis=1)
        if o > 0:
            s = np.maximum(s, o)
        np.add(s, z[:, v], out=finish[:, v])
    return _mean_row_max(finish)


def _mean_row_max(f: np.ndarray) -> float:
    """``float(f.max(axis=1).mean())`` of an ``(S, V)`` array, with the same bits
    (``ndarray.mean`` is the same pairwise ``np.add.reduce`` divided by the count) but
    without ``mean``'s Python-level wrapper (this runs at every task version)."""
    return float(np.add.reduce(np.maximum.reduce(f, axis=1)) / f.shape[0])


class MonteCarloLP:
    """Per-task Monte Carlo cache keyed by ``(task_id, TaskState.version)``.

    ``residual`` -- the :class:`ResidualModel`; ``n_samples`` -- rows ``S``; ``seed`` -- the
    run's seed (each task's uniforms come from ``(seed, task_id)``).
    """

    def __init__(
        self,
        residual: ResidualModel | None = None,
        n_samples: int = DEFAULT_SAMPLES,
        seed: int = 0,
        correlated: bool = False,
    ) -> None:
        if n_samples < 1:
            raise ValueError(f"n_samples {n_samples}: must be >= 1")
        self.residual = residual if residual is not None else EmpiricalResidual()
        #: ``correlated``: stages of a task are read at correlated quantiles learned online
        #: (:class:`topas.estimators.copula.TaskFactor`, review H1); needs a residual model
        #: with a ``pool`` (EmpiricalResidual)
        self.copula: TaskFactor | None = None
        if correlated:
            if not hasattr(self.residual, "pool"):
                raise ValueError(
                    "MonteCarloLP: correlated=True needs a residual model with "
                    f"pools (EmpiricalResidual), got {type(self.residual).__name__}"
                )
            self.copula = TaskFactor(seed=seed, n_samples=n_samples)
        self.n_samples = n_samples
        self.seed = seed
        self._entries: dict[int, TaskMC] = {}
        self._uniforms: dict[int, np.ndarray] = {}
        self._run_ref: object = -1

    def _u(self, task: TaskState) -> np.ndarray:
        u = self._uniforms.get(task.task_id)
        if u is None:
            rng = np.random.default_rng([self.seed, task.task_id])
            u = rng.random((self.n_samples, len(task.stages)))
            self._uniforms[task.task_id] = u
        return u

    def forget_finished(self, active: Mapping[int, object]) -> None:
        """Drop cache entries of tasks no longer in ``active`` (bounded memory)."""
        for tid in [t for t in self._entries if t not in active]:
            del self._entries[tid]
            self._uniforms.pop(tid, None)
            if self.copula is not None:
                self.copula.forget(tid)

    def entry(
        self,
        snap: Snapshot,
        task: TaskState,
        generated: Mapping[tuple[int, str], int] | None = None,
    ) -> TaskMC:
        """The task's sample matrix for its current version (built on a miss).

        ``generated`` maps ``(task_id, stage)`` of running calls to tokens generated so far
        (a conditioning input); when omitted it is read from ``snap.running``.
        """
        # a new run: nothing cached is valid (identity, not id(): ids are reused after GC)
        if snap.run_key is not self._run_ref:
            self._entries.clear()
            self._uniforms.clear()
            if self.copula is not None:
                self.copula.reset()
            self._run_ref = snap.run_key
        e = self._entries.get(task.task_id)
        if e is not None and e.version == task.version:
            return e
        if generated is None:
            generated = {
                (r.task_id, r.stage): r.generated_tokens
                for r in snap.running
                if r.task_id == task.task_id
            }
        u = self._u(task)
        if self.copula is not None:
            # checked in __init__: a correlated estimator's residual model has pools
            u = self.copula.uniforms(snap, task, u, cast(EmpiricalResidual, self.residual).pool)
        names: list[str] = []
        vals_list: list[np.ndarray] = []  #: per unfinished stage, its residual values
        u_cols: list[int] = []  #: per unfinished stage, its column of ``u``
        sizes: list[int] = []
        ready: list[int] = []
        running: list[int] = []
        tid = task.task_id
        stages = task.stages
        stage_residuals = self.residual.stage_residuals
        for c, name in enumerate(task.order):
            st = stages[name]
            status = st.status
            if status == StageStatus.DONE:
                continue
            vals = stage_residuals(snap, task, st, generated.get((tid, name), 0))
            k = len(names)
            names.append(name)
            vals_list.append(vals)
            u_cols.append(c)
            sizes.append(len(vals))
            if status == StageStatus.READY:
                ready.append(k)
            elif status == StageStatus.RUNNING or status == StageStatus.TOOL:
                running.append(k)
        if e is not None and e.names == names:
            # the same unfinished stages as the previous version: the same dependencies
            index, deps = e.index, e.deps
        else:
            index = {n: k for k, n in enumerate(names)}
            deps = [tuple(index[d] for d in stages[n].deps if d in index) for n in names]
        e = TaskMC(
            tid,
            task.version,
            names,
            deps,
            tuple(ready),
            tuple(running),
            self._samples(u, vals_list, u_cols, sizes),
            snap.time_s,
            index,
        )
        self._entries[tid] = e
        return e

    def _samples(
        self, u: np.ndarray, vals: list[np.ndarray], u_cols: list[int], sizes: list[int]
    ) -> np.ndarray:
        """The ``(S, V)`` residual matrix: column ``k`` is ``vals[k]`` (``sizes[k]`` equally
        likely values) read by inverse CDF at the uniforms ``u[:, u_cols[k]]``, i.e. row ``s``
        holds ``vals[k][floor(u[s, u_cols[k]] * sizes[k])]``.  One gather from the
        concatenated values for every column at once (each column's indices shifted by the
        offset of its values): a few numpy calls per task version instead of a few per stage,
        and the same floats (the same products, truncated the same way)."""
        n = len(vals)
        if n == 0:
            return np.empty((self.n_samples, 0))
        lo = u_cols[0]
        # the unfinished stages are usually a run of the topological order (a chain's are
        # its suffix): a slice, not a fancy-indexed copy
        picked = u[:, lo : lo + n] if u_cols[-1] - lo == n - 1 else u[:, u_cols]
        idx = (picked * np.array(sizes, dtype=float)).astype(np.int64)
        if n == 1:
            out: np.ndarray = vals[0][idx]
        else:
            idx += np.array([0, *itertools.accumulate(sizes[:-1])])
            out = np.concatenate(vals)[idx]
        return out

    def expected_remaining_s(self, snap: Snapshot, task: TaskState) -> float:
        """``L_i``: expected longest remaining path (s) if every ready stage started now."""
        return self.entry(snap, task).expected_lp(snap.time_s)


_DEFAULT = MonteCarloLP()


def expected_remaining_s(snapshot: Snapshot, task_state: TaskState) -> float:
    """Expected longest remaining path ``L_i = E[LP(G_i, Z_i)]`` of a task, in seconds from
    ``snapshot.time_s``, assuming its ready stages start now.

    Uses the default :class:`EmpiricalResidual` (history pooled per (agent, stage kind), a
    cost-model prior until enough history exists) and ``DEFAULT_SAMPLES`` Monte Carlo rows
    with common random numbers, cached per ``(task_id, version)``.
    """
    return _DEFAULT.expected_remaining_s(snapshot, task_state)
