"""The command line: JSON summary keys, comparisons, one-line errors, nothing half-written."""

from __future__ import annotations

import json

import pytest

from topas.cli import main
from topas.cli_run import JSON_KEYS


def test_run_json_prints_summary(capsys):
    assert (
        main(
            [
                "run",
                "--workload",
                "toy-chain",
                "--policy",
                "fcfs",
                "--tasks",
                "8",
                "--seed",
                "3",
                "--json",
            ]
        )
        == 0
    )
    s = json.loads(capsys.readouterr().out)
    for k in JSON_KEYS:
        assert k in s, k
    assert s["requests"] > 8 and s["mean_jct_s"] >= s["mean_lower_bound_s"] > 0


def test_same_seed_same_result(capsys):
    outs = []
    for _ in range(2):
        main(["run", "--workload", "toy-chain", "--tasks", "6", "--seed", "11", "--json"])
        s = json.loads(capsys.readouterr().out)
        outs.append((s["mean_jct_s"], s["p99_jct_s"], s["requests"]))
    assert outs[0] == outs[1]


def test_run_writes_results_atomically(tmp_path, capsys):
    out = tmp_path / "r"
    assert (
        main(["run", "--workload", "toy-chain", "--tasks", "5", "--out", str(out), "--json"]) == 0
    )
    assert {p.name for p in out.iterdir()} == {
        "tasks.csv",
        "requests.csv",
        "summary.json",
        "counters.json",
    }
    lines = (out / "tasks.csv").read_text().splitlines()
    assert lines[0].startswith("task_id,") and len(lines) == 6


def test_compare_table(capsys):
    assert (
        main(
            [
                "compare",
                "--workload",
                "toy-chain",
                "--policies",
                "fcfs,lpm",
                "--tasks",
                "6",
                "--json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["fcfs", "lpm"]
    assert rows[0]["requests"] == rows[1]["requests"]  # same trajectories


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["run", "--workload", "nope", "--json"], "workload 'nope': unknown"),
        (["run", "--workload", "toy-chain", "--policy", "nope"], "policy 'nope': unknown"),
        (["run", "--workload", "toy-chain", "--profile", "tpu/x"], "profile 'tpu/x': unknown"),
        (["run", "--workload", "toy-chain", "--rate", "-1"], "argument --rate: -1: must be > 0"),
        (
            ["run", "--workload", "toy-chain", "--tasks", "0"],
            "argument --tasks: 0: must be an integer in [1,",
        ),
        (["run", "--workload", "toy-chain", "--kv-budget", "100"], "can never fit"),
        (["compare", "--workload", "toy-chain", "--policies", ","], "--policies"),
    ],
)
def test_errors_are_one_line_and_write_nothing(argv, pattern, tmp_path, capsys):
    out = tmp_path / "o"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert pattern in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_list(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for name in ("fcfs", "toy-chain", "a100-80g/qwen2.5-32b"):
        assert name in text


def test_workloads_show(capsys):
    assert main(["workloads", "show", "metagpt-tl", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {a["name"] for a in d["agents"]} >= {"TeamLeader", "Engineer"}
    assert d["mean_critical_path_s"] > 0
    assert main(["workloads", "show", "metagpt-tl"]) == 0
    text = capsys.readouterr().out
    assert "TeamLeader-revisit" in text and "prefix tokens" in text


def test_policy_params_reach_the_policy(capsys):
    base = [
        "run",
        "--workload",
        "toy-chain",
        "--tasks",
        "6",
        "--seed",
        "2",
        "--json",
        "--policy",
        "topas",
    ]
    assert main(base + ["--param", "rho=0.0", "--param", "redo_cost=decode"]) == 0
    capsys.readouterr()
    assert main(base + ["--param", "redo_cost=nope"]) == 2
    assert "redo_cost='nope'" in capsys.readouterr().err
    assert main(base + ["--param", "novalue"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
