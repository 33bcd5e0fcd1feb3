"""The two motivating measurements (spec section 1 and the paper's Fig. 2), hand-built
scenarios run on the simulator directly; well under a second, not cached."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# -- the two motivating measurements ---------------------------------------------------------


def _sim(
    tasks,
    agents,
    policy: str,
    *,
    seed: int = 0,
    kv_budget_tokens: int | None = None,
    admissions: list | None = None,
):
    from topas.engine.cost import DEFAULT_PROFILE, get_profile
    from topas.engine.simulator import Simulator
    from topas.policies import make_policy

    def note(snap, dec) -> None:
        if admissions is not None:
            admissions.extend((rid, snap.time_s) for rid in dec.admit)

    sim = Simulator(
        tasks,
        {a.name: a for a in agents},
        get_profile(DEFAULT_PROFILE),
        make_policy(policy, seed=seed),
        seed=seed,
        kv_budget_tokens=kv_budget_tokens,
        record_timeline=True,
        on_decision=note if admissions is not None else None,
    )
    return sim.run()


def motivation_alternation(
    prefix_tokens: Sequence[int] = (4000, 8000, 12000),
    n_requests: int = 40,
    prompt_tokens: int = 512,
    output_tokens: int = 512,
) -> list[dict]:
    """Two agents, ``n_requests`` one-call tasks at once, served FCFS in an order fixed by
    arrival: alternating A, B, A, B, ... or grouped (all A, then all B).  Alternation keeps
    both prefixes resident, which crowds out dynamic KV: smaller batches, longer makespan.
    One row per prefix size (both agents get the same ``l_a``)."""
    from topas.metrics import summarize
    from topas.workflow.model import Agent, Call, Stage, Task

    rows = []
    for l_a in prefix_tokens:
        agents = (Agent("A", l_a), Agent("B", l_a))
        row: dict = {
            "prefix_tokens": l_a,
            "n_requests": n_requests,
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
        }
        for order in ("alternating", "grouped"):
            names = (
                (["A", "B"] * n_requests)[:n_requests]
                if order == "alternating"
                else ["A"] * (n_requests // 2) + ["B"] * (n_requests - n_requests // 2)
            )
            # 1 ms apart: the order is the arrival order, the load is "all at once"
            tasks = [
                Task(i, i * 1e-3, (Stage("s", a, (Call(prompt_tokens, output_tokens),)),))
                for i, a in enumerate(names)
            ]
            s = summarize(_sim(tasks, agents, "fcfs"))
            row[order] = {
                "mean_batch_size": s["mean_batch_size"],
                "makespan_s": s["makespan_s"],
                "mean_jct_s": s["mean_jct_s"],
            }
        row["batch_ratio"] = (
            row["alternating"]["mean_batch_size"] / row["grouped"]["mean_batch_size"]
        )
        row["makespan_ratio"] = row["alternating"]["makespan_s"] / row["grouped"]["makespan_s"]
        rows.append(row)
    return rows


#: the toy's engine: room for one 8k prefix and one request, not two prefixes
TOY_BUDGET_TOKENS = 10_000
TOY_POLICIES: tuple[str, ...] = ("spf", "lpm", "topas-paper", "topas")


def toy_tasks():
    """Paper Fig. 2's situation: task 0 is three calls of agent A in a chain, task 1 one call
    of agent B; both arrive at t=0, and only one agent's prefix fits at a time."""
    from topas.workflow.model import Agent, Call, Stage, Task

    agents = (Agent("A", 8000), Agent("B", 8000))
    call = (Call(1024, 256),)
    t0 = Task(
        0,
        0.0,
        (
            Stage("a1", "A", call),
            Stage("a2", "A", call, deps=("a1",)),
            Stage("a3", "A", call, deps=("a2",)),
        ),
    )
    t1 = Task(1, 0.0, (Stage("b1", "B", call),))
    return agents, [t0, t1]


def motivation_toy(policies: Sequence[str] = TOY_POLICIES) -> dict[str, dict]:
    """Per policy: mean JCT, each task's JCT, and a Gantt timeline (prefix residency
    intervals, request run segments from admissions / preemptions / finishes)."""
    out: dict[str, dict] = {}
    for p in policies:
        agents, tasks = toy_tasks()
        adm: list[tuple[int, float]] = []
        res = _sim(tasks, agents, p, kv_budget_tokens=TOY_BUDGET_TOKENS, admissions=adm)
        out[p] = {
            "mean_jct_s": float(np.mean([t.jct_s for t in res.tasks])),
            "jct_s": {t.task_id: t.jct_s for t in res.tasks},
            "makespan_s": res.makespan_s,
            "preemptions": res.counters.preemptions,
            "gantt": gantt(res.timeline, adm, res.makespan_s),
        }
    return out


def gantt(timeline: list[tuple], admissions: list[tuple[int, float]], end_s: float) -> dict:
    """Turn a simulator timeline into bars: ``prefixes[agent] = [(start, end, how)]`` and
    ``requests[(task, stage, agent)] = [(start, end, finished?)]``."""
    prefixes: dict[str, list] = {}
    open_in: dict[str, tuple[float, str]] = {}
    requests: dict[int, dict] = {}
    starts: dict[int, list[float]] = {}
    for rid, t in admissions:
        starts.setdefault(rid, []).append(t)
    stops: dict[int, list[tuple[float, bool]]] = {}
    for e in timeline:
        if e[0] == "prefix-in":
            open_in[e[1]] = (e[2], e[3])
        elif e[0] == "prefix-out" and e[1] in open_in:
            s, how = open_in.pop(e[1])
            prefixes.setdefault(e[1], []).append((s, e[2], how))
        elif e[0] == "preempt":
            stops.setdefault(e[1], []).append((e[2], False))
        elif e[0] == "request":
            _, rid, task, stage, agent, first, fin = e
            requests[rid] = {"task": task, "stage": stage, "agent": agent, "first": first}
            stops.setdefault(rid, []).append((fin, True))
    for a, (s, how) in open_in.items():
        prefixes.setdefault(a, []).append((s, end_s, how))
    bars = []
    for rid, info in sorted(requests.items()):
        st = sorted(starts.get(rid, [info["first"]]))
        sp = sorted(stops.get(rid, []))
        for s, (e, fin) in zip(st, sp):
            bars.append(
                {
                    "request": rid,
                    "task": info["task"],
                    "stage": info["stage"],
                    "agent": info["agent"],
                    "start_s": s,
                    "end_s": e,
                    "finished": fin,
                }
            )
    return {"prefixes": prefixes, "requests": bars}
