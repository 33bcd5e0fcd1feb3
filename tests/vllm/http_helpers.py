"""Small HTTP helpers shared by the tests that start vLLM OpenAI servers on 127.0.0.1."""

from __future__ import annotations

import socket
import urllib.request


def free_port() -> int:
    """A TCP port nobody listens on now (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """(status, body) of a GET."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def wait_healthy(proc, base: str, log_path, deadline: float) -> None:
    """Poll ``base``/health until 200; fail with the server log's tail if ``proc`` exits,
    or when ``time.time()`` passes ``deadline``."""
    import time
    from pathlib import Path

    while True:
        assert proc.poll() is None, Path(log_path).read_text()[-3000:]
        try:
            if http_get(base + "/health")[0] == 200:
                return
        except OSError:
            pass
        assert time.time() < deadline, f"{base} did not become healthy in time"
        time.sleep(1.0)


def stop_server(proc, log) -> None:
    """Stop a server by its PID: SIGTERM, then SIGKILL after 30 s; close its log."""
    import os
    import signal
    import subprocess

    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    log.close()
