"""The simulator's private state: event kinds and each request's job (its truth and progress)."""

from __future__ import annotations

from topas.engine.snapshot import RequestState

# event kinds (heap entries are (time, seq, kind, payload))
_ARRIVAL, _TOOL, _SWAP_IN, _SWAP_OUT, _HOLD = range(5)
# cluster mode only (engine/cluster.py): a call routed here (payload: task state, stage,
# round, the cause to note), a context whose stage a router
# moved elsewhere, a task finished on another replica
_INJECT, _FORGET, _TASK_DONE = range(5, 8)
_EVENT_NAMES = {
    _ARRIVAL: "arrival",
    _TOOL: "tool",
    _SWAP_IN: "swap-in",
    _SWAP_OUT: "swap-out",
    _HOLD: "hold-expiry",
    _INJECT: "routed",
    _FORGET: "route-away",
    _TASK_DONE: "task-done",
}


class PolicyStalled(RuntimeError):
    """The engine is idle, requests wait, nothing else can happen, and the policy admits none."""


class _Job:
    """Engine-private state of one request: its truth and its progress."""

    __slots__ = (
        "req",
        "out_total",
        "prefill_left",
        "ctx",
        "tool_after_s",
        "last",
        "first_admit_s",
        "hit",
        "gen0",
    )

    def __init__(self, req: RequestState, out_total: int, tool_after_s: float, last: bool):
        self.req = req
        self.out_total = out_total
        self.prefill_left = 0
        self.ctx = 0  #: attention context now (prefix + dynamic tokens in KV)
        self.tool_after_s = tool_after_s
        self.last = last
        self.first_admit_s = -1.0
        self.hit = False
        self.gen0 = 0  #: generated tokens kept at the latest admission (prefilled again)


class _PrefixJob:
    """Recomputing an agent prefix by prefill."""

    __slots__ = ("agent", "prefill_left", "ctx")

    def __init__(self, agent: str, tokens: int):
        self.agent = agent
        self.prefill_left = tokens
        self.ctx = 0
