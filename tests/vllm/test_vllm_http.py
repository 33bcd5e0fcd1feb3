"""One HTTP round trip: an OpenAI-compatible vLLM server on 127.0.0.1 with
``--scheduler-cls`` = TopasScheduler, a tagged request through the completions API, and the
server stopped by its PID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from http_helpers import free_port, stop_server, wait_healthy

from topas.integrations.vllm.client import xargs

pytestmark = pytest.mark.vllm


def test_tagged_request_through_openai_api(tiny_model, tmp_path):
    port = free_port()
    env = dict(os.environ, TOPAS_POLICY="lpm", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    log = open(tmp_path / "server.log", "w")
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
            str(8 << 20),
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
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, tmp_path / "server.log", time.time() + 240)
        body = {
            "model": tiny_model,
            "prompt": list(range(20, 300)),
            "max_tokens": 6,
            "min_tokens": 6,
            "ignore_eos": True,
            "temperature": 0.0,
            "vllm_xargs": xargs(
                task="http-1",
                stage="plan",
                agent="architect",
                prefix_tokens=256,
                dag=[("plan", "architect", "plan", ())],
            ),
        }
        req = urllib.request.Request(
            base + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            resp = json.loads(r.read())
        assert resp["usage"]["completion_tokens"] == 6
        assert resp["usage"]["prompt_tokens"] == 280
        text = (tmp_path / "server.log").read_text()
        assert "topas scheduler: policy lpm" in text  # our scheduler, under TOPAS_POLICY
    finally:
        stop_server(proc, log)  # by its PID
    assert proc.returncode is not None
