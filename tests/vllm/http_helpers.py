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
