"""An OpenAI-compatible HTTP router in front of N backend servers (vLLM OpenAI servers, or any
server that speaks the completions API), placing each call with one of the pure routers of
:mod:`topas.routing` -- the same ones the simulator's cluster uses.

Standard library only (``http.server.ThreadingHTTPServer`` and ``http.client``).

Endpoints
---------
``POST /v1/completions``, ``POST /v1/chat/completions``
    The JSON body is read, its workflow tag taken from ``vllm_xargs`` (the ``topas_*`` keys of
    :mod:`topas.integrations.vllm.tags`; a request without ``topas_task`` is routed as an
    untagged task of its own), the router picks a backend, the body is forwarded to it byte for
    byte and the backend's status, headers and body are relayed back (``"stream": true``
    responses chunk by chunk, as they arrive).  The response carries ``X-Topas-Backend: i``.
``GET /health``
    200 when at least one backend answers its ``/health`` with 200, else 503.
``GET /v1/models``
    Proxied to the first backend not marked down.
``GET /router/stats``
    JSON: router name, per-backend routed / in-flight / error counts.

Bad input gets a 400 whose JSON body's ``error.message`` is one line naming the field and the
problem (``body: ...``, ``vllm_xargs: ...``, ``topas_round: ...``); a backend that cannot be
reached gives a 502 naming it, and is left out of routing for ``down_s`` seconds (unless every
backend is down).  A failed call is not retried on another backend (the router cannot know
whether the backend started it).

The view
--------
The service sees no engine state; like SGLang's router it keeps an approximate view from what
it sent (all under one lock):

* ``running`` = requests in flight on the backend (sent, response not finished); ``waiting`` =
  0; ``queued_prompt_tokens`` = the prompt tokens of the in-flight requests;
* ``prefixes``: the agents whose prefixes were sent to the backend recently (a
  :class:`~topas.engine.snapshot.PrefixState` at ``Location.DEVICE``), and ``context_tokens``:
  the last (task, stage) prompts sent there with their dynamic token counts.  Both live in one
  LRU per backend bounded by ``kv_budget_tokens`` (default: the profile's budget), as the
  backend's prefix cache would evict them;
* ``used_kv_tokens`` = the LRU's tokens + the in-flight prompt tokens;
* ``cost``: the cost model of ``profile`` (default :data:`topas.engine.cost.DEFAULT_PROFILE`);
* ``RouteRequest.home`` / ``context_at``: the backend of the task's first call / of the
  stage's previous call (kept for the ``max_tasks`` most recent tasks).

Prompt tokens: ``len(prompt)`` when the prompt is a list of token ids (summed over a batch of
lists); otherwise ``ceil(characters / 4)`` of the prompt strings or of the chat messages' text
(an estimate: the service has no tokenizer).  The dynamic part is that minus the tag's
``topas_prefix_tokens``.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from http.server import ThreadingHTTPServer

from topas.engine.cost import DEFAULT_PROFILE, get_profile
from topas.integrations.vllm.tags import TagError, parse_tag
from topas.routing import DEFAULT_ROUTER, make_router, parse_router_params
from topas.routing.base import ClusterView, Router, RouteRequest

__all__ = [
    "Backend",
    "RouterService",
    "estimate_prompt_tokens",
    "parse_backend_url",
    "parse_router_params",
]

log = logging.getLogger("topas.router")

#: POST paths routed to a backend
from topas.integrations.router_backend import (
    Backend,
    BadRequest,
    _one_line,
    _Placed,
    estimate_prompt_tokens,
    parse_backend_url,
)
from topas.integrations.router_http import _Handler


class RouterService:
    """The router service; usable in-process::

    svc = RouterService(["http://127.0.0.1:8001", "http://127.0.0.1:8002"],
                        router="task-affinity").start()
    ... POST svc.url + "/v1/completions" ...
    svc.stop()
    """

    def __init__(
        self,
        backends: list[str],
        router: str | Router = DEFAULT_ROUTER,
        router_params: dict | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        profile: str = DEFAULT_PROFILE,
        kv_budget_tokens: int | None = None,
        timeout_s: float = 600.0,
        down_s: float = 5.0,
        max_tasks: int = 65536,
    ) -> None:
        if not backends:
            raise ValueError("backends: give at least one backend URL")
        prof = get_profile(profile)
        self.cost = prof.cost_model()
        budget = prof.kv_budget_tokens if kv_budget_tokens is None else int(kv_budget_tokens)
        if budget < 1:
            raise ValueError(f"kv_budget_tokens {budget}: must be >= 1")
        self.backends = [Backend(i, u, budget) for i, u in enumerate(backends)]
        seen: dict[str, int] = {}
        for b in self.backends:
            key = f"{b.scheme}://{b.host}:{b.port}{b.path}"
            if key in seen:
                raise ValueError(f"backend {b.url!r}: same server as backend {seen[key]}")
            seen[key] = b.index
        self.router = (
            router if isinstance(router, Router) else make_router(router, **(router_params or {}))
        )
        if not (timeout_s > 0 and down_s >= 0 and max_tasks >= 1):
            raise ValueError(
                f"timeout_s {timeout_s} / down_s {down_s} / max_tasks "
                f"{max_tasks}: must be > 0 / >= 0 / >= 1"
            )
        self.timeout_s, self.down_s, self.max_tasks = float(timeout_s), float(down_s), max_tasks
        self.host, self.port = host, port
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.routed = 0
        self.bad_requests = 0
        self._task_ids: OrderedDict[str, tuple[int, float]] = OrderedDict()  # tag -> (id, t)
        self._next_task = 0
        self._home: dict[int, int] = {}
        self._where: dict[tuple[int, str], int] = {}
        # agent -> (output tokens, answers) from the backends' `usage.completion_tokens`:
        # the routers' expected output length of that agent's next call
        self._out: dict[str, tuple[int, int]] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> RouterService:
        """Bind and serve in a daemon thread; returns self (``.url`` is then set)."""
        self._bind()
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="topas-router", daemon=True
        )
        self._thread.start()
        return self

    def _bind(self) -> None:
        service = self

        class Handler(_Handler):
            svc = service

        try:
            self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        except OSError as e:
            raise ValueError(
                f"--host {self.host} --port {self.port}: cannot listen ({e.strerror or e})"
            ) from None
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    def serve_forever(self) -> None:
        """Bind and serve in this thread until :meth:`stop` or KeyboardInterrupt."""
        self._bind()
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> RouterService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    # ------------------------------------------------------------------ bookkeeping
    def now(self) -> float:
        return time.monotonic() - self.t0

    def _task_id(self, key: str | None, now: float) -> tuple[int, float]:
        """A small int per tagged task (the routers' ``task_id``) and its arrival; an untagged
        request (``key`` None) is a task of its own."""
        if key is not None and key in self._task_ids:
            self._task_ids.move_to_end(key)
            return self._task_ids[key]
        tid = self._next_task
        self._next_task += 1
        if key is not None:
            self._task_ids[key] = (tid, now)
            while len(self._task_ids) > self.max_tasks:  # forget the stalest task
                _, (old, _) = self._task_ids.popitem(last=False)
                self._home.pop(old, None)
                for k in [k for k in self._where if k[0] == old]:
                    del self._where[k]
        return tid, now

    def place(self, body: dict) -> _Placed:
        """Parse the tag of ``body``, route it and record it as in flight (raises
        :class:`BadRequest`)."""
        xargs = body.get("vllm_xargs")
        if xargs is not None and not isinstance(xargs, dict):
            raise BadRequest(f"vllm_xargs: must be an object, got {type(xargs).__name__}")
        try:
            tag = parse_tag(xargs)
        except TagError as e:
            raise BadRequest(_one_line(e), e.key) from None
        total = estimate_prompt_tokens(body)
        with self.lock:
            now = self.now()
            live = [b for b in self.backends if now >= b.down_until] or self.backends
            if tag is None:
                tid, arrival = self._task_id(None, now)
                stage, agent, workflow, rnd, prefix = "request", "", "untagged", 0, 0
            else:
                tid, arrival = self._task_id(tag.task, now)
                stage, agent, workflow = tag.stage, tag.agent, tag.workflow
                rnd, prefix = tag.round_index, tag.prefix_tokens
            dyn = max(total - prefix, 0)
            key = (tid, stage)
            o = self._out.get(agent)
            req = RouteRequest(
                tid,
                workflow,
                stage,
                agent,
                rnd,
                dyn,
                prefix,
                now,
                arrival,
                self._home.get(tid),
                self._where.get(key),
                o[0] / o[1] if o else None,
            )
            view = ClusterView(now, tuple(b.view(self.cost) for b in live), self.routed)
            rid = self.router.route(req, view)
            if not any(b.index == rid for b in live) or isinstance(rid, bool):
                raise RuntimeError(
                    f"router {self.router.name!r} returned {rid!r}, not one of "
                    f"the backends {[b.index for b in live]}"
                )
            b = self.backends[rid]
            self.routed += 1
            b.routed += 1
            b.in_flight += 1
            b.in_flight_tokens += total
            if tag is not None:
                self._home.setdefault(tid, rid)
                self._where[key] = rid
                b.touch(("p", agent), prefix, now)
                b.touch(("c", tid, stage), dyn, now)
            return _Placed(b, total, agent)

    def finish(self, placed: _Placed, error: bool = False) -> None:
        with self.lock:
            b = placed.backend
            b.in_flight -= 1
            b.in_flight_tokens -= placed.tokens
            if error:
                b.errors += 1

    def learn_output(self, agent: str, answer: bytes) -> None:
        """Note the output length of a whole (non-streamed) JSON answer of ``agent``."""
        try:
            n = json.loads(answer)["usage"]["completion_tokens"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            with self.lock:
                tot, k = self._out.get(agent, (0, 0))
                self._out[agent] = (tot + n, k + 1)

    def mark_down(self, b: Backend) -> None:
        with self.lock:
            b.down_until = self.now() + self.down_s

    def stats(self) -> dict:
        with self.lock:
            now = self.now()
            bs = [b.stats(now) for b in self.backends]
            return {
                "router": self.router.name,
                "routed": self.routed,
                "in_flight": sum(b["in_flight"] for b in bs),
                "errors": sum(b["errors"] for b in bs),
                "bad_requests": self.bad_requests,
                "backends": bs,
            }

    def backend_healthy(self, b: Backend, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(b.url + "/health", timeout=timeout) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError, http.client.HTTPException):
            return False
