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
from functools import cache
from pathlib import Path

import numpy as np
import yaml

from topas.workflow.model import Agent, Task, WorkflowError, agent_table, validate_task
from topas.workloads import FILE_LOADERS, register
from topas.workloads.dists import SpecError, parse_dist
from topas.workloads.stage_parse import (
    _keys,
    _name,
    _parse_items,
)
from topas.workloads.template import (
    HARDNESS_FIELDS,
    ArrivalSpec,
    DeclarativeWorkload,
    HardnessSpec,
    TemplateSpec,
    sample_stages,
)

BUILTIN_DIR = Path(__file__).with_name("builtin")


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
                raise SpecError(
                    f"{path} line {ln}: expected a timestamp >= 0 (a number, or a "
                    f"JSON object with 'timestamp'), got {line[:60]!r}"
                ) from None
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
    raise SpecError(
        f"{where}.process: must be 'poisson' or 'gamma' (or use trace: PATH), got {proc!r}"
    )


_TOP_REQ = ("name", "agents")
_TOP_OPT = (
    "description",
    "default_rate",
    "default_tasks",
    "arrivals",
    "stages",
    "templates",
    "notes",
    "hardness",
)


def _parse_hardness(v: object, where: str) -> HardnessSpec:
    """``hardness: DIST`` (scales rounds and outputs) or ``{factor: DIST, scales: [...]}``."""
    if isinstance(v, dict) and "factor" in v:
        _keys(v, where, ("factor",), ("scales",))
        raw, fw = v["factor"], f"{where}.factor"
        fields = v.get("scales", ["count", "output"])
        if isinstance(fields, str):
            fields = [fields]
        if not isinstance(fields, list) or not fields:
            raise SpecError(
                f"{where}.scales: must be a non-empty list of {list(HARDNESS_FIELDS)}"
                f", got {fields!r}"
            )
        for f in fields:
            if f not in HARDNESS_FIELDS:
                raise SpecError(
                    f"{where}.scales: unknown field {f!r} (known: {list(HARDNESS_FIELDS)})"
                )
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
            templates.append(
                TemplateSpec(
                    _name(t["name"], f"{tw}.name"),
                    float(weight),
                    _parse_items(t["stages"], f"{tw}.stages", agents),
                )
            )
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
        name=name,
        description=desc.strip(),
        agents=tuple(agents.values()),
        default_rate=float(rate),
        default_tasks=n,
        templates=tuple(templates),
        arrivals=arrivals,
        source=source,
        notes=notes.strip(),
        _weights=tuple(t.weight / total for t in templates),
        hardness=hardness,
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
