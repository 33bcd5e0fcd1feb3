"""Length, count and delay distributions of the declarative workload format.

A distribution is written in a workload file as either a plain number (a constant) or a
mapping with exactly one kind key plus optional ``min`` / ``max`` caps:

    200                                            # constant
    {uniform: [3, 8]}                              # integers 3..8 inclusive (continuous for seconds)
    {normal: {mean: 3000, sd: 300}, min: 2400}     # Gaussian, capped below at 2400
    {lognormal: {median: 8, sigma: 0.7}, max: 100} # exp(N(log median, sigma^2)), capped at 100
    {exponential: {mean: 2.0}}
    {gamma: {mean: 2.0, cv: 1.5}}                  # shape 1/cv^2, scale mean*cv^2
    {choice: [1, 2, 5], weights: [0.5, 0.3, 0.2]}  # one of the values (weights default uniform)
    {mixture: [{weight: 0.7, dist: {uniform: [0.1, 1.0]}},
               {weight: 0.3, dist: {lognormal: {median: 4, sigma: 0.6}}}]}

``min``/``max`` *cap* a draw (a draw below ``min`` becomes ``min``); they do not re-draw, so a
cap shifts probability mass onto the bound.  What the draw means (tokens, calls, seconds)
depends on the field; :func:`parse_dist` rounds token and count draws to integers and enforces
the field's own floor (tokens >= 1, counts >= 0, seconds >= 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: unit of a distribution-valued field: sets rounding and the floor of every draw
UNITS = ("tokens", "count", "seconds")


class SpecError(ValueError):
    """A malformed workload file; the message names the file, the field and the problem."""


#: the largest magnitude a number in a workload file may have (tokens, counts, seconds)
MAX_NUMBER = 1e15


def _num(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where}: must be a finite number, got {v!r}")
    if abs(v) > MAX_NUMBER:
        raise SpecError(f"{where}: {v:g} is out of range (at most {MAX_NUMBER:g} in size)")
    return float(v)


def _pos(v: object, where: str) -> float:
    x = _num(v, where)
    if x <= 0:
        raise SpecError(f"{where}: must be > 0, got {v!r}")
    return x


@dataclass(frozen=True)
class Dist:
    """One parsed distribution.  ``draw(rng)`` returns a value already rounded, floored and
    capped for its unit; ``mean`` is the mean of the *uncapped* kind (None if it has none
    in closed form, e.g. a capped mixture) and ``lo``/``hi`` the caps."""

    kind: str
    params: tuple
    unit: str
    lo: float | None = None
    hi: float | None = None

    def _raw(self, rng: np.random.Generator) -> float:
        k, p = self.kind, self.params
        if k == "const":
            return p[0]
        if k == "uniform":
            if self.unit == "seconds":
                return float(rng.uniform(p[0], p[1]))
            return float(rng.integers(int(p[0]), int(p[1]) + 1))
        if k == "normal":
            return float(rng.normal(p[0], p[1]))
        if k == "lognormal":
            return float(p[0] * math.exp(p[1] * rng.standard_normal()))
        if k == "exponential":
            return float(rng.exponential(p[0]))
        if k == "gamma":
            mean, cv = p
            return float(rng.gamma(1.0 / cv**2, mean * cv**2))
        if k == "choice":
            values, weights = p
            return float(values[int(rng.choice(len(values), p=weights))])
        if k == "mixture":
            weights, comps = p
            return comps[int(rng.choice(len(comps), p=weights))]._raw(rng)
        raise AssertionError(k)

    def draw(self, rng: np.random.Generator, scale: float = 1.0) -> float:
        """One draw; ``scale`` multiplies the raw draw before the caps and rounding (a task's
        hardness factor, see :mod:`topas.workloads.declarative`; 1 leaves it unchanged).  A
        constant is never scaled: a plain number in a workload file is fixed structure (one
        call, eight mappers), not a quantity that varies with the task."""
        x = self._raw(rng)
        if scale != 1.0 and self.kind != "const":
            x *= scale
        if self.lo is not None:
            x = max(x, self.lo)
        if self.hi is not None:
            x = min(x, self.hi)
        if self.unit == "seconds":
            return max(0.0, x)
        x = int(round(x))
        return max(1 if self.unit == "tokens" else 0, x)

    def draw_int(self, rng: np.random.Generator, scale: float = 1.0) -> int:
        return int(self.draw(rng, scale))

    @property
    def mean(self) -> float | None:
        """Mean of the uncapped distribution (before rounding)."""
        k, p = self.kind, self.params
        if k == "const":
            return p[0]
        if k == "uniform":
            return (p[0] + p[1]) / 2.0
        if k == "normal":
            return p[0]
        if k == "lognormal":
            return p[0] * math.exp(p[1] ** 2 / 2.0)
        if k in ("exponential", "gamma"):
            return p[0]
        if k == "choice":
            values, weights = p
            return float(np.dot(values, weights))
        if k == "mixture":
            weights, comps = p
            means = [c.mean for c in comps]
            if any(m is None for m in means):
                return None
            return float(np.dot(weights, means))
        return None

    @property
    def is_const(self) -> bool:
        return self.kind == "const"


def _weights(raw: object, n: int, where: str) -> tuple[float, ...]:
    if raw is None:
        return tuple([1.0 / n] * n)
    if not isinstance(raw, list) or len(raw) != n:
        raise SpecError(f"{where}: must be a list of {n} weights, got {raw!r}")
    w = [_num(x, f"{where}[{i}]") for i, x in enumerate(raw)]
    if any(x < 0 for x in w) or sum(w) <= 0:
        raise SpecError(f"{where}: weights must be >= 0 and not all 0, got {raw!r}")
    s = sum(w)
    return tuple(x / s for x in w)


def _params(spec: dict, key: str, names: tuple[str, ...], where: str) -> dict[str, object]:
    body = spec[key]
    if not isinstance(body, dict):
        raise SpecError(f"{where}.{key}: must be a mapping with {list(names)}, got {body!r}")
    extra = sorted(set(body) - set(names))
    missing = [n for n in names if n not in body]
    if extra or missing:
        raise SpecError(
            f"{where}.{key}: needs exactly {list(names)}"
            + (f"; unknown {extra}" if extra else "")
            + (f"; missing {missing}" if missing else "")
        )
    return body


_KINDS = ("const", "uniform", "normal", "lognormal", "exponential", "gamma", "choice", "mixture")


def parse_dist(raw: object, where: str, unit: str) -> Dist:
    """Parse one distribution-valued field; ``where`` names the file and field for errors."""
    if unit not in UNITS:
        raise AssertionError(unit)
    if isinstance(raw, bool):
        raise SpecError(f"{where}: must be a number or a distribution mapping, got {raw!r}")
    if isinstance(raw, (int, float)):
        x = _num(raw, where)
        if unit == "tokens" and x < 1 or x < 0:
            floor = 1 if unit == "tokens" else 0
            raise SpecError(f"{where}: must be >= {floor} {unit}, got {raw!r}")
        return Dist("const", (x,), unit)
    if not isinstance(raw, dict):
        hint = ""
        if isinstance(raw, str):
            try:
                float(raw)
                hint = " (text, not a number: YAML reads 1e30 as text; write 1.0e+30)"
            except ValueError:
                pass
        raise SpecError(
            f"{where}: must be a number or a distribution mapping "
            f"(one of {list(_KINDS[1:])}), got {raw!r}{hint}"
        )
    kinds = [k for k in raw if k in _KINDS]
    extra = sorted(k for k in raw if k not in _KINDS and k not in ("min", "max", "weights"))
    if len(kinds) != 1 or extra:
        raise SpecError(
            f"{where}: needs exactly one distribution kind of {list(_KINDS)}"
            + (f", unknown keys {extra}" if extra else f", got {sorted(raw)}")
        )
    kind = kinds[0]
    if "weights" in raw and kind != "choice":
        raise SpecError(f"{where}.weights: only a choice distribution takes weights")
    lo = _num(raw["min"], f"{where}.min") if "min" in raw else None
    hi = _num(raw["max"], f"{where}.max") if "max" in raw else None
    if lo is not None and hi is not None and lo > hi:
        raise SpecError(f"{where}: min {lo:g} is above max {hi:g}")
    w = f"{where}.{kind}"
    params: tuple
    if kind == "const":
        params = (_num(raw[kind], w),)
    elif kind == "uniform":
        b = raw[kind]
        if not isinstance(b, list) or len(b) != 2:
            raise SpecError(f"{w}: must be [low, high], got {b!r}")
        a, c = _num(b[0], f"{w}[0]"), _num(b[1], f"{w}[1]")
        if a > c:
            raise SpecError(f"{w}: low {a:g} is above high {c:g}")
        if unit != "seconds" and (a != int(a) or c != int(c)):
            raise SpecError(f"{w}: {unit} bounds must be integers, got {b!r}")
        params = (a, c)
    elif kind == "normal":
        p = _params(raw, kind, ("mean", "sd"), where)
        params = (_num(p["mean"], f"{w}.mean"), _pos(p["sd"], f"{w}.sd"))
    elif kind == "lognormal":
        p = _params(raw, kind, ("median", "sigma"), where)
        params = (_pos(p["median"], f"{w}.median"), _pos(p["sigma"], f"{w}.sigma"))
    elif kind == "exponential":
        p = _params(raw, kind, ("mean",), where)
        params = (_pos(p["mean"], f"{w}.mean"),)
    elif kind == "gamma":
        p = _params(raw, kind, ("mean", "cv"), where)
        params = (_pos(p["mean"], f"{w}.mean"), _pos(p["cv"], f"{w}.cv"))
    elif kind == "choice":
        vals = raw[kind]
        if not isinstance(vals, list) or not vals:
            raise SpecError(f"{w}: must be a non-empty list of numbers, got {vals!r}")
        values = tuple(_num(v, f"{w}[{i}]") for i, v in enumerate(vals))
        params = (values, _weights(raw.get("weights"), len(values), f"{where}.weights"))
    else:  # mixture
        comps = raw[kind]
        if not isinstance(comps, list) or not comps:
            raise SpecError(f"{w}: must be a non-empty list of {{weight, dist}}, got {comps!r}")
        ws, ds = [], []
        for i, c in enumerate(comps):
            if not isinstance(c, dict) or set(c) != {"weight", "dist"}:
                raise SpecError(f"{w}[{i}]: must be a mapping with exactly weight and dist")
            ws.append(c["weight"])
            ds.append(parse_dist(c["dist"], f"{w}[{i}].dist", unit))
        params = (_weights(ws, len(ws), f"{w}.weight"), tuple(ds))
    return Dist(kind, params, unit, lo, hi)
