"""One-call entry points: sample a workload and run it under a policy on the simulator."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from topas.engine.cost import DEFAULT_PROFILE, Profile, get_profile
from topas.engine.simulator import SimResult, Simulator
from topas.policies import make_policy
from topas.workloads import get_workload
from topas.workflow.model import Task


def sample_tasks(workload: str, n_tasks: int | None, rate: float | None, seed: int):
    """The workload object and its sampled tasks; one generator per run, seeded by ``seed``."""
    wl = get_workload(workload)
    n = n_tasks if n_tasks is not None else wl.default_tasks
    r = rate if rate is not None else wl.default_rate
    if n <= 0:
        raise ValueError(f"tasks {n}: must be >= 1")
    rng = np.random.default_rng(seed)
    return wl, wl.sample(n, r, rng)


def simulate(workload: str, policy: str, *, rate: float | None = None, n_tasks: int | None = None,
             seed: int = 0, profile: str | Profile = DEFAULT_PROFILE,
             policy_params: dict | None = None, tasks: list[Task] | None = None,
             progress: Callable[[int], None] | None = None, **engine_kw) -> SimResult:
    """Run ``workload`` under ``policy`` on the embedded simulator.  The same ``seed`` gives
    the same trajectories for every policy (pass ``tasks`` to reuse a sample)."""
    prof = profile if isinstance(profile, Profile) else get_profile(profile)
    wl, sampled = sample_tasks(workload, n_tasks, rate, seed)
    pol = make_policy(policy, seed=seed, **(policy_params or {}))
    sim = Simulator(tasks if tasks is not None else sampled, {a.name: a for a in wl.agents},
                    prof, pol, seed=seed, progress=progress, **engine_kw)
    return sim.run()
