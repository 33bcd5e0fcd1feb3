"""The simulator's clock: events off the heap, and engine iterations (chunked prefill with
decode piggy-backing; regular decode runs jumped in one step with the cost model's closed form).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from topas.engine.core import SimCore
from topas.engine.jobs import (
    _ARRIVAL,
    _FORGET,
    _HOLD,
    _INJECT,
    _SWAP_IN,
    _SWAP_OUT,
    _TASK_DONE,
    _TOOL,
    _Job,
    _PrefixJob,
)
from topas.engine.snapshot import (
    Location,
    Phase,
)


class Iteration(SimCore):
    """Events and iterations (a part of :class:`~topas.engine.simulator.Simulator`)."""

    # ------------------------------------------------------------------ events
    def _handle(self, kind: int, payload: Any) -> None:
        if kind == _ARRIVAL:
            self._arrive(payload)
            self._schedule_next_arrival()
        elif kind == _TOOL:
            task_id, stage = payload
            ts = self.tasks[task_id]
            st = ts.stages[stage]
            st.tool_until_s = None
            self._make_ready(ts, stage, st.rounds_done)
            self._note("tool")
        elif kind == _SWAP_IN:
            p = self.prefixes[payload]
            if p.transfer == "in":
                p.transfer = None
                p.ready = True
                for j in self.running.values():
                    if j.req.agent == payload and j.req.phase == Phase.LOADING:
                        j.req.phase = Phase.PREFILL
            self._note("swap-in")
        elif kind == _SWAP_OUT:
            p = self.prefixes[payload]
            if p.transfer == "out":
                p.transfer = None
            self._note("swap-out")
        elif kind == _HOLD:
            key, hold = payload
            h = self.held.get(key)
            if h is hold:
                # it counted against the budget until now; _release_held only frees
                # contexts whose expiry is still in the future
                del self.held[key]
                self.used_kv -= h.tokens
                self.prefixes[h.agent].users -= 1
                self._cache_ctx(h)
                self._note("hold-expiry")
        elif kind == _INJECT:
            self._parked = False
            ts, stage, round_index, cause = payload
            assert self._cluster is not None  # routed events exist in cluster mode only
            self._cluster.landed(self.replica_id, ts.task_id, stage, round_index)
            self.tasks.setdefault(ts.task_id, ts)
            # ready when this engine sees it (after the iteration it landed in), as a
            # single engine treats its own events
            self._ready_local(ts, stage, round_index, self.now)
            self._note(cause)
        elif kind == _FORGET:
            # the router sent this stage's next call elsewhere: its context is not coming back
            if payload in self.held:
                self._release_held(payload)
                self._note("route-away")
        elif kind == _TASK_DONE:
            for key in [k for k in self.held if k[0] == payload]:
                self._release_held(key)
            self.tasks.pop(payload, None)
            self._note("task-done")

    def _pop_due(self) -> bool:
        any_ev = False
        while self._heap and self._heap[0][0] <= self.now:
            _, _, kind, payload = heapq.heappop(self._heap)
            self._handle(kind, payload)
            any_ev = True
        return any_ev

    # ------------------------------------------------------------------ iterations
    def _prefix_ready(self, agent: str) -> None:
        p = self.prefixes[agent]
        p.ready = True
        p.transfer = None
        for j in self.running.values():
            if j.req.agent == agent and j.req.phase == Phase.LOADING:
                j.req.phase = Phase.PREFILL

    def _step_prefill(self, decoders: list[_Job], prefillers: list[_Job | _PrefixJob]) -> float:
        """One mixed iteration: chunked prefill + one decode token per decoder."""
        budget = max(1, self.config.prefill_chunk_tokens - len(decoders))
        lin = len(decoders)
        pairs = 0.0
        reads = 0.0
        for j in decoders:
            pairs += j.ctx
            reads += j.ctx
        chunks = []
        for item in prefillers:
            if budget <= 0:
                break
            c = min(budget, item.prefill_left)
            budget -= c
            pp, rr = self.cost.prefill_chunk_terms(c, item.ctx)
            lin += c
            pairs += pp
            reads += rr
            chunks.append((item, c))
        dt = self.cost.iteration_time(lin, pairs, reads)
        self._advance(dt, len(decoders) + len(chunks))
        self.counters.prefill_tokens += sum(c for _, c in chunks)
        finished: list[_Job] = []
        for j in decoders:
            self._gen(j, 1)
            if j.req.generated_tokens >= j.out_total:
                finished.append(j)
        for item, c in chunks:
            item.prefill_left -= c
            item.ctx += c
            if isinstance(item, _PrefixJob):
                if item.prefill_left <= 0:
                    del self.prefix_jobs[item.agent]
                    self._prefix_ready(item.agent)
                    self._note("prefix-ready")
                continue
            r = item.req
            r.prefilled_tokens += c
            if item.prefill_left <= 0:
                r.phase = Phase.DECODE
                if r.first_token_s is None:
                    r.first_token_s = self.now
                self._gen(item, 1)
                if r.generated_tokens >= item.out_total:
                    finished.append(item)
        for j in finished:
            self._finish(j)
        return dt

    def _gen(self, j: _Job, n: int) -> None:
        r = j.req
        r.generated_tokens += n
        j.ctx += n
        self.counters.decode_tokens += n
        new_kv = (
            self._blocks(r.prompt_tokens + r.generated_tokens)
            if self.config.block_size > 1
            else r.kv_tokens + n
        )
        self.used_kv += new_kv - r.kv_tokens
        r.kv_tokens = new_kv
        if self.used_kv > self.counters.peak_kv_tokens or self.ctx_cache_tokens:
            self._kv_changed()

    def _advance(self, dt: float, batch: int) -> None:
        self.now += dt
        self.counters.iterations += 1
        self.counters.busy_s += dt
        self.counters.batch_time_product += batch * dt

    def _decode_room(self, decoders: list[_Job]) -> int:
        """How many decode iterations fit in the free KV (each adds a token per decoder)."""
        free = self.config.kv_budget_tokens - self.used_kv
        n = len(decoders)
        b = self.config.block_size
        if b <= 1:
            return free // n
        # block granularity: a request needs a new block when its length crosses a boundary
        lens = np.fromiter(
            (j.req.prompt_tokens + j.req.generated_tokens for j in decoders),
            dtype=np.int64,
            count=n,
        )
        cur = -(-lens // b)

        def extra(k: int) -> int:
            return int((-(-(lens + k) // b) - cur).sum()) * b

        lo, hi = 0, 1
        while extra(hi) <= free:
            lo, hi = hi, hi * 2
            if hi > 1 << 40:
                return lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if extra(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def _step_decode(self, decoders: list[_Job], horizon_s: float = math.inf) -> None:
        n_fin = min(j.out_total - j.req.generated_tokens for j in decoders)
        room = self._decode_room(decoders)
        if room <= 0:
            self._engine_preempt()
            return
        steps = min(n_fin, room)
        batch = len(decoders)
        ctx = sum(j.ctx for j in decoders)
        until = min(self._heap[0][0], horizon_s) if self._heap else horizon_s
        dt = -1.0
        if until < math.inf:
            horizon = until - self.now
            one = self.cost.decode_run_time(batch, ctx, 1)
            if horizon <= one or steps == 1:
                # the event falls in the first iteration (a busy cluster's usual case): the
                # search below would end at one step too
                steps, dt = 1, one
            else:
                k = self.cost.decode_steps_within(batch, ctx, horizon, steps)
                if k < steps and self.cost.decode_run_time(batch, ctx, k) < horizon:
                    k += 1  # the iteration during which the event happens
                steps = max(1, min(steps, k))
        if dt < 0:
            dt = self.cost.decode_run_time(batch, ctx, steps)
        self.now += dt
        self.counters.iterations += steps
        self.counters.busy_s += dt
        self.counters.batch_time_product += batch * dt
        finished = []
        for j in decoders:
            self._gen(j, steps)
            if j.req.generated_tokens >= j.out_total:
                finished.append(j)
        for j in finished:
            self._finish(j)

    def _engine_preempt(self) -> None:
        """Out of KV for the next decode token.  Like SGLang's radix cache and vLLM's free
        block pool, the engine first evicts idle cached prefixes (least recently used first);
        only when none is left does it preempt the most recently admitted request."""
        idle = sorted(
            (
                p
                for p in self.prefixes.values()
                if p.location == Location.DEVICE
                and p.users == 0
                and p.transfer is None
                and p.agent not in self.prefix_jobs
            ),
            key=lambda p: p.last_used_s,
        )
        if idle:
            self._drop_prefix(idle[0].agent, keep_host_copy=True)
            self._note("engine-evict")
            return
        victim = next(reversed(self.running.values()))
        self._preempt(victim, by_engine=True)
