"""vLLM's requests mirrored as topas workflow state: the tag mapping of the vLLM scheduler.

Each vLLM request becomes a :class:`~topas.engine.snapshot.RequestState` of a task built from
its workflow tag (:mod:`~topas.integrations.vllm.tags`); an untagged one is a single-request
task.  The tasks, prefixes and stage history live in the scheduler's
:class:`~topas.engine.state.EngineState` and change only through its stage transitions, as in
the simulator.  Nothing here touches vLLM's blocks or queues.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from vllm.v1.request import RequestStatus

from topas.engine.snapshot import (
    Phase,
    PrefixState,
    RequestState,
    StageState,
    StageStatus,
    TaskState,
)
from topas.engine.state import EngineState
from topas.integrations.vllm.compat import check_request
from topas.integrations.vllm.tags import StageSpec, TagError, parse_tag
from topas.workflow.model import round_up_to_blocks

UNTAGGED_AGENT = "__untagged__"
#: finish statuses that are no progress: the call did not complete (client abort, prompt too
#: long for the model, engine error); it enters no history and does not advance its stage
NOT_COMPLETED = frozenset(
    {RequestStatus.FINISHED_ABORTED, RequestStatus.FINISHED_IGNORED, RequestStatus.FINISHED_ERROR}
)


class Track:
    """Engine-private bookkeeping for one vLLM request (never shown to policies)."""

    __slots__ = ("state", "req", "prefix_full_tokens", "arrival_wall", "final", "before")

    def __init__(
        self,
        state: RequestState,
        req,
        prefix_full_tokens: int,
        arrival_wall: float,
        final: bool = False,
        before: tuple | None = None,
    ):
        self.state = state
        self.req = req
        self.prefix_full_tokens = prefix_full_tokens
        self.arrival_wall = arrival_wall
        self.final = final  #: the client says this is its stage's last call
        #: the stage's (status, ready_s, started_s, done_s) before this call arrived, restored
        #: if the call does not complete (abort)
        self.before = before


class RequestMirror:
    """The topas view of one vLLM scheduler's requests (engine-private bookkeeping)."""

    def __init__(
        self, state: EngineState, block_size: int, t0: float, stats: dict, warn: Callable[..., None]
    ) -> None:
        self.state = state
        self.tasks = state.tasks
        self.prefixes = state.prefixes
        self.block_size = block_size
        self.t0 = t0  #: wall clock of the scheduler's time 0 (tags carry wall-clock arrivals)
        self.stats = stats
        self.warn = warn
        self.tracks: dict[str, Track] = {}  #: by vLLM request id
        self.ids: dict[str, int] = {}
        self.task_ids: dict[str, int] = {}
        self.task_last_s: dict[int, float] = {}
        #: (task, stage) first seen at a round > 0 (earlier calls forgotten): no history record
        self.partial: set[tuple[int, str]] = set()
        self.request_checked = False
        self.seq = 0

    def new_track(self, req, now: float) -> Track:
        if not self.request_checked:
            check_request(req)
            self.request_checked = True
        extra = getattr(req.sampling_params, "extra_args", None) if req.sampling_params else None
        try:
            tag = parse_tag(extra)
        except TagError as e:  # a bad tag must not kill the engine: serve it untagged
            self.bad_tag(req.request_id, e)
            tag = None
        if tag is not None:
            try:
                return self.build_track(req, tag, now)
            except Exception as e:  # never expected (the tag is checked); still never fatal
                self.bad_tag(
                    req.request_id,
                    TagError(f"topas: tag not usable ({type(e).__name__}: {e})", "topas"),
                )
        return self.build_track(req, None, now)

    def bad_tag(self, request_id: str, err: TagError) -> None:
        self.stats["bad_tags"] += 1
        self.warn(
            err.key,
            f"bad {err.key} tags",
            "topas: request %s: bad workflow tag: %s; served untagged",
            request_id,
            err,
        )

    def build_track(self, req, tag, now: float) -> Track:
        self.seq += 1
        rid = self.ids.setdefault(req.request_id, len(self.ids) + 1)
        final = tag is None or tag.final
        if tag is None:
            task_key, stage, agent, kind, wf, prefix, rnd = (
                f"untagged:{req.request_id}",
                "call",
                UNTAGGED_AGENT,
                "call",
                "untagged",
                0,
                0,
            )
            dag, done, arrival = (), (), None
        else:
            task_key, stage, agent, kind, wf = (
                tag.task,
                tag.stage,
                tag.agent,
                tag.kind,
                tag.workflow,
            )
            prefix, rnd, dag, done, arrival = (
                tag.prefix_tokens,
                tag.round_index,
                tag.dag,
                tag.done,
                tag.arrival_s,
            )
        n_prompt = len(req.prompt_token_ids or ())
        prefix = min(prefix, n_prompt)
        tid = self.task_ids.setdefault(task_key, len(self.task_ids) + 1)
        task = self.tasks.get(tid)
        if task is None:
            # a checked DAG (parse_tag): unique names, known deps, topological order
            specs = {s.name: s for s in dag} if dag else {}
            if stage not in specs:
                specs[stage] = StageSpec(stage, agent, kind, ())
            succ: dict[str, list[str]] = {n: [] for n in specs}
            for s in specs.values():
                for d in s.deps:
                    succ[d].append(s.name)
            stages = {
                n: StageState(n, s.kind, s.agent, s.deps, tuple(succ[n])) for n, s in specs.items()
            }
            arr_s = (arrival - self.t0) if arrival is not None else now
            task = TaskState(tid, wf, min(arr_s, now), stages, tuple(specs))
            self.tasks[tid] = task
        self.task_last_s[tid] = now
        self.mark_done(task, done, now)
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
        EngineState.stage_ready(task, st, now)
        if rnd > st.rounds_done:
            # calls 0..rnd-1 ran before this scheduler knew the task (engine restart, or the
            # task was forgotten): count them, but the stage's service time is not known
            st.rounds_done = rnd
            self.partial.add((tid, stage))
        if agent not in self.prefixes:
            full = (prefix // self.block_size) * self.block_size
            self.prefixes[agent] = PrefixState(agent, full)
        pfull = self.prefixes[agent].tokens
        rs = RequestState(
            rid, tid, stage, agent, rnd, max(1, n_prompt - pfull), pfull, now, seq=self.seq
        )
        return Track(rs, req, pfull, time.time(), final, before)

    def mark_done(self, task: TaskState, done: Iterable[str], now: float) -> None:
        for name in done:
            st = task.stages.get(name)
            if st is None or st.status == StageStatus.DONE:
                continue
            # a stage whose service time is known enters the history estimators learn from
            record = (
                st.started_s is not None
                and st.ready_s is not None
                and (task.task_id, name) not in self.partial
            )
            self.state.stage_completed(task, st, now, record=record)

    def sync(self, live: dict, now: float, task_idle_s: float) -> None:
        """Mirror vLLM's live requests (``Scheduler.requests``) at ``now``."""
        for vid in list(self.tracks):
            if vid not in live:
                self.finish(self.tracks.pop(vid), now)
        for vid, req in live.items():
            tr = self.tracks.get(vid)
            if tr is None:
                tr = self.tracks[vid] = self.new_track(req, now)
            self.refresh(tr, now)
        # tasks idle for long with nothing live are forgotten (the client never says "done")
        active = {tr.state.task_id for tr in self.tracks.values()}
        for tid in [
            t
            for t, last in self.task_last_s.items()
            if t not in active and now - last > task_idle_s
        ]:
            self.forget_task(tid)

    def forget_task(self, tid: int) -> None:
        task = self.tasks.pop(tid, None)
        self.task_last_s.pop(tid, None)
        if task is not None and self.partial:
            self.partial.difference_update((tid, n) for n in task.stages)

    def refresh(self, tr: Track, now: float) -> None:
        rs, req = tr.state, tr.req
        rs.generated_tokens = req.num_output_tokens
        rs.preemptions = req.num_preemptions
        computed = req.num_computed_tokens
        n_prompt = req.num_prompt_tokens
        rs.prefilled_tokens = max(0, min(computed, n_prompt) - tr.prefix_full_tokens)
        if req.status == RequestStatus.RUNNING:
            rs.phase = Phase.PREFILL if computed < n_prompt else Phase.DECODE
            if rs.admitted_s is None:
                rs.admitted_s = now
                # right after vLLM scheduled it, its computed tokens are its prefix-cache hit;
                # past the agent prefix they are context found in the cache
                rs.cached_tokens = max(0, min(computed, n_prompt) - tr.prefix_full_tokens)
            if rs.first_token_s is None and rs.generated_tokens > 0:
                rs.first_token_s = now
            own = max(0, computed - tr.prefix_full_tokens)
            rs.kv_tokens = round_up_to_blocks(own, self.block_size)
            task = self.tasks[rs.task_id]
            st = task.stages.get(rs.stage)
            if st is not None and st.status != StageStatus.DONE:
                EngineState.stage_running(task, st, now)
        else:
            rs.phase = Phase.WAITING
            rs.kv_tokens = 0

    def finish(self, tr: Track, now: float) -> None:
        rs = tr.state
        rs.phase = Phase.DONE
        rs.finished_s = now
        self.stats["finished"] += 1
        completed = tr.req.is_finished() and tr.req.status not in NOT_COMPLETED
        if not completed:
            self.stats["aborted"] += 1
        task = self.tasks.get(rs.task_id)
        if task is None:
            return
        st = task.stages.get(rs.stage)
        if rs.agent == UNTAGGED_AGENT:  # a single-request task is done with its request
            if completed:
                self.mark_done(task, (rs.stage,), now)
            self.forget_task(rs.task_id)
        elif not completed:
            # an aborted call is no progress: its stage is as it was before the call arrived
            # (unless another call of the stage is live), and no history record is made
            other = any(
                o.state.task_id == rs.task_id and o.state.stage == rs.stage
                for o in self.tracks.values()
            )
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
                # the stage waits on its tool until a later call or a done-list says otherwise
                EngineState.call_finished(task, st, rs.generated_tokens)
            if tr.final:
                self.mark_done(task, (rs.stage,), now)
        p = self.prefixes.get(rs.agent)
        if p is not None:
            p.last_used_s = now
