"""Checks of a workload against an engine before a run: every task valid and every request
able to fit the KV budget on its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from topas.workflow.model import (
    MAX_TIME_S,
    Agent,
    Task,
    validate_fits,
    validate_task,
)


def validate_tasks(
    tasks: Sequence[Task], agents: Mapping[str, Agent], budget: int, block_size: int
) -> list[Task]:
    """Check every task against the agents and the KV budget; the tasks in arrival order."""
    for t in tasks:
        validate_task(t, agents)  # (a non-finite arrival time is a WorkflowError)
        if not abs(t.arrival_s) <= MAX_TIME_S:
            raise ValueError(
                f"task {t.task_id}: arrival time {t.arrival_s!r} s is beyond "
                f"{MAX_TIME_S:.0e} s, where simulated times lose precision "
                "(a rate too low?)"
            )
        validate_fits(t, agents, budget, block_size)
    if len({t.task_id for t in tasks}) != len(tasks):
        raise ValueError("tasks: task ids must be unique")
    return sorted(tasks, key=lambda t: (t.arrival_s, t.task_id))
