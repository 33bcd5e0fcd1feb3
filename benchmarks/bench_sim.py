"""Simulator speed: simulated requests per wall-second and peak memory.

    python benchmarks/bench_sim.py                 # 10k and 100k requests, metagpt-tl, FCFS
    python benchmarks/bench_sim.py --sizes 10000 --workload metagpt-sop --policy lpm
    python benchmarks/bench_sim.py --loads 1,4,10 --policies fcfs,lpm,continuum --sizes 10000

``--loads`` multiplies the workload's default rate (4 and 10: overload, the queue grows
without bound) and prints requests/s per policy and load: per-event cost must not grow with
the queue (issue 13: >= 5,000 requests/s at 10x for fcfs, lpm and continuum).

Each size runs in a fresh subprocess so its peak RSS (ru_maxrss) is its own.  The workload is
sampled inside the run and its sampling time is reported separately from the simulation.
Targets (issue 2): >= 5,000 simulated requests/s and <= 300 MB for 100k requests under FCFS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(workload: str, policy: str, requests: int, rate: float | None, seed: int) -> dict:
    from topas.api import sample_tasks, simulate
    from topas.metrics import summarize
    from topas.workloads import get_workload

    wl = get_workload(workload)
    _, probe = sample_tasks(workload, 50, rate, seed)
    per_task = sum(t.n_calls for t in probe) / len(probe)
    n_tasks = max(1, round(requests / per_task))
    t0 = time.perf_counter()
    _, tasks = sample_tasks(workload, n_tasks, rate, seed)
    sample_s = time.perf_counter() - t0
    cpu0 = time.process_time()
    res = simulate(workload, policy, tasks=tasks, rate=rate, n_tasks=n_tasks, seed=seed)
    cpu_s = time.process_time() - cpu0 - sample_s  # simulate() samples the workload again
    s = summarize(res)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "workload": workload,
        "policy": policy,
        "rate": rate or wl.default_rate,
        "tasks": n_tasks,
        "requests": s["requests"],
        "sample_s": round(sample_s, 2),
        "sim_wall_s": round(s["sim_wall_s"], 2),
        "requests_per_s": round(s["requests"] / s["sim_wall_s"]),
        "requests_per_cpu_s": round(s["requests"] / max(cpu_s, 1e-9)),
        "peak_rss_mb": round(rss_mb),
        "mean_jct_s": round(s["mean_jct_s"], 1),
        "decisions": s["decisions"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="metagpt-tl")
    ap.add_argument("--policy", default="fcfs")
    ap.add_argument("--sizes", default="10000,100000", help="requests per run, comma-separated")
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--loads",
        default=None,
        help="multiples of the default rate, comma-separated (a load table)",
    )
    ap.add_argument("--policies", default=None, help="with --loads: policies, comma-separated")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.workload, a.policy, int(a.sizes), a.rate, a.seed)))
        return
    if a.loads:
        load_table(a)
        return
    print(
        f"{'requests':>9} {'tasks':>6} {'sim s':>7} {'req/s':>8} {'peak MB':>8} "
        f"{'sample s':>8} {'mean JCT s':>10}"
    )
    for size in a.sizes.split(","):
        r = _child(a.workload, a.policy, size, a.rate, a.seed)
        print(
            f"{r['requests']:>9} {r['tasks']:>6} {r['sim_wall_s']:>7} {r['requests_per_s']:>8} "
            f"{r['peak_rss_mb']:>8} {r['sample_s']:>8} {r['mean_jct_s']:>10}"
        )


def _child(workload: str, policy: str, size: str, rate: float | None, seed: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--workload",
        workload,
        "--policy",
        policy,
        "--sizes",
        size,
        "--seed",
        str(seed),
    ]
    if rate is not None:
        cmd += ["--rate", repr(rate)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def load_table(a) -> None:
    from topas.workloads import get_workload

    base = a.rate if a.rate is not None else get_workload(a.workload).default_rate
    loads = [float(x) for x in a.loads.split(",")]
    policies = (a.policies or a.policy).split(",")
    size = a.sizes.split(",")[0]
    print(f"{a.workload}, ~{size} requests, seed {a.seed}, load x default rate {base:g} task/s")
    print(
        "requests per wall-second of the simulation (per CPU-second in brackets: "
        "steadier on a shared machine)"
    )
    print(f"{'policy':>12} " + " ".join(f"{f'{x:g}x':>16}" for x in loads))
    for pol in policies:
        runs = [_child(a.workload, pol, size, base * x, a.seed) for x in loads]
        cells = [f"{r['requests_per_s']} ({r['requests_per_cpu_s']})" for r in runs]
        print(f"{pol:>12} " + " ".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
