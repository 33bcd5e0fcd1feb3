"""A declarative workload's parsed form (the ``*Spec`` dataclasses, see
:mod:`topas.workloads.declarative` for the file format) and how a task is sampled from it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from topas.workflow.model import Agent, Call, Stage, Task
from topas.workloads import check_rate
from topas.workloads.dists import Dist


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
                raise ValueError(
                    f"tasks {n}: the arrival trace has only {len(self.times_s)} arrivals"
                )
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

    def sample_with_factors(
        self, n_tasks: int, rate: float, rng: np.random.Generator
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
            tasks.append(Task(i, float(arrivals[i]), sample_stages(tpl, traj_rng, sc), workflow=wf))
            factors.append(h)
        return tasks, factors


# ---------------------------------------------------------------------------------------------
# Sampling one task's stages
# ---------------------------------------------------------------------------------------------
def _make_stage(
    s: StageSpec,
    name: str,
    deps: list[str],
    hist_out: int,
    final_out: dict[str, int],
    rng: np.random.Generator,
    sc: dict[str, float] = _NO_SCALE,
) -> tuple[Stage, int]:
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
    f_out, f_delay, f_obs = (
        sc.get("output", 1.0),
        sc.get("tool_delay", 1.0),
        sc.get("observation", 1.0),
    )
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


def _conversation(s: StageSpec, st: Stage, hist_out: int) -> bool:
    """Whether the stage's first prompt is the whole conversation so far followed by its own
    prompt (``history: 1.0``, nothing inherited, not cut by ``max_prompt``): its leading
    ``hist_out`` tokens are then the conversation the same agent's later stages see first."""
    if s.history != 1.0 or s.inherit != 0.0:
        return False
    return not (s.max_prompt and st.calls[0].prompt_tokens >= s.max_prompt)


def sample_stages(
    tpl: TemplateSpec, rng: np.random.Generator, sc: dict[str, float] = _NO_SCALE
) -> tuple[Stage, ...]:
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
        # agent -> (its latest conversation stage in this chain, that stage's history tokens,
        # its copy: only earlier copies' stages are ancestors of every stage of this one)
        spoke: dict[str, tuple[str, int, int]] = {}
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
                if item.layout == "chain" and _conversation(s, st, hist_out):
                    last = spoke.get(st.agent)
                    if last is not None and last[1] > 0 and last[2] < k:
                        st = replace(st, shares_with=last[0], shared_tokens=last[1])
                    spoke[st.agent] = (cname, hist_out, k)
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
