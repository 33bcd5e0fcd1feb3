"""The router service's backends and requests: backend URLs, prompt-size estimates, one
backend's view, and the errors a client gets."""

from __future__ import annotations

import http.client
import logging
import math
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict

from topas.engine.snapshot import Location, PrefixState
from topas.routing.base import ReplicaView

log = logging.getLogger("topas.router")

#: POST paths routed to a backend


ROUTED_PATHS = ("/v1/completions", "/v1/chat/completions")
#: largest request body accepted (bytes)
MAX_BODY_BYTES = 64 << 20
#: hop-by-hop headers (RFC 9110 7.6.1) and the ones the relay sets itself
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "server",
        "date",
    }
)


def _one_line(s: object, limit: int = 300) -> str:
    t = " ".join(str(s).split())
    return t if len(t) <= limit else t[: limit - 3] + "..."


def parse_backend_url(url: str) -> tuple[str, str, int, str]:
    """``http[s]://host[:port][/path]`` -> (scheme, host, port, path prefix without trailing
    slash); a one-line ValueError otherwise."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"backend {url!r}: empty URL")
    try:
        u = urllib.parse.urlsplit(url.strip())
        port = u.port
    except ValueError as e:
        raise ValueError(f"backend {url!r}: {_one_line(e)}") from None
    if u.scheme not in ("http", "https"):
        raise ValueError(
            f"backend {url!r}: scheme must be http or https (e.g. http://127.0.0.1:8001)"
        )
    if not u.hostname:
        raise ValueError(f"backend {url!r}: no host")
    if u.query or u.fragment or u.username or u.password:
        raise ValueError(f"backend {url!r}: no query, fragment or credentials allowed")
    path = u.path.rstrip("/")
    if path.endswith("/v1"):
        raise ValueError(f"backend {url!r}: give the server's base URL, without /v1")
    return u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80), path


def _chars(x: object) -> int:
    if isinstance(x, str):
        return len(x)
    if isinstance(x, list):
        return sum(_chars(p) for p in x)
    if isinstance(x, dict):  # a chat content part: {"type": "text", "text": ...}
        return _chars(x.get("text")) if isinstance(x.get("text"), str) else 0
    return 0


def estimate_prompt_tokens(body: dict) -> int:
    """Prompt tokens of a completions / chat body: exact for token-id prompts, else
    ``ceil(characters / 4)`` (see the module docstring)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if all(isinstance(p, list) for p in prompt):
            return sum(len(p) for p in prompt)
    if prompt is not None:
        return math.ceil(_chars(prompt) / 4)
    msgs = body.get("messages")
    if isinstance(msgs, list):
        n = sum(_chars(m.get("content")) for m in msgs if isinstance(m, dict))
        return math.ceil(n / 4)
    return 0


class BadRequest(ValueError):
    """A client mistake: 400 (or ``status``) with a one-line message naming the field."""

    def __init__(self, message: str, param: str = "", status: int = 400) -> None:
        super().__init__(message)
        self.param = param or message.split(":", 1)[0]
        self.status = status


class Backend:
    """One backend server and the service's bookkeeping about it (guarded by the service's
    lock)."""

    def __init__(self, index: int, url: str, kv_budget_tokens: int) -> None:
        self.index = index
        self.url = url.strip().rstrip("/")
        self.scheme, self.host, self.port, self.path = parse_backend_url(url)
        self.kv_budget_tokens = kv_budget_tokens
        self.in_flight = 0
        self.in_flight_tokens = 0
        self.routed = 0
        self.errors = 0
        self.down_until = 0.0
        #: ("p", agent) / ("c", task_id, stage) -> tokens, least recently sent first
        self.lru: OrderedDict[tuple, int] = OrderedDict()
        self.lru_tokens = 0
        self.prefixes: dict[str, PrefixState] = {}
        self.contexts: dict[tuple[int, str], int] = {}

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def touch(self, key: tuple, tokens: int, now: float) -> None:
        """Record that ``key`` (a prefix or a context) was sent here; evict the least recently
        sent entries beyond the KV budget (never the one just sent)."""
        old = self.lru.pop(key, None)
        if old is not None:
            self.lru_tokens -= old
        self.lru[key] = tokens
        self.lru_tokens += tokens
        if key[0] == "p":
            p = self.prefixes.get(key[1])
            if p is None:
                p = self.prefixes[key[1]] = PrefixState(key[1], tokens)
            p.tokens, p.location, p.ready, p.last_used_s = tokens, Location.DEVICE, True, now
        else:
            self.contexts[(key[1], key[2])] = tokens
        while self.lru_tokens > self.kv_budget_tokens and len(self.lru) > 1:
            k, t = self.lru.popitem(last=False)
            self.lru_tokens -= t
            if k[0] == "p":
                self.prefixes.pop(k[1], None)
            else:
                self.contexts.pop((k[1], k[2]), None)

    def view(self, cost) -> ReplicaView:
        return ReplicaView(
            self.index,
            self.in_flight,
            0,
            self.in_flight_tokens,
            self.lru_tokens + self.in_flight_tokens,
            self.kv_budget_tokens,
            self.prefixes,
            lambda key: self.contexts.get(key, 0),
            cost,
        )

    def stats(self, now: float) -> dict:
        return {
            "index": self.index,
            "url": self.url,
            "routed": self.routed,
            "in_flight": self.in_flight,
            "errors": self.errors,
            "down": now < self.down_until,
            "cached_agents": sorted(self.prefixes),
            "cached_tokens": self.lru_tokens,
        }


class _Placed:
    """What :meth:`RouterService.place` decided for one request."""

    __slots__ = ("backend", "tokens", "agent")

    def __init__(self, backend: Backend, tokens: int, agent: str = "") -> None:
        self.backend, self.tokens, self.agent = backend, tokens, agent
