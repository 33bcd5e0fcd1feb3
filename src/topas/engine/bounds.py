"""The engine's context-credit rule and the lower bound it implies for a task's JCT (used by
the simulator, the vLLM driver and the workload tools alike)."""

from __future__ import annotations

from collections.abc import Mapping

from topas.engine.cost import CostModel
from topas.workflow.model import Agent, Task

__all__ = ["context_credit", "task_lower_bound"]


def context_credit(computed_tokens: int, prompt_tokens: int, block_size: int) -> int:
    """Dynamic prompt tokens the next call of a stage skips when it finds the previous call's
    context (held or cached): only tokens whose KV was computed, only whole blocks, and at
    least one prompt token is left to prefill (vLLM's ``get_computed_blocks`` caps the hit
    at ``num_tokens - 1`` and matches full blocks only; blocks hold only computed tokens)."""
    n = min(computed_tokens, prompt_tokens - 1)
    if n <= 0:
        return 0
    return n - n % block_size if block_size > 1 else n


def task_lower_bound(
    task: Task,
    agents: Mapping[str, Agent],
    cost: CostModel,
    chunk_tokens: int = 8192,
    block_size: int = 1,
) -> float:
    """The task's critical path on an empty engine: every call alone, its agent prefix already
    resident and the previous call's context of its stage (for a first call: the shared
    tokens of the stage it ``shares_with``) still cached (credited by the engine's rule,
    :func:`context_credit`, for ``block_size``); tool delays included.
    No schedule can finish the task sooner."""
    finish: dict[str, float] = {}
    for k in task.topological_order():
        s = task.stages[k]
        t = max((finish[d] for d in s.deps), default=0.0)
        prefix = agents[s.agent].prefix_tokens
        # a conversation's first call finds the agent's previous stage's shared tokens
        prev_computed = s.shared_tokens if s.shares_with else 0
        for j, c in enumerate(s.calls):
            cached = context_credit(prev_computed, c.prompt_tokens, block_size)
            # a cached context saves prefill FLOPs but adds attention over it; in the
            # memory-bound regime that can cost more than prefilling it again, so the bound
            # takes whichever is shorter (the engine credits exactly ``cached`` or nothing)
            t += min(
                cost.call_time_alone(
                    c.prompt_tokens - cached, c.output_tokens, prefix + cached, chunk_tokens
                ),
                cost.call_time_alone(c.prompt_tokens, c.output_tokens, prefix, chunk_tokens),
            )
            if j < len(s.calls) - 1:
                t += c.tool_delay_s
            prev_computed = c.prompt_tokens + c.output_tokens - 1
        finish[s.name] = t
    return max(finish.values())
