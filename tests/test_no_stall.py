"""No policy stalls on a valid workload (issue 12): a Mooncake-style replay whose prompts are
26-31k tokens of the 32k KV budget, some sharing their whole hash chain (so one prefix is
nearly the whole budget).  The flagship TOPAS once left the engine idle here
(``PolicyStalled``): its search reserves output headroom that no request could fit beside
such a prefix, where the engine admits a lone request with one block of headroom."""

from __future__ import annotations

import json
import random

import pytest

from topas.api import simulate
from topas.policies import list_policies


def big_prefix_trace(path, n: int = 35, seed: int = 4) -> None:
    rnd = random.Random(seed)
    chains: list[list[int]] = []
    nxt = 0
    with open(path, "w") as f:
        for i in range(n):
            if chains and rnd.random() < 0.3:
                ids = rnd.choice(chains)
            else:
                ids = list(range(nxt, nxt + rnd.randint(51, 61)))
                nxt += len(ids)
                chains.append(ids)
            f.write(
                json.dumps(
                    {
                        "timestamp": 1000 * i,
                        "input_length": 512 * len(ids) - rnd.randint(0, 500),
                        "output_length": rnd.choice([2, 8, 30, 300]),
                        "hash_ids": ids,
                    }
                )
                + "\n"
            )


@pytest.mark.parametrize("policy", [p.name for p in list_policies()])
def test_every_policy_completes_a_replay_of_budget_sized_prefixes(policy, tmp_path):
    path = tmp_path / "big.jsonl"
    big_prefix_trace(path)
    res = simulate(str(path), policy, n_tasks=35, seed=0)
    assert len(res.tasks) == 35
    assert all(t.jct_s >= t.lower_bound_s - 1e-6 for t in res.tasks)
