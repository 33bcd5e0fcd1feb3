"""Mooncake trace replay: reader totals on the shared traces, the hash-chain -> agent mapping
on a hand-built trace, and errors with line numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from topas.workloads import get_workload
from topas.workloads.dists import SpecError
from topas.workloads.mooncake import UNSHARED, load_mooncake, read_mooncake

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "mooncake"
TRACES = sorted(SHARED.glob("*.jsonl")) if SHARED.is_dir() else []


def write(tmp_path: Path, rows: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


@pytest.mark.skipif(not TRACES, reason="shared/data/mooncake is absent")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_reader_reproduces_request_count_and_token_totals(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    reqs = read_mooncake(path)
    assert len(reqs) == len(rows)
    assert sum(r.input_length for r in reqs) == sum(r["input_length"] for r in rows)
    assert sum(r.output_length for r in reqs) == sum(r["output_length"] for r in rows)
    # the workload keeps every token: prefix + dynamic prompt = input, outputs unchanged
    wl = load_mooncake(path, max_context_tokens=None)
    tasks = wl.sample(len(reqs), wl.default_rate, np.random.default_rng(0))
    prefix = {a.name: a.prefix_tokens for a in wl.agents}
    calls = [(t.stages[0].agent, t.stages[0].calls[0]) for t in tasks]
    assert sum(prefix[a] + c.prompt_tokens for a, c in calls) == sum(
        r["input_length"] for r in rows
    )
    assert sum(c.output_tokens for _, c in calls) == sum(r["output_length"] for r in rows)
    span_s = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000.0
    assert tasks[-1].arrival_s == pytest.approx(span_s)
    assert wl.default_rate == pytest.approx((len(rows) - 1) / span_s)


@pytest.mark.skipif(not TRACES, reason="shared/data/mooncake is absent")
def test_default_loader_skips_requests_over_the_kv_budget():
    path = TRACES[0]
    wl = get_workload(str(path))
    over = sum(1 for r in read_mooncake(path) if r.input_length + r.output_length > 32768)
    assert wl.skipped == over and len(wl.requests) + over == len(read_mooncake(path))
    assert all(r.input_length + r.output_length <= 32768 for r in wl.requests)


def test_hash_chains_become_agents(tmp_path):
    p = write(
        tmp_path,
        [
            {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [0, 1, 2]},
            {"timestamp": 500, "input_length": 1400, "output_length": 20, "hash_ids": [0, 1, 3]},
            {"timestamp": 1000, "input_length": 1100, "output_length": 30, "hash_ids": [0, 1, 3]},
            {"timestamp": 1500, "input_length": 600, "output_length": 40, "hash_ids": [7, 8]},
            {"timestamp": 3000, "input_length": 700, "output_length": 50, "hash_ids": [0, 9]},
        ],
    )
    wl = load_mooncake(p)
    prefix = {a.name: a.prefix_tokens for a in wl.agents}
    tasks = wl.sample(5, wl.default_rate, np.random.default_rng(0))
    agents = [t.stages[0].agent for t in tasks]
    # request 0 shares [0, 1] with 1 and 2; 1 and 2 share [0, 1, 3] (three blocks, capped
    # below the shorter member's 1,100 input tokens); 3 shares nothing; 4 shares [0]
    assert agents == ["hash:0..1/2", "hash:0..3/3", "hash:0..3/3", UNSHARED, "hash:0..0/1"]
    assert prefix == {"hash:0..1/2": 1024, "hash:0..3/3": 1099, UNSHARED: 0, "hash:0..0/1": 512}
    assert [t.stages[0].calls[0].prompt_tokens for t in tasks] == [476, 301, 1, 600, 188]
    assert [t.arrival_s for t in tasks] == [0.0, 0.5, 1.0, 1.5, 3.0]
    assert wl.default_rate == pytest.approx(4 / 3.0)
    # replaying at twice the rate halves the gaps; rng is not used (a trace is data)
    assert [t.arrival_s for t in wl.sample(3, 2 * wl.default_rate, None)] == [0.0, 0.25, 0.5]


@pytest.mark.parametrize(
    "line, problem",
    [
        ("{not json", "not valid JSON"),
        ('{"timestamp": 5, "input_length": 10, "output_length": 2}', "'hash_ids' is missing"),
        (
            '{"timestamp": 5, "input_length": 0, "output_length": 2, "hash_ids": []}',
            "'input_length' must be an integer >= 1",
        ),
        (
            '{"timestamp": 5, "input_length": 10, "output_length": 2.5, "hash_ids": [1]}',
            "'output_length' must be an integer >= 1",
        ),
        (
            '{"timestamp": -1, "input_length": 10, "output_length": 2, "hash_ids": [1]}',
            "'timestamp' must be a number >= 0",
        ),
        (
            '{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}',
            "has 2 blocks, more than the 10 input tokens",
        ),
        (
            '{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": ["a"]}',
            "'hash_ids' must be a list of integers",
        ),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, problem):
    good = {"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    p = write(tmp_path, [good, good, line])
    with pytest.raises(SpecError) as e:
        read_mooncake(p)
    assert f"{p} line 3" in str(e.value) and problem in str(e.value), str(e.value)


def test_timestamps_must_not_go_back(tmp_path):
    rows = [
        {"timestamp": t, "input_length": 10, "output_length": 2, "hash_ids": [1]} for t in (5, 3)
    ]
    with pytest.raises(SpecError, match="line 2: field 'timestamp' goes back in time"):
        read_mooncake(write(tmp_path, rows))
