"""The ``topas`` command line: run, compare, list, workloads show (and, with the vllm extra,
tiny-model and drive)."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.engine.decision import DecisionError
from topas.engine.simulator import PolicyStalled
from topas.routing import DEFAULT_ROUTER, ROUTERS
from topas.workflow.model import WorkflowError

err = Console(stderr=True)
out = Console()

#: the keys ``topas run --json`` always prints
from topas.cli_args import MAX_TASKS, ArgumentParser, CliError, check_out_dir, float_arg, int_arg
from topas.cli_list import cmd_list, cmd_workloads_show

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


def _add_sim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workload", required=True, help="built-in name (see `topas list`) or a workload file path"
    )
    p.add_argument(
        "--rate",
        type=float_arg(0.0),
        default=None,
        help="task arrivals per second (default: the workload's)",
    )
    p.add_argument(
        "--tasks",
        type=int_arg(1, MAX_TASKS),
        default=None,
        help="number of tasks (default: the workload's)",
    )
    p.add_argument(
        "--seed",
        type=int_arg(0),
        default=0,
        help="fixes every trajectory and arrival (an integer >= 0)",
    )
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"engine profile name or .json path (default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--preemption",
        choices=["sglang", "vllm"],
        default=None,
        help="preemption semantics (default: the profile's)",
    )
    p.add_argument(
        "--kv-budget", type=int_arg(1), default=None, help="override the KV budget (tokens)"
    )
    p.add_argument(
        "--no-host-tier",
        action="store_true",
        help="no host swap tier: evicted prefixes are recomputed",
    )
    p.add_argument(
        "--context-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep finished calls' contexts in free memory until the room is needed, "
        "as vLLM's automatic prefix caching and SGLang's radix cache do (default: "
        "on); --no-context-cache reuses contexts only when a policy holds them",
    )
    p.add_argument(
        "--replicas",
        type=int_arg(1, 1024),
        default=1,
        help="engine replicas, "
        "each with the profile's KV budget and its own policy instance, behind "
        "--router (default 1: one engine)",
    )
    p.add_argument(
        "--router",
        choices=list(ROUTERS),
        default=DEFAULT_ROUTER,
        help=f"how calls are placed on replicas (default {DEFAULT_ROUTER}; "
        "`topas list` describes each)",
    )
    p.add_argument(
        "--router-param",
        action="append",
        metavar="KEY=VALUE",
        help="a router parameter, e.g. --router-param externality=0.5 (repeatable)",
    )
    p.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="a policy "
        "parameter, e.g. --param rho=0.5 --param redo_cost=decode (repeatable; "
        "`topas list --params POLICY` lists them)",
    )
    p.add_argument("--out", default=None, help="write per-task/request CSVs and summary here")
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="topas",
        description="Task-oriented, prefix-aware scheduling for multi-agent LLM workflows.",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="run one workload under one policy on the simulator")
    _add_sim_args(p)
    p.add_argument("--policy", default="fcfs", help="policy name (see `topas list`)")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("compare", help="same workload and trajectories under several policies")
    _add_sim_args(p)
    p.add_argument("--policies", default="fcfs", help="comma-separated policy names")
    p.set_defaults(fn=cmd_compare)
    p = sub.add_parser("list", help="list policies, workloads and engine profiles")
    p.add_argument(
        "--params",
        metavar="POLICY",
        default=None,
        help="list one policy's parameters instead: name, type, range, default, what it does",
    )
    p.set_defaults(fn=cmd_list)
    p = sub.add_parser("workloads", help="inspect workloads")
    wsub = p.add_subparsers(dest="wcmd", required=True)
    q = wsub.add_parser("show", help="summary of one workload")
    q.add_argument("name")
    q.add_argument("--profile", default=DEFAULT_PROFILE)
    q.add_argument("--rate", type=float_arg(0.0), default=None)
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_workloads_show)
    try:  # optional commands: reproduce and the vLLM integration register themselves
        from topas.reproduce import cli as rcli

        rcli.add_arguments(sub)
    except ImportError:
        pass
    try:
        from topas.integrations.vllm import cli as vcli

        vcli.add_arguments(sub)
    except ImportError:
        pass
    try:
        from topas.integrations import router_service as rsvc

        rsvc.add_arguments(sub)
    except ImportError:
        pass
    return ap


def _os_error_text(e: OSError) -> str:
    """``PATH: problem`` for a file-system error (what the user named, what went wrong)."""
    what = e.strerror or type(e).__name__
    if e.filename is not None:
        return f"{e.filename}: {what}" + (f" -> {e.filename2}" if e.filename2 else "")
    return str(e) or what


def main(argv: list[str] | None = None) -> int:
    """The command; returns the exit status: 0, 1 (a run failed), 2 (bad input: one line on
    stderr, nothing written), 130 (interrupted)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a one-line usage error (2)
        return e.code if isinstance(e.code, int) else 2
    prog = f"topas {args.cmd}"
    try:
        return int(args.fn(args) or 0)
    except (CliError, ValueError, WorkflowError, DecisionError) as e:
        # ValueError covers the loaders' SpecError, ParamError and UnicodeDecodeError
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    except OSError as e:  # a path the user gave: missing, a directory, not writable, ...
        msg = _os_error_text(e)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    print(f"{prog}: error: {msg}", file=sys.stderr)  # one line, never wrapped
    return 2


if __name__ == "__main__":
    sys.exit(main())
