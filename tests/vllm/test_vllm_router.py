"""The HTTP router service in front of two real vLLM OpenAI servers (tiny model, CPU, prefix
caching on): a small ReAct-like workflow of two agents with distinct 256-token prefixes, each
agent's calls placed by the router, and the prefix-cache hits read from each server's
Prometheus ``/metrics``.

Task-affinity, prefix-affinity and the topas router keep each agent's task on one server, so every call after
the first reuses its prefix and its previous round's prompt there; round-robin, with the same
workflow shape (fresh token ids), scatters the rounds and gets fewer hit tokens.

Run alone with ``-s`` to see the measured hit tokens per router::

    VLLM_ENABLE_V1_MULTIPROCESSING=0 <vllm venv>/bin/python -m pytest -m vllm \\
        tests/vllm/test_vllm_router.py -p no:cacheprovider -o addopts="" -q -s
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from http_helpers import free_port, http_get, stop_server, wait_healthy

from topas.integrations.router_service import RouterService
from topas.integrations.vllm.tags import make_tag

pytestmark = pytest.mark.vllm

PREFIX = 256  #: tokens of each agent's prefix (2 blocks of 128)
ROUNDS = 4  #: calls of each task's ReAct stage; round r's prompt = prefix + 64 + 96 r tokens
AGENTS = ("coder", "critic")
VOCAB = 4096
#: 8 MiB of KV per server = 4096 tokens = 32 blocks of 128 (conftest.KV_BYTES)
KV_BYTES = 8 << 20


def _start(tiny_model: str, log_path) -> tuple[subprocess.Popen, str, object]:
    port = free_port()
    # one OpenMP thread each and no core binding: the two servers share the machine's cores
    env = dict(
        os.environ,
        TOPAS_POLICY="fcfs",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        OMP_NUM_THREADS="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
    )
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            tiny_model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(KV_BYTES),
            "--max-model-len",
            "2048",
            "--enable-prefix-caching",
            "--scheduler-cls",
            "topas.integrations.vllm.scheduler.TopasScheduler",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    return proc, f"http://127.0.0.1:{port}", log


def _prefix_hits(base: str) -> tuple[float, float]:
    """(hit tokens, queried tokens) so far: vLLM v1's ``vllm:prefix_cache_hits`` /
    ``vllm:prefix_cache_queries`` counters (``_total`` in the exposition), summed over
    label sets."""
    text = http_get(base + "/metrics", timeout=10)[1].decode()
    out = []
    for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
        vals = re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$", text, re.M)
        assert vals, f"{name} not in {base}/metrics"
        out.append(sum(float(v) for v in vals))
    return out[0], out[1]


def _workflow(svc: RouterService, model: str, seed: int) -> dict[str, list[int]]:
    """Each agent runs one task of one ReAct stage, its rounds one after another (a ReAct
    loop waits for each answer); the tasks run one after the other.  Token ids come from
    ``seed``, so each router's run shares no prefix with another's."""
    rng = random.Random(seed)
    where: dict[str, list[int]] = {}
    for agent in AGENTS:
        prefix = [rng.randrange(10, VOCAB) for _ in range(PREFIX)]
        history = [rng.randrange(10, VOCAB) for _ in range(64 + 96 * (ROUNDS - 1))]
        task = f"{agent}-{seed}"
        for r in range(ROUNDS):
            prompt = prefix + history[: 64 + 96 * r]  # the stage's prompt grows each round
            body = {
                "model": model,
                "prompt": prompt,
                "max_tokens": 4,
                "min_tokens": 4,
                "ignore_eos": True,
                "temperature": 0.0,
                "vllm_xargs": make_tag(
                    task=task,
                    stage="react",
                    agent=agent,
                    prefix_tokens=PREFIX,
                    round_index=r,
                    dag=[("react", agent, "react", ())],
                ),
            }
            req = urllib.request.Request(
                svc.url + "/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=120) as resp:
                out = json.loads(resp.read())
                where.setdefault(agent, []).append(int(resp.headers["X-Topas-Backend"]))
            assert out["usage"]["prompt_tokens"] == len(prompt)
            assert out["usage"]["completion_tokens"] == 4
    return where


def test_router_service_keeps_prefixes_where_they_are_cached(tiny_model, tmp_path):
    servers = [_start(tiny_model, tmp_path / f"server{i}.log") for i in range(2)]  # together
    try:
        deadline = time.time() + 240
        for i, (proc, base, _) in enumerate(servers):
            wait_healthy(proc, base, tmp_path / f"server{i}.log", deadline)
        bases = [base for _, base, _ in servers]
        hits: dict[str, float] = {}
        for seed, name in enumerate(("task-affinity", "prefix-affinity", "topas", "round-robin")):
            before = [_prefix_hits(b) for b in bases]
            with RouterService(
                bases, router=name, profile="cpu/tiny-llama", kv_budget_tokens=KV_BYTES // 2048
            ) as svc:
                assert http_get(svc.url + "/health")[0] == 200
                where = _workflow(svc, tiny_model, seed + 1)
                stats = json.loads(http_get(svc.url + "/router/stats")[1])
            after = [_prefix_hits(b) for b in bases]
            per = [a[0] - b[0] for a, b in zip(after, before)]
            hits[name] = sum(per)
            print(
                f"\n{name}: placement {where}, prefix-cache hit tokens per server {per} "
                f"(queried {[a[1] - b[1] for a, b in zip(after, before)]})"
            )
            assert stats["routed"] == len(AGENTS) * ROUNDS and stats["errors"] == 0
            if name == "round-robin":
                assert all(w == [0, 1] * (ROUNDS // 2) for w in where.values())
                continue
            homes = {agent: set(w) for agent, w in where.items()}
            assert all(len(h) == 1 for h in homes.values()), where  # one server per agent
            assert homes["coder"] != homes["critic"], where  # the two tasks spread
            for agent, (rid,) in homes.items():
                assert per[rid] > 0, (agent, per)  # its repeated prefix hit there
            # rounds 1..3 of each agent hit prefix + whole blocks of the previous prompt
            assert hits[name] >= len(AGENTS) * (ROUNDS - 1) * PREFIX, per
        print(f"hit tokens by router: {hits}")
        assert hits["task-affinity"] > hits["round-robin"]
        assert hits["prefix-affinity"] > hits["round-robin"]
        assert hits["topas"] > hits["round-robin"]
    finally:
        for proc, _, log in servers:
            stop_server(proc, log)
