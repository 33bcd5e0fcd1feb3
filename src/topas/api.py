"""One-call entry points: sample a workload and run it under a policy on the simulator.

Arguments are checked before any work: a wrong type raises ``TypeError`` and a bad value
``ValueError``, each naming the argument (``simulate(n_tasks=0)`` -> ``n_tasks 0: must be an
integer >= 1``); policy parameters go through the policies' declarations
(:mod:`topas.policies.params`), the same parser as ``topas run --param``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral, Real

import numpy as np

from topas.engine.cluster import Cluster, ClusterResult
from topas.engine.cost import DEFAULT_PROFILE, Profile, get_profile
from topas.engine.simulator import SimResult, Simulator
from topas.policies import build_policy
from topas.routing import DEFAULT_ROUTER, make_router
from topas.workflow.model import Task
from topas.workloads import get_workload


def _int_or_none(v: object, what: str, lo: int) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, Integral):
        raise TypeError(f"{what}: must be an integer, got {type(v).__name__} {v!r}")
    if v < lo:
        raise ValueError(f"{what} {v}: must be >= {lo}")
    return int(v)


def _rate_or_none(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, Real):
        raise TypeError(f"rate: must be a number (tasks/s), got {type(v).__name__} {v!r}")
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"rate {v!r}: must be a finite number > 0 tasks/s")
    return float(v)


def _name_or_path(v: object, what: str) -> str:
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if not isinstance(v, str):
        raise TypeError(f"{what}: must be a name or a path, got {type(v).__name__} {v!r}")
    return v


def sample_tasks(workload: str, n_tasks: int | None, rate: float | None, seed: int):
    """The workload object and its sampled tasks; one generator per run, seeded by ``seed``."""
    n_tasks = _int_or_none(n_tasks, "n_tasks", 1)
    rate = _rate_or_none(rate)
    seed = _int_or_none(seed, "seed", 0)
    if seed is None:
        raise TypeError("seed: must be an integer >= 0, got None")
    wl = get_workload(_name_or_path(workload, "workload"))
    n = n_tasks if n_tasks is not None else wl.default_tasks
    r = rate if rate is not None else wl.default_rate
    if n <= 0:
        raise ValueError(f"tasks {n}: must be >= 1")
    rng = np.random.default_rng(seed)
    return wl, wl.sample(n, r, rng)


def simulate(
    workload: str,
    policy: str,
    *,
    rate: float | None = None,
    n_tasks: int | None = None,
    seed: int = 0,
    profile: str | Profile = DEFAULT_PROFILE,
    policy_params: Mapping[str, object] | None = None,
    tasks: Sequence[Task] | None = None,
    progress: Callable[[int], None] | None = None,
    **engine_kw,
) -> SimResult:
    """Run ``workload`` under ``policy`` on the embedded simulator.  The same ``seed`` gives
    the same trajectories for every policy (pass ``tasks`` to reuse a sample)."""
    seed, prof = _check_run(policy, policy_params, tasks, progress, seed, profile)
    pol = build_policy(policy, seed, policy_params)
    wl, sampled = sample_tasks(workload, n_tasks, rate, seed)
    sim = Simulator(
        list(tasks) if tasks is not None else sampled,
        {a.name: a for a in wl.agents},
        prof,
        pol,
        seed=seed,
        progress=progress,
        **engine_kw,
    )
    return sim.run()


def _check_run(policy, policy_params, tasks, progress, seed, profile) -> tuple[int, Profile]:
    """The arguments ``simulate`` and ``simulate_cluster`` share, checked: the seed as an int
    and the profile loaded."""
    if not isinstance(policy, str):
        raise TypeError(f"policy: must be a policy name, got {type(policy).__name__} {policy!r}")
    if policy_params is not None and not isinstance(policy_params, Mapping):
        raise TypeError(
            f"policy_params: must be a mapping name -> value, got {type(policy_params).__name__}"
        )
    _check_tasks(tasks)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress: must be callable, got {type(progress).__name__}")
    seed = _int_or_none(seed, "seed", 0)
    if seed is None:
        raise TypeError("seed: must be an integer >= 0, got None")
    return seed, _profile(profile)


def _check_tasks(tasks) -> None:
    if tasks is not None:
        if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence):
            raise TypeError(f"tasks: must be a list of Task, got {type(tasks).__name__}")
        if not tasks:
            raise ValueError("tasks: empty; give at least one Task (or None to sample)")
        bad = next((t for t in tasks if not isinstance(t, Task)), None)
        if bad is not None:
            raise TypeError(f"tasks: must hold Task objects, got {type(bad).__name__}")


def _profile(profile: str | Profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    return get_profile(_name_or_path(profile, "profile"))


def simulate_cluster(
    workload: str,
    policy: str,
    *,
    replicas: int = 2,
    router: str = DEFAULT_ROUTER,
    router_params: Mapping[str, object] | None = None,
    rate: float | None = None,
    n_tasks: int | None = None,
    seed: int = 0,
    profile: str | Profile = DEFAULT_PROFILE,
    policy_params: Mapping[str, object] | None = None,
    tasks: Sequence[Task] | None = None,
    progress: Callable[[int], None] | None = None,
    **engine_kw,
) -> ClusterResult:
    """Run ``workload`` on ``replicas`` engines behind ``router`` (``topas list`` names the
    routers), each replica with its own KV budget and its own instance of ``policy``.
    ``result.as_sim_result()`` is the cluster as one run for :func:`topas.metrics.summarize`;
    ``result.replicas`` holds each replica's run.  ``replicas=1`` gives the single engine's
    task finish times."""
    if not isinstance(router, str):
        raise TypeError(f"router: must be a router name, got {type(router).__name__} {router!r}")
    if isinstance(replicas, bool) or not isinstance(replicas, Integral) or replicas < 1:
        raise ValueError(f"replicas {replicas!r}: must be an integer >= 1")
    if router_params is not None and not isinstance(router_params, Mapping):
        raise TypeError(
            f"router_params: must be a mapping name -> value, got {type(router_params).__name__}"
        )
    seed, prof = _check_run(policy, policy_params, tasks, progress, seed, profile)
    build_policy(policy, seed, policy_params)  # bad names / parameters fail here, once
    rt = make_router(router, **dict(router_params or {}))
    wl, sampled = sample_tasks(workload, n_tasks, rate, seed)
    cl = Cluster(
        list(tasks) if tasks is not None else sampled,
        {a.name: a for a in wl.agents},
        prof,
        lambda: build_policy(policy, seed, policy_params),
        rt,
        replicas=int(replicas),
        seed=seed,
        progress=progress,
        **engine_kw,
    )
    return cl.run()
