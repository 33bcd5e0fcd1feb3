"""How often the local prefix-set search misses the exhaustive search's arg-max.

    PYTHONPATH=src python benchmarks/search_quality.py [--workload dag10wide] [--rate 0.0375]
        [--tasks 180] [--seed 1] [--policy topas] [--param KEY=VALUE ...]

TOPAS enumerates every prefix subset while at most ``M`` agents compete and searches locally
otherwise.  This runs the workload under the policy and, at every decision where the local
search ran, also runs the exhaustive search on the same decision context (the run itself
follows the local search's choice, so it is the policy's own trajectory) and prints how many
decisions there were, in how many the local choice scored below the exhaustive one, and the
mean and largest Score shortfall (seconds).  ``--param room_moves=false`` gives the local
search without the flagship's make-room moves (docs/topas.md, "room_moves").
"""

from __future__ import annotations

import argparse
import sys

from topas.api import sample_tasks
from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.engine.simulator import Simulator
from topas.policies import build_policy, check_params
from topas.policies.params import key_value_pairs
from topas.policies.topas.policy import Topas
from topas.policies.topas.search import exhaustive


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="dag10wide")
    ap.add_argument("--rate", type=float, default=0.0375)
    ap.add_argument("--tasks", type=int, default=180)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policy", default="topas")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    try:
        params = check_params(a.policy, dict(key_value_pairs(a.param, "--param")))
        pol = build_policy(a.policy, a.seed, params)
    except ValueError as e:
        ap.error(str(e))
    if not isinstance(pol, Topas):
        ap.error(f"--policy {a.policy}: not a TOPAS policy (it has no prefix-set search)")
    try:
        wl, tasks = sample_tasks(a.workload, a.tasks, a.rate, a.seed)
    except (ValueError, TypeError) as e:
        ap.error(str(e))
    local = pol.hierarchical
    stats = {"local": 0, "missed": 0}
    gaps: list[float] = []

    def checked(ctx, agents):  # type: ignore[no-untyped-def]
        got = local(ctx, agents)
        best = exhaustive(ctx, agents, pol.max_preempt)
        stats["local"] += 1
        if best is not None and (got is None or best.key() > got.key()):
            stats["missed"] += 1
            gaps.append(best.score - (got.score if got is not None else 0.0))
        return got

    pol.hierarchical = checked  # type: ignore[method-assign]
    sim = Simulator(
        tasks, {ag.name: ag for ag in wl.agents}, get_profile(DEFAULT_PROFILE), pol, seed=a.seed
    )
    sim.run()
    n, m = stats["local"], stats["missed"]
    print(
        f"{a.policy} {dict(params)} on {a.workload} (rate {a.rate}, {a.tasks} tasks, seed "
        f"{a.seed}): {n} decisions searched locally, {m} below the exhaustive arg-max"
        + (f"; Score shortfall mean {sum(gaps) / m:.3f} s, max {max(gaps):.3f} s" if m else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
