"""A request's life in the simulator: admission, preemption (by the policy or the engine) and
finish, with the stage transitions of :class:`~topas.engine.state.EngineState`.
"""

from __future__ import annotations

from topas.engine.bounds import context_credit, task_lower_bound
from topas.engine.core import SimCore
from topas.engine.jobs import (
    _TOOL,
    _Job,
)
from topas.engine.records import Preempted, RequestRecord, RequestSpan, TaskRecord
from topas.engine.snapshot import (
    HeldContext,
    Location,
    Phase,
    StageStatus,
)
from topas.engine.state import EngineState


class Lifecycle(SimCore):
    """Admit, preempt and finish requests (a part of :class:`~topas.engine.simulator.Simulator`)."""

    # ------------------------------------------------------------------ request life cycle
    def _admit(self, job: _Job) -> None:
        r = job.req
        p = self.prefixes[r.agent]
        job.hit = p.location == Location.DEVICE and p.ready
        if job.hit:
            self.counters.prefix_hits += 1
        else:
            self.counters.prefix_misses += 1
        self._make_resident(r.agent)
        p.users += 1
        p.last_used_s = self.now
        key = (r.task_id, r.stage)
        self._set_ctx_priority(r)
        h = self.held.pop(key, None)
        r.cached_tokens = 0
        base = r.prompt_tokens + r.generated_tokens
        if h is None and self.ctx_cache_tokens and key in self.ctx_cache:
            agent, tokens, computed = self.ctx_cache.pop(key)
            self.ctx_cache_tokens -= tokens
            if job.hit:  # the prefix was resident throughout, so the chain is intact
                h = HeldContext(r.task_id, r.stage, agent, tokens, self.now, self.now, computed)
        elif h is None and self.ctx_cache_tokens and r.round_index == 0:
            spec = self._stage_spec[key]
            src = (r.task_id, spec.shares_with)
            if spec.shares_with and src in self.ctx_cache:
                # a conversation: the agent's previous stage's context begins with this
                # prompt's first shared_tokens tokens (found by prefix caching)
                agent, tokens, computed = self.ctx_cache.pop(src)
                self.ctx_cache_tokens -= tokens
                if job.hit:
                    h = HeldContext(
                        r.task_id,
                        r.stage,
                        agent,
                        tokens,
                        self.now,
                        self.now,
                        min(computed, spec.shared_tokens),
                    )
        if h is not None:
            if h.expires_s > self.now:
                self.used_kv -= h.tokens
                p.users -= 1  # the held context's claim on the prefix passes to the request
            r.cached_tokens = context_credit(
                h.computed_tokens, r.prompt_tokens, self.config.block_size
            )
            if r.round_index > 0:
                # never more than the previous round's context gives: on one engine that is
                # the context found; on a cluster's replica the stage moved away from and
                # back to, an older round's context cached there may be found instead
                prev = self._stage_spec[key].calls[r.round_index - 1]
                r.cached_tokens = min(
                    r.cached_tokens,
                    context_credit(
                        prev.prompt_tokens + prev.output_tokens - 1,
                        r.prompt_tokens,
                        self.config.block_size,
                    ),
                )
            self.counters.context_hit_tokens += r.cached_tokens
        r.kv_tokens = self._blocks(base)
        self.used_kv += r.kv_tokens
        if self.ctx_cache_tokens:  # this allocation may need cached contexts' room
            self._trim_ctx_cache()
        job.prefill_left = base - r.cached_tokens
        job.gen0 = r.generated_tokens
        job.ctx = r.prefix_tokens + r.cached_tokens
        r.prefilled_tokens = 0
        r.admitted_s = self.now
        if job.first_admit_s < 0:
            job.first_admit_s = self.now
        r.phase = Phase.PREFILL if p.ready else Phase.LOADING
        self.running[r.request_id] = job
        ts = self.tasks[r.task_id]
        EngineState.stage_running(ts, ts.stages[r.stage], self.now)

    def _preempt(self, job: _Job, by_engine: bool) -> None:
        r = job.req
        del self.running[r.request_id]
        self.used_kv -= r.kv_tokens
        p = self.prefixes[r.agent]
        p.users -= 1
        self.counters.preemptions += 1
        if by_engine:
            self.counters.engine_preemptions += 1
        # work that will be done again
        done_prefill = r.prefilled_tokens
        if self.config.preemption == "sglang":
            self.counters.recomputed_tokens += done_prefill + r.generated_tokens
            r.generated_tokens = 0
        else:
            self.counters.recomputed_tokens += done_prefill
        r.kv_tokens = 0
        r.prefilled_tokens = 0
        r.cached_tokens = 0
        r.phase = Phase.WAITING
        r.preemptions += 1
        r.first_token_s = r.first_token_s if self.config.preemption == "vllm" else None
        self.waiting[r.request_id] = job
        self._wreq[r.request_id] = r
        self._wready_sum += r.ready_s
        self._wprompt += r.prompt_tokens + r.generated_tokens
        self._wprog_add(r)
        self._waiting_sorted = False
        ts = self.tasks[r.task_id]
        EngineState.stage_requeued(ts, ts.stages[r.stage])
        self._note("preempt")
        if self.record_timeline:
            self.timeline.append(Preempted("preempt", r.request_id, self.now))

    def _finish(self, job: _Job) -> None:
        r = job.req
        del self.running[r.request_id]
        r.phase = Phase.DONE
        r.finished_s = self.now
        self.used_kv -= r.kv_tokens
        p = self.prefixes[r.agent]
        p.users -= 1
        p.last_used_s = self.now
        ts = self.tasks[r.task_id]
        st = ts.stages[r.stage]
        EngineState.call_finished(
            ts, st, r.generated_tokens, None if job.last else self.now + job.tool_after_s
        )
        self._n_req_done_by_task[r.task_id] += 1
        if self._cluster is not None:
            self._cluster.finished(r.agent, job.out_total)
        self.request_records.append(
            RequestRecord(
                r.request_id,
                r.task_id,
                r.stage,
                r.agent,
                r.round_index,
                r.prompt_tokens,
                job.out_total,
                r.ready_s,
                job.first_admit_s,
                r.first_token_s if r.first_token_s is not None else self.now,
                self.now,
                r.preemptions,
                job.hit,
                r.cached_tokens,
                r.prefilled_tokens - job.gen0,
            )
        )
        if self.record_timeline:
            self.timeline.append(
                RequestSpan(
                    "request",
                    r.request_id,
                    r.task_id,
                    r.stage,
                    r.agent,
                    job.first_admit_s,
                    self.now,
                )
            )
        if self.progress is not None:
            self.progress(1)
        ctx_tokens = r.kv_tokens
        # the last sampled token was never fed back, so it has no KV
        ctx_computed = r.prompt_tokens + r.generated_tokens - 1
        r.kv_tokens = 0
        self._note("finish")
        if not job.last:
            # offer the context to the policy: held only if the decision holds it
            self.held[(r.task_id, r.stage)] = EngineState.offered(
                r.task_id, r.stage, r.agent, ctx_tokens, self.now, ctx_computed
            )
            self._push(self.now + job.tool_after_s, _TOOL, (r.task_id, r.stage))
            return
        self.state.stage_completed(ts, st, self.now)
        truth = self._truth[ts.task_id]
        if any(x.shares_with == r.stage for x in truth.stages):
            # a later stage of the same agent continues this conversation: the context stays
            # in the engine's cache (automatic prefix caching keeps it in free memory)
            self._cache_ctx(
                EngineState.offered(r.task_id, r.stage, r.agent, ctx_tokens, self.now, ctx_computed)
            )
        if ts.stages_done == len(ts.stages):
            t_done = self.now
            if self._cluster is not None:
                # replicas' clocks differ by up to one iteration: the task is done when its
                # last stage anywhere is
                t_done = max(
                    t_done, max(s.done_s for s in ts.stages.values() if s.done_s is not None)
                )
            ts.done_s = t_done
            del self.tasks[ts.task_id]
            if self._cluster is not None:
                self._cluster.task_done(ts.task_id, t_done, self)
            truth = self._truth.pop(ts.task_id)
            for s in truth.stages:
                del self._stage_spec[(ts.task_id, s.name)]
                if s.shares_with:  # a conversation's cached context is never found now
                    done_ctx = self.ctx_cache.pop((ts.task_id, s.shares_with), None)
                    if done_ctx is not None:
                        self.ctx_cache_tokens -= done_ctx[1]
                if self.ctx_priority:
                    self.ctx_priority.pop((ts.task_id, s.name), None)
            self.task_records.append(
                TaskRecord(
                    ts.task_id,
                    ts.workflow,
                    ts.arrival_s,
                    t_done,
                    task_lower_bound(
                        truth,
                        self.agents,
                        self.cost,
                        self.config.prefill_chunk_tokens,
                        self.config.block_size,
                    ),
                    self._n_req_done_by_task.pop(ts.task_id),
                )
            )
            return
        for nxt in st.succs:
            ns = ts.stages[nxt]
            if ns.status == StageStatus.PENDING and all(
                ts.stages[d].status == StageStatus.DONE for d in ns.deps
            ):
                self._make_ready(ts, nxt, 0)
