"""Scheduling policies, registered by name.

Each policy family lives in its own module in this package and registers itself with
:func:`register`; modules are discovered automatically, so adding a policy touches no other
file.  ``make_policy(name, seed=..., **params)`` builds a fresh instance for one run.

Every parameter a policy takes is declared (``PARAMS``, see :mod:`topas.policies.params`):
``make_policy`` checks and converts ``params`` against the declaration before it calls the
factory, so the command line and the Python API share one parser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import TypeVar

from topas._plugins import import_submodules
from topas.policies.base import AdmissionPlan, Policy
from topas.policies.params import Param, ParamError, parse_params

__all__ = [
    "AdmissionPlan",
    "Policy",
    "register",
    "make_policy",
    "build_policy",
    "check_params",
    "list_policies",
    "policy_info",
    "Param",
    "ParamError",
]


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    factory: Callable[..., Policy]
    summary: str
    source: str
    #: parameters given to :func:`register` (a factory function's); None: the factory's
    #: ``PARAMS``
    declared: tuple[Param, ...] | None = None

    @property
    def params(self) -> tuple[Param, ...]:
        """The declared parameters: those given to :func:`register`, else the factory's
        ``PARAMS`` class attribute (read when asked)."""
        if self.declared is not None:
            return self.declared
        return tuple(getattr(self.factory, "PARAMS", ()))


_REGISTRY: dict[str, PolicyInfo] = {}
_F = TypeVar("_F", bound=Callable[..., Policy])


def register(
    name: str, summary: str, source: str = "", params: tuple[Param, ...] | None = None
) -> Callable[[_F], _F]:
    """Class or factory decorator: ``@register("fcfs", "first come, first served")``.
    The factory is called as ``factory(seed=int, **params)``; a factory function declares
    its parameters with ``params=`` (a class, as its ``PARAMS`` attribute)."""

    def deco(factory: _F) -> _F:
        if name in _REGISTRY and _REGISTRY[name].factory is not factory:
            raise ValueError(f"policy {name!r}: registered twice")
        _REGISTRY[name] = PolicyInfo(name, factory, summary, source, params)
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


def check_params(name: str, params: dict[str, object]) -> dict[str, object]:
    """``params`` for policy ``name`` converted to their declared types; raises
    ``ValueError`` (unknown policy) or :class:`ParamError` naming the parameter."""
    if not isinstance(name, str):
        raise TypeError(f"policy: must be a policy name (str), got {type(name).__name__}")
    return parse_params(name, policy_info(name).params, params)


def build_policy(name: str, seed: int = 0, params: Mapping[str, object] | None = None) -> Policy:
    """A fresh ``name`` policy for one run; ``params`` are checked against its declaration
    (strings from the command line or Python values).  Raises ``ValueError`` (a
    :class:`ParamError` for a parameter) naming the policy."""
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"policy {name!r}: seed {seed!r}: must be an integer >= 0")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(
            f"policy {name!r}: params must be a mapping name -> value, got {type(params).__name__}"
        )
    kw = check_params(name, dict(params or {}))
    return policy_info(name).factory(seed=int(seed), **kw)


def make_policy(name: str, /, seed: int = 0, **params: object) -> Policy:
    """:func:`build_policy` with the parameters as keywords."""
    return build_policy(name, seed, params)
