"""Cluster simulation cost at scale: requests/s and peak memory up to 1 M requests.

    PYTHONPATH=src python benchmarks/bench_cluster.py [--workload metagpt-tl]
        [--replicas 8] [--requests 10000,100000,1000000] [--policy fcfs]
        [--router task-affinity] [--mult 1.25] [--seed 3]

Each size runs in a fresh process (so its peak RSS is its own) on ``replicas`` replicas at
``mult`` x the workload's default rate x ``replicas`` (every replica as busy as the single
engine of the reproduction), with as many tasks as give about that many requests.  Prints
simulated requests per wall second, wall seconds, peak resident memory, and the bytes per
simulated request.  The machine is shared: compare figures of one run.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def child(a) -> None:
    from topas.api import sample_tasks, simulate_cluster
    from topas.reproduce import rate_of

    rate = rate_of(a.workload, a.mult * a.replicas)
    probe = sample_tasks(a.workload, 200, rate, a.seed)[1]
    per_task = sum(t.n_calls for t in probe) / len(probe)
    n_tasks = max(1, round(a.child / per_task))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    done = [0]
    step = max(a.child // 10, 1)

    def progress(k: int) -> None:
        done[0] += k
        if done[0] % step == 0:
            print(
                f"  {done[0]:,} requests, {time.perf_counter() - t0:,.0f} s",
                file=sys.stderr,
                flush=True,
            )

    c = simulate_cluster(
        a.workload,
        a.policy,
        replicas=a.replicas,
        router=a.router,
        rate=rate,
        n_tasks=n_tasks,
        seed=a.seed,
        progress=progress,
    )
    wall = time.perf_counter() - t0
    n_req = sum(len(r.requests) for r in c.replicas)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {
                "requests": n_req,
                "tasks": n_tasks,
                "wall_s": wall,
                "req_per_s": n_req / wall,
                "peak_rss_mib": rss / 1024,
                "bytes_per_request": (rss - rss0) * 1024 / n_req,
                "routed": c.routed,
            }
        )
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="metagpt-tl")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--requests", default="10000,100000,1000000")
    ap.add_argument("--policy", default="fcfs")
    ap.add_argument("--router", default="task-affinity")
    ap.add_argument("--mult", type=float, default=1.25)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    print(
        f"{a.workload}, {a.replicas} replicas, {a.policy} + {a.router}, "
        f"{a.mult} x default rate x {a.replicas}, seed {a.seed}"
    )
    print(
        f"{'requests':>10} {'tasks':>7} {'wall s':>8} {'req/s':>8} {'peak RSS MiB':>13} "
        f"{'bytes/req':>10}"
    )
    for n in (int(x) for x in a.requests.split(",")):
        cmd = [
            sys.executable,
            __file__,
            "--child",
            str(n),
            "--workload",
            a.workload,
            "--replicas",
            str(a.replicas),
            "--policy",
            a.policy,
            "--router",
            a.router,
            "--mult",
            str(a.mult),
            "--seed",
            str(a.seed),
        ]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{r['requests']:>10,} {r['tasks']:>7,} {r['wall_s']:>8,.1f} "
            f"{r['req_per_s']:>8,.0f} {r['peak_rss_mib']:>13,.0f} "
            f"{r['bytes_per_request']:>10,.0f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
