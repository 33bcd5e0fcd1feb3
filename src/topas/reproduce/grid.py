"""Grid files for ``topas sweep`` (the format: :mod:`~topas.reproduce.sweep`): read, check
every key before any run (errors name the file and the key), and expand to
:class:`~topas.reproduce.plan.Job` values."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from topas.reproduce.plan import Job, rate_of

#: the keys a grid file may have
KEYS = (
    "workloads",
    "policies",
    "baseline",
    "seeds",
    "rates",
    "rate_multipliers",
    "n_tasks",
    "params",
    "context_cache",
)
#: bounds on a grid (what fits a cluster, not what is sensible)
MAX_RUNS, MAX_TASKS = 1_000_000, 1_000_000


@dataclass(frozen=True)
class Grid:
    workloads: tuple[str, ...]
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    #: workload -> its rates (task/s)
    rates: dict = field(default_factory=dict)
    #: workload -> task count
    n_tasks: dict = field(default_factory=dict)
    #: policy -> sorted ``(name, value)`` pairs
    params: dict = field(default_factory=dict)
    context_cache: tuple[bool, ...] = (True,)
    baseline: str | None = None

    def jobs(self) -> list[Job]:
        """Every run, in a fixed order (workload, rate, cache, policy, seed)."""
        return [
            Job(w, p, r, s, self.n_tasks[w], cc, self.params.get(p, ()))
            for w in self.workloads
            for r in self.rates[w]
            for cc in self.context_cache
            for p in self.policies
            for s in self.seeds
        ]


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file; every error is a ValueError naming the file and key."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: does not exist")
    if not p.is_file():
        raise ValueError(f"{p}: not a file")
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not a UTF-8 text file") from None
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror})") from None
    except RecursionError:
        raise ValueError(f"{p}: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{p}: not valid YAML ({getattr(e, 'problem', None) or e}{at})") from None
    try:
        return parse_grid(doc)
    except ValueError as e:
        raise ValueError(f"{p}: {str(e).splitlines()[0]}") from None


def _names(doc: dict, key: str) -> tuple[str, ...]:
    v = doc.get(key)
    if v is None:
        raise ValueError(f"{key}: missing (a list of names)")
    v = [v] if isinstance(v, str) else v
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise ValueError(f"{key}: must be a non-empty list of names")
    if len(set(v)) != len(v):
        raise ValueError(f"{key}: names {next(x for x in v if v.count(x) > 1)!r} twice")
    return tuple(v)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_seeds(v) -> tuple[int, ...]:
    """A seed, a list of seeds and ranges, or an inclusive range ``"A..B"``."""
    items = v if isinstance(v, list) else [v]
    out: list[int] = []
    for x in items:
        if _is_int(x):
            out.append(x)
            continue
        lo, sep, hi = str(x).partition("..") if isinstance(x, str) else ("", "", "")
        try:
            a, b = int(lo), int(hi)
        except ValueError:
            a = b = None
        if not sep or a is None:
            raise ValueError(f"seeds {x!r}: expected an integer or a range A..B")
        if a > b:
            raise ValueError(f"seeds {x!r}: empty range ({a} > {b})")
        if b - a >= MAX_RUNS:
            raise ValueError(f"seeds {x!r}: more than {MAX_RUNS:_} seeds")
        out.extend(range(a, b + 1))
    if not out:
        raise ValueError("seeds: give at least one seed")
    if any(s < 0 for s in out):
        raise ValueError(f"seeds {v!r}: seeds must be >= 0")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds {v!r}: seed {next(s for s in out if out.count(s) > 1)} twice")
    return tuple(out)


def _numbers(key: str, v) -> tuple[float, ...]:
    items = v if isinstance(v, list) else [v]
    if not items:
        raise ValueError(f"{key}: give at least one value")
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"{key} {x!r}: must be a finite number > 0")
    if len(set(items)) != len(items):
        raise ValueError(f"{key}: a value is given twice")
    return tuple(float(x) for x in items)


def _frozen(v):
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


def parse_grid(doc) -> Grid:
    """Check a parsed grid document and resolve it (rates, task counts, parameters)."""
    from topas.policies import build_policy
    from topas.workloads import check_rate, get_workload

    if not isinstance(doc, dict):
        raise ValueError("the top level must be a mapping of " + ", ".join(KEYS))
    for k in doc:
        if k not in KEYS:
            raise ValueError(f"unknown key {k!r} (known: {', '.join(KEYS)})")
    workloads, policies = _names(doc, "workloads"), _names(doc, "policies")
    wls = {}
    for w in workloads:
        try:
            wls[w] = get_workload(w)
        except RecursionError:
            raise ValueError(f"workload {w}: nested too deeply") from None
    seeds = parse_seeds(doc.get("seeds", [3]))
    if "rates" in doc and "rate_multipliers" in doc:
        raise ValueError("rates and rate_multipliers: give one of them")
    if "rates" in doc:
        r = _numbers("rates", doc["rates"])
        rates = {w: r for w in workloads}
    else:
        m = _numbers("rate_multipliers", doc.get("rate_multipliers", [1.0]))
        rates = {w: tuple(dict.fromkeys(rate_of(w, x) for x in m)) for w in workloads}
    nt = doc.get("n_tasks")
    if isinstance(nt, dict):
        for w in nt:
            if w not in workloads:
                raise ValueError(f"n_tasks: {w!r} is not one of the workloads")
        n_tasks = {w: nt.get(w, wls[w].default_tasks) for w in workloads}
    else:
        n_tasks = {w: wls[w].default_tasks if nt is None else nt for w in workloads}
    for w, n in n_tasks.items():
        if not _is_int(n) or not 1 <= n <= MAX_TASKS:
            raise ValueError(f"n_tasks {n!r} ({w}): must be an integer in [1, {MAX_TASKS:_}]")
        for r in rates[w]:
            check_rate(r, n)
    raw = doc.get("params") or {}
    if not isinstance(raw, dict):
        raise ValueError("params: must map a policy to its parameters")
    params = {}
    for p, kv in raw.items():
        if p not in policies:
            raise ValueError(f"params: {p!r} is not one of the policies")
        if not isinstance(kv, dict) or not all(isinstance(k, str) for k in kv):
            raise ValueError(f"params.{p}: must map parameter names to values")
        params[p] = tuple(sorted((k, _frozen(v)) for k, v in kv.items()))
    for p in policies:
        build_policy(p, seeds[0], dict(params.get(p, ())))  # unknown policy or parameter
    cc = doc.get("context_cache", True)
    cc = cc if isinstance(cc, list) else [cc]
    if not cc or not all(isinstance(x, bool) for x in cc) or len(set(cc)) != len(cc):
        raise ValueError(
            f"context_cache {doc.get('context_cache')!r}: true, false or a list of both"
        )
    base = doc.get("baseline")
    if base is not None:
        if base not in policies:
            raise ValueError(f"baseline {base!r}: must be one of the policies")
        if len(seeds) < 2:
            raise ValueError(f"baseline {base!r}: a paired interval needs at least 2 seeds")
    g = Grid(workloads, policies, seeds, rates, n_tasks, params, tuple(cc), base)
    n = sum(len(rates[w]) for w in workloads) * len(cc) * len(policies) * len(seeds)
    if n > MAX_RUNS:
        raise ValueError(f"the grid has {n:_} runs; at most {MAX_RUNS:_}")
    return g
