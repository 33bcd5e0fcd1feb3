"""Correlated residuals across a task's stages: a one-factor Gaussian copula (review H1).

:class:`~topas.estimators.residual.EmpiricalResidual` draws every unfinished stage of a task
independently from its (agent, stage kind) pool.  When a task is hard in all its stages at
once (a long document, a hard bug), that is wrong in two ways (docs/topas.md, "Independence
bias"): the finished stages, which already show how hard the task is, say nothing about the
unfinished ones; and parallel stages that share the task's difficulty have a smaller maximum
than independent draws.  :class:`TaskFactor` replaces the independent uniforms each stage's
residual is read at by correlated ones, leaving every stage's marginal (its pool) unchanged:

* **Scores.**  A finished stage's *score* is the normal quantile of its output tokens within
  its pool (mid-rank empirical CDF of the pool's output tokens, ``Phi^-1``).  Output tokens,
  not service time: they do not contain queueing.
* **Model.**  Stage scores are ``x_v = a F + sqrt(1 - a^2) e_v`` with one task factor
  ``F ~ N(0, 1)`` and independent ``e_v ~ N(0, 1)``, so two stages of a task correlate by
  ``a^2``.
* **Learning ``a^2``.**  Online, from the pairs of scored stages within each task:
  ``sum x_i x_j / sum x_i^2`` over the pairs (both orders), shrunk by ``pairs / (pairs +
  prior_pairs)``, clipped to ``[0, max_a2]`` and rounded to ``step`` (so cached samples stay
  valid between small changes).  Work without correlation learns ``a^2 = 0`` and gets the
  independent samples exactly.
* **Conditioning.**  Given the task's ``n`` scores with sum ``S``, the factor's posterior is
  normal with precision ``P = 1 + n a^2 / (1 - a^2)`` and mean ``a S / ((1 - a^2) P)``.  Row
  ``r`` of the task's Monte Carlo matrix draws ``F_r`` from that posterior and each unfinished
  stage ``x_{v,r} = a F_r + sqrt(1 - a^2) w_{v,r}``; the stage's residual is read at
  ``Phi(x_{v,r})`` (``w`` from the task's own generator, seeded by ``(seed, task_id)``: common
  random numbers, as for the independent uniforms).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np

from topas.engine.snapshot import Snapshot, StageStatus, TaskState

#: a residual model's pool: ``(snap, agent, kind) -> (service_s, rounds, output_tokens)``
PoolFn = Callable[[Snapshot, str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_STD_NORMAL = NormalDist()


def norm_cdf(x: np.ndarray) -> np.ndarray:
    """``Phi(x)`` elementwise (Abramowitz-Stegun 7.1.26 for erf, error below 1.5e-7)."""
    z = np.abs(x) * _SQRT1_2
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-z * z)
    out: np.ndarray = 0.5 * (1.0 + np.where(x >= 0, erf, -erf))
    return out


def norm_ppf(p: float) -> float:
    """``Phi^-1(p)`` for ``0 < p < 1`` (the standard library's inverse normal CDF)."""
    return _STD_NORMAL.inv_cdf(p)


class TaskFactor:
    """Learns the within-task correlation ``a^2`` of stage scores online and turns a task's
    finished stages into correlated sampling quantiles for its unfinished ones.

    ``seed`` -- the run's seed; ``n_samples`` -- Monte Carlo rows; ``prior_pairs`` -- pairs
    of scores the estimate of ``a^2`` is shrunk by (toward 0); ``max_a2`` -- cap on ``a^2``;
    ``step`` -- ``a^2`` is rounded down to a multiple of this.
    """

    def __init__(
        self,
        seed: int = 0,
        n_samples: int = 64,
        prior_pairs: int = 20,
        max_a2: float = 0.9,
        step: float = 0.05,
    ) -> None:
        if not 0 <= max_a2 < 1 or prior_pairs < 0 or not step > 0:
            raise ValueError(
                f"TaskFactor: max_a2={max_a2} must be in [0, 1), prior_pairs="
                f"{prior_pairs} >= 0 and step={step} > 0"
            )
        self.seed, self.n_samples = seed, n_samples
        self.prior_pairs, self.max_a2, self.step = prior_pairs, max_a2, step
        #: task id -> stage name -> score of the finished stage
        self._scores: dict[int, dict[str, float]] = {}
        #: sums over within-task pairs of scores (both orders): sum x_i x_j, sum x_i^2, pairs
        self._sxy = 0.0
        self._sxx = 0.0
        self._pairs = 0
        #: ``a2`` for the sums above (None: not computed since they last changed)
        self._a2: float | None = None
        #: task id -> (S, 1 + stages) standard normals: column 0 the factor's, then the stages'
        self._normals: dict[int, np.ndarray] = {}
        #: task id -> ((a2, n scores), uniforms (S, stages))
        self._u: dict[int, tuple[tuple[float, int], np.ndarray]] = {}
        #: (agent, kind) -> (pool tokens array it was built from, sorted tokens)
        self._sorted: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}

    def reset(self) -> None:
        """Forget everything (a new run)."""
        self._scores.clear()
        self._normals.clear()
        self._u.clear()
        self._sorted.clear()
        self._sxy = self._sxx = 0.0
        self._pairs = 0
        self._a2 = None

    def forget(self, task_id: int) -> None:
        """Drop a finished task's cached samples (its scores stay counted in ``a^2``)."""
        self._scores.pop(task_id, None)
        self._normals.pop(task_id, None)
        self._u.pop(task_id, None)

    @property
    def a2(self) -> float:
        """The current estimate of the within-task correlation of stage scores (memoised
        until the next scored stage: it is read at every task version)."""
        if self._a2 is None:
            if self._pairs == 0 or self._sxx <= 0:
                self._a2 = 0.0
            else:
                rho = self._sxy / self._sxx * self._pairs / (self._pairs + self.prior_pairs)
                rho = min(max(rho, 0.0), self.max_a2)
                self._a2 = math.floor(rho / self.step + 1e-9) * self.step
        return self._a2

    def score(self, tokens: int, pool_tokens: np.ndarray, key: tuple[str, str]) -> float:
        """Normal score of ``tokens`` output tokens within the pool's output tokens."""
        hit = self._sorted.get(key)
        if hit is None or hit[0] is not pool_tokens:
            hit = self._sorted[key] = (pool_tokens, np.sort(pool_tokens))
        srt = hit[1]
        n = len(srt)
        below = int(np.searchsorted(srt, tokens, side="left"))
        equal = int(np.searchsorted(srt, tokens, side="right")) - below
        return norm_ppf((below + 0.5 * equal + 0.5) / (n + 1))

    def _observe(self, snap: Snapshot, task: TaskState, pool: PoolFn) -> dict[str, float]:
        """Score the task's newly finished stages and count their pairs."""
        scores = self._scores.setdefault(task.task_id, {})
        if task.stages_done == len(scores):
            return scores
        for name in task.order:
            st = task.stages[name]
            if st.status != StageStatus.DONE or name in scores:
                continue
            toks = pool(snap, st.agent, st.kind)[2]
            x = self.score(st.output_tokens, toks, (st.agent, st.kind))
            for y in scores.values():
                self._sxy += 2.0 * x * y
                self._sxx += x * x + y * y
                self._pairs += 2
                self._a2 = None
            scores[name] = x
        return scores

    def uniforms(self, snap: Snapshot, task: TaskState, u: np.ndarray, pool: PoolFn) -> np.ndarray:
        """Sampling quantiles ``(S, stages)`` for the task's stages (columns in
        ``task.order``, like ``u``): ``u`` itself while ``a^2 = 0``.  ``pool(snap,
        agent, kind)`` gives the (service, rounds, output tokens) pool of a stage kind."""
        scores = self._observe(snap, task, pool)
        a2 = self.a2
        if a2 == 0.0:
            return u
        key = (a2, len(scores))
        hit = self._u.get(task.task_id)
        if hit is not None and hit[0] == key:
            return hit[1]
        w = self._normals.get(task.task_id)
        if w is None:
            rng = np.random.default_rng([self.seed, task.task_id, 1])
            w = self._normals[task.task_id] = rng.standard_normal((self.n_samples, 1 + u.shape[1]))
        a = math.sqrt(a2)
        prec = 1.0 + len(scores) * a2 / (1.0 - a2)
        mean = a * sum(scores.values()) / ((1.0 - a2) * prec)
        factor = mean + w[:, :1] / math.sqrt(prec)
        x = a * factor + math.sqrt(1.0 - a2) * w[:, 1:]
        out: np.ndarray = np.minimum(norm_cdf(x), 1.0 - 1e-12)
        self._u[task.task_id] = (key, out)
        return out
