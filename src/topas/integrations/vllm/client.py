"""Client side of the workflow tags, for OpenAI-client users.

    from openai import OpenAI
    from topas.integrations.vllm.client import tagged

    client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="none")
    client.completions.create(model=M, prompt=p, max_tokens=64,
        **tagged(task="run-17", stage="code", agent="engineer", prefix_tokens=1024,
                 dag=[("plan", "architect", "plan", ()), ("code", "engineer", "code", ("plan",))],
                 done=["plan"]))

``tagged`` returns ``{"extra_body": {"vllm_xargs": {...}}}``: the OpenAI Python client sends
``extra_body`` fields as top-level JSON, where vLLM reads ``vllm_xargs`` into
``SamplingParams.extra_args``.  With plain HTTP put the dict under ``"vllm_xargs"`` yourself
(:func:`xargs`).  The agent prefix must be the first ``prefix_tokens`` tokens of every prompt of
that agent, byte for byte, or the prefix cache cannot share it.
"""

from __future__ import annotations

from topas.integrations.vllm.tags import make_tag


def xargs(**tag) -> dict:
    """The ``vllm_xargs`` dict for one request (see :func:`topas.integrations.vllm.tags.make_tag`)."""
    return make_tag(**tag)


def tagged(**tag) -> dict:
    """Keyword arguments for ``client.completions.create`` / ``chat.completions.create``."""
    return {"extra_body": {"vllm_xargs": make_tag(**tag)}}
