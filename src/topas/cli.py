"""The ``topas`` command line: run, compare, list, workloads show (and, with the vllm extra,
tiny-model and drive)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from topas.engine.cost import DEFAULT_PROFILE
from topas.engine.decision import DecisionError
from topas.routing import DEFAULT_ROUTER, ROUTERS
from topas.workflow.model import WorkflowError

err = Console(stderr=True)
out = Console()

#: the keys ``topas run --json`` always prints
from topas.cli_args import MAX_TASKS, ArgumentParser, CliError, float_arg, int_arg
from topas.cli_list import cmd_list, cmd_workloads_show
from topas.cli_run import cmd_compare, cmd_run


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
        from topas.integrations import router_cli

        router_cli.add_arguments(sub)
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
