"""A small built-in chain workload, so everything runs end to end without workload files.

``toy-chain``: three stages, each a different agent with a 2k-4k-token prefix, one call per
stage except the middle one (a ReAct stage of 1-3 calls with sub-second tool delays).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topas.workflow.model import Agent, Call, Stage, Task
from topas.workloads import poisson_arrivals, register

_AGENTS = (Agent("planner", 3000), Agent("worker", 4000), Agent("checker", 2000))


@dataclass
class ToyChain:
    name: str = "toy-chain"
    description: str = "3-stage chain (planner -> ReAct worker -> checker), 2-4k-token prefixes"
    agents: tuple[Agent, ...] = _AGENTS
    default_rate: float = 0.3
    default_tasks: int = 40

    def sample(self, n_tasks: int, rate: float, rng: np.random.Generator) -> list[Task]:
        arrivals = poisson_arrivals(n_tasks, rate, rng)
        tasks = []
        for i in range(n_tasks):
            rounds = int(rng.integers(1, 4))
            ctx = int(rng.integers(300, 900))
            worker_calls = []
            for _ in range(rounds):
                out = int(rng.integers(50, 300))
                worker_calls.append(Call(ctx, out, float(rng.uniform(0.1, 0.9))))
                ctx += out + int(rng.integers(50, 200))
            stages = (
                Stage(
                    "plan",
                    "planner",
                    (Call(int(rng.integers(200, 600)), int(rng.integers(100, 400))),),
                ),
                Stage("work", "worker", tuple(worker_calls), deps=("plan",)),
                Stage(
                    "check",
                    "checker",
                    (Call(int(rng.integers(400, 1200)), int(rng.integers(20, 120))),),
                    deps=("work",),
                ),
            )
            tasks.append(Task(i, float(arrivals[i]), stages, workflow=self.name))
        return tasks


register("toy-chain")(ToyChain)
