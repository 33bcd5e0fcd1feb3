"""CLI subcommands ``topas tiny-model`` and ``topas drive`` (wired in by ``topas.cli``).

vLLM is imported only when a command runs, so ``topas --help`` stays fast without the extra.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def add_arguments(subparsers) -> None:
    p = subparsers.add_parser(
        "tiny-model",
        help="build a random tiny Llama + tokenizer (for running the real vLLM engine on CPU)",
    )
    p.add_argument("path", help="output folder")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cli_tiny_model, func=cli_tiny_model)

    d = subparsers.add_parser(
        "drive", help="run a workload against a real vLLM engine and record real JCTs"
    )
    d.add_argument("--workload", required=True)
    d.add_argument("--policy", default="fcfs")
    g = d.add_mutually_exclusive_group()
    g.add_argument(
        "--endpoint",
        help="URL of a running OpenAI-compatible vLLM server "
        "(started with --scheduler-cls topas.integrations.vllm.scheduler."
        "TopasScheduler and TOPAS_POLICY set)",
    )
    g.add_argument(
        "--in-process",
        action="store_true",
        help="start vLLM in this process (default when no --endpoint)",
    )
    d.add_argument(
        "--model",
        default=None,
        help="model path (default: build the tiny model in ~/.cache/topas/tiny-llama)",
    )
    d.add_argument("--tasks", type=int, default=8)
    d.add_argument("--rate", type=float, default=None, help="tasks/s before --time-scale")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--token-scale", type=float, default=0.25)
    d.add_argument("--time-scale", type=float, default=1.0)
    d.add_argument("--kv-cache-mb", type=float, default=32.0)
    d.add_argument("--profile", default="cpu/tiny-llama", help="for the lower bounds")
    d.add_argument(
        "--threads",
        type=int,
        default=1,
        help="--in-process: OpenMP threads of "
        "the engine (OMP_NUM_THREADS; default 1, as calibration used: with one per "
        "core, any other process on the machine stalls every step)",
    )
    d.add_argument("--out", default=None, help="write tasks.csv/requests.csv/summary.json here")
    d.set_defaults(fn=cli_drive, func=cli_drive)


def cli_tiny_model(args: argparse.Namespace) -> int:
    from topas.integrations.vllm.tiny_model import build_tiny_model

    print(build_tiny_model(args.path, seed=args.seed))
    return 0


def default_model() -> Path:
    from topas.integrations.vllm.tiny_model import build_tiny_model

    p = Path.home() / ".cache" / "topas" / "tiny-llama"
    if not (p / "topas_tiny_model.json").exists():
        build_tiny_model(p, seed=0)
    return p


def cli_drive(args: argparse.Namespace) -> int:
    from topas.api import sample_tasks
    from topas.engine.cost import get_profile
    from topas.integrations.vllm.backends import HTTPBackend, InProcessBackend
    from topas.integrations.vllm.driver import (
        DriveConfig,
        drive,
        make_llm,
        scale_tasks,
    )
    from topas.metrics import summarize
    from topas.metrics.summary import write_results

    wl, tasks = sample_tasks(args.workload, args.tasks, args.rate, args.seed)
    cfg = DriveConfig(token_scale=args.token_scale, time_scale=args.time_scale, seed=args.seed)
    scaled, agents = scale_tasks(tasks, wl.agents, cfg)
    try:
        prof = get_profile(args.profile)
    except ValueError:
        prof = None
    model = args.model or str(default_model())
    if args.endpoint:
        backend = HTTPBackend(args.endpoint, model)
    else:
        if args.threads < 1:
            raise ValueError(f"--threads {args.threads}: must be >= 1")
        # before torch loads (make_llm imports vLLM), as the calibration runner does
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        llm = make_llm(
            model, args.policy, kv_cache_bytes=int(args.kv_cache_mb * 2**20), seed=args.seed
        )
        backend = InProcessBackend(llm)
    res = drive(
        scaled,
        agents,
        backend,
        policy=args.policy,
        seed=args.seed,
        profile=prof,
        label=f"vllm:{Path(model).name}",
    )
    summ = summarize(res)
    if args.out:
        write_results(res, Path(args.out), summ)
    json.dump(
        {
            k: summ[k]
            for k in (
                "policy",
                "tasks",
                "requests",
                "mean_jct_s",
                "p50_jct_s",
                "p99_jct_s",
                "prefix_hit_rate",
                "makespan_s",
            )
        },
        sys.stdout,
        indent=2,
    )
    print()
    return 0
