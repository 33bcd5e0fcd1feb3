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

from topas.engine.cost import DEFAULT_PROFILE, get_profile, list_profiles
from topas.engine.decision import DecisionError
from topas.workflow.model import WorkflowError

err = Console(stderr=True)
out = Console()

#: the keys ``topas run --json`` always prints
JSON_KEYS = ("mean_jct_s", "p99_jct_s", "throughput_tasks_per_s", "mean_lower_bound_s",
             "requests", "mean_decision_ms", "p99_decision_ms", "sim_wall_s")


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


@contextmanager
def _progress(total: int, label: str, enabled: bool):
    if not enabled:
        yield lambda n: None
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("requests"), TimeElapsedColumn(), console=err,
                  transient=True) as prog:
        tid = prog.add_task(label, total=total)
        yield lambda n: prog.advance(tid, n)


def _policy_params(args) -> dict:
    """``--param KEY=VALUE`` pairs; values are read as JSON (numbers, true/false, null) when
    they parse, else kept as strings."""
    out: dict = {}
    for item in args.param or []:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise CliError(f"--param {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError:
            out[key] = val
    return out


def _run_one(args, policy: str, tasks=None, quiet: bool = False):
    from topas.api import sample_tasks, simulate
    from topas.metrics import summarize

    if tasks is None:
        _, tasks = sample_tasks(args.workload, args.tasks, args.rate, args.seed)
    total = sum(t.n_calls for t in tasks)
    show = not quiet and sys.stderr.isatty()
    with _progress(total, f"{policy} on {args.workload}", show) as adv:
        res = simulate(args.workload, policy, rate=args.rate, n_tasks=args.tasks, seed=args.seed,
                       profile=args.profile, tasks=tasks, progress=adv,
                       policy_params=_policy_params(args),
                       preemption=args.preemption, host_tier=not args.no_host_tier,
                       kv_budget_tokens=args.kv_budget, context_cache=args.context_cache)
    return res, summarize(res)


def cmd_run(args) -> int:
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
        t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out.print(t)
    if args.out:
        out.print(f"results written to {args.out}/ (tasks.csv, requests.csv, summary.json)")
    return 0


COMPARE_COLS = [("mean_jct_s", "mean\nJCT s"), ("p99_jct_s", "p99\nJCT s"),
                ("jct_over_lower_bound", "JCT/\nLB"),
                ("throughput_requests_per_s", "req/s"), ("mean_batch_size", "batch"),
                ("prefix_hit_rate", "prefix\nhit"), ("preemptions", "pre-\nempt"),
                ("mean_decision_ms", "decide\nms")]


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
    t = Table(title=f"{args.workload}: {len(tasks)} tasks, rate "
                    f"{args.rate if args.rate is not None else 'default'}, seed {args.seed}, "
                    f"profile {args.profile}")
    t.add_column("policy", no_wrap=True, min_width=12)
    for _, label in COMPARE_COLS:
        t.add_column(label, justify="right")
    for r in rows:
        style = "bold green" if r["mean_jct_s"] == best else None
        t.add_row(r["policy"], *[_fmt(r[k]) for k, _ in COMPARE_COLS], style=style)
    out.print(t)
    return 0


def cmd_list(args) -> int:
    from topas.policies import list_policies
    from topas.workloads import get_workload, list_workloads

    t = Table(title="policies")
    t.add_column("name")
    t.add_column("what it does")
    t.add_column("source")
    for p in list_policies():
        t.add_row(p.name, p.summary, p.source)
    out.print(t)
    t = Table(title="workloads")
    t.add_column("name")
    t.add_column("description")
    t.add_column("default rate (task/s)", justify="right")
    for w in list_workloads():
        wl = get_workload(w)
        t.add_row(w, wl.description, f"{wl.default_rate:g}")
    out.print(t)
    t = Table(title="engine profiles")
    t.add_column("name")
    t.add_column("KV budget (tokens)", justify="right")
    t.add_column("mu (bytes/token)", justify="right")
    for name in list_profiles():
        p = get_profile(name)
        t.add_row(name, f"{p.kv_budget_tokens:,}", f"{p.model.kv_bytes_per_token:,}")
    out.print(t)
    return 0


def cmd_workloads_show(args) -> int:
    try:
        from topas.workloads.describe import describe_workload
    except ImportError:
        raise CliError("workloads show: not available in this build") from None
    d = describe_workload(args.name, args.profile, args.rate)
    if args.json:
        print(json.dumps(d, indent=2, default=str))
        return 0
    t = Table(title=f"workload {args.name}", show_header=False)
    t.add_column("field")
    t.add_column("value", justify="right")
    for k, v in d.items():
        if isinstance(v, (list, dict)):
            continue
        t.add_row(str(k), f"{v:.4g}" if isinstance(v, float) else str(v))
    out.print(t)
    if d.get("agents"):
        t = Table(title="agents")
        t.add_column("agent")
        t.add_column("prefix tokens", justify="right")
        for a in d["agents"]:
            t.add_row(a["name"], f"{a['prefix_tokens']:,}")
        out.print(t)
    if d.get("stages"):
        t = Table(title="stages (per task)")
        t.add_column("stage kind")
        t.add_column("agents")
        t.add_column("mean count", justify="right")
        t.add_column("mean calls / stage", justify="right")
        for st in d["stages"]:
            t.add_row(st["kind"], ", ".join(st["agents"]), f"{st['mean_per_task']:.3g}",
                      f"{st['mean_calls_per_stage']:.3g}")
        out.print(t)
    return 0


def _add_sim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", required=True, help="built-in name (see `topas list`) or a "
                   "workload file path")
    p.add_argument("--rate", type=float, default=None, help="task arrivals per second "
                   "(default: the workload's)")
    p.add_argument("--tasks", type=int, default=None, help="number of tasks (default: the "
                   "workload's)")
    p.add_argument("--seed", type=int, default=0, help="fixes every trajectory and arrival")
    p.add_argument("--profile", default=DEFAULT_PROFILE, help="engine profile name or .json "
                   f"path (default {DEFAULT_PROFILE})")
    p.add_argument("--preemption", choices=["sglang", "vllm"], default=None,
                   help="preemption semantics (default: the profile's)")
    p.add_argument("--kv-budget", type=int, default=None, help="override the KV budget (tokens)")
    p.add_argument("--no-host-tier", action="store_true", help="no host swap tier: evicted "
                   "prefixes are recomputed")
    p.add_argument("--context-cache", action="store_true", help="keep finished calls' "
                   "contexts in free memory until the room is needed (vLLM's automatic prefix "
                   "caching, SGLang's radix cache); off by default: contexts are reused only "
                   "when a policy holds them")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="a policy "
                   "parameter, e.g. --param rho=0.5 --param redo_cost=decode (repeatable)")
    p.add_argument("--out", default=None, help="write per-task/request CSVs and summary here")
    p.add_argument("--json", action="store_true", help="print a JSON summary to stdout")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="topas", description="Task-oriented, prefix-aware "
                                 "scheduling for multi-agent LLM workflows.")
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
    p.set_defaults(fn=cmd_list)
    p = sub.add_parser("workloads", help="inspect workloads")
    wsub = p.add_subparsers(dest="wcmd", required=True)
    q = wsub.add_parser("show", help="summary of one workload")
    q.add_argument("name")
    q.add_argument("--profile", default=DEFAULT_PROFILE)
    q.add_argument("--rate", type=float, default=None)
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_workloads_show)
    try:  # optional commands: report and the vLLM integration register themselves
        from topas.metrics import report

        report.add_arguments(sub)
    except ImportError:
        pass
    try:
        from topas.integrations.vllm import cli as vcli

        vcli.add_arguments(sub)
    except ImportError:
        pass
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (CliError, ValueError, WorkflowError, DecisionError, FileNotFoundError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"topas {args.cmd}: {msg}", file=sys.stderr)  # one line, never wrapped
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
