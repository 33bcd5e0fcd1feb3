"""Workloads: generators of tasks (DAGs of stages with sampled trajectories) and arrivals.

A workload is any object with ``name``, ``description``, ``agents`` (a tuple of
:class:`~topas.workflow.model.Agent`), ``default_rate`` (tasks/s), ``default_tasks`` and
``sample(n_tasks, rate, rng) -> list[Task]``.  Sampling draws every trajectory (rounds,
lengths, tool delays) and every arrival time from ``rng`` before the engine starts, so all
policies replay the same trajectories for the same seed.

Built-in workloads register themselves with :func:`register`; ``get_workload`` also accepts a
path to a workload file, or ``SCHEME:PATH`` for a file read another way (``sessions:`` groups a
Mooncake trace into multi-turn sessions; see docs/workloads.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from topas._plugins import import_submodules
from topas.workflow.model import MAX_TIME_S, Agent, Task


class Workload(Protocol):
    name: str
    description: str
    agents: tuple[Agent, ...]
    default_rate: float
    default_tasks: int

    def sample(self, n_tasks: int, rate: float, rng: np.random.Generator) -> list[Task]: ...


_REGISTRY: dict[str, Callable[[], Workload]] = {}
#: loaders for workload files by suffix, filled in by the module that implements the format
FILE_LOADERS: dict[str, Callable[[Path], Workload]] = {}
#: loaders for ``SCHEME:PATH`` workload names (``sessions:trace.jsonl``), filled in likewise
SCHEME_LOADERS: dict[str, Callable[[Path], Workload]] = {}


def register(name: str) -> Callable:
    def deco(factory: Callable[[], Workload]) -> Callable[[], Workload]:
        _REGISTRY[name] = factory
        return factory

    return deco


def _load_all() -> None:
    import_submodules(__name__, __path__, skip=())


def list_workloads() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def get_workload(name_or_path: str) -> Workload:
    _load_all()
    if name_or_path in _REGISTRY:
        return _REGISTRY[name_or_path]()
    scheme, sep, rest = name_or_path.partition(":")
    if sep and scheme in SCHEME_LOADERS:
        sp = Path(rest)
        if not sp.exists():
            raise ValueError(f"workload file {sp}: does not exist")
        return SCHEME_LOADERS[scheme](sp)
    p = Path(name_or_path)
    if p.suffix in FILE_LOADERS:
        if not p.exists():
            raise ValueError(f"workload file {p}: does not exist")
        return FILE_LOADERS[p.suffix](p)
    known = ", ".join(sorted(_REGISTRY))
    raise ValueError(
        f"workload {name_or_path!r}: unknown (known: {known}; or a workload file "
        f"with suffix {sorted(FILE_LOADERS) or ['.yaml']}"
        + (f", or SCHEME:PATH with scheme {sorted(SCHEME_LOADERS)}" if SCHEME_LOADERS else "")
        + ")"
    )


#: the longest arrival span (s) a rate may ask for: the simulator's clock limit
#: (:data:`topas.workflow.model.MAX_TIME_S`)
MAX_ARRIVAL_SPAN_S = MAX_TIME_S


def check_rate(rate: float, n_tasks: int) -> None:
    """Reject a rate that is not a positive finite number, or so low that ``n_tasks``
    arrivals would span more than :data:`MAX_ARRIVAL_SPAN_S` (their times would lose
    precision)."""
    if not (isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate {rate!r}: must be > 0 tasks/s")
    span = max(1, n_tasks) / rate
    if not span <= MAX_ARRIVAL_SPAN_S:
        raise ValueError(
            f"rate {rate!r}: {n_tasks} arrivals would span ~{span:.3g} s, beyond "
            f"{MAX_ARRIVAL_SPAN_S:.0e} s, where simulated times lose precision; use a rate "
            f">= {max(1, n_tasks) / MAX_ARRIVAL_SPAN_S:.3g} tasks/s"
        )


def poisson_arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of a Poisson process of ``rate`` tasks/s, first arrival at 0."""
    check_rate(rate, n)
    gaps = rng.exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)
