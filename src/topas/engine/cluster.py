"""A cluster of engine replicas behind a router, on one shared clock.

Each replica is a full :class:`~topas.engine.simulator.Simulator` (its own KV budget, prefix
cache, host tier and policy instance).  Every call that becomes ready (a task's first
stages at arrival, a stage's next round when its tool returns, a successor stage) goes to
the router, which sees every replica's load and residency
(:class:`~topas.routing.base.ClusterView`) and names the replica that runs it.  A task's
state is shared by the replicas that run its calls; a context left on a replica the stage
moved away from is released there, and a finished task's holds are released everywhere.

Time: conservative parallel discrete-event simulation.  The replica with the earliest next
step goes first; its regular-decode jumps end by the earliest time any other replica could
make a call ready (``Simulator.emit_lower_bound_s``) and by the next task arrival, so no
replica runs past a request routed to it.  A routed request that lands while its replica is
inside one iteration waits for that iteration to end, as on a real engine.
"""

from __future__ import annotations

import itertools
import math
import time as _time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from topas.engine.core import EnginePolicy, SimCore
from topas.engine.cost import Profile
from topas.engine.jobs import _FORGET, _INJECT, _TASK_DONE, PolicyStalled
from topas.engine.records import EngineCounters, SimResult
from topas.engine.simulator import Simulator
from topas.engine.snapshot import TaskState
from topas.engine.validate import validate_tasks
from topas.routing.base import ClusterView, ReplicaView, Router, RouteRequest, RouterError
from topas.workflow.model import Agent, Stage, Task

__all__ = ["Cluster", "ClusterResult"]


@dataclass
class ClusterResult:
    router: str
    policy: str
    replicas: list[SimResult]
    #: calls routed to each replica
    routed: list[int]
    wall_s: float
    #: calls whose stage context was on another replica than the one they were routed to
    moved_contexts: int = 0

    def as_sim_result(self) -> SimResult:
        """The cluster as one run (records merged, counters summed, peak KV the largest
        replica peak) for the single-engine metrics."""
        c = EngineCounters()
        for f in fields(EngineCounters):
            vals = [getattr(r.counters, f.name) for r in self.replicas]
            setattr(c, f.name, max(vals) if f.name.startswith("peak") else sum(vals))
        first = self.replicas[0]
        return SimResult(
            policy=first.policy,
            profile=first.profile,
            seed=first.seed,
            tasks=sorted((t for r in self.replicas for t in r.tasks), key=lambda t: t.task_id),
            requests=sorted(
                (q for r in self.replicas for q in r.requests), key=lambda q: q.request_id
            ),
            counters=c,
            decision_s=[d for r in self.replicas for d in r.decision_s],
            makespan_s=max(r.makespan_s for r in self.replicas),
            wall_s=self.wall_s,
        )


class Cluster:
    """``replicas`` engines, each running its own ``make_policy()`` instance, behind
    ``router``.  Engine keywords (``context_cache``, ``preemption``, ...) apply to every
    replica.  ``progress(n)`` is called as requests finish."""

    def __init__(
        self,
        tasks: Sequence[Task],
        agents: Mapping[str, Agent],
        profile: Profile,
        make_policy: Callable[[], EnginePolicy],
        router: Router,
        *,
        replicas: int = 2,
        seed: int = 0,
        progress: Callable[[int], None] | None = None,
        **engine_kw: Any,
    ) -> None:
        if not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"replicas {replicas!r}: must be an integer >= 1")
        if not callable(getattr(router, "route", None)):
            raise ValueError(f"router {router!r}: has no route(request, view) method")
        self.router = router
        self.sims = [
            Simulator([], agents, profile, make_policy(), seed=seed, progress=progress, **engine_kw)
            for _ in range(replicas)
        ]
        first = self.sims[0]
        self.tasks_in = validate_tasks(
            tasks, first.agents, first.config.kv_budget_tokens, first.config.block_size
        )
        ids = itertools.count(1)
        truth: dict[int, Task] = {}
        specs: dict[tuple[int, str], Stage] = {}
        n_done: dict[int, int] = {}
        for i, s in enumerate(self.sims):
            s.replica_id = i
            s._cluster = self
            s._ids, s._truth, s._stage_spec, s._n_req_done_by_task = ids, truth, specs, n_done
        self._where: dict[tuple[int, str], int] = {}  # (task, stage) -> replica of last round
        self._home: dict[int, int] = {}
        self._on: dict[int, set[int]] = {}  # task -> replicas that ran its calls
        self._routed = [0] * replicas
        self._out_sum: dict[str, int] = {}  # agent -> output tokens of its finished calls
        self._out_n: dict[str, int] = {}
        # calls routed to a replica that has not seen them yet (an event at its next step):
        # the router counts them as queued there, or calls routed at one instant would all
        # see the same load
        self._transit_n = [0] * replicas
        self._transit_tokens = [0] * replicas
        self._n_routed = 0
        self._moved = 0
        self._tasks_done = 0
        self._lb = [math.inf] * replicas
        self._lb_ok = [False] * replicas
        # each replica's next_step_s, recomputed only after it steps or gets an event
        self._ns = [math.inf] * replicas
        self._ns_ok = [False] * replicas

    # ------------------------------------------------------------------ hooks (Simulator)
    def _view(self, t: float) -> ClusterView:
        views = []
        for s in self.sims:

            def ctx(key: tuple[int, str], s: Simulator = s) -> int:
                h = s.held.get(key)
                if h is not None:
                    return h.tokens
                c = s.ctx_cache.get(key)
                return c[1] if c is not None else 0

            i = s.replica_id
            views.append(
                ReplicaView(
                    i,
                    len(s.running),
                    len(s.waiting) + self._transit_n[i],
                    s._wprompt + self._transit_tokens[i],
                    s.used_kv,
                    s.config.kv_budget_tokens,
                    s.prefixes,
                    ctx,
                    s.cost,
                )
            )
        return ClusterView(t, tuple(views), self._n_routed)

    def route(
        self,
        ts: TaskState,
        stage: str,
        round_index: int,
        t: float,
        origin: Simulator | None,
        cause: str = "ready",
    ) -> None:
        spec = self.sims[0]._stage_spec[(ts.task_id, stage)]
        key = (ts.task_id, stage)
        prev = self._where.get(key)
        n_out = self._out_n.get(spec.agent)
        req = RouteRequest(
            ts.task_id,
            ts.workflow,
            stage,
            spec.agent,
            round_index,
            spec.calls[round_index].prompt_tokens,
            self.sims[0].agents[spec.agent].prefix_tokens,
            t,
            ts.arrival_s,
            self._home.get(ts.task_id),
            prev,
            self._out_sum[spec.agent] / n_out if n_out else None,
        )
        rid = self.router.route(req, self._view(t))
        if not isinstance(rid, int) or isinstance(rid, bool) or not 0 <= rid < len(self.sims):
            raise RouterError(
                f"router {getattr(self.router, 'name', self.router)!r} returned "
                f"{rid!r}, not a replica id in 0..{len(self.sims) - 1}"
            )
        self._n_routed += 1
        self._routed[rid] += 1
        if prev is not None and prev != rid:
            self._moved += 1
            self._push(prev, t, _FORGET, key)
        self._where[key] = rid
        self._home.setdefault(ts.task_id, rid)
        self._on.setdefault(ts.task_id, set()).add(rid)
        target = self.sims[rid]
        if target is origin and t == target.now:
            # the replica that made the call ready runs it: ready in this very decision, as
            # on a single engine
            target.tasks.setdefault(ts.task_id, ts)
            target._ready_local(ts, stage, round_index, t)
        else:
            self._transit_n[rid] += 1
            self._transit_tokens[rid] += req.prompt_tokens
            self._push(rid, t, _INJECT, (ts, stage, round_index, cause))

    def finished(self, agent: str, output_tokens: int) -> None:
        """A call of ``agent`` finished with ``output_tokens`` (Simulator._finish)."""
        self._out_sum[agent] = self._out_sum.get(agent, 0) + output_tokens
        self._out_n[agent] = self._out_n.get(agent, 0) + 1

    def landed(self, rid: int, task_id: int, stage: str, round_index: int) -> None:
        """A routed call reached its replica's queue (Simulator, on the routed event)."""
        self._transit_n[rid] -= 1
        self._transit_tokens[rid] -= (
            self.sims[0]._stage_spec[(task_id, stage)].calls[round_index].prompt_tokens
        )

    def _push(self, rid: int, t: float, kind: int, payload: object) -> None:
        self.sims[rid]._push(t, kind, payload)
        self._lb_ok[rid] = False
        self._ns_ok[rid] = False

    def task_done(self, task_id: int, t: float, origin: SimCore) -> None:
        self._tasks_done += 1
        for rid in self._on.pop(task_id, ()):
            if self.sims[rid] is not origin:
                self._push(rid, t, _TASK_DONE, task_id)
        self._home.pop(task_id, None)
        stages = self.sims[0]._truth[task_id].stages
        for s in stages:
            self._where.pop((task_id, s.name), None)

    # ------------------------------------------------------------------ main loop
    def run(self) -> ClusterResult:
        wall0 = _time.perf_counter()
        sims = self.sims
        n = len(sims)
        arrivals = self.tasks_in
        k = 0
        total = len(arrivals)
        while self._tasks_done < total:
            t_arr = arrivals[k].arrival_s if k < total else math.inf
            best, t_next = -1, math.inf
            ns, ns_ok = self._ns, self._ns_ok
            for i in range(n):
                if not ns_ok[i]:
                    ns[i] = sims[i].next_step_s()
                    ns_ok[i] = True
                if ns[i] < t_next:
                    best, t_next = i, ns[i]
            if t_arr <= t_next and k < total:
                task = arrivals[k]
                k += 1
                ts = sims[0].register_task(task)
                for st in task.stages:
                    if not st.deps:
                        self.route(ts, st.name, 0, t_arr, None, "arrival")
                continue
            if best < 0:
                raise PolicyStalled(
                    f"cluster at t={max(s.now for s in sims):.3f}s: {total - self._tasks_done} "
                    "unfinished task(s), and every replica is idle: "
                    + "; ".join(
                        f"replica {s.replica_id} ({s._pname()}) has {len(s.waiting)} "
                        "waiting request(s) it admits none of"
                        for s in sims
                    )
                )
            s = sims[best]
            if s.now < t_next:
                s.now = t_next
            horizon = t_arr
            if n > 1:
                lbs, lb_ok = self._lb, self._lb_ok
                for i in range(n):
                    if i != best:
                        if not lb_ok[i]:
                            lbs[i] = sims[i].emit_lower_bound_s()
                            lb_ok[i] = True
                        if lbs[i] < horizon:
                            horizon = lbs[i]
            s.step(horizon)
            self._lb_ok[best] = False
            ns_ok[best] = False
        return ClusterResult(
            router=getattr(self.router, "name", type(self.router).__name__),
            policy=sims[0]._pname(),
            replicas=[s.result(wall0) for s in sims],
            routed=list(self._routed),
            wall_s=_time.perf_counter() - wall0,
            moved_contexts=self._moved,
        )
