"""``topas run`` and ``topas compare``: one policy, or several paired by seed, on the embedded
simulator, with their argument checks and output tables."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from topas.engine.cost import get_profile
from topas.engine.simulator import PolicyStalled

err = Console(stderr=True)
out = Console()

#: the keys ``topas run --json`` always prints
from topas.cli_args import CliError, check_out_dir

JSON_KEYS = (
    "mean_jct_s",
    "p99_jct_s",
    "throughput_tasks_per_s",
    "mean_lower_bound_s",
    "requests",
    "mean_decision_ms",
    "p99_decision_ms",
    "sim_wall_s",
)


def _load_profile(name: str):
    """The engine profile, with file problems named after ``--profile``."""
    try:
        return get_profile(name)
    except UnicodeDecodeError:
        raise CliError(f"--profile {name}: not a UTF-8 text file") from None
    except RecursionError:
        raise CliError(f"--profile {name}: nested too deeply") from None


def _check_workload(name: str) -> None:
    """Load the workload (name or file) before any work; file problems name ``--workload``."""
    from topas.workloads import get_workload

    try:
        get_workload(name)
    except UnicodeDecodeError:
        raise CliError(f"--workload {name}: not a UTF-8 text file") from None
    except RecursionError:
        raise CliError(f"--workload {name}: nested too deeply") from None


def _check_policies(args, policies: list[str]) -> dict:
    """Every policy exists and takes every ``--param``; returns the raw parameters."""
    from topas.policies import build_policy

    params = _policy_params(args)
    for p in policies:
        build_policy(p, args.seed, params)
    return params


def _check_sim_args(args, policies: list[str]) -> dict:
    """Everything a run needs, checked before any simulation: the output folder, the
    workload, the profile, every policy and its parameters."""
    if args.out:
        check_out_dir(args.out)
    _check_workload(args.workload)
    args.profile_obj = _load_profile(args.profile)
    args.router_params = {}
    if getattr(args, "router_param", None):
        from topas.routing import make_router, parse_router_params

        try:
            args.router_params = parse_router_params(args.router_param)
            make_router(args.router, **args.router_params)
        except ValueError as e:
            raise CliError(str(e)) from None
    return _check_policies(args, policies)


@contextmanager
def _progress(total: int, label: str, enabled: bool):
    if not enabled:
        yield lambda n: None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as prog:
        tid = prog.add_task(label, total=total)
        yield lambda n: prog.advance(tid, n)


def _policy_params(args) -> dict:
    """``--param KEY=VALUE`` pairs, values as given: the policy's declared parameter types
    (``topas list --params POLICY``) convert them, in ``make_policy``."""
    from topas.policies.params import key_value_pairs

    try:
        return key_value_pairs(args.param, "--param")
    except ValueError as e:
        raise CliError(str(e)) from None


def _run_one(args, policy: str, tasks=None, quiet: bool = False):
    from topas.api import sample_tasks, simulate
    from topas.metrics import summarize

    if tasks is None:
        _, tasks = sample_tasks(args.workload, args.tasks, args.rate, args.seed)
    total = sum(t.n_calls for t in tasks)
    show = not quiet and sys.stderr.isatty()
    params = _policy_params(args)
    engine_kw = dict(
        preemption=args.preemption,
        host_tier=not args.no_host_tier,
        kv_budget_tokens=args.kv_budget,
        context_cache=args.context_cache,
    )
    label = f"{policy} on {args.workload}"
    if args.replicas > 1:
        label += f" ({args.replicas} replicas, {args.router})"
    with _progress(total, label, show) as adv:
        try:
            if args.replicas > 1:
                from topas.api import simulate_cluster

                cres = simulate_cluster(
                    args.workload,
                    policy,
                    replicas=args.replicas,
                    router=args.router,
                    router_params=getattr(args, "router_params", None),
                    rate=args.rate,
                    n_tasks=args.tasks,
                    seed=args.seed,
                    profile=getattr(args, "profile_obj", args.profile),
                    tasks=tasks,
                    progress=adv,
                    policy_params=params,
                    **engine_kw,
                )
                from topas.metrics.summary import summarize_cluster

                return cres.as_sim_result(), summarize_cluster(cres)
            res = simulate(
                args.workload,
                policy,
                rate=args.rate,
                n_tasks=args.tasks,
                seed=args.seed,
                profile=getattr(args, "profile_obj", args.profile),
                tasks=tasks,
                progress=adv,
                policy_params=params,
                **engine_kw,
            )
        except PolicyStalled as e:
            if not params:
                raise  # the policy's own defaults stalled: a bug, not bad input
            shown = " ".join(f"--param {k}={v}" for k, v in params.items())
            raise CliError(
                f"{shown}: policy {policy!r} stalls with these parameters "
                f"({str(e).splitlines()[0]})"
            ) from None
    return res, summarize(res)


def cmd_run(args) -> int:
    _check_sim_args(args, [args.policy])
    res, s = _run_one(args, args.policy, quiet=args.json)
    s = {"workload": args.workload, **s}
    if args.out:
        from topas.metrics import write_results

        write_results(res, Path(args.out), s)
    if args.json:
        print(json.dumps({k: s[k] for k in (*JSON_KEYS, *[k for k in s if k not in JSON_KEYS])}))
        return 0
    t = Table(title=f"{args.policy} on {args.workload} ({s['tasks']} tasks, seed {args.seed})")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in s.items():
        if k != "per_replica":
            t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out.print(t)
    if s.get("per_replica"):
        rows = s["per_replica"]
        pt = Table(title=f"per replica ({s['router']} router)")
        short = {
            "replica": "#",
            "routed": "routed",
            "requests": "reqs",
            "tasks_finished": "tasks\ndone",
            "busy_fraction": "busy",
            "mean_batch_size": "batch",
            "prefix_hit_rate": "prefix\nhit",
            "context_hit_tokens": "ctx hit\ntokens",
            "preemptions": "pre-\nempt",
            "peak_kv_tokens": "peak KV\ntokens",
        }
        for k in rows[0]:
            pt.add_column(short.get(k, k), justify="right")
        for row in rows:
            pt.add_row(*(_fmt(v) for v in row.values()))
        out.print(pt)
    if args.out:
        out.print(f"results written to {args.out}/ (tasks.csv, requests.csv, summary.json)")
    return 0


COMPARE_COLS = [
    ("mean_jct_s", "mean\nJCT s"),
    ("p99_jct_s", "p99\nJCT s"),
    ("jct_over_lower_bound", "JCT/\nLB"),
    ("throughput_requests_per_s", "req/s"),
    ("mean_batch_size", "batch"),
    ("prefix_hit_rate", "prefix\nhit"),
    ("preemptions", "pre-\nempt"),
    ("mean_decision_ms", "decide\nms"),
]


def _fmt(v) -> str:
    """Numbers for narrow tables: thousands without exponents, small values to 3 digits."""
    if not isinstance(v, float):
        return f"{v:,}" if isinstance(v, int) else str(v)
    if v != v:  # NaN
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def cmd_compare(args) -> int:
    from topas.api import sample_tasks

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise CliError("--policies: give at least one policy name")
    if len(set(policies)) != len(policies):
        raise CliError(f"--policies {args.policies}: names a policy twice")
    _check_sim_args(args, policies)
    _, tasks = sample_tasks(args.workload, args.tasks, args.rate, args.seed)
    rows = []
    for p in policies:
        _, s = _run_one(args, p, tasks=tasks, quiet=args.json)
        rows.append(s)
    if args.out:
        from topas.metrics.summary import atomic_write_text

        atomic_write_text(Path(args.out) / "compare.json", json.dumps(rows, indent=2) + "\n")
    if args.json:
        print(json.dumps(rows))
        return 0
    best = min(r["mean_jct_s"] for r in rows)
    t = Table(
        title=f"{args.workload}: {len(tasks)} tasks, rate "
        f"{args.rate if args.rate is not None else 'default'}, seed {args.seed}, "
        f"profile {args.profile}"
        + (f", {args.replicas} replicas ({args.router})" if args.replicas > 1 else "")
    )
    t.add_column("policy", no_wrap=True, min_width=12)
    for _, label in COMPARE_COLS:
        t.add_column(label, justify="right")
    for r in rows:
        style = "bold green" if r["mean_jct_s"] == best else None
        t.add_row(r["policy"], *[_fmt(r[k]) for k, _ in COMPARE_COLS], style=style)
    out.print(t)
    return 0
