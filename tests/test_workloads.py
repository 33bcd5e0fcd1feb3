"""Workloads: built-in structures, declared length statistics, reproducibility, the file
format's errors, and describe_workload."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from topas.engine.bounds import task_lower_bound
from topas.engine.cost import get_profile
from topas.engine.decision import Decision
from topas.engine.simulator import Simulator
from topas.policies import make_policy
from topas.policies.base import AdmissionPlan
from topas.workloads import get_workload, list_workloads
from topas.workloads.declarative import builtin_names, load_workload_file, parse_workload
from topas.workloads.describe import describe_workload
from topas.workloads.dists import SpecError, parse_dist

BUILTINS = [
    "chain3",
    "dag4",
    "dag10wide",
    "metagpt-sop",
    "metagpt-tl",
    "react",
    "mapreduce",
    "debate",
    "plan-execute",
    "supervisor",
    "groupchat",
    "mapreduce-hard",
    "plan-execute-hard",
]
PROFILE = get_profile("a100-80g/qwen2.5-32b")


def sample(name: str, n: int = 50, seed: int = 0, rate: float | None = None):
    wl = get_workload(name)
    return wl, wl.sample(n, rate or wl.default_rate, np.random.default_rng(seed))


def edges(task) -> set[tuple[str, str]]:
    return {(d, s.name) for s in task.stages for d in s.deps}


# --------------------------------------------------------------------------- registry
def test_every_builtin_is_registered_and_ships_as_yaml():
    assert set(BUILTINS) <= set(list_workloads())
    assert set(BUILTINS) == set(builtin_names())


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_tasks_are_valid_and_fit_the_default_budget(name):
    from topas.workflow.model import validate_fits, validate_task

    wl, tasks = sample(name, 30)
    agents = {a.name: a for a in wl.agents}
    assert wl.default_rate > 0 and wl.default_tasks >= 1 and wl.description
    for t in tasks:
        validate_task(t, agents)
        validate_fits(t, agents, PROFILE.kv_budget_tokens)
    arrivals = [t.arrival_s for t in tasks]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)


# --------------------------------------------------------------------------- structures
def test_chain3_structure():
    wl, tasks = sample("chain3", 5)
    for t in tasks:
        assert [s.name for s in t.stages] == ["s1", "s2", "s3"]
        assert edges(t) == {("s1", "s2"), ("s2", "s3")}
        assert len({s.agent for s in t.stages}) == 3
        assert all(len(s.calls) == 1 for s in t.stages)
    assert all(a.prefix_tokens >= 4000 for a in wl.agents)


def test_dag4_is_a_diamond():
    _, tasks = sample("dag4", 5)
    for t in tasks:
        assert edges(t) == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}
        assert len({s.agent for s in t.stages}) == 4


def test_dag10wide_fans_out_to_eight_and_joins():
    wl, tasks = sample("dag10wide", 5)
    for t in tasks:
        assert len(t.stages) == 10 and len({s.agent for s in t.stages}) == 10
        succ = t.successors()
        assert len(succ["root"]) == 8
        join = t.stages[t.stage_index["join"]]
        assert set(join.deps) == set(succ["root"])
    # the ten prefixes together exceed the KV budget: not all can stay resident
    assert sum(a.prefix_tokens for a in wl.agents) > PROFILE.kv_budget_tokens


def test_metagpt_sop_pipeline():
    wl, tasks = sample("metagpt-sop", 200)
    prefixes = {a.name: a.prefix_tokens for a in wl.agents}
    assert prefixes["Engineer"] == 9400 and prefixes["ProductManager"] == 5000
    files = []
    for t in tasks:
        by = {s.name: s for s in t.stages}
        assert len(by["ProductManager"].calls) == 2
        assert len(by["Architect"].calls) == 1 and by["Architect"].deps == ("ProductManager",)
        assert len(by["ProjectManager"].calls) == 1
        eng = [s for s in t.stages if s.kind == "Engineer"]
        files.append(len(eng))
        assert eng[0].deps == ("ProjectManager",)
        for k in range(1, len(eng)):  # one file after another
            assert eng[k].deps == (eng[k - 1].name,)
        assert all(len(s.calls) == 2 for s in eng)  # write + review
        # prompts grow with the files already written (history 0.6 of earlier outputs)
        firsts = [s.calls[0].prompt_tokens for s in eng]
        assert firsts[-1] > firsts[0]
        assert by["QaEngineer"].deps == (eng[-1].name,)
        assert 1 <= len(by["QaEngineer"].calls) <= 5
    assert min(files) == 3 and max(files) == 8


def test_metagpt_tl_revisits_the_team_leader():
    wl, tasks = sample("metagpt-tl", 100)
    roles = [
        "TeamLeader",
        "ProductManager",
        "TeamLeader",
        "Architect",
        "TeamLeader",
        "Engineer",
        "TeamLeader",
        "DataAnalyst",
        "TeamLeader",
    ]
    for t in tasks:
        assert [s.agent for s in t.stages] == roles
        names = [s.name for s in t.stages]
        assert edges(t) == set(zip(names, names[1:]))  # a chain of nine stages
        tl = [s for s in t.stages if s.agent == "TeamLeader"]
        assert len(tl[0].calls) == 3 and all(len(s.calls) == 1 for s in tl[1:])
        for s in t.stages:
            if s.agent != "TeamLeader":
                assert len(s.calls) >= 4  # 2 commands + >= 1 ReAct round + summary
                p = [c.prompt_tokens for c in s.calls]
                assert all(b > a for a, b in zip(p, p[1:])) or p[-1] == 12000  # context grows


def test_react_mapreduce_debate_structures():
    _, tasks = sample("react", 50)
    assert all(len(t.stages) == 1 and 1 <= len(t.stages[0].calls) <= 100 for t in tasks)
    _, tasks = sample("mapreduce", 5)
    for t in tasks:
        maps = [s for s in t.stages if s.kind == "map"]
        assert len(maps) == 8 and all(s.deps == ("split",) for s in maps)
        assert set(t.stages[t.stage_index["reduce"]].deps) == {s.name for s in maps}
        assert len({s.agent for s in maps}) == 1  # one shared Mapper prefix
    _, tasks = sample("debate", 5)
    for t in tasks:
        assert len(t.stages) == 6
        r0 = {s.name for s in t.stages if s.name.startswith("round.0.")}
        for s in t.stages:
            if s.name.startswith("round.1."):
                assert set(s.deps) == r0
                # round 2 reads the three answers of round 1
                outs = sum(t.stages[t.stage_index[d]].calls[-1].output_tokens for d in s.deps)
                assert s.calls[0].prompt_tokens > outs


def test_plan_execute_supervisor_groupchat_structures():
    _, tasks = sample("plan-execute", 50)
    for t in tasks:
        kinds = [s.kind for s in t.stages]
        assert kinds[0] == "plan" and kinds[1::2] == ["execute"] * ((len(kinds) - 1) // 2)
        assert 2 <= kinds.count("execute") <= 5 and kinds.count("replan") == kinds.count("execute")
    _, tasks = sample("supervisor", 50)
    workers = Counter()
    for t in tasks:
        kinds = [s.kind for s in t.stages]
        assert kinds[-1] == "answer" and kinds[:-1:2] == ["route"] * ((len(kinds) - 1) // 2)
        assert {s.agent for s in t.stages if s.kind in ("route", "answer")} == {"Supervisor"}
        workers.update(s.agent for s in t.stages if s.kind == "work")
    assert set(workers) == {"Researcher", "Coder", "Analyst"}
    _, tasks = sample("groupchat", 100)
    rounds = []
    for t in tasks:
        sel = [s for s in t.stages if s.kind == "select"]
        rounds.append(len(sel))
        assert all(s.agent == "ChatManager" for s in sel)
        # every call sees the whole conversation so far: prompts grow round by round
        assert sel[-1].calls[0].prompt_tokens > sel[0].calls[0].prompt_tokens
    assert min(rounds) >= 3 and max(rounds) == 10


def test_groupchat_calls_continue_the_conversation_their_agent_saw_last():
    """history 1.0 puts the whole conversation first: an agent's stage shares the leading
    tokens (the conversation then) with its previous stage in the chat, unless max_prompt
    cut either prompt; workloads without such stages share nothing."""
    _, tasks = sample("groupchat", 60)
    n_shared = 0
    for t in tasks:
        by = {s.name: s for s in t.stages}
        last: dict[str, str] = {}
        for s in t.stages:
            prev = last.get(s.agent)
            if s.shares_with:
                n_shared += 1
                src = by[s.shares_with]
                assert s.shares_with == prev and src.agent == s.agent
                # the earlier stage's history: its prompt less its own part, which a later
                # prompt of the same agent begins with
                assert 0 < s.shared_tokens < src.calls[0].prompt_tokens
                assert s.calls[0].prompt_tokens - s.shared_tokens >= 100  # its own prompt
            elif prev is not None and by[prev].calls[0].prompt_tokens < 12000:
                # only the chat's first round (no history yet) or a cut prompt shares nothing
                assert prev.startswith("round.0.") or s.calls[0].prompt_tokens >= 12000
            last[s.agent] = s.name
    assert n_shared > 200
    for name in ("dag4", "react", "metagpt-sop", "plan-execute"):
        _, tasks = sample(name, 20)
        assert not any(s.shares_with for t in tasks for s in t.stages)


# --------------------------------------------------------------------------- statistics
def test_fixed_lengths_are_exact():
    _, tasks = sample("dag10wide", 20)
    assert {
        (c.prompt_tokens, c.output_tokens) for t in tasks for s in t.stages for c in s.calls
    } == {(1024, 256)}


def test_react_rounds_and_tool_delays_match_their_declared_distributions():
    _, tasks = sample("react", 3000, seed=3)
    rounds = np.array([len(t.stages[0].calls) for t in tasks])
    # LogNormal(median 8, sigma 0.7) capped to [1, 100], rounded
    assert 7 <= np.median(rounds) <= 9
    assert rounds.max() <= 100
    frac_above = np.mean(rounds > 8 * np.exp(0.7))  # P(X > median * e^sigma) = 15.9%
    assert abs(frac_above - 0.159) < 0.03
    delays = np.array([c.tool_delay_s for t in tasks for c in t.stages[0].calls[:-1]])
    # mixture: 70% uniform [0.05, 1.0] s, 30% LogNormal(median 4 s), which is < 1 s 1%
    assert abs(np.mean(delays < 1.0) - (0.7 + 0.3 * 0.011)) < 0.02
    assert delays.max() <= 60.0 and delays.min() >= 0.05


def test_metagpt_sop_lengths_match_the_calibration():
    _, tasks = sample("metagpt-sop", 1000, seed=4)
    files = np.array([sum(s.kind == "Engineer" for s in t.stages) for t in tasks])
    assert abs(files.mean() - 5.5) < 0.15  # uniform [3, 8]
    assert set(np.unique(files)) == set(range(3, 9))
    writes = np.array(
        [s.calls[0].output_tokens for t in tasks for s in t.stages if s.kind == "Engineer"]
    )
    assert writes.min() >= 170 and writes.max() <= 820  # Parrot log range
    assert abs(np.median(writes) - 380) < 15
    first = np.array(
        [s.calls[0].prompt_tokens for t in tasks for s in t.stages if s.name == "Engineer.0"]
    )
    assert abs(first.mean() - 3000) < 30 and first.min() >= 2400 and first.max() <= 3600


@pytest.mark.parametrize(
    "raw, mean, sd",
    [
        ({"normal": {"mean": 100, "sd": 10}}, 100, 10),
        ({"uniform": [3, 8]}, 5.5, np.sqrt((6**2 - 1) / 12)),
        (
            {"lognormal": {"median": 50, "sigma": 0.5}},
            50 * np.exp(0.125),
            50 * np.exp(0.125) * np.sqrt(np.exp(0.25) - 1),
        ),
        ({"gamma": {"mean": 40, "cv": 0.5}}, 40, 20),
        ({"exponential": {"mean": 30}}, 30, 30),
        ({"choice": [10, 20], "weights": [3, 1]}, 12.5, np.sqrt(0.75 * 0.25) * 10),
    ],
)
def test_distribution_draws_match_their_declared_moments(raw, mean, sd):
    d = parse_dist(raw, "f.yaml: x", "count")
    assert d.mean == pytest.approx(mean)
    rng = np.random.default_rng(11)
    x = np.array([d.draw(rng) for _ in range(20000)], dtype=float)
    assert abs(x.mean() - mean) < 4 * sd / np.sqrt(len(x)) + 0.5  # + rounding to integers
    assert abs(x.std() - sd) < 0.05 * sd + 0.5


def test_caps_clip_draws():
    d = parse_dist({"normal": {"mean": 0, "sd": 100}, "min": 5, "max": 20}, "f: x", "tokens")
    rng = np.random.default_rng(0)
    x = [d.draw(rng) for _ in range(2000)]
    assert min(x) == 5 and max(x) == 20


# --------------------------------------------------------------------------- reproducibility
@pytest.mark.parametrize("name", ["metagpt-tl", "groupchat", "supervisor"])
def test_same_seed_same_trajectories_other_seed_other(name):
    _, a = sample(name, 20, seed=7)
    _, b = sample(name, 20, seed=7)
    _, c = sample(name, 20, seed=8)
    assert a == b
    assert [t.stages for t in a] != [t.stages for t in c]


def test_trajectories_do_not_depend_on_the_rate():
    _, a = sample("metagpt-sop", 20, seed=5, rate=0.01)
    _, b = sample("metagpt-sop", 20, seed=5, rate=0.1)
    assert [t.stages for t in a] == [t.stages for t in b]
    assert a[-1].arrival_s > b[-1].arrival_s


class _Newest:
    """A test policy that admits the most recently ready request first."""

    name = "newest-first"

    def decide(self, snap) -> Decision:
        if not snap.waiting:
            return Decision()
        plan = AdmissionPlan(snap)
        plan.admit_in_order(
            sorted(snap.waiting, key=lambda r: -r.ready_s), stop_at_first_blocked=False
        )
        return plan.decision()


def test_every_policy_replays_the_same_trajectories():
    wl, tasks = sample("supervisor", 12, seed=2, rate=0.05)
    agents = {a.name: a for a in wl.agents}
    seen = []
    for pol in (make_policy("fcfs", seed=2), _Newest()):
        res = Simulator(tasks, agents, PROFILE, pol, seed=2).run()
        seen.append(
            sorted(
                (r.task_id, r.stage, r.round_index, r.prompt_tokens, r.output_tokens)
                for r in res.requests
            )
        )
    assert seen[0] == seen[1]
    truth = sorted(
        (t.task_id, s.name, j, c.prompt_tokens, c.output_tokens)
        for t in tasks
        for s in t.stages
        for j, c in enumerate(s.calls)
    )
    assert seen[0] == truth


# --------------------------------------------------------------------------- the file format
GOOD = """
name: tiny
default_rate: 0.5
agents: {A: 100, B: {prefix_tokens: 50}}
arrivals: {process: gamma, cv: 2.0}
stages:
  - {name: s1, agent: A, prompt: 10, calls: {output: 5}}
  - {name: s2, agent: [A, B], deps: [s1], repeat: {count: 3, layout: parallel}, inherit: 1.0,
     prompt: 10, calls: [{count: 2, output: 4, observation: 3, tool_delay: 0.5}]}
"""


def test_a_workload_file_loads_by_path(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(GOOD)
    wl = get_workload(str(p))
    assert wl.name == "tiny" and wl.default_tasks == 100
    t = wl.sample(1, 0.5, np.random.default_rng(0))[0]
    s2 = [s for s in t.stages if s.kind == "s2"]
    assert [s.deps for s in s2] == [("s1",)] * 3
    # first prompt 10 + inherited s1 output 5; second call adds output 4 + observation 3
    assert [(c.prompt_tokens, c.output_tokens, c.tool_delay_s) for c in s2[0].calls] == [
        (15, 4, 0.5),
        (22, 4, 0.0),
    ]
    j = tmp_path / "tiny.json"
    import yaml

    j.write_text(json.dumps(yaml.safe_load(GOOD)))
    assert get_workload(str(j)).sample(1, 0.5, np.random.default_rng(0))[0] == t


def test_gamma_arrivals_have_the_declared_cv(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(GOOD)
    wl = load_workload_file(p)
    t = np.array([x.arrival_s for x in wl.sample(4000, 0.5, np.random.default_rng(1))])
    gaps = np.diff(t)
    assert abs(gaps.mean() - 2.0) < 0.2 and abs(gaps.std() / gaps.mean() - 2.0) < 0.25


def test_trace_arrivals_replay_and_rescale(tmp_path):
    (tmp_path / "times.jsonl").write_text(
        "".join(json.dumps({"timestamp": ms}) + "\n" for ms in (1000, 3000, 5000, 9000))
    )
    p = tmp_path / "t.yaml"
    p.write_text(
        GOOD.replace("default_rate: 0.5\n", "").replace(
            "{process: gamma, cv: 2.0}", "{trace: times.jsonl, unit: ms}"
        )
    )
    wl = load_workload_file(p)
    assert wl.default_rate == pytest.approx(3 / 8.0)
    rng = np.random.default_rng(0)
    assert [t.arrival_s for t in wl.sample(4, wl.default_rate, rng)] == [0.0, 2.0, 4.0, 8.0]
    assert [t.arrival_s for t in wl.sample(3, 2 * wl.default_rate, rng)] == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="only 4 arrivals"):
        wl.sample(5, 1.0, rng)


BAD = [
    # (replace this, with that, field named in the error, problem named in the error)
    ("agents: {A: 100, B: {prefix_tokens: 50}}", "agents: {A: -1}", "agents.A", ">= 0"),
    ("default_rate: 0.5", "default_rate: 0.5\nspeed: 3", "tiny.yaml", "unknown field"),
    ("{name: s1, agent: A,", "{name: s1, agent: C,", "stages[0].agent", "unknown agent 'C'"),
    ("deps: [s1]", "deps: [s9]", "stages[1].deps", "'s9' is not an earlier"),
    (
        "calls: {output: 5}",
        "calls: {output: {poisson: 3}}",
        "stages[0].calls.output",
        "exactly one distribution kind",
    ),
    (
        "calls: {output: 5}",
        "calls: {output: {uniform: [9, 3]}}",
        "stages[0].calls.output.uniform",
        "above high",
    ),
    ("calls: {output: 5}", "calls: {count: 1}", "stages[0].calls.output", "missing"),
    ("layout: parallel", "layout: star", "stages[1].repeat.layout", "'parallel' or 'chain'"),
    ("{process: gamma, cv: 2.0}", "{process: gamma}", "arrivals.cv", "missing"),
    ("{process: gamma, cv: 2.0}", "{trace: nope.jsonl}", "arrivals.trace", "does not exist"),
    ("inherit: 1.0", "inherit: -1", "stages[1].inherit", "[0, 10]"),
    (
        "prompt: 10, calls: {output: 5}",
        "prompt: 0, calls: {output: 5}",
        "stages[0].prompt",
        ">= 1 tokens",
    ),
    (
        "{name: s1, agent: A, prompt: 10,",
        "{name: s.1, agent: A, prompt: 10,",
        "stages[0].name",
        "must not contain '.'",
    ),
    ("  - {name: s1", "  - {name: s1 x: [", "tiny.yaml", "not valid YAML"),
]


@pytest.mark.parametrize("old, new, field, problem", BAD)
def test_each_malformed_file_names_file_field_and_problem(tmp_path, old, new, field, problem):
    assert old in GOOD
    p = tmp_path / "tiny.yaml"
    p.write_text(GOOD.replace(old, new))
    with pytest.raises(SpecError) as e:
        load_workload_file(p)
    msg = str(e.value)
    assert str(p) in msg and field in msg and problem in msg, msg
    assert "\n" not in msg


def test_stages_and_templates_are_exclusive_and_templates_mix():
    doc = {
        "name": "mix",
        "default_rate": 1.0,
        "agents": {"A": 10},
        "templates": [
            {
                "name": "short",
                "weight": 3,
                "stages": [{"name": "a", "agent": "A", "calls": {"output": 1}}],
            },
            {
                "name": "long",
                "weight": 1,
                "stages": [
                    {"name": "a", "agent": "A", "calls": {"output": 1}},
                    {"name": "b", "agent": "A", "deps": ["a"], "calls": {"output": 1}},
                ],
            },
        ],
    }
    wl = parse_workload(doc, "mix.yaml")
    tasks = wl.sample(4000, 1.0, np.random.default_rng(0))
    share = np.mean([t.workflow == "mix/short" for t in tasks])
    assert abs(share - 0.75) < 0.03
    with pytest.raises(SpecError, match="mix.yaml: stages/templates: give exactly one"):
        parse_workload({**doc, "stages": doc["templates"][0]["stages"]}, "mix.yaml")


# --------------------------------------------------------------------------- describe
def test_describe_chain3():
    d = describe_workload("chain3", "a100-80g/qwen2.5-32b", rate=0.1)
    assert d["mean_calls_per_task"] == 3 and d["mean_stages_per_task"] == 3
    assert d["mean_prompt_tokens_per_task"] == 3 * 1024
    assert d["offered_tokens_per_s"] == pytest.approx(0.1 * 3 * (1024 + 256))
    wl, tasks = sample("chain3", 1)
    lb = task_lower_bound(tasks[0], {a.name: a for a in wl.agents}, PROFILE.cost_model())
    assert d["mean_critical_path_s"] == pytest.approx(lb)
    assert d["offered_load_serial"] == pytest.approx(0.1 * d["mean_serial_service_s"])
    assert {a["name"]: a["prefix_tokens"] for a in d["agents"]} == {"A": 6000, "B": 4000, "C": 5000}


def test_describe_metagpt_tl_counts_team_leader_visits():
    d = describe_workload("metagpt-tl", "a100-80g/qwen2.5-32b", rate=None)
    kinds = {s["kind"]: s for s in d["stages"]}
    assert kinds["TeamLeader-revisit"]["mean_per_task"] == 4
    assert kinds["TeamLeader-first"]["mean_calls_per_stage"] == 3
    assert d["rate_tasks_per_s"] == get_workload("metagpt-tl").default_rate
    assert d["mean_critical_path_s"] > 0


def test_builtin_yaml_files_live_inside_the_package():
    import topas.workloads.declarative as m

    assert Path(m.BUILTIN_DIR).parent == Path(m.__file__).parent
