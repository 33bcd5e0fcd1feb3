"""Mooncake trace replay: a JSONL trace becomes a workload of one-call tasks.

Each line of a Mooncake trace is one request::

    {"timestamp": 1200, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}

``timestamp`` is in milliseconds; ``hash_ids`` has one id per 512-token block of the prompt,
and the ids are chained (a block's id depends on every block before it), so two requests that
start with the same ids start with the same tokens.

**Prefix identity.**  The engine knows one kind of shareable prefix, an
:class:`~topas.workflow.model.Agent` (a name and ``prefix_tokens``, the paper's ``l_a``).  The
reader maps hash chains onto agents:

* for each request, its *shared chain* is the longest leading run of hash ids that at least
  one other request of the trace (after the size filter below) also starts with;
* every distinct shared chain becomes one agent, named ``hash:<first>..<last>/<blocks>``, with
  ``prefix_tokens = 512 * blocks``, capped at ``input_length - 1`` of its shortest member so
  every request keeps at least one token of dynamic prompt;
* the rest of the prompt (``input_length - prefix_tokens``) is the request's dynamic prompt;
* requests that share no leading block with any other request go to one agent ``unshared``
  with a 0-token prefix.

A request shares exactly one prefix with the engine: two chains that themselves share a
shorter leading run (for example every request that starts with block 0) are two agents, so
the shorter common part is not modelled as shared between them.  This keeps one prefix
mechanism in the engine; docs/workloads.md discusses the approximation.

Every request is its own task (one stage, one call); arrivals replay the trace's timestamps,
rescaled in time when a rate other than the trace's own is asked for.  Sampling is
deterministic (a trace is data), so ``rng`` is not used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from topas.workflow.model import Agent, Call, Stage, Task
from topas.workloads import FILE_LOADERS, check_rate
from topas.workloads.dists import SpecError

BLOCK_TOKENS = 512  #: tokens per hash block in Mooncake traces
UNSHARED = "unshared"


@dataclass(frozen=True, slots=True)
class TraceRequest:
    line: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def int_field(v: object, name: str, where: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise SpecError(f"{where}: field {name!r} must be an integer >= {minimum}, got {v!r}")
    return v


def json_objects(path: str | Path) -> Iterator[tuple[int, str, dict]]:
    """``(line number, "FILE line N", object)`` for every non-empty line of a JSONL file;
    a missing file, a directory, a line that is not a JSON object (binary files included)
    raises :class:`SpecError` naming the file and line."""
    p = Path(path)
    if not p.exists():
        raise SpecError(f"{p}: does not exist")
    if not p.is_file():
        raise SpecError(f"{p}: is not a file")
    # undecodable bytes become U+FFFD: a binary file fails as invalid JSON on a named line
    with p.open(encoding="utf-8", errors="replace") as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p} line {ln}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise SpecError(f"{where}: not valid JSON ({e.msg})") from None
            except RecursionError:
                raise SpecError(f"{where}: nested too deeply") from None
            if not isinstance(d, dict):
                raise SpecError(f"{where}: must be a JSON object, got {type(d).__name__}")
            yield ln, where, d


def read_mooncake(path: str | Path) -> list[TraceRequest]:
    """Every request of a Mooncake JSONL trace, in file order; a malformed line raises
    :class:`SpecError` naming the file, the line number and the problem."""
    out: list[TraceRequest] = []
    last_ts = -math.inf
    for ln, where, d in json_objects(path):
        for k in ("timestamp", "input_length", "output_length", "hash_ids"):
            if k not in d:
                raise SpecError(f"{where}: field {k!r} is missing")
        ts = d["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not ts >= 0:
            raise SpecError(f"{where}: field 'timestamp' must be a number >= 0 (ms), got {ts!r}")
        if ts < last_ts:
            raise SpecError(f"{where}: field 'timestamp' goes back in time ({ts} < {last_ts})")
        last_ts = ts
        n_in = int_field(d["input_length"], "input_length", where, 1)
        n_out = int_field(d["output_length"], "output_length", where, 1)
        ids = d["hash_ids"]
        if not isinstance(ids, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in ids
        ):
            raise SpecError(f"{where}: field 'hash_ids' must be a list of integers")
        if len(ids) > -(-n_in // BLOCK_TOKENS):
            raise SpecError(
                f"{where}: field 'hash_ids' has {len(ids)} blocks, more than "
                f"the {n_in} input tokens fill at {BLOCK_TOKENS} per block"
            )
        out.append(TraceRequest(ln, float(ts), n_in, n_out, tuple(ids)))
    if not out:
        raise SpecError(f"{Path(path)}: has no requests")
    return out


def shared_chains(reqs: list[TraceRequest]) -> list[int]:
    """For each request, the number of leading hash blocks it shares with another request."""
    node_of: dict[tuple[int, int], int] = {}  # (parent node, hash id) -> trie node
    count: list[int] = []
    paths: list[list[int]] = []
    for r in reqs:
        node, path = -1, []
        for h in r.hash_ids:
            key = (node, h)
            nxt = node_of.get(key)
            if nxt is None:
                nxt = node_of[key] = len(count)
                count.append(0)
            count[nxt] += 1
            path.append(nxt)
            node = nxt
        paths.append(path)
    depth = []
    for path in paths:
        k = 0
        while k < len(path) and count[path[k]] >= 2:
            k += 1
        depth.append(k)
    return depth


def prefix_groups(
    reqs: list[TraceRequest], shortest: list[int]
) -> tuple[dict[str, int], list[str]]:
    """Agents (shared prefixes) of ``reqs`` by the hash-chain rule (:func:`shared_chains`):
    ``(prefix tokens per agent name, agent name per request)``.  A prefix is capped one
    token below the shortest prompt that uses it (``shortest[i]``: request ``i``'s, or its
    session's shortest), so every call keeps a dynamic prompt."""
    prefix: dict[str, int] = {UNSHARED: 0}
    chain_name: dict[tuple[int, ...], str] = {}
    agent_of: list[str] = []
    for r, k, low in zip(reqs, shared_chains(reqs), shortest):
        if k == 0:
            agent_of.append(UNSHARED)
            continue
        chain = r.hash_ids[:k]
        name = chain_name.get(chain)
        if name is None:
            name = f"hash:{chain[0]}..{chain[-1]}/{k}"
            if name in prefix:  # two chains with equal ends and length: keep names unique
                name = f"{name}#{len(chain_name)}"
            chain_name[chain] = name
            prefix[name] = BLOCK_TOKENS * k
        prefix[name] = min(prefix[name], low - 1)
        agent_of.append(name)
    return prefix, agent_of


@dataclass(frozen=True)
class MooncakeWorkload:
    """A Mooncake trace as a workload (satisfies the ``Workload`` protocol)."""

    name: str
    description: str
    agents: tuple[Agent, ...]
    default_rate: float
    default_tasks: int
    requests: tuple[TraceRequest, ...]
    agent_of: tuple[str, ...]  #: per request, its agent (prefix) name
    skipped: int = 0
    _prefix: dict[str, int] = field(default_factory=dict, repr=False)

    def tasks_of(self, n_tasks: int, rate: float) -> list[Task]:
        if n_tasks > len(self.requests):
            raise ValueError(f"tasks {n_tasks}: the trace has only {len(self.requests)} requests")
        check_rate(rate, n_tasks)
        t0 = self.requests[0].timestamp_ms
        stretch = self.default_rate / rate  # replaying at another rate rescales time
        tasks = []
        for i in range(n_tasks):
            r = self.requests[i]
            agent = self.agent_of[i]
            prompt = r.input_length - self._prefix[agent]
            stage = Stage("request", agent, (Call(prompt, r.output_length),), kind="request")
            tasks.append(
                Task(i, (r.timestamp_ms - t0) / 1000.0 * stretch, (stage,), workflow=self.name)
            )
        return tasks

    def sample(self, n_tasks: int, rate: float, rng: np.random.Generator) -> list[Task]:
        return self.tasks_of(n_tasks, rate)


def load_mooncake(
    path: str | Path, max_context_tokens: int | None = 32_768, default_tasks: int = 300
) -> MooncakeWorkload:
    """A Mooncake trace as a workload.  Requests whose prompt + output exceed
    ``max_context_tokens`` are skipped (the default is the default profile's KV budget, since
    such a request could never run there); ``None`` keeps every request."""
    p = Path(path)
    every = read_mooncake(p)
    reqs = [
        r
        for r in every
        if max_context_tokens is None or r.input_length + r.output_length <= max_context_tokens
    ]
    if not reqs:
        raise SpecError(f"{p}: no request fits max_context_tokens={max_context_tokens}")
    prefix, agent_of = prefix_groups(reqs, [r.input_length for r in reqs])
    used = dict.fromkeys(agent_of)
    agents = tuple(Agent(a, prefix[a]) for a in used)
    span_s = (reqs[-1].timestamp_ms - reqs[0].timestamp_ms) / 1000.0
    rate = (len(reqs) - 1) / span_s if span_s > 0 and len(reqs) > 1 else 1.0
    skipped = len(every) - len(reqs)
    desc = (
        f"Mooncake trace {p.name}: {len(reqs)} requests, {len(agents)} prefix groups from "
        f"hash chains, native rate {rate:.3g} req/s"
        + (f"; {skipped} requests over {max_context_tokens} tokens skipped" if skipped else "")
    )
    return MooncakeWorkload(
        name=f"mooncake:{p.stem}",
        description=desc,
        agents=agents,
        default_rate=rate,
        default_tasks=min(default_tasks, len(reqs)),
        requests=tuple(reqs),
        agent_of=tuple(agent_of),
        skipped=skipped,
        _prefix={a: prefix[a] for a in used},
    )


FILE_LOADERS[".jsonl"] = load_mooncake
