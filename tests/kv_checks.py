"""Shared checks on snapshots (imported by several test modules)."""

from __future__ import annotations

from topas.engine.snapshot import Location, Snapshot
from topas.engine.state import kv_footprint


def assert_kv_accounted(s: Snapshot) -> None:
    """Every KV token the engine counts as used belongs to a resident prefix, an admitted
    request or a live held context (an expired hold must have given its memory back)."""
    fp = kv_footprint(s.prefixes, s.running, s.held, s.time_s)  # the engines' one rule
    assert s.used_kv_tokens == fp.used_tokens, (s.time_s, s.used_kv_tokens, fp.used_tokens)
    assert 0 <= s.used_kv_tokens <= s.kv_budget_tokens
    # a prefix's users are its admitted requests and its live held contexts, and a prefix
    # with users is resident (a held context continues its prefix's KV)
    users = fp.users
    for a, p in s.prefixes.items():
        assert p.users == users.get(a, 0), (s.time_s, a, p.users, users.get(a, 0))
        assert p.users == 0 or p.location == Location.DEVICE, (s.time_s, a, p.location)
    assert_queue_indices(s)


def assert_queue_indices(s: Snapshot) -> None:
    """The queue indices an engine may supply agree with ``waiting`` itself: FCFS order,
    program order, and the sum of ready times (Continuum's mean queueing time)."""
    if s.waiting_fcfs:
        keys = [(r.ready_s, r.seq) for r in s.waiting]
        assert keys == sorted(keys), s.time_s
    if s.waiting_program is not None:
        assert sorted(r.request_id for r in s.waiting_program) == sorted(
            r.request_id for r in s.waiting
        ), s.time_s
        pk = [
            (s.tasks[r.task_id].arrival_s, r.task_id, r.ready_s, r.seq) for r in s.waiting_program
        ]
        assert pk == sorted(pk), s.time_s
    if s.waiting_ready_sum_s is not None:
        exact = sum(r.ready_s for r in s.waiting)
        assert abs(s.waiting_ready_sum_s - exact) <= 1e-9 * max(1.0, abs(exact)), (
            s.time_s,
            s.waiting_ready_sum_s,
            exact,
        )
