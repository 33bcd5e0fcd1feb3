"""The benchmark scripts' command lines: bad input is a one-line usage error before any run,
and parameters are converted by the policy's own declarations (benchmarks/paired.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--seeds", "1"], "at least 2 distinct seeds"),
        (["--seeds", "x-y"], "--seeds 'x-y'"),
        (["--workloads", "nope"], "workload 'nope'"),
        (["--baselines", "fcfs,zzz"], "policy 'zzz'"),
        (["--param", "group_agents=nah"], "group_agents='nah'"),
        (["--param", "bogus=1"], "unknown parameter 'bogus'"),
        (["--param", "K"], "expected KEY=VALUE"),
    ],
)
def test_paired_bad_input_is_a_usage_error(args, needle, capsys, tmp_path):
    paired = _load("paired")
    base = ["--seeds", "1,2", "--workloads", "chain3", "--quiet", "--cache-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as ex:
        paired.main(base + args)
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert needle in err
    assert not any(tmp_path.iterdir())  # nothing ran


def test_paired_choice_value_none_is_the_string(capsys, tmp_path):
    # group_agents=none names a choice; it used to become Python None and every target
    # run failed silently
    paired = _load("paired")
    rc = paired.main(
        [
            "--seeds", "1,2", "--workloads", "toy-chain", "--task-mult", "0.1",
            "--baselines", "fcfs", "--cache", "on", "--quiet", "--jobs", "1",
            "--cache-dir", str(tmp_path), "--param", "group_agents=none",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "failed" not in out
    assert "'group_agents': 'none'" in out
    assert "worst mean difference: " in out and "none (" not in out


def test_bench_decisions_bad_input(capsys, monkeypatch):
    bench = _load("bench_decisions")
    for argv, needle in (
        (["--policy", "nope"], "policy 'nope'"),
        (["--param", "bogus=1"], "unknown parameter 'bogus'"),
        (["--repeat", "0"], "--repeat 0"),
    ):
        monkeypatch.setattr(sys, "argv", ["bench_decisions.py", *argv])
        with pytest.raises(SystemExit) as ex:
            bench.main()
        assert ex.value.code == 2
        assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    "probe, needle",
    [
        ("nope", "unknown"),
        ("evict-penalty=x", "needs evict-penalty=W"),
        ("step-admission=0", "must be >= 1"),
        ("trim-oldest=3", "takes no value"),
    ],
)
def test_cache_probes_bad_probe_is_a_usage_error(probe, needle, capsys):
    probes = _load("cache_probes")
    with pytest.raises(SystemExit) as ex:
        probes.main(["--probe", probe, "--tasks", "2"])
    assert ex.value.code == 2
    got = capsys.readouterr()
    err = got.err.strip().splitlines()[-1]
    assert needle in err and repr(probe) in err
    assert "seed" not in got.out  # nothing ran (not even the header)


def test_cache_probes_bad_param_is_a_usage_error(capsys):
    probes = _load("cache_probes")
    with pytest.raises(SystemExit) as ex:
        probes.main(["--param", "cache_priority=sometimes", "--tasks", "2"])
    assert ex.value.code == 2
    got = capsys.readouterr()
    err = got.err.strip().splitlines()[-1]
    assert "--param" in err and "cache_priority" in err
    assert "seed" not in got.out


def test_cache_probes_param_reaches_the_flagship_only():
    probes = _load("cache_probes")
    on = probes.run("groupchat", "topas", 0.0625, 12, 1, "none")
    off = probes.run("groupchat", "topas", 0.0625, 12, 1, "none", {"off": ("cache_priority",)})
    spf = probes.run("groupchat", "spf", 0.0625, 12, 1, "none", {"off": ("cache_priority",)})
    assert spf == probes.run("groupchat", "spf", 0.0625, 12, 1, "none")
    assert on != off


def test_cache_probes_patch_one_run_only():
    from topas.policies.topas import search

    probes = _load("cache_probes")
    score0 = search.GreedyPack._score
    base = probes.run("groupchat", "topas", 0.0625, 40, 1, "none")
    pen = probes.run("groupchat", "topas", 0.0625, 40, 1, "evict-penalty=1000000")
    assert search.GreedyPack._score is score0  # the search is restored after the run
    assert base["evictions"] > 0 and base["lost_tokens"] > 0
    assert pen["evictions"] < base["evictions"]  # the penalty reaches the Score
    # per-step admission at the engine's 8,192-token budget changes nothing here
    step = probes.run("groupchat", "topas", 0.0625, 40, 1, "step-admission=8192")
    assert step["mean"] == base["mean"]
    # a hit needs a context the cache held when its request first appeared
    assert 0 < base["hits"] <= base["offered"]


def test_cache_probes_trim_oldest_evicts_the_youngest_task_first():
    from types import SimpleNamespace

    from topas.api import sample_tasks
    from topas.engine.cost import DEFAULT_PROFILE, get_profile
    from topas.engine.simulator import Simulator
    from topas.policies import build_policy

    probes = _load("cache_probes")
    wl, tasks = sample_tasks("groupchat", 2, 0.0625, 1)
    sim = Simulator(
        tasks, {a.name: a for a in wl.agents}, get_profile(DEFAULT_PROFILE), build_policy("spf")
    )
    probes._trim_oldest(sim)
    sim.tasks[1] = SimpleNamespace(arrival_s=1.0)
    sim.tasks[2] = SimpleNamespace(arrival_s=2.0)
    # LRU order would trim task 1's context (finished first)
    sim.ctx_cache[(1, "a")] = ("Writer", 100, 100)
    sim.ctx_cache[(2, "b")] = ("Writer", 100, 100)
    sim.ctx_cache_tokens = 200
    sim.used_kv = sim.config.kv_budget_tokens - 150
    sim._trim_ctx_cache()
    assert sim.ctx_cache == {(1, "a"): ("Writer", 100, 100), (2, "b"): ("Writer", 50, 50)}
    assert sim.ctx_cache_tokens == 150


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--configs", "0"], "--configs 0"),
        (["--param", "bogus=1"], "unknown parameter 'bogus'"),
        (["--seeds", "1,x"], "--seeds '1,x'"),
        (["--workloads", "nope"], "workload 'nope'"),
    ],
)
def test_random_search_bad_input_is_a_usage_error(args, needle, capsys, tmp_path):
    rs = _load("random_search")
    with pytest.raises(SystemExit) as ex:
        rs.main(["--quiet", "--cache-dir", str(tmp_path), *args])
    assert ex.value.code == 2
    assert needle in capsys.readouterr().err.strip().splitlines()[-1]
    assert not any(tmp_path.iterdir())  # nothing ran


def test_random_search_samples_valid_distinct_settings():
    import random

    from topas.policies import build_policy

    rs = _load("random_search")
    cfgs = rs.sample(random.Random(3), 40)
    assert len({tuple(sorted(c.items())) for c in cfgs}) == 40
    for c in cfgs:
        assert c and set(c) <= set(rs.SPACE) | {"backfill"}
        assert all(c[k] in rs.SPACE[k] for k in c if k != "backfill")
        if c.get("hol_block") == "false":
            assert c["backfill"] == "false"
        build_policy("topas", 0, c)  # every sampled setting is a valid flagship
    assert rs.sample(random.Random(3), 40) == cfgs  # the sampler's seed fixes the settings


def test_random_search_runs_and_writes_every_setting(capsys, tmp_path):
    import json

    from topas.api import simulate
    from topas.metrics import summarize

    rs = _load("random_search")
    out = tmp_path / "search.json"
    rc = rs.main(
        [
            "--workloads", "toy-chain", "--configs", "2", "--task-mult", "0.1", "--jobs", "1",
            "--quiet", "--cache-dir", str(tmp_path / "c"), "--out", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    doc = json.loads(out.read_text())
    assert [s["default"] for s in doc["settings"]] == [True, False, False]
    assert "toy-chain: defaults" in capsys.readouterr().out
    # the defaults' mean is the flagship's own runs, averaged over the seeds
    n = doc["settings"][0]["means"]["toy-chain"]
    from topas.reproduce import OTHER_TASKS_FULL, rate_of

    tasks = _load("paired").TASKS.get("toy-chain", OTHER_TASKS_FULL)
    runs = [
        summarize(
            simulate(
                "toy-chain", "topas", rate=rate_of("toy-chain", 1.25),
                n_tasks=int(round(tasks * 0.1)), seed=s,
            )
        )["mean_jct_s"]
        for s in (1, 2)
    ]  # fmt: skip
    assert n == pytest.approx(sum(runs) / 2)


def test_search_quality_counts_local_searches_against_the_exhaustive_one(capsys):
    sq = _load("search_quality")
    for argv, needle in (
        (["--policy", "fcfs"], "not a TOPAS policy"),
        (["--param", "bogus=1"], "unknown parameter 'bogus'"),
        (["--workload", "nope"], "workload 'nope'"),
    ):
        with pytest.raises(SystemExit) as ex:
            sq.main(argv)
        assert ex.value.code == 2
        assert needle in capsys.readouterr().err
    # dag10wide's ten agents exceed M = 6: every decision with competition searches locally
    assert sq.main(["--tasks", "8", "--param", "room_moves=false"]) == 0
    out = capsys.readouterr().out
    assert "{'room_moves': False} on dag10wide" in out
    n = int(out.split("seed 1): ")[1].split(" decisions")[0])
    assert n > 0
    assert sq.main(["--tasks", "8", "--param", "M=16"]) == 0  # never local
    assert ": 0 decisions searched locally, 0 below" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workload", "nope"], "--workload 'nope'"),
        (["--seeds", "1,x"], "--seeds '1,x'"),
        (["--kv-budget", "0"], "budgets must be positive"),
        (["--policies", "fcfs,zzz"], "policy 'zzz'"),
        (["--param", "bogus=1"], "unknown parameter 'bogus'"),
        (["--tasks", "0"], "--tasks 0"),
        (["--workload", "metagpt-tl", "--kv-budget", "12000"], "more than the KV budget"),
    ],
)
def test_memory_split_bad_input_is_a_usage_error(args, needle, capsys):
    ms = _load("memory_split")
    with pytest.raises(SystemExit) as ex:
        ms.main(["--workload", "toy-chain", "--tasks", "4", *args])
    assert ex.value.code == 2
    assert needle in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("cache", [True, False])
def test_memory_split_accounts_for_every_token(cache):
    # prefixes + running requests + live holds + free is the whole budget at every decision,
    # so the time-weighted means add up to it too; a smaller budget leaves less free room
    ms = _load("memory_split")
    free = {}
    for budget in (20000, 32768):
        r = ms.run_one("metagpt-tl", "topas", 0.02, 6, 1, budget, cache, {})
        parts = r["prefix"] + r["running"] + r["held"] + r["free"]
        assert parts == pytest.approx(budget, rel=1e-9)
        assert r["prefix"] > 0 and r["running"] > 0 and r["batch"] > 0
        assert 0 <= r["any_waiting"] <= 1
        free[budget] = r["free"]
    assert free[20000] < free[32768]


def test_memory_split_reads_the_state_after_each_decision():
    # the first decision of a run admits onto an empty engine: the interval it opens holds
    # the admitted requests and their prefixes (the next snapshot, the old end-of-interval
    # view, shows them only once an event has passed), and the free room is the budget less
    # what the decision uses.  Snapshots hold live engine objects, so the expectations are
    # read at the decision itself.
    from topas.api import sample_tasks
    from topas.engine.cost import get_profile
    from topas.engine.simulator import Simulator
    from topas.policies import make_policy
    from topas.workflow.model import round_up_to_blocks

    ms = _load("memory_split")
    seen = []

    class Spy:
        name = "fcfs"

        def __init__(self):
            self.pol = make_policy("fcfs", seed=1)

        def decide(self, snap):
            d = self.pol.decide(snap)
            if d.admit and not seen:
                adm = [r for r in snap.waiting if r.request_id in d.admit]
                bs = snap.config.block_size
                seen.append(
                    {
                        "after": ms.after_decision(snap, d),
                        "idle": not snap.running,
                        "n": len(adm),
                        "tokens": sum(r.prompt_tokens + r.generated_tokens for r in adm),
                        "blocks": sum(
                            round_up_to_blocks(r.prompt_tokens + r.generated_tokens, bs)
                            for r in adm
                        ),
                        "prefix": sum(snap.prefixes[a].tokens for a in {r.agent for r in adm}),
                        "free": snap.free_kv_tokens,
                        "left": len(snap.waiting) - len(adm),
                    }
                )
            return d

    w, tasks = sample_tasks("toy-chain", 2, 0.01, 1)
    Simulator(tasks, {a.name: a for a in w.agents}, get_profile(ms.PROFILE), Spy(), seed=1).run()
    x = seen[0]
    after = x["after"]
    assert x["idle"] and x["n"] >= 1
    assert after["batch"] == x["n"]
    assert after["running"] == x["tokens"]
    assert after["prefix"] >= x["prefix"] > 0
    assert after["free"] <= x["free"] - x["blocks"]
    assert after["waiting"] == x["left"]
