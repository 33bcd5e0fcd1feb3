"""Workflow model: agents, tasks, stages and the LLM calls they make.

Vocabulary (the paper's symbols in brackets):

* ``Agent`` -- a role with a static prefix of ``prefix_tokens`` tokens (``l_a``), shared by
  every request of that agent across all tasks.  A prefix is identified by the agent name; a
  trace whose requests share leading hash blocks (Mooncake) is mapped onto agents by the trace
  reader, so the engine has exactly one notion of a shareable prefix.
* ``Task`` -- one workflow run (``i``), arriving at ``arrival_s`` (``tau_i``) with a DAG of
  stages (``G_i``).  It completes when its last stage completes.
* ``Stage`` -- one node ``v`` of the DAG, executed by one agent ``a(v)``.  It makes one or more
  LLM calls, ReAct style: call, tool delay, call, ...  The number of calls and their lengths
  are the stage's *true trajectory*: the engine knows them, a policy does not.
* ``Call`` -- one LLM request of a stage: a dynamic prompt of ``prompt_tokens`` (the part after
  the agent prefix), ``output_tokens`` generated, then ``tool_delay_s`` seconds of tool time
  before the next call of the stage becomes ready (ignored after the last call).

Everything here is immutable data; validation raises :class:`WorkflowError` with a one-line
message that names the offending input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: the latest simulated time (s) a run may reach: beyond it float64 clock values lose
#: sub-microsecond resolution (ulp(1e9 s) ~ 1.2e-7 s), so JCTs could come out below their
#: lower bounds from rounding alone (31.7 years of simulated time).  Arrival processes
#: reject rates that would reach it (``topas.workloads.check_rate``), the simulator arrival
#: times beyond it.
MAX_TIME_S = 1e9


class WorkflowError(ValueError):
    """Invalid workflow input; the message is one line and names the input."""


def _check_pos_int(value: object, what: str, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok and (value > 0 or (allow_zero and value == 0)):
        return
    bound = ">= 0" if allow_zero else "> 0"
    raise WorkflowError(f"{what}: must be an integer {bound}, got {value!r}")


def _check_nonneg_float(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WorkflowError(f"{what}: must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise WorkflowError(f"{what}: must be finite and >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Agent:
    """A role with a static prefix of ``prefix_tokens`` tokens (``l_a``)."""

    name: str
    prefix_tokens: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise WorkflowError(f"agent name: must be a non-empty string, got {self.name!r}")
        _check_pos_int(self.prefix_tokens, f"agent {self.name!r} prefix_tokens", allow_zero=True)


@dataclass(frozen=True, slots=True)
class Call:
    """One LLM call: ``prompt_tokens`` of dynamic prompt, ``output_tokens`` generated, then
    ``tool_delay_s`` of tool time before the stage's next call (unused after the last)."""

    prompt_tokens: int
    output_tokens: int
    tool_delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Stage:
    """A DAG node: ``agent`` runs ``calls`` in sequence after every stage in ``deps`` is done.

    ``kind`` names the stage in its workflow template (for example ``"Engineer"`` for every
    per-file engineer stage); estimators pool service-time history by ``(agent, kind)``.

    ``shares_with`` names an earlier stage of the task, run by the same agent, whose prompt
    begins with the same ``shared_tokens`` dynamic tokens as this stage's first call: a
    conversation history this agent saw the last time it spoke (group chat).  An engine that
    still caches that stage's context finds those tokens (automatic prefix caching); ``""``
    when the stage shares nothing.
    """

    name: str
    agent: str
    calls: tuple[Call, ...]
    deps: tuple[str, ...] = ()
    kind: str = ""
    shares_with: str = ""
    shared_tokens: int = 0

    @property
    def template(self) -> str:
        return self.kind or self.name


@dataclass(frozen=True, slots=True)
class Task:
    """One workflow run: stages (a DAG) arriving together at ``arrival_s``."""

    task_id: int
    arrival_s: float
    stages: tuple[Stage, ...]
    workflow: str = "custom"
    _order: tuple[int, ...] = field(default=(), compare=False, repr=False)

    @property
    def stage_index(self) -> dict[str, int]:
        return {s.name: k for k, s in enumerate(self.stages)}

    def topological_order(self) -> tuple[int, ...]:
        """Indices of ``stages`` in a topological order (validated by :func:`validate_task`)."""
        return self._order or _topo_order(self)

    def successors(self) -> dict[str, tuple[str, ...]]:
        succ: dict[str, list[str]] = {s.name: [] for s in self.stages}
        for s in self.stages:
            for d in s.deps:
                succ[d].append(s.name)
        return {k: tuple(v) for k, v in succ.items()}

    @property
    def n_calls(self) -> int:
        return sum(len(s.calls) for s in self.stages)


def _topo_order(task: Task) -> tuple[int, ...]:
    return _graph_order(
        f"task {task.task_id}", [s.name for s in task.stages], [s.deps for s in task.stages]
    )


def _graph_order(
    where: str, names: Sequence[str], deps: Sequence[Sequence[str]]
) -> tuple[int, ...]:
    index = {n: k for k, n in enumerate(names)}
    indeg = [len(d) for d in deps]
    succ: list[list[int]] = [[] for _ in names]
    for k, ds in enumerate(deps):
        for d in ds:
            succ[index[d]].append(k)
    ready = [k for k, n in enumerate(indeg) if n == 0]
    order: list[int] = []
    while ready:
        k = ready.pop()
        order.append(k)
        for j in succ[k]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if len(order) != len(names):
        stuck = sorted(names[k] for k in range(len(names)) if indeg[k] > 0)
        raise WorkflowError(f"{where}: stage graph has a cycle through {stuck}")
    return tuple(order)


def check_stage_graph(
    where: str, names: Sequence[str], deps: Sequence[Sequence[str]]
) -> tuple[int, ...]:
    """Check a stage DAG given as parallel lists of stage names and their dependencies:
    names unique, every dependency another stage of the graph, no cycle.  Returns the stage
    indices in a topological order; raises :class:`WorkflowError` (one line, prefixed with
    ``where``).  Used by :func:`validate_task` and by the vLLM adapter's ``topas_dag`` tag."""
    names = list(names)
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise WorkflowError(f"{where}: duplicate stage names {dup}")
    known = set(names)
    for name, ds in zip(names, deps):
        for d in ds:
            if d not in known:
                raise WorkflowError(f"{where} stage {name!r}: depends on unknown stage {d!r}")
            if d == name:
                raise WorkflowError(f"{where} stage {name!r}: depends on itself (cycle)")
    return _graph_order(where, names, deps)


def validate_task(task: Task, agents: Mapping[str, Agent]) -> Task:
    """Check one task against the agent table; return it with its topological order cached."""
    where = f"task {task.task_id}"
    _check_nonneg_float(task.arrival_s, f"{where} arrival_s")
    if not task.stages:
        raise WorkflowError(f"{where}: has no stages")
    order = check_stage_graph(where, [s.name for s in task.stages], [s.deps for s in task.stages])
    for s in task.stages:
        sw = f"{where} stage {s.name!r}"
        if s.agent not in agents:
            raise WorkflowError(f"{sw}: unknown agent {s.agent!r}")
        if not s.calls:
            raise WorkflowError(f"{sw}: has no calls")
        for j, c in enumerate(s.calls):
            cw = f"{sw} call {j}"
            _check_pos_int(c.prompt_tokens, f"{cw} prompt_tokens")
            _check_pos_int(c.output_tokens, f"{cw} output_tokens")
            _check_nonneg_float(c.tool_delay_s, f"{cw} tool_delay_s")
        if s.shares_with or s.shared_tokens:
            _check_shared(task, s, sw)
    object.__setattr__(task, "_order", order)
    return task


def _check_shared(task: Task, s: Stage, sw: str) -> None:
    """``shares_with`` names an ancestor stage of the same agent and ``shared_tokens`` fits
    both stages' first prompts."""
    _check_pos_int(s.shared_tokens, f"{sw} shared_tokens")
    by_name = {x.name: x for x in task.stages}
    src = by_name.get(s.shares_with)
    if src is None:
        raise WorkflowError(f"{sw}: shares_with {s.shares_with!r} is not a stage of the task")
    if src.agent != s.agent:
        raise WorkflowError(
            f"{sw}: shares_with {s.shares_with!r} is run by {src.agent!r}, not {s.agent!r}"
        )
    seen: set[str] = set()
    todo = list(s.deps)
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(by_name[d].deps)
    if src.name not in seen:
        raise WorkflowError(f"{sw}: shares_with {s.shares_with!r} is not an ancestor")
    limit = min(src.calls[0].prompt_tokens, s.calls[0].prompt_tokens)
    if s.shared_tokens > limit:
        raise WorkflowError(
            f"{sw}: shared_tokens {s.shared_tokens} exceeds the first prompts' {limit} tokens"
        )


def round_up_to_blocks(tokens: int, block_size: int) -> int:
    """``tokens`` rounded up to whole KV blocks of ``block_size`` tokens (the engines'
    allocation unit; ``block_size <= 1``: tokens as they are).  The one place this rule lives:
    the simulator, the snapshot, the vLLM adapter, the policies and ``validate_fits`` use it."""
    return tokens if block_size <= 1 else -(-tokens // block_size) * block_size


def validate_fits(
    task: Task, agents: Mapping[str, Agent], kv_budget_tokens: int, block_size: int = 1
) -> None:
    """A request must fit the KV budget on an otherwise empty engine, or it can never run:
    its prefix, its prompt and output rounded up to whole blocks, and the one block of
    headroom every policy keeps for a request's next token (a request preempted late in its
    output must be admissible again)."""
    b = max(1, block_size)
    for s in task.stages:
        prefix = agents[s.agent].prefix_tokens
        if prefix > kv_budget_tokens:
            raise WorkflowError(
                f"agent {s.agent!r}: prefix of {prefix} tokens can never fit the KV budget of "
                f"{kv_budget_tokens} tokens"
            )
        for j, c in enumerate(s.calls):
            need = prefix + round_up_to_blocks(c.prompt_tokens + c.output_tokens, b) + b
            if need > kv_budget_tokens:
                raise WorkflowError(
                    f"task {task.task_id} stage {s.name!r} call {j}: needs {need} KV tokens "
                    f"(prefix {prefix} + prompt {c.prompt_tokens} + output {c.output_tokens} "
                    f"in blocks of {b} + one block of headroom), more than the KV budget of "
                    f"{kv_budget_tokens}"
                )


def agent_table(agents: Iterable[Agent]) -> dict[str, Agent]:
    table: dict[str, Agent] = {}
    for a in agents:
        if a.name in table:
            raise WorkflowError(f"agent {a.name!r}: defined twice")
        table[a.name] = a
    return table
