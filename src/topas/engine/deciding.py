"""The simulator's snapshot and decision step: build the policy's view, call it, check the
whole decision (:func:`topas.engine.state.check`) and apply its effects.
"""

from __future__ import annotations

import time as _time
from bisect import bisect_left

from topas.engine.core import SimCore
from topas.engine.decision import Decision, DecisionError
from topas.engine.jobs import (
    _HOLD,
    PolicyStalled,
)
from topas.engine.snapshot import (
    Snapshot,
)
from topas.engine.state import EngineState, check


class Deciding(SimCore):
    """Snapshot, decide, apply (a part of :class:`~topas.engine.simulator.Simulator`)."""

    def snapshot(self) -> Snapshot:
        if not self._waiting_sorted:
            self.waiting = dict(sorted(self.waiting.items(), key=lambda kv: kv[1].req.seq))
            self._wreq = {rid: j.req for rid, j in self.waiting.items()}
            self._waiting_sorted = True
        return Snapshot(
            time_s=self.now,
            event=self._pending_event or "tick",
            config=self.config,
            cost=self.cost,
            used_kv_tokens=self.used_kv,
            prefixes=self.prefixes,
            running=tuple(j.req for j in self.running.values()),
            waiting=tuple(self._wreq.values()),
            waiting_fcfs=True,
            waiting_program=tuple(self._wprog),
            waiting_ready_sum_s=self._wready_sum,
            tasks=self.tasks,
            held=dict(self.held),
            history=self.history,
            host_used_tokens=self.host_used,
            history_records=self.state.history_records,
            run_id=self.state.run_id,
        )

    def _decide(self) -> None:
        if self.now != self._instant:
            self._instant, self._decisions_now = self.now, 0
        self._decisions_now += 1
        if self._decisions_now > 1000 + 20 * (len(self.running) + len(self.waiting)):
            raise PolicyStalled(
                f"policy {self._pname()} at t={self.now:.6f}s: livelock, {self._decisions_now} "
                "decisions at one instant without the clock advancing (an admission that the "
                "engine has to preempt again at once?)"
            )
        snap = self.snapshot()
        t0 = _time.perf_counter()
        dec = self.policy.decide(snap)
        self.decision_s.append(_time.perf_counter() - t0)
        self.counters.decisions += 1
        self._pending_event = ""
        if not isinstance(dec, Decision):
            raise DecisionError(
                f"policy {self._pname()}: decide() returned {type(dec).__name__}, not a Decision"
            )
        if self.on_decision is not None:
            self.on_decision(snap, dec)
        self._apply(dec)

    def _pname(self) -> str:
        return getattr(self.policy, "name", type(self.policy).__name__)

    def _bad(self, msg: str) -> DecisionError:
        return DecisionError(f"policy {self._pname()} at t={self.now:.6f}s: {msg}")

    def _apply(self, d: Decision) -> None:
        if d.empty:  # the common case on busy engines: nothing to validate
            if self.held:
                self._drop_offers()
            return
        # the whole decision is checked before anything changes (engine/state.py)
        try:
            check(
                d,
                now=self.now,
                config=self.config,
                used_kv=self.used_kv,
                prefixes=self.prefixes,
                waiting=self._wreq,
                running={rid: j.req for rid, j in self.running.items()},
                held=self.held,
            )
        except DecisionError as e:
            raise self._bad(str(e)) from None

        # apply
        for key in d.release:
            self._release_held(key)
        for rid in d.preempt:
            self._preempt(self.running[rid], by_engine=False)
        for a in d.drop:
            self._drop_prefix(a, keep_host_copy=True)
        for a in d.evict:
            self._evict_prefix(a)
        for key, until in d.hold.items():
            h = self.held[key]
            change = (until > self.now) - (h.expires_s > self.now)
            self.used_kv += change * h.tokens
            self.prefixes[h.agent].users += change  # a held context keeps its prefix
            held = self.held[key] = EngineState.held_until(h, until)
            if until > self.now:
                # the event names this very hold: by its time the context may have been used,
                # re-held, or replaced by the stage's next context (offered, never counted)
                self._push(until, _HOLD, (key, held))
        self._drop_offers()
        for a in d.load:
            self._make_resident(a)
        for rid, c in d.credit.items():
            (self.running.get(rid) or self.waiting[rid]).req.credit_s = float(c)
        for rid, c in d.cache_priority.items():
            job = self.running.get(rid)
            (job or self.waiting[rid]).req.cache_priority = float(c)
            if job is not None:  # running: its stage's context takes the new priority
                self._set_ctx_priority(job.req)
        for rid in d.admit:
            r = self._wreq.pop(rid)
            self._wready_sum = self._wready_sum - r.ready_s if self._wreq else 0.0
            self._wprompt -= r.prompt_tokens + r.generated_tokens
            i = bisect_left(self._wprog_keys, self._wprog_key(r))
            del self._wprog_keys[i]
            del self._wprog[i]
            self._admit(self.waiting.pop(rid))
        self._kv_changed()
        if self.record_timeline:
            self.kv_trace.append((self.now, self.used_kv))
