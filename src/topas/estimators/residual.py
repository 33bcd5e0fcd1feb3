"""Residual-service distributions ``Z_{i,v}(t)`` of unfinished stages.

The paper draws the residual service of stage ``v`` of task ``i`` from ``F_{a(v),v}``, the
empirical distribution of completed executions of that agent and stage kind, conditioned on
what is known now.  Residuals of different stages are independent (as in the paper).  The
:class:`ResidualModel` protocol is the seam where a correlated or learned estimator can be
plugged in later: it turns a stage into a sorted vector of equally likely residual values
(seconds), which :mod:`topas.estimators.longest_path` maps onto a task's fixed uniform sample
matrix by inverse CDF (common random numbers).

:class:`EmpiricalResidual` (the default):

* **pool** -- the last ``window`` :class:`~topas.engine.snapshot.StageRecord` of
  ``(agent, kind)``: service time ``service_s`` (first admission to completion, seconds),
  rounds and output tokens.
* **prior** -- until ``min_history`` records exist, the pool is extended by prior points from
  the cost model: one call of ``prior_prompt_tokens`` dynamic prompt tokens after the agent
  prefix, with ``prior_output_tokens * q`` output tokens for ``q`` in ``PRIOR_QUANTILES``,
  each timed alone on the engine (``CostModel.call_time_alone``).  The spread mimics the
  heavy right tail of LLM output lengths.
* **conditioning** -- a stage that has started has spent ``e = t - started_s`` seconds, done
  ``k = rounds_done`` calls and generated ``y`` tokens.  Its residual is ``z - e`` over pool
  records with ``z > e``, ``rounds > k`` (when ``k > 0``) and ``output_tokens > y`` (when
  ``y > 0``); if no record is that long, the tokens and then the rounds conditions are
  relaxed; if still none, the stage is assumed to need one more mean call
  (``mean(z / rounds)``), the memoryless fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Protocol

import numpy as np

from topas.engine.cost import CostModel
from topas.engine.snapshot import Snapshot, StageState, StageStatus, TaskState
from topas.workflow.model import Task

#: a record's fields, read by C-level getters (a pool is rebuilt whenever its kind completes)
_SERVICE, _ROUNDS, _TOKENS = (attrgetter(f) for f in ("service_s", "rounds", "output_tokens"))

#: quantiles of the prior output-length spread, relative to ``prior_output_tokens``
PRIOR_QUANTILES = (0.25, 0.5, 1.0, 1.5, 2.75)


class ResidualModel(Protocol):
    """Residual service (seconds) of one unfinished stage, as equally likely values."""

    def stage_residuals(
        self, snap: Snapshot, task: TaskState, stage: StageState, generated_tokens: int
    ) -> np.ndarray:
        """Sorted (ascending) 1-D array of equally likely residual service times (s)."""
        ...


class EmpiricalResidual:
    """Empirical ``F_{a,v}`` per (agent, stage kind) with a cost-model prior.

    ``window`` -- most recent records used (keeps the estimator adaptive and O(1)).
    ``min_history`` -- records needed before the prior points are left out.
    ``prior_prompt_tokens`` / ``prior_output_tokens`` -- default call lengths (tokens) of
    the prior.
    """

    def __init__(
        self,
        window: int = 64,
        min_history: int = 5,
        prior_prompt_tokens: int = 512,
        prior_output_tokens: int = 256,
    ) -> None:
        if window < 1 or min_history < 0:
            raise ValueError(
                f"EmpiricalResidual: window {window} must be >= 1 and "
                f"min_history {min_history} >= 0"
            )
        self.window = window
        self.min_history = min_history
        self.prior_prompt_tokens = prior_prompt_tokens
        self.prior_output_tokens = prior_output_tokens
        # pools are rebuilt when the history of their key grows (history is append-only)
        #: (agent, kind) -> (history length, the history mapping it came from, pool arrays)
        self._pools: dict[
            tuple[str, str], tuple[int, object, np.ndarray, np.ndarray, np.ndarray]
        ] = {}
        self._prior: dict[str, tuple[CostModel, np.ndarray]] = {}
        #: (agent, kind) -> (pool service array, its sorted copy, the history mapping and its
        #: record count when last checked): the unconditioned residuals
        self._sorted: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, object, int | None]] = {}

    # -- pools ------------------------------------------------------------------------------
    def _prior_points(self, snap: Snapshot, agent: str) -> np.ndarray:
        hit = self._prior.get(agent)
        pts = hit[1] if hit is not None and hit[0] is snap.cost else None
        if pts is None:
            p = snap.prefixes.get(agent)
            prefix = p.tokens if p is not None else 0
            pts = np.array(
                [
                    snap.cost.call_time_alone(
                        self.prior_prompt_tokens,
                        max(1, int(self.prior_output_tokens * q)),
                        prefix,
                        snap.config.prefill_chunk_tokens,
                    )
                    for q in PRIOR_QUANTILES
                ]
            )
            self._prior[agent] = (snap.cost, pts)
        return pts

    def pool(
        self, snap: Snapshot, agent: str, kind: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(service_s, rounds, output_tokens) arrays of the pool of ``(agent, kind)``."""
        recs = snap.history.get((agent, kind), ())
        n = len(recs)
        key = (agent, kind)
        hit = self._pools.get(key)
        if hit is not None and hit[0] == n and hit[1] is snap.history:
            return hit[2], hit[3], hit[4]
        tail = recs[-self.window :] if n else ()
        z = list(map(_SERVICE, tail))
        rounds = list(map(_ROUNDS, tail))
        toks = list(map(_TOKENS, tail))
        if n < self.min_history:
            pts = self._prior_points(snap, agent)
            z.extend(pts.tolist())
            rounds.extend([1] * len(pts))
            toks.extend(max(1, int(self.prior_output_tokens * q)) for q in PRIOR_QUANTILES)
        zs = np.asarray(z, dtype=float)
        rs = np.asarray(rounds, dtype=np.int64)
        ts = np.asarray(toks, dtype=np.int64)
        self._pools[key] = (n, snap.history, zs, rs, ts)
        return zs, rs, ts

    # -- the model --------------------------------------------------------------------------
    def stage_residuals(
        self, snap: Snapshot, task: TaskState, stage: StageState, generated_tokens: int = 0
    ) -> np.ndarray:
        k = stage.rounds_done
        y = stage.output_tokens + generated_tokens
        started_s = stage.started_s
        started = started_s is not None and stage.status != StageStatus.PENDING
        if not started and k == 0 and y == 0:
            # unconditioned: the sorted pool, memoised with the pool (history is append-only);
            # while the engine's record count has not moved no pool has changed, so the
            # pool itself need not even be looked up (a task's pending stages of one kind)
            key = (stage.agent, stage.kind)
            hit = self._sorted.get(key)
            n_records = snap.history_records
            if (
                hit is not None
                and n_records is not None
                and hit[3] == n_records
                and hit[2] is snap.history
            ):
                return hit[1]
            z = self.pool(snap, stage.agent, stage.kind)[0]
            srt = hit[1] if hit is not None and hit[0] is z else np.sort(z)
            self._sorted[key] = (z, srt, snap.history, n_records)
            return srt
        z, rounds, toks = self.pool(snap, stage.agent, stage.kind)
        e = snap.time_s - started_s if started_s is not None and started else 0.0
        ok = z > e
        if k > 0:
            ok_r = ok & (rounds > k)
        else:
            ok_r = ok
        ok_full = ok_r & (toks > y) if y > 0 else ok_r
        for mask in (ok_full, ok_r, ok):
            if np.count_nonzero(mask):  # mask.any() without its Python-level wrapper
                return np.sort(z[mask] - e)
        # nothing in the pool ran this long: assume one more mean call
        return np.array([float(np.mean(z / np.maximum(rounds, 1)))])


class TrueResidual:
    """The clairvoyant residual (``topas-oracle``): the true remaining calls of the stage,
    each timed alone on the engine (``CostModel.call_time_alone``, prefix resident), plus
    the tool delays between them.  ``oracle(task_id) -> Task`` comes from the engine's
    ``bind_oracle`` hook.  One value per stage (no uncertainty)."""

    def __init__(self, oracle: Callable[[int], Task]) -> None:
        self.oracle = oracle
        self._cache: dict[tuple[int, str], tuple[float, list[float]]] = {}

    def _suffix_times(self, snap: Snapshot, task_id: int, stage_name: str) -> list[float]:
        """``out[k]`` = true service time of calls ``k..`` of the stage (seconds)."""
        key = (task_id, stage_name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit[1]
        truth = self.oracle(task_id)
        spec = truth.stages[truth.stage_index[stage_name]]
        p = snap.prefixes.get(spec.agent)
        prefix = p.tokens if p is not None else 0
        times = []
        for j, c in enumerate(spec.calls):
            t = snap.cost.call_time_alone(
                c.prompt_tokens, c.output_tokens, prefix, snap.config.prefill_chunk_tokens
            )
            if j < len(spec.calls) - 1:
                t += c.tool_delay_s
            times.append(t)
        suffix = [0.0] * (len(times) + 1)
        for j in range(len(times) - 1, -1, -1):
            suffix[j] = suffix[j + 1] + times[j]
        self._cache[key] = (0.0, suffix)
        return suffix

    def stage_residuals(
        self, snap: Snapshot, task: TaskState, stage: StageState, generated_tokens: int = 0
    ) -> np.ndarray:
        suffix = self._suffix_times(snap, task.task_id, stage.name)
        k = min(stage.rounds_done, len(suffix) - 1)
        z = suffix[k]
        if generated_tokens > 0:
            # the running call is partly done: its decoded tokens need not be generated again
            z -= generated_tokens * snap.cost.decode_step_time(1, stage_prefix_ctx(snap, stage))
        if stage.status == StageStatus.TOOL and stage.tool_until_s is not None:
            z += max(0.0, stage.tool_until_s - snap.time_s)
            # the tool delay before call k is already in suffix[k-1], not suffix[k]
        return np.array([max(z, 0.0)])


def stage_prefix_ctx(snap: Snapshot, stage: StageState) -> int:
    p = snap.prefixes.get(stage.agent)
    return p.tokens if p is not None else 0
