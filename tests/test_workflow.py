"""Bad workflow input gives a one-line error that names the input and the problem."""

from __future__ import annotations

import math

import pytest

from topas.engine.cost import get_profile
from topas.engine.simulator import Simulator
from topas.policies import make_policy
from topas.workflow.model import Agent, Call, Stage, Task, WorkflowError, agent_table

AGENTS = agent_table([Agent("A", 1000), Agent("B", 2000)])
PROFILE = get_profile("a100-80g/qwen2.5-32b")


def sim(tasks, agents=AGENTS, **kw):
    return Simulator(tasks, agents, PROFILE, make_policy("fcfs"), **kw)


def one(stages, tid=0, at=0.0):
    return Task(tid, at, tuple(stages))


@pytest.mark.parametrize(
    "task,pattern",
    [
        (
            one(
                [
                    Stage("x", "A", (Call(10, 10),), deps=("y",)),
                    Stage("y", "A", (Call(10, 10),), deps=("x",)),
                ]
            ),
            r"task 0: stage graph has a cycle through \['x', 'y'\]",
        ),
        (one([Stage("x", "A", (Call(10, 10),), deps=("x",))]), r"stage 'x': depends on itself"),
        (one([Stage("x", "Z", (Call(10, 10),))]), r"stage 'x': unknown agent 'Z'"),
        (one([Stage("x", "A", (Call(10, 10),), deps=("nope",))]), r"unknown stage 'nope'"),
        (one([Stage("x", "A", (Call(0, 10),))]), r"call 0 prompt_tokens: must be an integer > 0"),
        (one([Stage("x", "A", (Call(10, -3),))]), r"call 0 output_tokens: must be an integer > 0"),
        (one([Stage("x", "A", (Call(10, 10, math.nan),))]), r"tool_delay_s: must be finite"),
        (one([Stage("x", "A", (Call(10, 10),))], at=math.nan), r"task 0 arrival_s: must be finite"),
        (one([Stage("x", "A", ())]), r"stage 'x': has no calls"),
        (
            one([Stage("x", "A", (Call(10, 10),)), Stage("x", "B", (Call(10, 10),))]),
            r"duplicate stage names \['x'\]",
        ),
        (
            one(
                [
                    Stage("x", "A", (Call(10, 10),)),
                    Stage("y", "A", (Call(20, 10),), deps=("x",), shares_with="z", shared_tokens=5),
                ]
            ),
            r"stage 'y': shares_with 'z' is not a stage of the task",
        ),
        (
            one(
                [
                    Stage("x", "B", (Call(10, 10),)),
                    Stage("y", "A", (Call(20, 10),), deps=("x",), shares_with="x", shared_tokens=5),
                ]
            ),
            r"stage 'y': shares_with 'x' is run by 'B', not 'A'",
        ),
        (
            one(
                [
                    Stage("x", "A", (Call(10, 10),)),
                    Stage("y", "A", (Call(20, 10),), shares_with="x", shared_tokens=5),
                ]
            ),
            r"stage 'y': shares_with 'x' is not an ancestor",
        ),
        (
            one(
                [
                    Stage("x", "A", (Call(10, 10),)),
                    Stage(
                        "y", "A", (Call(20, 10),), deps=("x",), shares_with="x", shared_tokens=11
                    ),
                ]
            ),
            r"stage 'y': shared_tokens 11 exceeds the first prompts' 10 tokens",
        ),
        (
            one(
                [
                    Stage("x", "A", (Call(10, 10),)),
                    Stage("y", "A", (Call(20, 10),), deps=("x",), shares_with="x"),
                ]
            ),
            r"stage 'y' shared_tokens: must be an integer > 0",
        ),
        (
            one([Stage("x", "A", (Call(40_000, 10),))]),
            r"needs 41011 KV tokens .* more than the KV "
            r"budget of 32768",
        ),
    ],
)
def test_bad_task_errors(task, pattern):
    with pytest.raises(WorkflowError, match=pattern) as e:
        sim([task])
    assert "\n" not in str(e.value)


def test_bad_agents():
    with pytest.raises(WorkflowError, match=r"agent 'A' prefix_tokens: must be an integer >= 0"):
        Agent("A", -1)
    with pytest.raises(WorkflowError, match=r"agent 'A': defined twice"):
        agent_table([Agent("A", 1), Agent("A", 2)])
    with pytest.raises(WorkflowError, match=r"prefix of 40000 tokens can never fit"):
        sim([one([Stage("x", "A", (Call(10, 10),))])], agents={"A": Agent("A", 40_000)})


def test_bad_engine_options():
    t = [one([Stage("x", "A", (Call(10, 10),))])]
    with pytest.raises(ValueError, match="preemption 'swap'"):
        sim(t, preemption="swap")
    with pytest.raises(ValueError, match="task ids must be unique"):
        sim(t + t)
