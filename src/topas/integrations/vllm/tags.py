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
``topas_done``         list of stage names the client has finished (for DAG status)
``topas_arrival_s``    the task's arrival time, client wall clock (``time.time()``)
``topas_final``        1 if this is the last call of its stage (optional; 0 = more may follow):
                       the engine then marks the stage done at once and offers no held context
=====================  ========================================================================

Only ``topas_task``, ``topas_stage`` and ``topas_agent`` are required; a request without
``topas_task`` is served as a single-request task of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PREFIX = "topas_"


class TagError(ValueError):
    """A malformed workflow tag; the message is one line and names the key."""


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
        for part in (name, agent, kind, *deps):
            if "|" in part or "," in part:
                raise TagError(f"topas_dag: name {part!r} may not contain '|' or ','")
        out.append(f"{name}|{agent}|{kind}|{','.join(deps)}")
    return out


def make_tag(*, task: str | int, stage: str, agent: str, prefix_tokens: int = 0,
             round_index: int = 0, workflow: str = "custom", kind: str = "",
             dag: Sequence[tuple[str, str, str, Sequence[str]]] | None = None,
             done: Sequence[str] = (), arrival_s: float | None = None,
             final: bool | None = None) -> dict:
    """The flat ``vllm_xargs`` / ``extra_args`` dict for one request."""
    tag: dict = {
        "topas_task": task, "topas_workflow": workflow, "topas_stage": stage,
        "topas_kind": kind or stage, "topas_agent": agent,
        "topas_prefix_tokens": int(prefix_tokens), "topas_round": int(round_index),
        "topas_done": list(done),
    }
    if dag is not None:
        tag["topas_dag"] = encode_dag(dag)
    if arrival_s is not None:
        tag["topas_arrival_s"] = float(arrival_s)
    if final is not None:
        tag["topas_final"] = int(bool(final))
    parse_tag(tag)  # fail on the client, where the mistake is, not in the engine
    return tag


def _int(extra: Mapping, key: str, default: int) -> int:
    v = extra.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or int(v) != v:
        raise TagError(f"{key}: must be an integer >= 0, got {v!r}")
    return int(v)


def parse_tag(extra: Mapping | None) -> WorkflowTag | None:
    """The tag in ``extra`` (a request's ``extra_args``), or None for an untagged request."""
    if not extra or "topas_task" not in extra:
        return None
    task = extra["topas_task"]
    if not isinstance(task, (str, int)) or isinstance(task, bool):
        raise TagError(f"topas_task: must be a string or integer, got {task!r}")
    for key in ("topas_stage", "topas_agent"):
        if not isinstance(extra.get(key), str) or not extra[key]:
            raise TagError(f"{key}: required non-empty string, got {extra.get(key)!r}")
    stage = extra["topas_stage"]
    dag_raw = extra.get("topas_dag") or []
    if not isinstance(dag_raw, (list, tuple)):
        raise TagError(f"topas_dag: must be a list of 'stage|agent|kind|deps', got {dag_raw!r}")
    dag = []
    for item in dag_raw:
        parts = str(item).split("|")
        if len(parts) != 4 or not parts[0] or not parts[1]:
            raise TagError(f"topas_dag: entry {item!r} is not 'stage|agent|kind|dep1,dep2'")
        deps = tuple(d for d in parts[3].split(",") if d)
        dag.append(StageSpec(parts[0], parts[1], parts[2] or parts[0], deps))
    done = extra.get("topas_done") or []
    if not isinstance(done, (list, tuple)):
        raise TagError(f"topas_done: must be a list of stage names, got {done!r}")
    arr = extra.get("topas_arrival_s")
    if arr is not None and (isinstance(arr, bool) or not isinstance(arr, (int, float))):
        raise TagError(f"topas_arrival_s: must be a number, got {arr!r}")
    final = extra.get("topas_final", 0)
    if final not in (0, 1):  # True/False compare equal to 1/0
        raise TagError(f"topas_final: must be 0 or 1, got {final!r}")
    return WorkflowTag(
        task=str(task), workflow=str(extra.get("topas_workflow") or "custom"), stage=stage,
        kind=str(extra.get("topas_kind") or stage), agent=extra["topas_agent"],
        prefix_tokens=_int(extra, "topas_prefix_tokens", 0),
        round_index=_int(extra, "topas_round", 0), dag=tuple(dag),
        done=tuple(str(d) for d in done), arrival_s=None if arr is None else float(arr),
        final=bool(final))
