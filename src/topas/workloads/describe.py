"""A summary of a workload for ``topas workloads show NAME``.

Everything is estimated from a fixed sample (``n_sample`` tasks, seed 0) so the summary is the
same on every call.  The *offered load* at a rate ``lambda`` (tasks/s) is reported two ways:

* ``offered_tokens_per_s`` = ``lambda`` x mean (prompt + output) tokens per task;
* ``offered_load_serial`` = ``lambda`` x mean serial service per task, the sum over the task's
  calls of each call's latency alone on an empty engine (prefix resident).  It is the
  utilisation an engine without batching would see: above 1 the engine must batch to keep
  up; batching several requests per iteration is what lets a real engine run above 1.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.workloads import get_workload


def describe_workload(
    name_or_path: str,
    profile: str = DEFAULT_PROFILE,
    rate: float | None = None,
    n_sample: int = 200,
) -> dict:
    """Agents and prefix tokens, stages, mean calls and tokens per task, the mean critical
    path on ``profile`` (seconds, :func:`~topas.engine.simulator.task_lower_bound`) and the
    offered load at ``rate`` (tasks/s; the workload's default when None)."""
    # imported here: the workloads package is auto-imported by the registry, and policies
    # that read workload metadata must not pull the simulator in with it
    from topas.engine.bounds import task_lower_bound

    wl = get_workload(name_or_path)
    prof = get_profile(profile)
    cost = prof.cost_model()
    r = wl.default_rate if rate is None else float(rate)
    if not r > 0:
        raise ValueError(f"rate {rate!r}: must be > 0 tasks/s")
    n = (
        min(n_sample, getattr(wl, "default_tasks", n_sample))
        if hasattr(wl, "requests")
        else n_sample
    )
    tasks = wl.sample(n, r, np.random.default_rng(0))
    agents = {a.name: a for a in wl.agents}
    chunk = prof.prefill_chunk_tokens
    n_stages = np.array([len(t.stages) for t in tasks], dtype=float)
    n_calls = np.array([t.n_calls for t in tasks], dtype=float)
    prompt = np.array(
        [sum(c.prompt_tokens for s in t.stages for c in s.calls) for t in tasks], dtype=float
    )
    output = np.array(
        [sum(c.output_tokens for s in t.stages for c in s.calls) for t in tasks], dtype=float
    )
    crit = np.array([task_lower_bound(t, agents, cost, chunk) for t in tasks])
    serial = np.array(
        [
            sum(
                cost.call_time_alone(
                    c.prompt_tokens, c.output_tokens, agents[s.agent].prefix_tokens, chunk
                )
                for s in t.stages
                for c in s.calls
            )
            for t in tasks
        ]
    )
    kinds: Counter[str] = Counter()
    calls_by_kind: Counter[str] = Counter()
    agent_of_kind: dict[str, set[str]] = {}
    for t in tasks:
        for s in t.stages:
            kinds[s.template] += 1
            calls_by_kind[s.template] += len(s.calls)
            agent_of_kind.setdefault(s.template, set()).add(s.agent)
    stages = [
        {
            "kind": k,
            "agents": sorted(agent_of_kind[k]),
            "mean_per_task": kinds[k] / len(tasks),
            "mean_calls_per_stage": calls_by_kind[k] / kinds[k],
        }
        for k in kinds
    ]
    shown_agents = sorted(wl.agents, key=lambda a: -a.prefix_tokens)
    return {
        "name": wl.name,
        "description": wl.description,
        "profile": prof.name,
        "rate_tasks_per_s": r,
        "default_rate_tasks_per_s": wl.default_rate,
        "default_tasks": wl.default_tasks,
        "n_agents": len(wl.agents),
        "agents": [{"name": a.name, "prefix_tokens": a.prefix_tokens} for a in shown_agents[:50]],
        "total_prefix_tokens": sum(a.prefix_tokens for a in wl.agents),
        "kv_budget_tokens": prof.kv_budget_tokens,
        "stages": stages,
        "sampled_tasks": len(tasks),
        "mean_stages_per_task": float(n_stages.mean()),
        "mean_calls_per_task": float(n_calls.mean()),
        "mean_prompt_tokens_per_task": float(prompt.mean()),
        "mean_output_tokens_per_task": float(output.mean()),
        "mean_critical_path_s": float(crit.mean()),
        "p99_critical_path_s": float(np.percentile(crit, 99)),
        "mean_serial_service_s": float(serial.mean()),
        "offered_tokens_per_s": r * float((prompt + output).mean()),
        "offered_load_serial": r * float(serial.mean()),
    }
