"""Random search over the flagship's parameters on the tuning seeds: how much is left to gain?

    PYTHONPATH=src python benchmarks/random_search.py [--workloads dag4,dag10wide]
        [--configs 120] [--rng 7] [--seeds 1,2] [--cache on|off|both] [--mult 1.25]
        [--task-mult 3] [--jobs 2] [--top 6] [--param KEY=VALUE ...] [--out search.json]

Samples ``--configs`` parameter settings of ``topas`` (each parameter of ``SPACE`` is set
with probability 1/2, to a value drawn uniformly from its list; the rest keep the flagship's
defaults; ``--param`` fixes a parameter in every setting, the defaults included, and a
sampled value never overrides it), runs each on every workload (at ``mult`` x its default rate, the paired
comparison's task counts x ``task-mult``), seed and cache setting, together with the
flagship's defaults and every baseline on the same seeds (same trajectories), and prints
per workload the defaults' and the best baseline's mean JCT and the ``--top`` settings by
mean JCT, then the settings best over all workloads (by the mean of their per-workload
ratios to the defaults).  Everything is the mean over the seeds and cache settings.

The best of many settings on two seeds is an optimistic estimate of what the parameters can
give (selection on noise): a setting found here is adopted only after the paired comparison
(``benchmarks/paired.py``) on every workload and the report's seeds 3-12.  Only the tuning
seeds belong here.  Runs are cached in ``--cache-dir`` (the paired comparison's cache layout)
and ``--out`` writes every setting's means as JSON, atomically.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from topas.metrics.summary import atomic_write_text
from topas.policies import check_params
from topas.policies.params import key_value_pairs
from topas.reproduce import BASELINES, rate_of, run_jobs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired import CACHES, paired_jobs  # noqa: E402  (the paired comparison's runs, next to this file)

#: the parameters searched and the values each may take (strings, as on the command line)
SPACE: dict[str, tuple[str, ...]] = {
    "beta": ("0", "1", "3", "10", "30"),
    "rho": ("0.25", "0.5", "1", "2", "4"),
    "reserve_ratio": ("0.3", "0.45", "0.6", "0.8"),
    "M": ("4", "6", "8", "10"),
    "joint_gain": ("true", "false"),
    "group_agents": ("none", "best", "density"),
    "hol_block": ("true", "false"),
    "phase_depth": ("0", "0.2", "0.3", "0.5"),
    "phase_min": ("2", "4", "8"),
    "phase_gain": ("0.1", "0.3"),
    "peak_fit": ("true", "false"),
    "min_gain_s": ("0.001", "0.1", "1"),
    "reuse": ("true", "false"),
    "move": ("true", "false"),
}


def sample(rng: random.Random, n: int) -> list[dict[str, str]]:
    """``n`` distinct settings, each non-empty (the defaults are run separately)."""
    out: list[dict[str, str]] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    while len(out) < n:
        cfg = {k: rng.choice(v) for k, v in SPACE.items() if rng.random() < 0.5}
        if cfg.get("hol_block") == "false":  # backfilling needs head-of-line blocking
            cfg["backfill"] = "false"
        key = tuple(sorted(cfg.items()))
        if cfg and key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="dag4,dag10wide")
    ap.add_argument("--configs", type=int, default=120, help="settings to sample")
    ap.add_argument("--rng", type=int, default=7, help="seed of the settings' sampler")
    ap.add_argument("--seeds", default="1,2", help="simulation seeds (tune on 1-2 only)")
    ap.add_argument("--cache", choices=["on", "off", "both"], default="on")
    ap.add_argument("--mult", type=float, default=1.25)
    ap.add_argument("--task-mult", type=float, default=3.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--cache-dir", default=".paired-cache")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default=None, help="write every setting's means here (JSON)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.configs < 1:
        ap.error(f"--configs {a.configs}: must be >= 1")
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds {a.seeds!r}: expected a list such as 1,2")
    wls = [w for w in a.workloads.split(",") if w]
    for w in wls:
        try:
            rate_of(w, a.mult)
        except ValueError as e:
            ap.error(f"--workloads: {e}")
    try:
        fixed = dict(key_value_pairs(a.param, "--param"))
        check_params("topas", fixed)
    except ValueError as e:
        ap.error(str(e))
    cfgs = sample(random.Random(a.rng), a.configs)
    params = [tuple(sorted(check_params("topas", {**c, **fixed}).items())) for c in [{}, *cfgs]]
    runs = [(b, ()) for b in BASELINES] + [("topas", p) for p in params]
    jobs = paired_jobs(wls, runs, seeds, a.cache, a.mult, a.task_mult)
    res = run_jobs(jobs, Path(a.cache_dir), n_workers=a.jobs, progress=not a.quiet, label="search")

    by_run: dict[tuple[str, str, tuple], list[float]] = {}
    for j, v in res.items():
        if "mean_jct_s" in v:
            by_run.setdefault((j.workload, j.policy, j.params), []).append(v["mean_jct_s"])
    n_runs = len(seeds) * len(CACHES[a.cache])

    def mean_of(w: str, policy: str, p: tuple = ()) -> float | None:
        """The mean over every seed and cache setting; None if any of those runs failed."""
        vals = by_run.get((w, policy, p), [])
        return statistics.fmean(vals) if len(vals) == n_runs else None

    table: list[dict[str, object]] = []
    for i, p in enumerate(params):
        means = {w: mean_of(w, "topas", p) for w in wls}
        table.append({"params": dict(p), "means": means, "default": i == 0})
    base = table[0]["means"]
    assert isinstance(base, dict)
    print(
        f"{len(cfgs)} settings of topas (sampler seed {a.rng}"
        + (f", fixed {dict(params[0])}" if fixed else "")
        + f"); seeds {a.seeds}, cache "
        f"{a.cache}, rate {a.mult} x default, tasks x {a.task_mult}; mean JCT (s)"
    )
    best_base: dict[str, tuple[str, float]] = {}
    for w in wls:
        got = [(b, m) for b in BASELINES if (m := mean_of(w, b)) is not None]
        best_base[w] = min(got, key=lambda bm: bm[1])
        d = base[w]
        print(
            f"\n{w}: defaults {d:.1f}, best baseline {best_base[w][0]} {best_base[w][1]:.1f}"
            if d is not None
            else f"\n{w}: the defaults' runs failed"
        )
        ok = [t for t in table[1:] if t["means"][w] is not None]  # type: ignore[index]
        for t in sorted(ok, key=lambda t: t["means"][w])[: a.top]:  # type: ignore[index]
            m = t["means"][w]  # type: ignore[index]
            rel = f" ({(m / d - 1) * 100:+.1f} % vs defaults)" if d else ""
            print(f"  {m:8.1f}{rel}  {t['params']}")
    joint = []
    for t in table[1:]:
        ms = t["means"]
        assert isinstance(ms, dict)
        if all(ms[w] is not None and base[w] for w in wls):
            joint.append((statistics.fmean(ms[w] / base[w] for w in wls), t))
    print(f"\nover all {len(wls)} workloads (mean ratio to the defaults):")
    for ratio, t in sorted(joint, key=lambda rt: rt[0])[: a.top]:
        print(f"  {(ratio - 1) * 100:+.1f} %  {t['params']}")
    if a.out:
        doc = {
            "seeds": seeds,
            "cache": a.cache,
            "mult": a.mult,
            "task_mult": a.task_mult,
            "sampler_seed": a.rng,
            "best_baseline": {w: {"policy": b, "mean_jct_s": m} for w, (b, m) in best_base.items()},
            "settings": table,
        }
        atomic_write_text(Path(a.out), json.dumps(doc, indent=1, default=str) + "\n")
        print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
