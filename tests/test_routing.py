"""Routers (issue 16): each router's defining choice on a hand-built cluster view, bad names
and parameters, a router that returns no replica, and the CLI's --replicas / --router."""

from __future__ import annotations

import json

import pytest

from topas.cli import main
from topas.engine.cluster import Cluster
from topas.engine.cost import get_profile
from topas.engine.snapshot import Location, PrefixState
from topas.policies import make_policy
from topas.routing import ROUTERS, ClusterView, ReplicaView, RouteRequest, RouterError, make_router
from topas.workflow.model import Agent, Call, Stage, Task

COST = get_profile("a100-80g/qwen2.5-32b").cost_model()
BUDGET = 200_000


def _prefixes(**where: str) -> dict[str, PrefixState]:
    """agent -> "device" / "host" prefix states (4,000 tokens each)."""
    out = {}
    for agent, loc in where.items():
        p = PrefixState(agent, 4000)
        if loc == "device":
            p.location, p.ready = Location.DEVICE, True
        else:
            p.location, p.on_host = Location.HOST, True
        out[agent] = p
    return out


def replica(
    rid: int,
    *,
    running: int = 0,
    waiting: int = 0,
    queued: int = 0,
    used: int = 0,
    prefixes: dict | None = None,
    contexts: dict | None = None,
) -> ReplicaView:
    ctx = dict(contexts or {})
    return ReplicaView(
        rid,
        running,
        waiting,
        queued,
        used,
        BUDGET,
        prefixes or {},
        lambda key: ctx.get(key, 0),
        COST,
    )


def request(**kw) -> RouteRequest:
    base = dict(
        task_id=7,
        workflow="w",
        stage="code",
        agent="eng",
        round_index=0,
        prompt_tokens=1000,
        prefix_tokens=4000,
        time_s=10.0,
        task_arrival_s=0.0,
    )
    base.update(kw)
    return RouteRequest(**base)


def view(*reps: ReplicaView, routed: int = 0) -> ClusterView:
    return ClusterView(10.0, reps, routed)


def test_round_robin_cycles_by_calls_routed():
    r = make_router("round-robin")
    v = [view(replica(0), replica(1), replica(2), routed=k) for k in range(5)]
    assert [r.route(request(), x) for x in v] == [0, 1, 2, 0, 1]


def test_least_outstanding_ignores_cache_and_breaks_ties_by_kv():
    r = make_router("least-outstanding")
    warm = replica(0, running=3, prefixes=_prefixes(eng="device"))
    assert r.route(request(), view(warm, replica(1, running=2))) == 1
    # equal load: the one with less KV in use
    assert (
        r.route(request(), view(replica(0, running=2, used=900), replica(1, running=2, used=100)))
        == 1
    )


def test_prefix_affinity_follows_the_cached_prefix_until_load_is_imbalanced():
    r = make_router("prefix-affinity")
    warm = dict(prefixes=_prefixes(eng="device"))
    # the prefix is 4,000 of 5,000 tokens (80 % > 30 %): the warm replica wins though busier
    assert r.route(request(), view(replica(0, running=5), replica(1, running=20, **warm))) == 1
    # imbalanced (100 - 5 > 64 and 100 > 1.5 * 5): least loaded, cache or not
    assert r.route(request(), view(replica(0, running=5), replica(1, running=100, **warm))) == 0
    # nothing cached anywhere worth the threshold: the replica with the most free KV
    assert r.route(request(prefix_tokens=0), view(replica(0, used=5000), replica(1, used=100))) == 1
    # a small prefix share (100 of 10,100 < 30 %) does not pull the call
    small = request(prefix_tokens=100, prompt_tokens=10_000)
    assert r.route(small, view(replica(0, used=5000, **warm), replica(1, used=100))) == 1


def test_prefix_affinity_counts_the_stages_context():
    r = make_router("prefix-affinity")
    both = _prefixes(eng="device")
    ctx = {(7, "code"): 6000}
    req = request(round_index=2, prompt_tokens=8000)
    # same prefix on both; only replica 0 has the stage's context
    assert (
        r.route(
            req, view(replica(0, prefixes=both, contexts=ctx, running=3), replica(1, prefixes=both))
        )
        == 0
    )


def test_task_affinity_keeps_a_task_where_its_context_is():
    r = make_router("task-affinity", balance_abs=8)
    reps = (replica(0, running=1), replica(1, running=6), replica(2, running=3))
    # the stage's context is on 1 (5 above the least loaded <= 8): it stays there
    assert r.route(request(context_at=1, home=2), view(*reps)) == 1
    # no context yet: the task's home
    assert r.route(request(home=2), view(*reps)) == 2
    # a new task: the least loaded
    assert r.route(request(), view(*reps)) == 0
    # home overloaded (20 - 1 > 8): moved to the least loaded
    busy = (replica(0, running=1), replica(1, running=20))
    assert r.route(request(context_at=1, home=1), view(*busy)) == 0


def test_topas_router_weighs_prefix_miss_against_queue():
    r = make_router("topas")
    warm = _prefixes(eng="device")
    # idle cold replica vs a warm one with a short queue: the 4,000-token prefix recompute
    # costs more than 500 queued prompt tokens, so the warm replica finishes first
    cold, busy_warm = replica(0), replica(1, waiting=1, queued=500, prefixes=warm)
    assert r.expected_finish_s(request(), busy_warm) < r.expected_finish_s(request(), cold)
    assert r.route(request(), view(cold, busy_warm)) == 1
    # a long queue ahead (60k tokens to prefill) outweighs the miss: the cold replica
    long_q = replica(1, waiting=30, queued=60_000, prefixes=warm)
    assert r.route(request(), view(cold, long_q)) == 0
    # a host copy makes the miss a swap-in, cheaper than a recompute
    host = replica(1, prefixes=_prefixes(eng="host"))
    assert r.expected_finish_s(request(), host) < r.expected_finish_s(request(), cold)


def test_topas_router_counts_a_full_kv_as_waiting():
    r = make_router("topas")
    full = replica(0, running=8, used=BUDGET - 100)
    roomy = replica(1, running=8, used=1000)
    assert r.expected_finish_s(request(), full) > r.expected_finish_s(request(), roomy)


@pytest.mark.parametrize(
    "name, params",
    [
        ("nope", {}),
        ("prefix-affinity", {"bogus": 1}),
        ("prefix-affinity", {"cache_threshold": 2.0}),
        ("task-affinity", {"balance_abs": -1}),
        ("topas", {"expected_output_tokens": 0}),
    ],
)
def test_make_router_rejects_bad_names_and_parameters(name, params):
    with pytest.raises(ValueError) as e:
        make_router(name, **params)
    assert "\n" not in str(e.value)


def test_every_registered_router_returns_a_valid_replica():
    reps = (replica(0, running=2), replica(1, prefixes=_prefixes(eng="device")), replica(2))
    for name in ROUTERS:
        assert make_router(name).route(request(), view(*reps)) in (0, 1, 2)


def _two_tasks() -> tuple[list[Task], dict[str, Agent]]:
    tasks = [
        Task(
            k,
            0.1 * k,
            (
                Stage("s0", "a", (Call(50, 5, 0.1), Call(80, 5))),
                Stage("s1", "b", (Call(40, 4),), ("s0",)),
            ),
        )
        for k in range(4)
    ]
    return tasks, {"a": Agent("a", 300), "b": Agent("b", 200)}


def test_cluster_rejects_a_router_that_names_no_replica():
    class Bad:
        name = "bad"

        def route(self, req, view):
            return len(view.replicas)

    tasks, agents = _two_tasks()
    cl = Cluster(
        tasks,
        agents,
        get_profile("a100-80g/qwen2.5-32b"),
        lambda: make_policy("fcfs"),
        Bad(),
        replicas=2,
    )
    with pytest.raises(RouterError, match=r"'bad' returned 2, not a replica id in 0\.\.1"):
        cl.run()


def test_task_affinity_cluster_keeps_each_task_on_one_replica():
    tasks, agents = _two_tasks()
    cres = Cluster(
        tasks,
        agents,
        get_profile("a100-80g/qwen2.5-32b"),
        lambda: make_policy("fcfs"),
        make_router("task-affinity"),
        replicas=2,
    ).run()
    where = {}
    for rid, r in enumerate(cres.replicas):
        for q in r.requests:
            where.setdefault(q.task_id, set()).add(rid)
    assert all(len(v) == 1 for v in where.values())
    assert len({next(iter(v)) for v in where.values()}) == 2  # the tasks spread
    assert cres.moved_contexts == 0
    rr = Cluster(
        tasks,
        agents,
        get_profile("a100-80g/qwen2.5-32b"),
        lambda: make_policy("fcfs"),
        make_router("round-robin"),
        replicas=2,
    ).run()
    assert rr.moved_contexts > 0  # round-robin moves stages between rounds


def test_cli_replicas_and_router(capsys):
    assert (
        main(
            [
                "run",
                "--workload",
                "dag4",
                "--policy",
                "continuum",
                "--tasks",
                "6",
                "--replicas",
                "2",
                "--router",
                "least-outstanding",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["replicas"] == 2 and out["router"] == "least-outstanding"
    assert sum(r["requests"] for r in out["per_replica"]) == out["requests"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--replicas", "0"], "--replicas"),
        (["--replicas", "2", "--router", "nope"], "--router: invalid choice: 'nope'"),
        (
            ["--replicas", "2", "--router", "topas", "--router-param", "externality=20"],
            "router 'topas': externality 20: must be in [0, 10]",
        ),
        (
            ["--replicas", "2", "--router-param", "oops"],
            "--router-param 'oops': expected KEY=VALUE",
        ),
    ],
)
def test_cli_rejects_bad_cluster_arguments(argv, needle, capsys):
    assert main(["run", "--workload", "dag4", "--tasks", "2"] + argv) != 0
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_topas_router_counts_the_delay_it_imposes_on_a_busy_replica():
    """The externality term: a warm replica with 20 running requests would finish this call
    sooner (no prefix recompute), but its prefill stalls those 20 and its decode slows them:
    with the term the idle cold replica wins, without it the warm one."""
    warm = replica(0, running=20, used=60_000, prefixes=_prefixes(eng="device"))
    cold = replica(1)
    req = request(prompt_tokens=2000)
    assert make_router("topas", externality=0.0).route(req, view(warm, cold)) == 0
    assert make_router("topas").route(req, view(warm, cold)) == 1


def test_topas_router_uses_the_learned_output_length():
    r = make_router("topas")
    rep = replica(0, running=4, used=20_000)
    short = r.expected_finish_s(request(expected_output_tokens=16.0), rep)
    long = r.expected_finish_s(request(expected_output_tokens=1024.0), rep)
    assert long > short
    assert r.expected_finish_s(request(), rep) == r.expected_finish_s(
        request(expected_output_tokens=128.0), rep
    )  # the default


def test_calls_routed_at_one_instant_see_each_other():
    """Two tasks arriving together: the second call's view counts the first as queued on
    its replica before that replica has seen it, so least-outstanding spreads them."""
    tasks = [Task(k, 0.0, (Stage("s0", "a", (Call(50, 5),)),)) for k in range(2)]
    cres = Cluster(
        tasks,
        {"a": Agent("a", 100)},
        get_profile("a100-80g/qwen2.5-32b"),
        lambda: make_policy("fcfs"),
        make_router("least-outstanding"),
        replicas=2,
    ).run()
    assert cres.routed == [1, 1]
