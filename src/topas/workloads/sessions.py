"""Multi-turn sessions: Mooncake traces grouped into sessions, and agent-session traces.

Both produce one task per session: one stage (kind ``session``) whose calls are the session's
LLM rounds in order, each round's tool delay the time until the next round (think or tool
time), so the engine's held context of a stage (the conversation so far) is what a round
continues from.

**Mooncake sessions** (``--workload sessions:PATH``).  A Mooncake trace has no session ids;
its hash chains show which request continues which.  The rule, applied to the requests in
file (= time) order after the size filter of :func:`~topas.workloads.mooncake.load_mooncake`:

* a round's *complete chain* is its first ``input_length // 512`` hash ids (the last block of
  a prompt that is not a multiple of 512 tokens is partial: its id changes once the next turn
  appends to it);
* a request continues a session when that session's latest round has a complete chain of at
  least ``min_blocks`` (2) blocks that is a leading run of the request's hash ids, and the
  request's prompt is longer than that round's (a new turn appends to the conversation);
* among such sessions the longest matched chain wins, ties going to the most recent latest
  round; a request that continues none starts a new session.  Only a session's latest round
  can be continued, so sessions are chains: of two requests extending the same round, the
  second starts a session of its own.

``min_blocks = 2`` keeps a one-block common start (the system prompt block 0 that almost
every conversation request begins with) from chaining unrelated conversations.  Each session
becomes one task arriving at its first round's timestamp; round ``k``'s tool delay is the
trace gap ``t_{k+1} - t_k`` (so a round becomes ready that long after the previous one
*finishes*: the gap in the trace also contains the original response time, which the trace
does not record).  Replaying at another rate rescales session arrivals, not think times.
A session's agent (its shareable prefix) comes from its first round, by the hash-chain rule of
:mod:`topas.workloads.mooncake` applied across sessions' first rounds; the rest of each round's
prompt is its dynamic prompt.

**Agent-session traces** (``--workload agent-trace:PATH``, or any ``.jsonl`` file whose first
record has ``session_id``): one JSON object per LLM round::

    {"session_id": "s7", "prefix_tokens": 3412, "appended_tokens": 180,
     "output_tokens": 95, "tool_latency_s": 1.8}

optional ``agent`` (name of the static prefix the session runs under, default ``agent``),
``round`` (order within the session, default file order) and ``timestamp`` (seconds; on a
session's first round it is the session's arrival).  ``prefix_tokens`` is the context the
round reuses from before (system prompt + conversation so far), ``appended_tokens`` the new
prompt tokens (user message, tool result), ``tool_latency_s`` the tool time after the round.
An agent's static prefix is the smallest ``prefix_tokens`` of its sessions' first rounds;
each round's dynamic prompt is ``prefix_tokens + appended_tokens`` minus that.  With
timestamps on every session's first round they are replayed (rescaled at another rate),
otherwise arrivals are Poisson at the run's rate.  The package ships a generated example,
``agent-sessions`` (``scripts/make_agent_session_example.py``, seeded).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from topas.workflow.model import Agent, Call, Stage, Task
from topas.workloads import FILE_LOADERS, SCHEME_LOADERS, check_rate, poisson_arrivals, register
from topas.workloads.dists import SpecError
from topas.workloads.mooncake import (
    BLOCK_TOKENS,
    TraceRequest,
    int_field,
    json_objects,
    load_mooncake,
    prefix_groups,
    read_mooncake,
)

#: a session continues only from a latest round with at least this many complete blocks
MIN_BLOCKS = 2
DATA_DIR = Path(__file__).with_name("data")
EXAMPLE = DATA_DIR / "agent_sessions_example.jsonl"


def group_sessions(
    reqs: list[TraceRequest] | tuple[TraceRequest, ...], min_blocks: int = MIN_BLOCKS
) -> list[list[int]]:
    """Sessions as lists of request indices (rounds in order), by the rule in the module
    docstring; sessions are ordered by their first round."""
    if min_blocks < 1:
        raise ValueError(f"min_blocks {min_blocks}: must be >= 1")
    child: dict[tuple[int, int], int] = {}  # trie of complete chains: (node, hash id) -> node
    tails_at: dict[int, list[int]] = {}  # node -> sessions whose latest round's chain ends here
    sessions: list[list[int]] = []
    tail_node: list[int] = []
    for j, r in enumerate(reqs):
        node, best = -1, -1
        for depth, h in enumerate(r.hash_ids, 1):
            node = child.get((node, h), -2)
            if node == -2:
                break
            if depth < min_blocks:
                continue
            cands = [
                s
                for s in tails_at.get(node, ())
                if r.input_length > reqs[sessions[s][-1]].input_length
            ]
            if cands:  # deeper matches overwrite shallower ones; ties: most recent tail
                best = max(cands, key=lambda s: sessions[s][-1])
        if best >= 0:
            s = best
            tails_at[tail_node[s]].remove(s)
            sessions[s].append(j)
        else:
            s = len(sessions)
            sessions.append([j])
            tail_node.append(-1)
        chain = r.hash_ids[: r.input_length // BLOCK_TOKENS]
        node = -1
        for h in chain:
            key = (node, h)
            nxt = child.get(key)
            if nxt is None:
                nxt = child[key] = len(child)
            node = nxt
        if len(chain) >= min_blocks:
            tails_at.setdefault(node, []).append(s)
            tail_node[s] = node
        else:  # too short to be continued: the session ends here
            tail_node[s] = -1
    return sessions


@dataclass(frozen=True)
class SessionSpec:
    """One session: arrival (s, from the start of the trace), agent and its rounds."""

    arrival_s: float
    agent: str
    calls: tuple[Call, ...]


@dataclass(frozen=True)
class SessionWorkload:
    """Sessions as one-stage multi-call tasks (satisfies the ``Workload`` protocol).

    ``timed`` -- session arrivals come from the trace (replayed, rescaled at another rate);
    otherwise they are Poisson at the run's rate.
    """

    name: str
    description: str
    agents: tuple[Agent, ...]
    default_rate: float
    default_tasks: int
    sessions: tuple[SessionSpec, ...]
    timed: bool = True

    def sample(self, n_tasks: int, rate: float, rng: np.random.Generator) -> list[Task]:
        if n_tasks > len(self.sessions):
            raise ValueError(f"tasks {n_tasks}: the trace has only {len(self.sessions)} sessions")
        check_rate(rate, n_tasks)
        if self.timed:
            t0 = self.sessions[0].arrival_s
            stretch = self.default_rate / rate
            arrivals = [(s.arrival_s - t0) * stretch for s in self.sessions[:n_tasks]]
        else:
            arrivals = poisson_arrivals(n_tasks, rate, rng).tolist()
        return [
            Task(
                i,
                float(arrivals[i]),
                (Stage("session", s.agent, s.calls, kind="session"),),
                workflow=self.name,
            )
            for i, s in enumerate(self.sessions[:n_tasks])
        ]


def _rate(arrivals: list[float]) -> float:
    span = arrivals[-1] - arrivals[0] if arrivals else 0.0
    return (len(arrivals) - 1) / span if span > 0 and len(arrivals) > 1 else 1.0


# ---------------------------------------------------------------------------------------------
# Mooncake traces grouped into sessions
# ---------------------------------------------------------------------------------------------
def load_mooncake_sessions(
    path: str | Path,
    max_context_tokens: int | None = 32_768,
    min_blocks: int = MIN_BLOCKS,
    default_tasks: int = 100,
) -> SessionWorkload:
    """A Mooncake trace grouped into multi-turn sessions (rule in the module docstring);
    requests over ``max_context_tokens`` are dropped first, as in ``load_mooncake``."""
    p = Path(path)
    every = read_mooncake(p)
    reqs = [
        r
        for r in every
        if max_context_tokens is None or r.input_length + r.output_length <= max_context_tokens
    ]
    if not reqs:
        raise SpecError(f"{p}: no request fits max_context_tokens={max_context_tokens}")
    groups = group_sessions(reqs, min_blocks)
    firsts = [reqs[g[0]] for g in groups]
    prefix, agent_of = prefix_groups(firsts, [min(reqs[j].input_length for j in g) for g in groups])
    specs = []
    for g, agent in zip(groups, agent_of):
        rs = [reqs[j] for j in g]
        calls = tuple(
            Call(
                r.input_length - prefix[agent],
                r.output_length,
                (rs[k + 1].timestamp_ms - r.timestamp_ms) / 1000.0 if k + 1 < len(rs) else 0.0,
            )
            for k, r in enumerate(rs)
        )
        specs.append(SessionSpec(rs[0].timestamp_ms / 1000.0, agent, calls))
    used = dict.fromkeys(agent_of)
    rate = _rate([s.arrival_s for s in specs])
    n_multi = sum(len(g) > 1 for g in groups)
    skipped = len(every) - len(reqs)
    desc = (
        f"Mooncake trace {p.name} as sessions: {len(reqs)} requests in {len(groups)} "
        f"sessions ({n_multi} with 2+ rounds, at most {max(len(g) for g in groups)}), "
        f"{len(used)} prefix groups, native rate {rate:.3g} sessions/s"
        + (f"; {skipped} requests over {max_context_tokens} tokens skipped" if skipped else "")
    )
    return SessionWorkload(
        f"mooncake-sessions:{p.stem}",
        desc,
        tuple(Agent(a, prefix[a]) for a in used),
        rate,
        min(default_tasks, len(specs)),
        tuple(specs),
        timed=True,
    )


# ---------------------------------------------------------------------------------------------
# Agent-session traces (one JSON line per LLM round)
# ---------------------------------------------------------------------------------------------
_AT_REQ = ("session_id", "prefix_tokens", "appended_tokens", "output_tokens")
_AT_OPT = ("tool_latency_s", "agent", "round", "timestamp")


def _int(d: dict, k: str, where: str, minimum: int) -> int:
    return int_field(d[k], k, where, minimum)


def _num(d: dict, k: str, where: str) -> float:
    v = d[k]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecError(f"{where}: field {k!r} must be a number >= 0, got {v!r}")
    return float(v)


def read_agent_trace(path: str | Path) -> dict[str, list[dict]]:
    """Rounds per session (in first-appearance order of sessions, rounds in order), each a
    dict of the validated fields plus ``line``; errors name the file, line and field."""
    p = Path(path)
    out: dict[str, list[dict]] = {}
    for ln, where, d in json_objects(p):
        for k in _AT_REQ:
            if k not in d:
                raise SpecError(f"{where}: field {k!r} is missing")
        extra = sorted(k for k in d if k not in _AT_REQ + _AT_OPT)
        if extra:
            raise SpecError(
                f"{where}: unknown field(s) {extra} (known: {sorted(_AT_REQ + _AT_OPT)})"
            )
        sid = d["session_id"]
        if isinstance(sid, bool) or not isinstance(sid, (str, int)) or sid == "":
            raise SpecError(
                f"{where}: field 'session_id' must be a string or an integer, got {sid!r}"
            )
        agent = d.get("agent", "agent")
        if not isinstance(agent, str) or not agent:
            raise SpecError(f"{where}: field 'agent' must be a non-empty string, got {agent!r}")
        rec = {
            "line": ln,
            "agent": agent,
            "prefix": _int(d, "prefix_tokens", where, 0),
            "appended": _int(d, "appended_tokens", where, 1),
            "output": _int(d, "output_tokens", where, 1),
            "tool": _num(d, "tool_latency_s", where) if "tool_latency_s" in d else 0.0,
            "round": _int(d, "round", where, 0) if "round" in d else None,
            "timestamp": _num(d, "timestamp", where) if "timestamp" in d else None,
        }
        out.setdefault(str(sid), []).append(rec)
    if not out:
        raise SpecError(f"{p}: has no rounds")
    for sid, rounds in out.items():
        if any(r["round"] is not None for r in rounds):
            if any(r["round"] is None for r in rounds):
                raise SpecError(
                    f"{p} line {rounds[0]['line']}: session {sid!r}: give "
                    f"'round' on every round of the session or on none"
                )
            rounds.sort(key=lambda r: r["round"])
            seen = [r["round"] for r in rounds]
            if len(set(seen)) != len(seen):
                raise SpecError(f"{p}: session {sid!r}: round numbers repeat: {seen}")
        for a, b in zip(rounds, rounds[1:]):
            if b["agent"] != a["agent"]:
                raise SpecError(
                    f"{p} line {b['line']}: session {sid!r} changes agent "
                    f"({a['agent']!r} -> {b['agent']!r})"
                )
            if b["prefix"] > a["prefix"] + a["appended"] + a["output"]:
                raise SpecError(
                    f"{p} line {b['line']}: session {sid!r}: prefix_tokens {b['prefix']} is "
                    f"more than the previous round's whole context "
                    f"({a['prefix']} + {a['appended']} + {a['output']})"
                )
    return out


def load_agent_trace(
    path: str | Path, default_rate: float = 0.05, default_tasks: int = 100, name: str | None = None
) -> SessionWorkload:
    """An agent-session trace as a workload (format in the module docstring).
    ``default_rate`` applies only when the trace has no timestamps."""
    p = Path(path)
    sessions = read_agent_trace(p)
    static: dict[str, int] = {}
    for rounds in sessions.values():
        a = rounds[0]["agent"]
        static[a] = min(static.get(a, rounds[0]["prefix"]), rounds[0]["prefix"])
    firsts = [rounds[0]["timestamp"] for rounds in sessions.values()]
    timed = all(t is not None for t in firsts)
    order = list(sessions)
    if timed:
        order.sort(key=lambda s: sessions[s][0]["timestamp"])  # stable: file order on ties
    specs = []
    for sid in order:
        rounds = sessions[sid]
        a = rounds[0]["agent"]
        calls = tuple(
            Call(
                r["prefix"] + r["appended"] - static[a],
                r["output"],
                r["tool"] if k + 1 < len(rounds) else 0.0,
            )
            for k, r in enumerate(rounds)
        )
        specs.append(SessionSpec(rounds[0]["timestamp"] if timed else 0.0, a, calls))
    rate = _rate([s.arrival_s for s in specs]) if timed else default_rate
    n_rounds = sum(len(s.calls) for s in specs)
    desc = (
        f"agent-session trace {p.name}: {len(specs)} sessions, {n_rounds} rounds, "
        f"{len(static)} agents; "
        + (
            f"timestamps replayed (native rate {rate:.3g} sessions/s)"
            if timed
            else "Poisson arrivals"
        )
    )
    return SessionWorkload(
        name or f"agent-trace:{p.stem}",
        desc,
        tuple(Agent(a, t) for a, t in static.items()),
        rate,
        min(default_tasks, len(specs)),
        tuple(specs),
        timed=timed,
    )


def _is_agent_trace(p: Path) -> bool:
    try:
        with p.open() as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    return isinstance(d, dict) and "session_id" in d
    except (OSError, ValueError):
        return False
    return False


_plain_jsonl = FILE_LOADERS.get(".jsonl", load_mooncake)


def _load_jsonl(p: Path):
    """``.jsonl``: an agent-session trace when its first record has ``session_id``, else a
    Mooncake trace (one request per task, :mod:`topas.workloads.mooncake`)."""
    return load_agent_trace(p) if _is_agent_trace(p) else _plain_jsonl(p)


FILE_LOADERS[".jsonl"] = _load_jsonl
SCHEME_LOADERS["sessions"] = load_mooncake_sessions
SCHEME_LOADERS["agent-trace"] = load_agent_trace


@register("agent-sessions")
def _example() -> SessionWorkload:
    return load_agent_trace(EXAMPLE, name="agent-sessions")


def session_stats(wl: SessionWorkload) -> dict:
    """Sessions, multi-round sessions, rounds, the longest session and the median think
    time (s) of a session workload."""
    rounds = [len(s.calls) for s in wl.sessions]
    gaps = sorted(c.tool_delay_s for s in wl.sessions for c in s.calls[:-1])
    return {
        "sessions": len(rounds),
        "multi_round_sessions": sum(r > 1 for r in rounds),
        "rounds": sum(rounds),
        "rounds_in_multi_round": sum(r for r in rounds if r > 1),
        "max_rounds": max(rounds),
        "median_think_s": float(np.median(gaps)) if gaps else 0.0,
    }


if __name__ == "__main__":  # python -m topas.workloads.sessions NAME_OR_PATH ...
    import sys

    from topas.workloads import get_workload

    for arg in sys.argv[1:]:
        print(arg, session_stats(get_workload(arg)))
