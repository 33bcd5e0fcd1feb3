"""Declared policy parameters: one declaration mechanism and one parser for every policy.

A policy declares what it accepts as a ``PARAMS`` tuple of :class:`Param` (a class attribute,
or an attribute of the factory function it registers).  :func:`parse_params` is the only
place a parameter value is read: ``topas run --param KEY=VALUE`` hands it strings, the Python
API (``simulate(policy_params=...)``, ``make_policy(name, **params)``) hands it Python values,
and both come out as the declared type or a :class:`ParamError` naming the policy, the
parameter and the problem.

Kinds: ``bool`` (``true``/``false`` in any case, or a Python bool -- never ``0``/``1``/
``yes``), ``int``, ``float`` (finite only, within ``[lo, hi]``), ``choice`` (one of
``choices``), ``floats`` (a list of finite numbers: ``0.5,1,2`` on the command line) and
``subset`` (names from ``choices`` joined by ``+`` on the command line, e.g.
``off=holds+reserve``).  ``nullable`` parameters also take ``None`` (``none``/``null``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

__all__ = [
    "Param",
    "ParamError",
    "flag",
    "integer",
    "real",
    "choice",
    "reals",
    "subset",
    "parse_params",
    "with_defaults",
    "without",
    "key_value_pairs",
]

KINDS = ("bool", "int", "float", "choice", "floats", "subset")


class ParamError(ValueError):
    """A policy parameter that is unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: object
    doc: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  #: ``lo`` itself is excluded
    choices: tuple[str, ...] = ()
    nullable: bool = False  #: ``None`` is allowed (``none`` / ``null`` on the command line)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise AssertionError(f"param {self.name}: kind {self.kind!r} not in {KINDS}")

    # -- how `topas list --params` shows it ------------------------------------------------
    def type_text(self) -> str:
        t = {"floats": "list of float", "subset": "names joined by +"}.get(self.kind, self.kind)
        if self.kind == "choice":
            t = "str"
        return f"{t} or none" if self.nullable else t

    def range_text(self) -> str:
        if self.kind in ("choice", "subset"):
            return ", ".join(self.choices)
        if self.kind == "bool":
            return "true, false"
        lo = "-inf" if self.lo is None else _num_text(self.lo)
        hi = "inf" if self.hi is None else _num_text(self.hi)
        return f"{'(' if self.lo_open else '['}{lo}, {hi}{']' if self.hi is not None else ')'}"

    def default_text(self) -> str:
        d = self.default
        if d is None:
            return "none"
        if isinstance(d, bool):
            return "true" if d else "false"
        if isinstance(d, (tuple, list)):
            sep = "+" if self.kind == "subset" else ","
            return sep.join(_num_text(x) if isinstance(x, float) else str(x) for x in d) or "-"
        return _num_text(d) if isinstance(d, float) else str(d)

    # -- parsing ---------------------------------------------------------------------------
    def parse(self, value: object) -> object:
        """``value`` (a command-line string or a Python value) as the declared type; raises
        ``ValueError`` with the problem (without the parameter's name)."""
        if self.nullable and (
            value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null"))
        ):
            return None
        if value is None:
            raise ValueError("must not be none")
        k = self.kind
        if k == "bool":
            return _bool(value)
        if k == "int":
            return self._check_range(_int(value))
        if k == "float":
            return self._check_range(_float(value))
        if k == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"must be one of {', '.join(self.choices)}")
            return value
        if k == "floats":
            items = _split(value, ",")
            if items is None:
                raise ValueError("must be a list of numbers (0.5,1,2 on the command line)")
            return tuple(self._check_range(_float(x)) for x in items)
        # subset
        items = _split(value, "+")
        if items is None or not all(isinstance(x, str) for x in items):
            raise ValueError(f"must be names from {', '.join(self.choices)} joined by '+'")
        bad = [x for x in items if x not in self.choices]
        if bad:
            raise ValueError(
                f"unknown {', '.join(map(repr, bad))} (known: {', '.join(self.choices)})"
            )
        return tuple(dict.fromkeys(items))

    def _check_range(self, v: float) -> float:
        below = self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo)
        above = self.hi is not None and v > self.hi
        if below or above:
            raise ValueError(f"must be in {self.range_text()}")
        return v


def _num_text(x: object) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _bool(v: object) -> bool:
    if isinstance(v, bool) or type(v).__name__ == "bool_":  # numpy.bool_
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ValueError("must be true or false")


def _int(v: object) -> int:
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        raise ValueError("must be an integer, not a bool")
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
        try:
            f = float(v)
        except ValueError:
            raise ValueError("must be an integer") from None
        v = f
    if isinstance(v, numbers.Real) and math.isfinite(v) and float(v).is_integer():
        # (typeshed's numbers.Real has no __int__; every real type here has one)
        return int(v)  # type: ignore[call-overload, no-any-return]
    raise ValueError("must be an integer")


def _float(v: object) -> float:
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        raise ValueError("must be a number, not a bool")
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise ValueError("must be a number") from None
    if not isinstance(v, numbers.Real):
        raise ValueError("must be a number")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError("must be a finite number")
    return f


def _split(v: object, sep: str) -> list[object] | None:
    if isinstance(v, str):
        s = v.strip()
        if sep == "," and s.startswith("[") and s.endswith("]"):
            s = s[1:-1]
        return [x.strip() for x in s.split(sep) if x.strip()]
    if isinstance(v, (list, tuple)):
        return list(v)
    return None


# -- declaring ---------------------------------------------------------------------------------


def key_value_pairs(items: Iterable[str] | None, flag_name: str) -> dict[str, str]:
    """The ``KEY=VALUE`` items of a repeatable command-line flag (``--param``,
    ``--router-param``) as ``{key: value}``, values as given; a malformed item or a key given
    twice is a one-line ValueError naming ``flag_name``."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{flag_name} {item!r}: expected KEY=VALUE")
        if key in out:
            raise ValueError(f"{flag_name} {key}: given twice")
        out[key] = val
    return out


def flag(name: str, default: bool, doc: str) -> Param:
    return Param(name, "bool", default, doc)


def integer(
    name: str,
    default: int | None,
    doc: str,
    lo: int | None = 0,
    hi: int | None = None,
    nullable: bool = False,
) -> Param:
    return Param(name, "int", default, doc, lo=lo, hi=hi, nullable=nullable)


def real(
    name: str,
    default: float | None,
    doc: str,
    lo: float | None = 0.0,
    hi: float | None = None,
    lo_open: bool = False,
    nullable: bool = False,
) -> Param:
    return Param(name, "float", default, doc, lo=lo, hi=hi, lo_open=lo_open, nullable=nullable)


def choice(name: str, default: str, choices: Iterable[str], doc: str) -> Param:
    return Param(name, "choice", default, doc, choices=tuple(choices))


def reals(
    name: str, default: tuple[float, ...], doc: str, lo: float | None = 0.0, hi: float | None = None
) -> Param:
    return Param(name, "floats", tuple(default), doc, lo=lo, hi=hi)


def subset(name: str, default: tuple[str, ...], choices: Iterable[str], doc: str) -> Param:
    return Param(name, "subset", tuple(default), doc, choices=tuple(choices))


def with_defaults(params: Iterable[Param], defaults: Mapping[str, object]) -> tuple[Param, ...]:
    """``params`` with the defaults named in ``defaults`` replaced (a variant's own values)."""
    return tuple(replace(p, default=defaults[p.name]) if p.name in defaults else p for p in params)


def without(params: Iterable[Param], *names: str) -> tuple[Param, ...]:
    """``params`` less the ones a variant fixes itself."""
    return tuple(p for p in params if p.name not in names)


# -- parsing -----------------------------------------------------------------------------------


def parse_params(
    policy: str, declared: Iterable[Param], given: Mapping[str, object]
) -> dict[str, object]:
    """``given`` checked against ``declared`` and converted to the declared types.  Raises
    :class:`ParamError` naming the policy and the parameter."""
    decl = {p.name: p for p in declared}
    out: dict[str, object] = {}
    for key, value in given.items():
        if not isinstance(key, str):
            raise ParamError(f"policy {policy!r}: parameter names must be strings, got {key!r}")
        if key == "seed":
            raise ParamError(
                f"policy {policy!r}: seed is not a policy parameter (give the "
                "run's seed: --seed N, or seed= in the Python API)"
            )
        p = decl.get(key)
        if p is None:
            known = ", ".join(sorted(decl)) or "none"
            raise ParamError(
                f"policy {policy!r}: unknown parameter {key!r} (known: {known}; "
                f"see topas list --params {policy})"
            )
        try:
            out[key] = p.parse(value)
        except ValueError as e:
            raise ParamError(f"policy {policy!r}: {key}={value!r}: {e}") from None
    return out


# -- declarations several policies share -----------------------------------------------------

RESERVE_RATIO = real(
    "reserve_ratio",
    0.5,
    "KV headroom kept free per admission: this fraction of the request's expected remaining output",
    hi=4.0,
)
N_SAMPLES = integer(
    "n_samples", 64, "Monte Carlo rows of the remaining-time estimate", lo=1, hi=100_000
)
