"""``topas list`` and ``topas workloads show``: what policies, parameters and workloads exist."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from topas.engine.cost import get_profile, list_profiles
from topas.routing import DEFAULT_ROUTER, ROUTER_SUMMARIES

err = Console(stderr=True)
out = Console()

#: the keys ``topas run --json`` always prints
from topas.cli_args import CliError


def cmd_list_params(name: str) -> int:
    from topas.policies import policy_info

    info = policy_info(name)
    t = Table(title=f"parameters of {name} (--param NAME=VALUE)")
    for col, kw in (
        ("name", {"no_wrap": True}),
        ("type", {}),
        ("range", {}),
        ("default", {"justify": "right"}),
        ("what it does", {}),
    ):
        t.add_column(col, **kw)
    for p in info.params:
        t.add_row(p.name, p.type_text(), p.range_text(), p.default_text(), p.doc)
    if not info.params:
        out.print(f"{name} takes no parameters")
        return 0
    out.print(t)
    return 0


def cmd_list(args) -> int:
    from topas.policies import list_policies
    from topas.workloads import get_workload, list_workloads

    if args.params:
        return cmd_list_params(args.params)

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
    t = Table(title="routers (--replicas N --router NAME)")
    t.add_column("name")
    t.add_column("what it does")
    for name, text in ROUTER_SUMMARIES.items():
        t.add_row(name + (" (default)" if name == DEFAULT_ROUTER else ""), text)
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
            t.add_row(
                st["kind"],
                ", ".join(st["agents"]),
                f"{st['mean_per_task']:.3g}",
                f"{st['mean_calls_per_stage']:.3g}",
            )
        out.print(t)
    return 0
