"""Generate the shipped agent-session example trace (seeded, deterministic).

    python scripts/make_agent_session_example.py            # writes the package's copy
    python scripts/make_agent_session_example.py --check    # exits 1 if it would change it

The trace is synthetic (no real agent ran): 40 sessions of two tool-using agents, one JSON
line per LLM round in the agent-session format of ``topas.workloads.sessions``.  Every number
below is our choice, in the ranges of the built-in ``react`` workload:

* sessions arrive as a Poisson process of 0.05 sessions/s (``timestamp`` on first rounds);
* agent ``coder`` (system prompt 3,200 tokens) or ``researcher`` (2,400), 60 / 40 %;
* rounds per session LogNormal(median 6, sigma 0.6) capped [1, 30];
* the first round appends the user's task, LogNormal(median 400, sigma 0.5) tokens; each
  later round appends the previous tool result, LogNormal(median 350, sigma 0.9) [10, 4,000];
* outputs LogNormal(median 160, sigma 0.6) [20, 1,500] tokens;
* tool latency after a round: 70 % Uniform(0.1, 1.5) s, 30 % LogNormal(median 5 s,
  sigma 0.6); none after the last round;
* a round reuses the whole previous context (``prefix_tokens`` = previous prefix + appended
  + output) until it would pass 20,000 tokens; then the agent drops old turns and keeps the
  system prompt plus the most recent 12,000 tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "src/topas/workloads/data/agent_sessions_example.jsonl"
SEED = 20261203
N_SESSIONS = 40
AGENTS = {"coder": 3200, "researcher": 2400}
CONTEXT_LIMIT, KEEP = 20_000, 12_000


def lognormal(rng, median, sigma, lo=None, hi=None) -> float:
    x = median * float(np.exp(sigma * rng.standard_normal()))
    return min(max(x, lo if lo is not None else x), hi if hi is not None else x)


def generate() -> str:
    rng = np.random.default_rng(SEED)
    lines = []
    t = 0.0
    for s in range(N_SESSIONS):
        if s:
            t += float(rng.exponential(1 / 0.05))
        agent = "coder" if rng.random() < 0.6 else "researcher"
        n = int(round(lognormal(rng, 6, 0.6, 1, 30)))
        prefix = AGENTS[agent]
        appended = int(round(lognormal(rng, 400, 0.5, 20)))
        for k in range(n):
            out = int(round(lognormal(rng, 160, 0.6, 20, 1500)))
            last = k == n - 1
            if last:
                tool = 0.0
            elif rng.random() < 0.7:
                tool = float(rng.uniform(0.1, 1.5))
            else:
                tool = lognormal(rng, 5.0, 0.6)
            rec = {"session_id": f"s{s:02d}", "round": k, "agent": agent,
                   "prefix_tokens": prefix, "appended_tokens": appended,
                   "output_tokens": out, "tool_latency_s": round(tool, 3)}
            if k == 0:
                rec = {"timestamp": round(t, 3), **rec}
            lines.append(json.dumps(rec, separators=(", ", ": ")))
            prefix = prefix + appended + out
            appended = int(round(lognormal(rng, 350, 0.9, 10, 4000)))
            if prefix + appended > CONTEXT_LIMIT:
                prefix = AGENTS[agent] + KEEP
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped copy only")
    text = generate()
    if ap.parse_args().check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'DIFFERS'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text):,} bytes, {text.count(chr(10))} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
