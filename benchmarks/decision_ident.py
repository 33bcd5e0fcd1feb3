"""Decision identity: a speed change must not change a single scheduling decision.

    PYTHONPATH=src python benchmarks/decision_ident.py --save /tmp/ident.json   # before
    PYTHONPATH=src python benchmarks/decision_ident.py --check /tmp/ident.json  # after

For every workload x seed x context cache on/off x policy (and one overloaded rate, where the
queue is long) it records each task's finish time, each request's admission / first-token /
finish times and preemptions, the decision count and every engine counter, as exact float
reprs.  ``--check`` reruns everything and prints ``OK: identical`` or the first difference
(exit status 1).  ``--jobs`` runs that many processes.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

WORKLOADS = ("metagpt-sop", "metagpt-tl", "dag4", "groupchat", "chain3", "react")
POLICIES = ("continuum", "topas", "topas-paper", "fcfs", "lpm")
SEEDS = (1, 2)
#: (multiple of the default rate, tasks): busy as in the reproduction, and overloaded
LOADS = ((1.25, 40), (4.0, 60))


def cases() -> list[tuple]:
    return [
        (w, p, s, cc, m, n)
        for w in WORKLOADS
        for (m, n) in LOADS
        for s in SEEDS
        for cc in (True, False)
        for p in POLICIES
    ]


def run_case(case: tuple) -> tuple[str, dict]:
    from topas.api import simulate
    from topas.reproduce.plan import rate_of

    w, p, s, cc, m, n = case
    res = simulate(w, p, rate=rate_of(w, m), n_tasks=n, seed=s, context_cache=cc)
    out = {
        "tasks": [[t.task_id, repr(t.finished_s)] for t in res.tasks],
        "requests": [
            [
                r.request_id,
                repr(r.admitted_s),
                repr(r.first_token_s),
                repr(r.finished_s),
                r.preemptions,
                r.cached_tokens,
                r.computed_tokens,
            ]
            for r in res.requests
        ],
        "decisions": len(res.decision_s),
        "counters": {k: repr(v) for k, v in asdict(res.counters).items()},
        "makespan_s": repr(res.makespan_s),
    }
    return key(case), out


def key(case: tuple) -> str:
    w, p, s, cc, m, n = case
    return f"{w} {p} seed={s} cache={'on' if cc else 'off'} load={m:g}x tasks={n}"


def first_diff(a, b, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: missing on one side"
            d = first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", metavar="FILE")
    g.add_argument("--check", metavar="FILE")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--policies", default=",".join(POLICIES))
    a = ap.parse_args()
    pols = set(a.policies.split(","))
    todo = [c for c in cases() if c[1] in pols]
    with ProcessPoolExecutor(a.jobs) as ex:
        got = dict(ex.map(run_case, todo, chunksize=4))
    if a.save:
        with open(a.save, "w") as f:
            json.dump(got, f)
        print(f"saved {len(got)} runs to {a.save}")
        return 0
    with open(a.check) as f:
        ref = json.load(f)
    for c in todo:
        k = key(c)
        if k not in ref:
            print(f"DIFFERENT: {k}: not in {a.check}")
            return 1
        d = first_diff(ref[k], got[k])
        if d:
            print(f"DIFFERENT: {k}: {d}")
            return 1
    print(f"OK: identical ({len(todo)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
