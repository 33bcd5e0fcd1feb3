"""The declarative workload format (YAML or JSON) and the workloads built from it.

A workload file declares agents with their prefix lengths (``l_a``), one or more DAG templates
and an arrival process; :class:`DeclarativeWorkload` samples tasks from it.  The full schema is
in docs/workloads.md; in short::

    name: chain3                 # must equal the file stem for a built-in
    description: ...
    default_rate: 0.1            # tasks/s
    default_tasks: 60
    agents: {A: 6000, B: 4000}   # name -> prefix tokens (or {prefix_tokens: N})
    arrivals: {process: poisson} # | {process: gamma, cv: 2} | {trace: times.jsonl, unit: ms}
    stages:                      # one template; or templates: [{name, weight, stages}, ...]
      - name: s1
        agent: A                 # or [A, B] / {choice: [A, B], weights: [...]} per task
        prompt: 1000             # dynamic prompt of the first call (tokens after the prefix)
        calls: {count: 1, output: 256}
      - name: s2
        agent: B
        deps: [s1]
        inherit: 1.0             # + this fraction of each dependency's last output
        calls:                   # call groups, in order; each call's context grows by its
          - {count: 2, output: 200, tool_delay: 0.5, observation: 150}  # output + observation
          - {count: {uniform: [1, 5]}, output: {lognormal: {median: 300, sigma: 0.5}}}
      - name: worker
        agent: B
        deps: [s2]
        repeat: {count: 8, layout: parallel}   # fan-out; chain = one copy after another
        ...
      - group: round             # several stages repeated together (debate, group chat)
        deps: [worker]
        repeat: {count: {uniform: [3, 10]}, layout: chain}
        stages: [...]            # deps inside a group name stages of the same group

Sampling draws from two generators spawned from the run's ``rng``: one for trajectories and
one for arrivals, so a workload and a seed fix every task's trajectory (rounds, lengths,
delays) whatever the policy *and* whatever the arrival rate.

**Correlated work** (optional)::

    hardness:                    # one factor per task, shared by all of its stages
      factor: {lognormal: {median: 0.726, sigma: 0.8}}
      scales: [count, output]    # fields it multiplies (default [count, output])

multiplies the raw draw of the chosen fields (before their ``min``/``max`` caps and rounding)
in every stage of the task, so a hard task has more rounds *and* longer outputs everywhere.
The factors come from a third generator spawned after the other two, so a file without
``hardness`` samples exactly what it sampled before the feature existed (factor 1, no draw).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np
import yaml

from topas.workflow.model import Agent, Call, Stage, Task, WorkflowError, agent_table, validate_task
from topas.workloads import FILE_LOADERS, check_rate, register
from topas.workloads.dists import Dist, SpecError, parse_dist

BUILTIN_DIR = Path(__file__).with_name("builtin")


# ---------------------------------------------------------------------------------------------
# Parsed spec (frozen data)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CallGroupSpec:
    """``count`` calls, each generating ``output`` tokens, then ``tool_delay`` seconds of tool
    time, and ``observation`` tokens of tool result appended to the context."""

    count: Dist
    output: Dist
    tool_delay: Dist
    observation: Dist


@dataclass(frozen=True)
class StageSpec:
    name: str
    agents: tuple[str, ...]
    agent_weights: tuple[float, ...]
    kind: str
    deps: tuple[str, ...]
    prompt: Dist
    inherit: float  #: fraction of each dependency's last-call output added to the first prompt
    history: float  #: fraction of earlier chain copies' outputs added to the first prompt
    max_prompt: int | None  #: cap of any call's dynamic prompt (context truncation)
    groups: tuple[CallGroupSpec, ...]


@dataclass(frozen=True)
class GroupSpec:
    """Stages repeated ``count`` times, copies side by side (parallel) or one after another
    (chain).  ``single`` marks a stage with ``repeat`` (copies are named ``name.k``)."""

    name: str
    count: Dist
    layout: str
    deps: tuple[str, ...]
    stages: tuple[StageSpec, ...]
    single: bool


@dataclass(frozen=True)
class TemplateSpec:
    name: str
    weight: float
    items: tuple[StageSpec | GroupSpec, ...]


@dataclass(frozen=True)
class ArrivalSpec:
    process: str  #: "poisson", "gamma" or "trace"
    cv: float = 1.0
    times_s: tuple[float, ...] = ()  #: trace arrival times, first at 0

    @property
    def native_rate(self) -> float | None:
        if self.process != "trace" or len(self.times_s) < 2 or self.times_s[-1] <= 0:
            return None
        return (len(self.times_s) - 1) / self.times_s[-1]

    def times(self, n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
        check_rate(rate, n)
        if self.process == "poisson":
            gaps = rng.exponential(1.0 / rate, size=n)
        elif self.process == "gamma":
            # Gamma gaps with mean 1/rate and coefficient of variation cv (cv=1 is Poisson)
            gaps = rng.gamma(1.0 / self.cv**2, self.cv**2 / rate, size=n)
        else:
            if n > len(self.times_s):
                raise ValueError(f"tasks {n}: the arrival trace has only {len(self.times_s)} "
                                 f"arrivals")
            t = np.asarray(self.times_s[:n], dtype=float)
            native = self.native_rate
            return t * (native / rate) if native else t
        gaps[0] = 0.0
        return np.cumsum(gaps)


#: fields a hardness factor can multiply: call-group ``count`` (rounds), ``output``,
#: ``tool_delay``, ``observation``, a stage's first ``prompt`` and a ``repeat`` count
HARDNESS_FIELDS = ("count", "output", "tool_delay", "observation", "prompt", "repeat")
_NO_SCALE: dict[str, float] = {}


@dataclass(frozen=True)
class HardnessSpec:
    """A per-task factor ``factor`` (drawn once per task) multiplying ``fields``."""

    factor: Dist
    fields: tuple[str, ...] = ("count", "output")

    def scales(self, h: float) -> dict[str, float]:
        return {f: h for f in self.fields}


@dataclass(frozen=True)
class DeclarativeWorkload:
    """A workload sampled from a declarative spec (satisfies the ``Workload`` protocol)."""

    name: str
    description: str
    agents: tuple[Agent, ...]
    default_rate: float
    default_tasks: int
    templates: tuple[TemplateSpec, ...]
    arrivals: ArrivalSpec
    source: str = ""
    notes: str = ""
    _weights: tuple[float, ...] = field(default=(), repr=False)
    hardness: HardnessSpec | None = None  #: per-task correlated-work factor (None: all 1)

    def sample(self, n_tasks: int, rate: float, rng: np.random.Generator) -> list[Task]:
        """``n_tasks`` tasks; trajectories from one spawned generator, arrivals from another
        (and hardness factors, when declared, from a third)."""
        return self.sample_with_factors(n_tasks, rate, rng)[0]

    def sample_with_factors(self, n_tasks: int, rate: float, rng: np.random.Generator
                            ) -> tuple[list[Task], list[float]]:
        """:meth:`sample`, plus each task's hardness factor (all 1.0 without ``hardness``)."""
        traj_rng, arr_rng = rng.spawn(2)
        arrivals = self.arrivals.times(n_tasks, rate, arr_rng)
        hard_rng = rng.spawn(1)[0] if self.hardness is not None else None
        tasks, factors = [], []
        for i in range(n_tasks):
            k = 0
            if len(self.templates) > 1:
                k = int(traj_rng.choice(len(self.templates), p=self._weights))
            tpl = self.templates[k]
            wf = self.name if len(self.templates) == 1 else f"{self.name}/{tpl.name}"
            h, sc = 1.0, _NO_SCALE
            if self.hardness is not None:
                h = float(self.hardness.factor.draw(hard_rng))
                sc = self.hardness.scales(h)
            tasks.append(Task(i, float(arrivals[i]), sample_stages(tpl, traj_rng, sc),
                              workflow=wf))
            factors.append(h)
        return tasks, factors


# ---------------------------------------------------------------------------------------------
# Sampling one task's stages
# ---------------------------------------------------------------------------------------------
def _make_stage(s: StageSpec, name: str, deps: list[str], hist_out: int,
                final_out: dict[str, int], rng: np.random.Generator,
                sc: dict[str, float] = _NO_SCALE) -> tuple[Stage, int]:
    """One concrete stage; returns it and the total tokens it generates.  ``sc`` maps a
    field name to the task's hardness factor for that field (missing: 1)."""
    if len(s.agents) == 1:
        agent = s.agents[0]
    else:
        agent = s.agents[int(rng.choice(len(s.agents), p=s.agent_weights))]
    ctx = s.prompt.draw_int(rng, sc.get("prompt", 1.0))
    ctx += int(round(s.inherit * sum(final_out[d] for d in deps)))
    ctx += int(round(s.history * hist_out))
    calls: list[Call] = []
    f_out, f_delay, f_obs = (sc.get("output", 1.0), sc.get("tool_delay", 1.0),
                             sc.get("observation", 1.0))
    for g in s.groups:
        for _ in range(g.count.draw_int(rng, sc.get("count", 1.0))):
            out = g.output.draw_int(rng, f_out)
            delay = g.tool_delay.draw(rng, f_delay)
            obs = g.observation.draw_int(rng, f_obs)
            prompt = min(ctx, s.max_prompt) if s.max_prompt else ctx
            calls.append(Call(prompt, out, float(delay)))
            ctx += out + obs  # the next call sees this call's output and the tool's result
    if not calls:  # every group drew 0 calls: a stage still makes one call of its last group
        g = s.groups[-1]
        prompt = min(ctx, s.max_prompt) if s.max_prompt else ctx
        calls.append(Call(prompt, g.output.draw_int(rng, f_out), 0.0))
    last = calls[-1]
    calls[-1] = Call(last.prompt_tokens, last.output_tokens, 0.0)  # no tool after the last call
    final_out[name] = calls[-1].output_tokens
    total = sum(c.output_tokens for c in calls)
    return Stage(name, agent, tuple(calls), tuple(deps), kind=s.kind), total


def sample_stages(tpl: TemplateSpec, rng: np.random.Generator,
                  sc: dict[str, float] = _NO_SCALE) -> tuple[Stage, ...]:
    """Expand a template (repeats, groups, agent choices) and draw every call's lengths;
    ``sc`` holds the task's hardness factor per scaled field (empty: no scaling)."""
    out: list[Stage] = []
    exits: dict[str, list[str]] = {}  # item name -> concrete stages a successor depends on
    final_out: dict[str, int] = {}

    def resolve(names: tuple[str, ...]) -> list[str]:
        return [c for n in names for c in exits[n]]

    for item in tpl.items:
        if isinstance(item, StageSpec):
            st, _ = _make_stage(item, item.name, resolve(item.deps), 0, final_out, rng, sc)
            out.append(st)
            exits[item.name] = [item.name]
            continue
        n = max(1, item.count.draw_int(rng, sc.get("repeat", 1.0)))
        ext = resolve(item.deps)
        prev = ext
        all_exits: list[str] = []
        hist_out = 0
        inner = {d for s in item.stages for d in s.deps}
        for k in range(n):
            local: dict[str, str] = {}
            copy_out = 0
            for s in item.stages:
                cname = f"{item.name}.{k}" if item.single else f"{item.name}.{k}.{s.name}"
                if s.deps:
                    deps = [local[d] for d in s.deps]
                else:
                    deps = list(prev if item.layout == "chain" else ext)
                st, tot = _make_stage(s, cname, deps, hist_out, final_out, rng, sc)
                out.append(st)
                local[s.name] = cname
                copy_out += tot
            copy_exits = [local[s.name] for s in item.stages if s.name not in inner]
            all_exits += copy_exits
            if item.layout == "chain":
                prev = copy_exits
                hist_out += copy_out
        exits[item.name] = prev if item.layout == "chain" else all_exits
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------
def _keys(d: object, where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
    if not isinstance(d, dict):
        raise SpecError(f"{where}: must be a mapping, got {type(d).__name__}")
    unknown = sorted(str(k) for k in d if k not in required and k not in optional)
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {unknown} (known: "
                        f"{sorted(required + optional)})")
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


def _parse_agent_ref(v: object, where: str, agents: dict[str, Agent]
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
        out.append(CallGroupSpec(
            count=parse_dist(g.get("count", 1), f"{w}.count", "count"),
            output=parse_dist(g["output"], f"{w}.output", "tokens"),
            tool_delay=parse_dist(g.get("tool_delay", 0), f"{w}.tool_delay", "seconds"),
            observation=parse_dist(g.get("observation", 0), f"{w}.observation", "count"),
        ))
    return tuple(out)


def _parse_stage(d: object, where: str, agents: dict[str, Agent], known: set[str],
                 in_group: bool) -> StageSpec:
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
    if max_prompt is not None and (isinstance(max_prompt, bool)
                                   or not isinstance(max_prompt, int) or max_prompt < 1):
        raise SpecError(f"{where}.max_prompt: must be an integer >= 1 tokens, got {max_prompt!r}")
    kind = d.get("kind", name)
    if not isinstance(kind, str) or not kind:
        raise SpecError(f"{where}.kind: must be a non-empty string, got {kind!r}")
    return StageSpec(
        name=name, agents=names, agent_weights=weights, kind=kind, deps=deps,
        prompt=parse_dist(d.get("prompt", 1), f"{where}.prompt", "tokens"),
        inherit=_fraction(d.get("inherit", 0.0), f"{where}.inherit"),
        history=_fraction(d.get("history", 0.0), f"{where}.history"),
        max_prompt=max_prompt, groups=_parse_calls(d["calls"], f"{where}.calls"),
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


def _parse_items(raw: object, where: str, agents: dict[str, Agent]
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
            item: StageSpec | GroupSpec = GroupSpec(gname, count, layout, deps, tuple(inner),
                                                    single=False)
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


def _read_trace_times(path: Path, unit: str, where: str) -> tuple[float, ...]:
    """Arrival times from a JSONL file with a ``timestamp`` field per line, or a text file of
    one number per line; shifted so the first arrival is at 0 and sorted check."""
    if not path.exists():
        raise SpecError(f"{where}: trace file {path} does not exist")
    if not path.is_file():
        raise SpecError(f"{where}: trace file {path} is not a file")
    scale = {"ms": 1e-3, "s": 1.0}[unit]
    times: list[float] = []
    # undecodable bytes become U+FFFD: a binary file fails as a bad line, named below
    with path.open(encoding="utf-8", errors="replace") as f:
        for ln, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                v = json.loads(line)
                t = v["timestamp"] if isinstance(v, dict) else v
                if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                    raise ValueError
            except (ValueError, KeyError, RecursionError):
                raise SpecError(f"{path} line {ln}: expected a timestamp >= 0 (a number, or a "
                                f"JSON object with 'timestamp'), got {line[:60]!r}") from None
            if times and t * scale < times[-1]:
                raise SpecError(f"{path} line {ln}: timestamps must not decrease")
            times.append(t * scale)
    if not times:
        raise SpecError(f"{where}: trace file {path} has no arrivals")
    return tuple(t - times[0] for t in times)


def _parse_arrivals(v: object, where: str, base: Path) -> ArrivalSpec:
    if v is None:
        return ArrivalSpec("poisson")
    if isinstance(v, dict) and "trace" in v:
        _keys(v, where, ("trace",), ("unit",))
        unit = v.get("unit", "s")
        if unit not in ("s", "ms"):
            raise SpecError(f"{where}.unit: must be 's' or 'ms', got {unit!r}")
        if not isinstance(v["trace"], str):
            raise SpecError(f"{where}.trace: must be a file path, got {v['trace']!r}")
        p = Path(v["trace"])
        p = p if p.is_absolute() else base / p
        return ArrivalSpec("trace", times_s=_read_trace_times(p, unit, f"{where}.trace"))
    _keys(v, where, ("process",), ("cv",))
    proc = v["process"]
    if proc == "poisson":
        if "cv" in v:
            raise SpecError(f"{where}.cv: only a gamma process takes a cv")
        return ArrivalSpec("poisson")
    if proc == "gamma":
        if "cv" not in v:
            raise SpecError(f"{where}.cv: missing (required for a gamma process)")
        cv = v["cv"]
        if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not cv > 0:
            raise SpecError(f"{where}.cv: must be a number > 0, got {cv!r}")
        return ArrivalSpec("gamma", cv=float(cv))
    raise SpecError(f"{where}.process: must be 'poisson' or 'gamma' (or use trace: PATH), "
                    f"got {proc!r}")


_TOP_REQ = ("name", "agents")
_TOP_OPT = ("description", "default_rate", "default_tasks", "arrivals", "stages", "templates",
            "notes", "hardness")


def _parse_hardness(v: object, where: str) -> HardnessSpec:
    """``hardness: DIST`` (scales rounds and outputs) or ``{factor: DIST, scales: [...]}``."""
    if isinstance(v, dict) and "factor" in v:
        _keys(v, where, ("factor",), ("scales",))
        raw, fw = v["factor"], f"{where}.factor"
        fields = v.get("scales", ["count", "output"])
        if isinstance(fields, str):
            fields = [fields]
        if not isinstance(fields, list) or not fields:
            raise SpecError(f"{where}.scales: must be a non-empty list of {list(HARDNESS_FIELDS)}"
                            f", got {fields!r}")
        for f in fields:
            if f not in HARDNESS_FIELDS:
                raise SpecError(f"{where}.scales: unknown field {f!r} (known: "
                                f"{list(HARDNESS_FIELDS)})")
        if len(set(fields)) != len(fields):
            raise SpecError(f"{where}.scales: names a field twice: {fields!r}")
    else:
        raw, fw, fields = v, where, ["count", "output"]
    factor = parse_dist(raw, fw, "seconds")  # continuous, floored at 0
    return HardnessSpec(factor, tuple(fields))


def parse_workload(d: object, source: str, base: Path | None = None) -> DeclarativeWorkload:
    """Build a workload from a parsed YAML/JSON document; ``source`` (the file) prefixes every
    error message."""
    base = base or Path(".")
    _keys(d, source, _TOP_REQ, _TOP_OPT)
    name = _name(d["name"], f"{source}: name")
    w = f"{source}: "
    raw_agents = d["agents"]
    if not isinstance(raw_agents, dict) or not raw_agents:
        raise SpecError(f"{w}agents: must be a non-empty mapping name -> prefix tokens")
    agents: dict[str, Agent] = {}
    for an, av in raw_agents.items():
        aw = f"{w}agents.{an}"
        _name(an, aw)
        if isinstance(av, dict):
            _keys(av, aw, ("prefix_tokens",), ())
            av = av["prefix_tokens"]
        if isinstance(av, bool) or not isinstance(av, int) or av < 0:
            raise SpecError(f"{aw}: prefix tokens must be an integer >= 0, got {av!r}")
        agents[an] = Agent(an, av)
    if ("stages" in d) == ("templates" in d):
        raise SpecError(f"{w}stages/templates: give exactly one of them")
    templates: list[TemplateSpec] = []
    if "stages" in d:
        templates.append(TemplateSpec(name, 1.0, _parse_items(d["stages"], f"{w}stages", agents)))
    else:
        raw_t = d["templates"]
        if not isinstance(raw_t, list) or not raw_t:
            raise SpecError(f"{w}templates: must be a non-empty list")
        for i, t in enumerate(raw_t):
            tw = f"{w}templates[{i}]"
            _keys(t, tw, ("name", "stages"), ("weight",))
            weight = t.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
                raise SpecError(f"{tw}.weight: must be a number > 0, got {weight!r}")
            templates.append(TemplateSpec(_name(t["name"], f"{tw}.name"), float(weight),
                                          _parse_items(t["stages"], f"{tw}.stages", agents)))
    arrivals = _parse_arrivals(d.get("arrivals"), f"{w}arrivals", base)
    rate = d.get("default_rate", arrivals.native_rate)
    if rate is None:
        raise SpecError(f"{w}default_rate: missing (required unless arrivals come from a trace)")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise SpecError(f"{w}default_rate: must be a number > 0 tasks/s, got {rate!r}")
    n = d.get("default_tasks", 100)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError(f"{w}default_tasks: must be an integer >= 1, got {n!r}")
    desc = d.get("description", "")
    notes = d.get("notes", "")
    if not isinstance(desc, str) or not isinstance(notes, str):
        raise SpecError(f"{w}description/notes: must be text")
    hardness = _parse_hardness(d["hardness"], f"{w}hardness") if "hardness" in d else None
    total = sum(t.weight for t in templates)
    wl = DeclarativeWorkload(
        name=name, description=desc.strip(), agents=tuple(agents.values()),
        default_rate=float(rate), default_tasks=n, templates=tuple(templates),
        arrivals=arrivals, source=source, notes=notes.strip(),
        _weights=tuple(t.weight / total for t in templates), hardness=hardness,
    )
    # one sample per template through the workflow model's validation catches what the schema
    # checks cannot see (for example a stage graph the model rejects)
    table = agent_table(wl.agents)
    for i, t in enumerate(templates):
        try:
            validate_task(Task(0, 0.0, sample_stages(t, np.random.default_rng(0))), table)
        except WorkflowError as e:
            raise SpecError(f"{w}templates[{i}] ({t.name}): {e}") from None
    return wl


def load_workload_file(path: str | Path) -> DeclarativeWorkload:
    """Load a ``.yaml``/``.yml``/``.json`` workload file; errors name the file and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{p}: not a UTF-8 text file") from None
    except OSError as e:
        raise SpecError(f"{p}: cannot read ({e.strerror})") from None
    try:
        doc = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except RecursionError:
        raise SpecError(f"{p}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{p}: not valid YAML ({getattr(e, 'problem', None) or e}{at})") from None
    if _depth(doc) > MAX_DEPTH:
        raise SpecError(f"{p}: nested too deeply (at most {MAX_DEPTH} levels)")
    return parse_workload(doc, str(p), base=p.parent)


#: deepest nesting of lists and mappings a workload file may have (the built-in ones use
#: under 10); keeps recursive parsing and sampling far from Python's recursion limit
MAX_DEPTH = 64


def _depth(doc: object) -> int:
    """Nesting depth of lists and mappings in ``doc``, without recursion (stops counting
    past ``MAX_DEPTH``)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:
                stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


@cache
def load_builtin(name: str) -> DeclarativeWorkload:
    p = BUILTIN_DIR / f"{name}.yaml"
    wl = load_workload_file(p)
    if wl.name != name:
        raise SpecError(f"{p}: name: must equal the file stem {name!r}, got {wl.name!r}")
    return wl


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


for _suffix in (".yaml", ".yml", ".json"):
    FILE_LOADERS[_suffix] = load_workload_file
for _n in builtin_names():
    register(_n)(lambda _n=_n: load_builtin(_n))
