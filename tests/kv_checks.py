"""Shared checks on snapshots (imported by several test modules)."""

from __future__ import annotations

from topas.engine.snapshot import Location, Snapshot


def assert_kv_accounted(s: Snapshot) -> None:
    """Every KV token the engine counts as used belongs to a resident prefix, an admitted
    request or a live held context (an expired hold must have given its memory back)."""
    live = sum(p.tokens for p in s.prefixes.values() if p.location == Location.DEVICE)
    live += sum(r.kv_tokens for r in s.running)
    live += sum(h.tokens for h in s.held.values() if h.expires_s > s.time_s)
    assert s.used_kv_tokens == live, (s.time_s, s.used_kv_tokens, live)
    assert 0 <= s.used_kv_tokens <= s.kv_budget_tokens
    # a prefix's users are its admitted requests and its live held contexts, and a prefix
    # with users is resident (a held context continues its prefix's KV)
    users: dict[str, int] = {}
    for r in s.running:
        users[r.agent] = users.get(r.agent, 0) + 1
    for h in s.held.values():
        if h.expires_s > s.time_s:
            users[h.agent] = users.get(h.agent, 0) + 1
    for a, p in s.prefixes.items():
        assert p.users == users.get(a, 0), (s.time_s, a, p.users, users.get(a, 0))
        assert p.users == 0 or p.location == Location.DEVICE, (s.time_s, a, p.location)
