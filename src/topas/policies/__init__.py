"""Scheduling policies, registered by name.

Each policy family lives in its own module in this package and registers itself with
:func:`register`; modules are discovered automatically, so adding a policy touches no other
file.  ``make_policy(name, seed=..., **params)`` builds a fresh instance for one run.
"""

from __future__ import annotations

from topas._plugins import import_submodules
from collections.abc import Callable
from dataclasses import dataclass

from topas.policies.base import AdmissionPlan, Policy

__all__ = ["AdmissionPlan", "Policy", "register", "make_policy", "list_policies", "policy_info"]


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    factory: Callable[..., Policy]
    summary: str
    source: str


_REGISTRY: dict[str, PolicyInfo] = {}


def register(name: str, summary: str, source: str = "") -> Callable:
    """Class or factory decorator: ``@register("fcfs", "first come, first served")``.
    The factory is called as ``factory(seed=int, **params)``."""

    def deco(factory: Callable[..., Policy]) -> Callable[..., Policy]:
        if name in _REGISTRY and _REGISTRY[name].factory is not factory:
            raise ValueError(f"policy {name!r}: registered twice")
        _REGISTRY[name] = PolicyInfo(name, factory, summary, source)
        return factory

    return deco


def _load_all() -> None:
    import_submodules(__name__, __path__, skip=("base",))


def list_policies() -> list[PolicyInfo]:
    _load_all()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def policy_info(name: str) -> PolicyInfo:
    _load_all()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"policy {name!r}: unknown (known: {known})")
    return _REGISTRY[name]


def make_policy(name: str, seed: int = 0, **params) -> Policy:
    info = policy_info(name)
    try:
        return info.factory(seed=seed, **params)
    except TypeError as e:
        raise ValueError(f"policy {name!r}: bad parameters {sorted(params)} ({e})") from None
