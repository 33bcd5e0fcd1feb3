"""Multi-turn sessions: the Mooncake session rule on a hand-built trace and on the shared
traces, agent-session traces, and the shipped generated example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from topas.api import simulate
from topas.workloads import get_workload
from topas.workloads.dists import SpecError
from topas.workloads.mooncake import TraceRequest, read_mooncake
from topas.workloads.sessions import (
    EXAMPLE,
    group_sessions,
    load_agent_trace,
    load_mooncake_sessions,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "mooncake"
TRACES = sorted(SHARED.glob("*.jsonl")) if SHARED.is_dir() else []


def req(ts_ms, n_in, ids, n_out=50, line=0):
    return TraceRequest(line, float(ts_ms), n_in, n_out, tuple(ids))


# name -> (timestamp ms, input tokens, hash ids); complete chain = ids[: input // 512]
HAND = [
    ("A", 0, 1100, [0, 1, 2]),  # chain [0, 1]
    ("B", 1000, 1700, [0, 1, 3, 4]),  # extends A's chain, longer: continues A
    ("C", 1500, 2000, [0, 1, 5, 6]),  # A is no longer a tail (B is): new session
    ("D", 2000, 600, [0, 9]),  # chain [0]: too short to be continued
    ("E", 2500, 1200, [0, 9, 10]),  # so E is new, though it extends D
    ("F", 3000, 2300, [0, 1, 3, 7, 8]),  # extends B's chain [0, 1, 3]: A-B-F
    ("G", 3500, 2100, [0, 1, 5, 6, 11]),  # extends C's chain [0, 1, 5]: C-G
    ("H", 4000, 1900, [0, 1, 5, 6]),  # extends G's chain [0, 1, 5, 6] but is shorter: new
    ("I", 4500, 2600, [0, 1, 3, 7, 12, 13]),  # extends F's chain [0, 1, 3, 7]: A-B-F-I
    ("J", 5000, 2700, [0, 1, 3, 7, 14, 15]),  # F was continued by I (a branch): new session
    ("Y", 5100, 1600, [20, 21, 22, 31]),  # chain [20, 21, 22]
    ("X", 5200, 1100, [20, 21, 30]),  # not an extension of Y's chain: new, chain [20, 21]
    ("Z", 5300, 2100, [20, 21, 22, 23, 24]),  # extends X (2 blocks) and Y (3): longest, Y
    ("P", 6000, 1100, [50, 51, 52]),  # chain [50, 51]
    ("Q", 6100, 1050, [50, 51, 53]),  # extends P's chain but shorter: new, chain [50, 51]
    ("R", 6200, 1300, [50, 51, 54]),  # extends P and Q equally: the most recent, Q
]
EXPECTED = [
    ["A", "B", "F", "I"],
    ["C", "G"],
    ["D"],
    ["E"],
    ["H"],
    ["J"],
    ["Y", "Z"],
    ["X"],
    ["P"],
    ["Q", "R"],
]


def test_session_rule_on_a_hand_built_trace():
    reqs = [req(ts, n, ids) for _, ts, n, ids in HAND]
    names = [h[0] for h in HAND]
    got = [[names[j] for j in g] for g in group_sessions(reqs)]
    assert got == EXPECTED
    # min_blocks=1 lets the one-block chain [0] of D continue into E
    got1 = [[names[j] for j in g] for g in group_sessions(reqs, min_blocks=1)]
    assert ["D", "E"] in got1


def write(tmp_path: Path, rows: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_mooncake_sessions_become_multi_call_tasks(tmp_path):
    rows = [
        {"timestamp": ts, "input_length": n, "output_length": 40 + k, "hash_ids": ids}
        for k, (_, ts, n, ids) in enumerate(HAND)
    ]
    p = write(tmp_path, rows)
    wl = get_workload(f"sessions:{p}")
    assert wl.name == "mooncake-sessions:t"
    assert len(wl.sessions) == len(EXPECTED) and wl.default_tasks == len(EXPECTED)
    tasks = wl.sample(len(EXPECTED), wl.default_rate, np.random.default_rng(0))
    prefix = {a.name: a.prefix_tokens for a in wl.agents}
    by = {h[0]: (k, h) for k, h in enumerate(HAND)}
    for t, names in zip(tasks, EXPECTED):
        (st,) = t.stages
        assert st.kind == "session" and len(st.calls) == len(names)
        k0, first = by[names[0]]
        assert t.arrival_s == pytest.approx(first[1] / 1000.0 * 1.0)  # native rate: no rescale
        for j, (c, n) in enumerate(zip(st.calls, names)):
            k, (_, ts, n_in, _) = by[n]
            assert prefix[st.agent] + c.prompt_tokens == n_in  # every prompt token kept
            assert c.output_tokens == 40 + k
            nxt = by[names[j + 1]][1][1] if j + 1 < len(names) else None
            # think time = the trace gap to the next round; none after the last
            assert c.tool_delay_s == pytest.approx((nxt - ts) / 1000.0 if nxt else 0.0)
    # agents come from first rounds: A and J share [0, 1]; C and H share [0, 1, 5, 6], capped
    # at the shortest round of those sessions minus one (H: 1,900 tokens)
    agent = [t.stages[0].agent for t in tasks]
    assert agent[0] == agent[5] == "hash:0..1/2" and prefix[agent[0]] == 1024
    assert agent[1] == agent[4] == "hash:0..6/4" and prefix[agent[1]] == 1899
    assert agent[2] == agent[3]  # D and E share [0, 9]
    # another rate rescales session arrivals, not think times
    slow = wl.sample(len(EXPECTED), wl.default_rate / 2, np.random.default_rng(0))
    assert slow[-1].arrival_s == pytest.approx(2 * tasks[-1].arrival_s)
    assert slow[0].stages == tasks[0].stages


@pytest.mark.skipif(not TRACES, reason="shared/data/mooncake is absent")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_shared_traces_group_into_sessions_that_obey_the_rule(path):
    reqs = read_mooncake(path)
    groups = group_sessions(reqs)
    flat = sorted(j for g in groups for j in g)
    assert flat == list(range(len(reqs)))  # every request in exactly one session
    for g in groups:
        assert g == sorted(g)
        for a, b in zip(g, g[1:]):
            ra, rb = reqs[a], reqs[b]
            chain = ra.hash_ids[: ra.input_length // 512]
            assert len(chain) >= 2 and rb.hash_ids[: len(chain)] == chain
            assert rb.input_length > ra.input_length and rb.timestamp_ms >= ra.timestamp_ms
    multi = [g for g in groups if len(g) > 1]
    assert multi  # both traces have multi-turn sessions
    wl = load_mooncake_sessions(path, max_context_tokens=None)
    tasks = wl.sample(len(wl.sessions), wl.default_rate, np.random.default_rng(0))
    prefix = {a.name: a.prefix_tokens for a in wl.agents}
    assert sum(t.n_calls for t in tasks) == len(reqs)
    assert sum(
        prefix[t.stages[0].agent] + c.prompt_tokens for t in tasks for c in t.stages[0].calls
    ) == sum(r.input_length for r in reqs)


AGENT_ROWS = [
    {
        "session_id": "a",
        "timestamp": 0.0,
        "agent": "coder",
        "prefix_tokens": 3000,
        "appended_tokens": 200,
        "output_tokens": 100,
        "tool_latency_s": 1.5,
    },
    {
        "session_id": "b",
        "timestamp": 4.0,
        "agent": "coder",
        "prefix_tokens": 2800,
        "appended_tokens": 50,
        "output_tokens": 30,
    },
    {
        "session_id": "a",
        "agent": "coder",
        "prefix_tokens": 3300,
        "appended_tokens": 400,
        "output_tokens": 80,
        "tool_latency_s": 0.5,
    },
    {
        "session_id": "b",
        "agent": "coder",
        "prefix_tokens": 2880,
        "appended_tokens": 10,
        "output_tokens": 5,
        "tool_latency_s": 9.0,
    },
]


def test_agent_trace_rounds_prefix_and_arrivals(tmp_path):
    p = write(tmp_path, AGENT_ROWS)
    for wl in (get_workload(str(p)), get_workload(f"agent-trace:{p}")):  # sniffed or named
        assert wl.name == "agent-trace:t"
        assert [(a.name, a.prefix_tokens) for a in wl.agents] == [("coder", 2800)]
        ta, tb = wl.sample(2, wl.default_rate, np.random.default_rng(0))
        assert (ta.arrival_s, tb.arrival_s) == (0.0, 4.0)
        assert wl.default_rate == pytest.approx(1 / 4.0)
        a = ta.stages[0].calls
        assert [(c.prompt_tokens, c.output_tokens, c.tool_delay_s) for c in a] == [
            (3000 + 200 - 2800, 100, 1.5),
            (3300 + 400 - 2800, 80, 0.0),
        ]
        b = tb.stages[0].calls
        assert [(c.prompt_tokens, c.output_tokens, c.tool_delay_s) for c in b] == [
            (50, 30, 0.0),
            (90, 5, 0.0),
        ]
    # without timestamps arrivals are Poisson at the run's rate
    rows = [{k: v for k, v in r.items() if k != "timestamp"} for r in AGENT_ROWS]
    wl = load_agent_trace(write(tmp_path, rows, "u.jsonl"), default_rate=0.5)
    assert not wl.timed and wl.default_rate == 0.5
    t = wl.sample(2, 0.5, np.random.default_rng(0))
    assert t[0].arrival_s == 0.0 and t[1].arrival_s > 0
    # a Mooncake .jsonl is still read as a Mooncake trace
    m = write(
        tmp_path,
        [{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}],
        "m.jsonl",
    )
    assert get_workload(str(m)).name == "mooncake:m"


@pytest.mark.parametrize(
    "row,msg",
    [
        (
            {"session_id": "a", "prefix_tokens": 10, "appended_tokens": 0, "output_tokens": 1},
            "line 1: field 'appended_tokens' must be an integer >= 1, got 0",
        ),
        (
            {"session_id": "a", "prefix_tokens": 10, "appended_tokens": 1},
            "line 1: field 'output_tokens' is missing",
        ),
        (
            {
                "session_id": "a",
                "prefix_tokens": 10,
                "appended_tokens": 1,
                "output_tokens": 1,
                "tool": 1,
            },
            "line 1: unknown field(s) ['tool']",
        ),
        (
            {
                "session_id": "a",
                "prefix_tokens": 10,
                "appended_tokens": 1,
                "output_tokens": 1,
                "tool_latency_s": -1,
            },
            "line 1: field 'tool_latency_s' must be a number >= 0",
        ),
    ],
)
def test_agent_trace_errors_name_line_and_field(tmp_path, row, msg):
    p = write(tmp_path, [row])
    with pytest.raises(SpecError) as e:
        load_agent_trace(p)
    assert str(e.value) == f"{p} {msg}" or str(e.value).startswith(f"{p} {msg}"), str(e.value)


def test_agent_trace_rejects_reuse_beyond_the_previous_context(tmp_path):
    rows = [dict(AGENT_ROWS[0]), dict(AGENT_ROWS[2], prefix_tokens=3301)]
    p = write(tmp_path, rows)
    with pytest.raises(
        SpecError,
        match=r"line 2: session 'a': prefix_tokens 3301 is more "
        r"than the previous round's whole context",
    ):
        load_agent_trace(p)
    # explicit round numbers order the rounds
    rows = [dict(AGENT_ROWS[2], round=1), dict(AGENT_ROWS[0], round=0)]
    t = load_agent_trace(write(tmp_path, rows, "r.jsonl")).sample(1, 1.0, np.random.default_rng(0))[
        0
    ]
    assert [c.output_tokens for c in t.stages[0].calls] == [100, 80]


def test_shipped_example_is_generated_small_and_runs():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts/make_agent_session_example.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert EXAMPLE.stat().st_size < 100_000
    wl = get_workload("agent-sessions")
    assert len(wl.sessions) == 40 and {a.name for a in wl.agents} == {"coder", "researcher"}
    res = simulate("agent-sessions", "fcfs", n_tasks=10, seed=0)
    assert len(res.tasks) == 10
    assert sum(r.task_id >= 0 for r in res.requests) == sum(len(s.calls) for s in wl.sessions[:10])


def test_sessions_scheme_runs_end_to_end_and_names_missing_files(tmp_path):
    rows = [
        {"timestamp": ts, "input_length": n, "output_length": 30, "hash_ids": ids}
        for _, ts, n, ids in HAND
    ]
    p = write(tmp_path, rows)
    res = simulate(f"sessions:{p}", "topas", n_tasks=len(EXPECTED), seed=0)
    assert len(res.tasks) == len(EXPECTED) and len(res.requests) == len(HAND)
    with pytest.raises(ValueError, match="does not exist"):
        get_workload(f"sessions:{tmp_path / 'nope.jsonl'}")
    with pytest.raises(ValueError, match=r"SCHEME:PATH with scheme \['agent-trace', 'sessions'\]"):
        get_workload("nosuch:thing")
