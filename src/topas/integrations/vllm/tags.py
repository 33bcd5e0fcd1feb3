"""Workflow tags: what a client attaches to each request so the engine-side scheduler can build
the policy snapshot (task, stage, agent, prefix length and enough of the DAG).

Tags travel in ``SamplingParams.extra_args`` (offline / in-process) or the OpenAI API field
``vllm_xargs`` (HTTP), which only carries flat ``str | int | float | list`` values, so the tag is
a flat dict of ``topas_*`` keys:

=====================  ========================================================================
key                    value
=====================  ========================================================================
``topas_task``         task id (str or int), unique per workflow run
``topas_workflow``     workflow name (history is pooled per agent and stage kind)
``topas_stage``        stage name inside the task
``topas_kind``         stage kind (template name); defaults to the stage name
``topas_agent``        agent name: requests of one agent share its prefix
``topas_prefix_tokens``  length of the agent prefix at the start of the prompt (tokens)
``topas_round``        index of this call inside its stage (0 for the first)
``topas_dag``          list of ``"stage|agent|kind|dep1,dep2"`` strings: the task's DAG
``topas_done``         list of every stage the client has finished so far (cumulative: after
                       an engine restart the task is rebuilt from the tag alone)
``topas_arrival_s``    the task's arrival time, client wall clock (``time.time()``)
``topas_final``        1 if this is the last call of its stage (optional; 0 = more may follow):
                       the engine then marks the stage done at once and offers no held context
=====================  ========================================================================

Only ``topas_task``, ``topas_stage`` and ``topas_agent`` are required; a request without
``topas_task`` is served as a single-request task of its own.  An optional key that is absent or
``None`` takes its default.

:func:`parse_tag` checks every value and raises :class:`TagError` (one line, naming the key) for
anything else: integers must be whole, finite and in ``[0, MAX_INT]``; ``topas_arrival_s``
finite and >= 0; names non-empty strings; the DAG is checked like a workload file's
(:func:`topas.workflow.model.check_stage_graph`: unique stage names, every dependency a stage of
the DAG, no cycle; at most ``MAX_DAG_STAGES`` stages) and returned in a topological order (the
client's order when it already is one); ``topas_done`` may name only stages of the DAG (when
one is given) and not the request's own stage.  The engine serves a request whose tag fails
these checks as untagged and logs one line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topas.workflow.model import WorkflowError, check_stage_graph

PREFIX = "topas_"
#: largest token count / round index a tag may carry (numpy int64 arithmetic stays exact)
MAX_INT = 2**31 - 1
#: most stages a ``topas_dag`` may list (the estimators' cost grows with it)
MAX_DAG_STAGES = 4096


class TagError(ValueError):
    """A malformed workflow tag; the message is one line and starts with the key, which is
    also in ``key``."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key or message.split(":", 1)[0]


def _show(v: object, limit: int = 60) -> str:
    """``repr(v)``, cut to ``limit`` characters (a tag value may be arbitrarily long)."""
    try:
        r = repr(v)
    except Exception:  # a hostile __repr__ cannot come through JSON, but be safe
        r = f"<{type(v).__name__}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class StageSpec:
    name: str
    agent: str
    kind: str
    deps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkflowTag:
    task: str
    workflow: str
    stage: str
    kind: str
    agent: str
    prefix_tokens: int
    round_index: int
    dag: tuple[StageSpec, ...]
    done: tuple[str, ...]
    arrival_s: float | None
    final: bool = False


def encode_dag(stages: Sequence[tuple[str, str, str, Sequence[str]]]) -> list[str]:
    """``[(name, agent, kind, deps), ...]`` -> the ``topas_dag`` list."""
    out = []
    for name, agent, kind, deps in stages:
        if isinstance(deps, str):
            raise TagError(
                f"topas_dag: stage {_show(name)}: deps must be a list of names, got {_show(deps)}"
            )
        for part in (name, agent, kind, *deps):
            if not isinstance(part, str):
                raise TagError(f"topas_dag: name {_show(part)} is not a string")
            if "|" in part or "," in part:
                raise TagError(f"topas_dag: name {part!r} may not contain '|' or ','")
        out.append(f"{name}|{agent}|{kind}|{','.join(deps)}")
    return out


def make_tag(
    *,
    task: str | int,
    stage: str,
    agent: str,
    prefix_tokens: int = 0,
    round_index: int = 0,
    workflow: str = "custom",
    kind: str = "",
    dag: Sequence[tuple[str, str, str, Sequence[str]]] | None = None,
    done: Sequence[str] = (),
    arrival_s: float | None = None,
    final: bool | None = None,
) -> dict:
    """The flat ``vllm_xargs`` / ``extra_args`` dict for one request; raises
    :class:`TagError` for a value the engine would reject."""
    if isinstance(done, str):
        raise TagError(f"topas_done: must be a list of stage names, got {_show(done)}")
    tag: dict = {
        "topas_task": task,
        "topas_workflow": workflow,
        "topas_stage": stage,
        "topas_kind": kind or stage,
        "topas_agent": agent,
        "topas_prefix_tokens": prefix_tokens,
        "topas_round": round_index,
        "topas_done": list(done),
    }
    if dag is not None:
        tag["topas_dag"] = encode_dag(dag)
    if arrival_s is not None:
        tag["topas_arrival_s"] = arrival_s
    if final is not None:
        tag["topas_final"] = final
    t = parse_tag(tag)  # fail on the client, where the mistake is, not in the engine
    tag["topas_prefix_tokens"], tag["topas_round"] = t.prefix_tokens, t.round_index
    if arrival_s is not None:
        tag["topas_arrival_s"] = t.arrival_s
    if final is not None:
        tag["topas_final"] = int(t.final)
    return tag


def _int(extra: Mapping, key: str, default: int) -> int:
    v = extra.get(key)
    if v is None:
        return default
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not math.isfinite(v))
        or v < 0
        or v > MAX_INT
        or int(v) != v
    ):
        raise TagError(f"{key}: must be an integer in [0, {MAX_INT}], got {_show(v)}")
    return int(v)


def _name(extra: Mapping, key: str, default: str | None = None) -> str:
    v = extra.get(key)
    if default is not None and (v is None or v == ""):
        return default
    if not isinstance(v, str) or not v:
        what = "required non-empty string" if default is None else "must be a string"
        raise TagError(f"{key}: {what}, got {_show(v)}")
    return v


def _names(v: object, key: str) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise TagError(f"{key}: must be a list of stage names, got {_show(v)}")
    for d in v:
        if not isinstance(d, str) or not d:
            raise TagError(f"{key}: entry {_show(d)} is not a non-empty stage name")
    return list(v)


def _dag(raw: object) -> tuple[StageSpec, ...]:
    if raw is None or raw == "":
        return ()
    if not isinstance(raw, (list, tuple)):
        raise TagError(f"topas_dag: must be a list of 'stage|agent|kind|deps', got {_show(raw)}")
    if len(raw) > MAX_DAG_STAGES:
        raise TagError(f"topas_dag: {len(raw)} stages, more than {MAX_DAG_STAGES}")
    dag = []
    for item in raw:
        parts = item.split("|") if isinstance(item, str) else ()
        if len(parts) != 4 or not parts[0] or not parts[1]:
            raise TagError(f"topas_dag: entry {_show(item)} is not 'stage|agent|kind|dep1,dep2'")
        deps = tuple(d for d in parts[3].split(",") if d)
        dag.append(StageSpec(parts[0], parts[1], parts[2] or parts[0], deps))
    try:  # the workload loader's checks: unique names, known dependencies, no cycle
        order = check_stage_graph("topas_dag", [s.name for s in dag], [s.deps for s in dag])
    except WorkflowError as e:
        raise TagError(str(e), "topas_dag") from None
    seen: set[str] = set()
    for s in dag:
        if not all(d in seen for d in s.deps):  # not topological: use the checked order
            return tuple(dag[k] for k in order)
        seen.add(s.name)
    return tuple(dag)


def parse_tag(extra: Mapping | None) -> WorkflowTag | None:
    """The tag in ``extra`` (a request's ``extra_args``), or None for an untagged request.

    Raises :class:`TagError` (and only that) for a malformed tag; see the module docstring."""
    if not isinstance(extra, Mapping) or "topas_task" not in extra:
        return None
    try:
        return _parse(extra)
    except TagError:
        raise
    except Exception as e:  # anything unforeseen is still a bad tag, never a crash
        raise TagError(
            f"topas: unreadable tag ({type(e).__name__}: {_show(str(e))})", "topas"
        ) from None


def _parse(extra: Mapping) -> WorkflowTag:
    task = extra["topas_task"]
    if (
        isinstance(task, bool)
        or not isinstance(task, (str, int))
        or task == ""
        or (isinstance(task, int) and abs(task) > 2**63)
    ):
        raise TagError(f"topas_task: must be a non-empty string or an integer, got {_show(task)}")
    stage = _name(extra, "topas_stage")
    agent = _name(extra, "topas_agent")
    workflow = _name(extra, "topas_workflow", "custom")
    kind = _name(extra, "topas_kind", stage)
    prefix_tokens = _int(extra, "topas_prefix_tokens", 0)
    round_index = _int(extra, "topas_round", 0)
    dag = _dag(extra.get("topas_dag"))
    done = _names(extra.get("topas_done"), "topas_done")
    if dag:
        names = {s.name for s in dag}
        for d in done:
            if d not in names:
                raise TagError(f"topas_done: stage {_show(d)} is not in topas_dag")
    if stage in done:
        raise TagError(f"topas_done: lists this request's own stage {_show(stage)}")
    arr = extra.get("topas_arrival_s")
    if arr is not None and (
        isinstance(arr, bool)
        or not isinstance(arr, (int, float))
        or not math.isfinite(arr)
        or arr < 0
    ):
        raise TagError(
            f"topas_arrival_s: must be a finite number >= 0 (client time.time()), got {_show(arr)}"
        )
    final = extra.get("topas_final")
    if final is None:
        final = 0
    if isinstance(final, (list, tuple, dict, set)) or final not in (0, 1):
        raise TagError(f"topas_final: must be 0 or 1, got {_show(final)}")
    return WorkflowTag(
        task=str(task),
        workflow=workflow,
        stage=stage,
        kind=kind,
        agent=agent,
        prefix_tokens=prefix_tokens,
        round_index=round_index,
        dag=dag,
        done=tuple(done),
        arrival_s=None if arr is None else float(arr),
        final=bool(final),
    )
