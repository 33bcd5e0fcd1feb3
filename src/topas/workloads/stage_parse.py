"""Parsing a declarative workload's stages: keys, names, agent references, calls, repeats and
nested groups, each error naming where in the file it is."""

from __future__ import annotations

from dataclasses import replace

from topas.workflow.model import Agent
from topas.workloads.dists import Dist, SpecError, parse_dist
from topas.workloads.template import (
    CallGroupSpec,
    GroupSpec,
    StageSpec,
)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------
def _keys(d: object, where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
    if not isinstance(d, dict):
        raise SpecError(f"{where}: must be a mapping, got {type(d).__name__}")
    unknown = sorted(str(k) for k in d if k not in required and k not in optional)
    if unknown:
        raise SpecError(
            f"{where}: unknown field(s) {unknown} (known: {sorted(required + optional)})"
        )
    for k in required:
        if k not in d:
            raise SpecError(f"{where}.{k}: missing (required)")
    return d


def _name(v: object, where: str) -> str:
    if not isinstance(v, str) or not v or any(c.isspace() for c in v):
        raise SpecError(f"{where}: must be a non-empty name without spaces, got {v!r}")
    return v


def _fraction(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 10:
        raise SpecError(f"{where}: must be a number in [0, 10], got {v!r}")
    return float(v)


def _names(v: object, where: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list):
        raise SpecError(f"{where}: must be a list of names, got {v!r}")
    return tuple(_name(x, f"{where}[{i}]") for i, x in enumerate(v))


def _parse_agent_ref(
    v: object, where: str, agents: dict[str, Agent]
) -> tuple[tuple[str, ...], tuple[float, ...]]:
    weights = None
    if isinstance(v, dict):
        _keys(v, where, ("choice",), ("weights",))
        names, weights = _names(v["choice"], f"{where}.choice"), v.get("weights")
    else:
        names = _names(v, where)
    if not names:
        raise SpecError(f"{where}: names no agent")
    for n in names:
        if n not in agents:
            raise SpecError(f"{where}: unknown agent {n!r} (agents: {sorted(agents)})")
    if weights is None:
        return names, tuple([1.0 / len(names)] * len(names))
    d = parse_dist({"choice": list(range(len(names))), "weights": weights}, where, "count")
    return names, d.params[1]


_STAGE_KEYS = ("deps", "kind", "prompt", "inherit", "history", "max_prompt", "repeat")


def _parse_calls(v: object, where: str) -> tuple[CallGroupSpec, ...]:
    groups = v if isinstance(v, list) else [v]
    if not groups:
        raise SpecError(f"{where}: must list at least one call group")
    out = []
    for i, g in enumerate(groups):
        w = f"{where}[{i}]" if isinstance(v, list) else where
        _keys(g, w, ("output",), ("count", "tool_delay", "observation"))
        out.append(
            CallGroupSpec(
                count=parse_dist(g.get("count", 1), f"{w}.count", "count"),
                output=parse_dist(g["output"], f"{w}.output", "tokens"),
                tool_delay=parse_dist(g.get("tool_delay", 0), f"{w}.tool_delay", "seconds"),
                observation=parse_dist(g.get("observation", 0), f"{w}.observation", "count"),
            )
        )
    return tuple(out)


def _parse_stage(
    d: object, where: str, agents: dict[str, Agent], known: set[str], in_group: bool
) -> StageSpec:
    optional = _STAGE_KEYS if not in_group else tuple(k for k in _STAGE_KEYS if k != "repeat")
    _keys(d, where, ("name", "agent", "calls"), optional)
    name = _name(d["name"], f"{where}.name")
    if "." in name:
        raise SpecError(f"{where}.name: must not contain '.' (reserved for copies), got {name!r}")
    names, weights = _parse_agent_ref(d["agent"], f"{where}.agent", agents)
    deps = _names(d.get("deps", []), f"{where}.deps")
    for dep in deps:
        if dep not in known:
            what = "a stage of this group" if in_group else "an earlier stage or group"
            raise SpecError(f"{where}.deps: {dep!r} is not {what}")
    max_prompt = d.get("max_prompt")
    if max_prompt is not None and (
        isinstance(max_prompt, bool) or not isinstance(max_prompt, int) or max_prompt < 1
    ):
        raise SpecError(f"{where}.max_prompt: must be an integer >= 1 tokens, got {max_prompt!r}")
    kind = d.get("kind", name)
    if not isinstance(kind, str) or not kind:
        raise SpecError(f"{where}.kind: must be a non-empty string, got {kind!r}")
    return StageSpec(
        name=name,
        agents=names,
        agent_weights=weights,
        kind=kind,
        deps=deps,
        prompt=parse_dist(d.get("prompt", 1), f"{where}.prompt", "tokens"),
        inherit=_fraction(d.get("inherit", 0.0), f"{where}.inherit"),
        history=_fraction(d.get("history", 0.0), f"{where}.history"),
        max_prompt=max_prompt,
        groups=_parse_calls(d["calls"], f"{where}.calls"),
    )


def _parse_repeat(v: object, where: str) -> tuple[Dist, str]:
    _keys(v, where, ("count",), ("layout",))
    count = parse_dist(v["count"], f"{where}.count", "count")
    if count.is_const and count.params[0] < 1:
        raise SpecError(f"{where}.count: must be >= 1, got {v['count']!r}")
    layout = v.get("layout", "parallel")
    if layout not in ("parallel", "chain"):
        raise SpecError(f"{where}.layout: must be 'parallel' or 'chain', got {layout!r}")
    return count, layout


def _parse_items(
    raw: object, where: str, agents: dict[str, Agent]
) -> tuple[StageSpec | GroupSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"{where}: must be a non-empty list of stages")
    known: set[str] = set()
    items: list[StageSpec | GroupSpec] = []
    for i, d in enumerate(raw):
        w = f"{where}[{i}]"
        if isinstance(d, dict) and "group" in d:
            _keys(d, w, ("group", "repeat", "stages"), ("deps",))
            gname = _name(d["group"], f"{w}.group")
            if "." in gname:
                raise SpecError(f"{w}.group: must not contain '.', got {gname!r}")
            deps = _names(d.get("deps", []), f"{w}.deps")
            for dep in deps:
                if dep not in known:
                    raise SpecError(f"{w}.deps: {dep!r} is not an earlier stage or group")
            count, layout = _parse_repeat(d["repeat"], f"{w}.repeat")
            inner_raw = d["stages"]
            if not isinstance(inner_raw, list) or not inner_raw:
                raise SpecError(f"{w}.stages: must be a non-empty list of stages")
            local: set[str] = set()
            inner = []
            for j, sd in enumerate(inner_raw):
                s = _parse_stage(sd, f"{w}.stages[{j}]", agents, local, in_group=True)
                if s.name in local:
                    raise SpecError(f"{w}.stages[{j}].name: {s.name!r} is used twice")
                local.add(s.name)
                inner.append(s)
            item: StageSpec | GroupSpec = GroupSpec(
                gname, count, layout, deps, tuple(inner), single=False
            )
        else:
            s = _parse_stage(d, w, agents, known, in_group=False)
            item = s
            if isinstance(d, dict) and "repeat" in d:
                count, layout = _parse_repeat(d["repeat"], f"{w}.repeat")
                inner_s = replace(s, deps=())
                item = GroupSpec(s.name, count, layout, s.deps, (inner_s,), single=True)
        if item.name in known:
            raise SpecError(f"{w}: name {item.name!r} is used twice")
        known.add(item.name)
        items.append(item)
    return tuple(items)
