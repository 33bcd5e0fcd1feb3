"""Aging ``g_i(t)``: the weight of a task's gain in ``J_admit^age`` (docs/topas.md).

* ``age_form="log"`` (the paper): ``g_i(t) = 1 + rho * log(1 + (t - tau_i) / H_age)``, with
  ``H_age`` fixed or the running median of completed stage service times.
* ``age_form="rank"`` (a flagship departure): ``g_i = 1 + rho * younger_i``, the number of
  unfinished tasks ranked after task ``i``; tasks are ranked by arrival time, or by a size
  key (``rank_key``), with the ``size_gate`` and ``tail_q`` refinements.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat

from topas.engine.snapshot import Snapshot, TaskState
from topas.policies.topas.core import TopasCore


class Aging(TopasCore):
    """The aging half of :class:`~topas.policies.topas.policy.Topas` (a mixin).

    Reads the policy's parameters ``aging``, ``rho``, ``H_age``, ``rank_key``,
    ``size_weight``, ``size_gate``, ``tail_q`` and its estimator ``mc``; keeps the per-run
    caches ``_median``, ``_rank``, ``_rank_keys``, ``_live_arrivals``, ``_live_sorted``,
    ``_done_jcts`` and reads ``_task_info`` (declared in :class:`TopasCore`)."""

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

    def age_weight(self, snap: Snapshot, arrival_s: float, h_age: float) -> float:
        """``g_i(t) = 1 + rho * log(1 + (t - tau_i) / H_age)``."""
        if not self.aging or self.rho == 0:
            return 1.0
        return 1.0 + self.rho * math.log1p(max(0.0, snap.time_s - arrival_s) / h_age)

    def size_key_on(self) -> bool:
        """Whether the size rank key is used now: always, or while a gate is open --
        ``size_gate``: the estimator's learned within-task correlation is at least
        ``size_gate``; ``size_cv``: the coefficient of variation of the run's tasks' E[LP]
        when first seen is at least ``size_cv`` (sizes that differ visibly at arrival)."""
        if self.size_gate <= 0 and self.size_cv <= 0 and self.size_corr <= 0:
            return True
        if self.size_corr > 0 and self._pred_corr >= self.size_corr:
            return True
        if self.size_gate > 0:
            cop = self.mc.copula
            if cop is not None and cop.a2 >= self.size_gate:
                return True
        if self.size_cv > 0:
            n, s1, s2 = self._first_lp
            if n >= 10 and s1 > 0:
                mean = s1 / n
                var = max(0.0, s2 / n - mean * mean)
                return math.sqrt(var) >= self.size_cv * mean
        return False

    def observe_finishes(self, snap: Snapshot) -> None:
        """``size_corr``: a task seen before that has left ``snap.tasks`` finished now; its
        (first-sight E[LP], time from first sight to now) joins the window of the last 200,
        whose Spearman rank correlation is ``_pred_corr`` (-1 until 20 tasks finished)."""
        seen = self._first_seen
        gone = finished(seen, snap.tasks)
        if not gone:
            return
        now = snap.time_s
        pairs = self._pred_pairs
        for tid in gone:
            t0, lp = seen.pop(tid)
            pairs.append((lp, now - t0))
        del pairs[:-200]
        if len(pairs) >= 20:
            self._pred_corr = spearman([p[0] for p in pairs], [p[1] for p in pairs])

    def tail_age_s(self, snap: Snapshot) -> float:
        """``tail_q``: the age (s) past which a task ranks first -- that quantile of the JCTs
        of the tasks finished so far in this run (inf until 10 have finished)."""
        live, done, srt = self._live_arrivals, self._done_jcts, self._live_sorted
        tasks = snap.tasks
        now = snap.time_s
        for tid in finished(live, tasks):
            arrival = live.pop(tid)
            del srt[bisect.bisect_left(srt, arrival)]
            bisect.insort(done, now - arrival)
        if len(live) != len(tasks):
            for tid, ts in tasks.items():
                if tid not in live:
                    live[tid] = ts.arrival_s
                    bisect.insort(srt, ts.arrival_s)
        if len(done) < 10:
            return math.inf
        return done[min(len(done) - 1, int(self.tail_q * len(done)))]

    def task_ranks(self, snap: Snapshot, build: Callable[[TaskState], object]) -> dict[int, int]:
        """Rank aging: task id -> number of unfinished tasks ranked after it (``younger_i``).

        Strict-ish task priority: a task's weight grows with the number of unfinished tasks
        that arrived after it (``g_i = 1 + rho * younger_i``); memoised by the set of
        unfinished tasks (in the snapshot's order).  ``build(ts)`` estimates a task's
        ``E[LP]`` for its current version (which sets its size key)."""
        tasks = snap.tasks
        task_info = self._task_info
        if self.size_corr > 0 and self.rank_key != "arrival":
            self.observe_finishes(snap)
        by_size = self.rank_key != "arrival" and self.size_key_on()
        if by_size:
            # the keys of tasks whose state changed are estimated first (a task never
            # estimated ranks last)
            for r in snap.waiting:
                ts = tasks[r.task_id]
                info = task_info.get(r.task_id)
                if info is None or info.version != ts.version:
                    build(ts)
            keys = self._rank_keys
            inf = math.inf
            ids: tuple[object, ...] = (tuple(tasks), tuple(map(keys.get, tasks, repeat(inf))))
        else:
            ids = (tuple(tasks), ())
        late_before = -math.inf
        if self.tail_q > 0:
            # tasks that arrived before now - tail age rank first, oldest first
            late_before = snap.time_s - self.tail_age_s(snap)
            # (tail_age_s keeps the unfinished tasks' arrivals sorted)
            ids = (*ids, bisect.bisect_left(self._live_sorted, late_before))
        if self._rank[0] != ids:
            if not by_size:
                order = sorted(tasks.values(), key=lambda t: (t.arrival_s, t.task_id))
            elif late_before > -math.inf:
                order = sorted(
                    tasks.values(),
                    key=lambda t: (
                        (0, t.arrival_s, t.task_id)
                        if t.arrival_s < late_before
                        else (1, keys.get(t.task_id, inf), t.arrival_s, t.task_id)
                    ),
                )
            else:
                order = sorted(
                    tasks.values(), key=lambda t: (keys.get(t.task_id, inf), t.arrival_s, t.task_id)
                )
            n_t = len(order)
            self._rank = (ids, {t.task_id: n_t - 1 - k for k, t in enumerate(order)})
        return self._rank[1]


def finished(tracked: Mapping[int, object], tasks: Mapping[int, object]) -> list[int]:
    """The task ids in ``tracked`` that are no longer in ``tasks`` (a task leaves
    ``Snapshot.tasks`` when it finishes); no list is built when none has gone."""
    if len(tracked) <= len(tasks) and tracked.keys() <= tasks.keys():
        return []
    return [t for t in tracked if t not in tasks]


def _ranks(xs: Sequence[float]) -> list[float]:
    """Ranks 0..n-1 of ``xs``, ties given their mean rank."""
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (0 when either is
    constant)."""
    rx, ry = _ranks(xs), _ranks(ys)
    n = len(rx)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0
