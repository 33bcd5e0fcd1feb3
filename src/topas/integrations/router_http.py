"""The router service's HTTP side: one handler per connection (stdlib ``http.server``)
that places a request, relays it to the chosen backend and streams the answer back."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

log = logging.getLogger("topas.router")

#: POST paths routed to a backend
from topas.integrations.router_backend import (
    _HOP,
    MAX_BODY_BYTES,
    ROUTED_PATHS,
    Backend,
    BadRequest,
    _one_line,
)

if TYPE_CHECKING:
    from topas.integrations.router_service import RouterService


class _Handler(BaseHTTPRequestHandler):
    svc: RouterService
    protocol_version = "HTTP/1.1"
    server_version = "topas-router"
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s %s", self.address_string(), format % args)

    # ------------------------------------------------------------------ replies
    def _json(self, status: int, obj: dict, headers: dict | None = None) -> None:
        data = (json.dumps(obj) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(
        self, status: int, message: str, param: str | None = None, kind: str = "bad_request"
    ) -> None:
        self._json(
            status,
            {
                "error": {
                    "message": _one_line(message),
                    "type": kind,
                    "param": param,
                    "code": status,
                }
            },
        )

    # ------------------------------------------------------------------ GET
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        path = urllib.parse.urlsplit(self.path).path.rstrip("/") or "/"
        svc = self.svc
        if path == "/health":
            ok = [b.index for b in svc.backends if svc.backend_healthy(b)]
            self._json(
                200 if ok else 503,
                {"healthy": bool(ok), "healthy_backends": ok, "backends": len(svc.backends)},
            )
        elif path == "/router/stats":
            self._json(200, svc.stats())
        elif path == "/v1/models":
            now = svc.now()
            b = next((b for b in svc.backends if now >= b.down_until), svc.backends[0])
            self._relay(b, "GET", None, None)
        else:
            self._error(
                404,
                f"path {path}: not found (POST /v1/completions, "
                "/v1/chat/completions; GET /health, /v1/models, /router/stats)",
                "path",
                "not_found",
            )

    # ------------------------------------------------------------------ POST
    def do_POST(self) -> None:  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path.rstrip("/")
        svc = self.svc
        try:
            body = self._read_body()
            if path not in ROUTED_PATHS:
                raise BadRequest(
                    f"path {path}: not routed (POST /v1/completions or /v1/chat/completions)",
                    "path",
                    404,
                )
            try:
                obj = json.loads(body)
            except (ValueError, UnicodeDecodeError) as e:
                raise BadRequest(f"body: not valid JSON ({_one_line(e, 120)})") from None
            if not isinstance(obj, dict):
                raise BadRequest(f"body: must be a JSON object, got {type(obj).__name__}")
            placed = svc.place(obj)
        except BadRequest as e:
            with svc.lock:
                svc.bad_requests += 1
            self.close_connection = True
            self._error(
                e.status, str(e), e.param, "not_found" if e.status == 404 else "bad_request"
            )
            return
        except Exception as e:  # a router bug: say so, keep serving
            log.exception("routing failed")
            self._error(500, f"router: {type(e).__name__}: {e}", "router", "router_error")
            return
        settled = []

        def done(ok: bool) -> None:  # once: when the backend's answer is in, or on failure
            if not settled:
                settled.append(ok)
                svc.finish(placed, error=not ok)

        ok = False
        try:
            ok = self._relay(placed.backend, "POST", path, body, placed.agent, done)
        finally:
            done(ok)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise BadRequest(
                "Transfer-Encoding: chunked request bodies are not supported; send Content-Length",
                "Transfer-Encoding",
                411,
            )
        raw = self.headers.get("Content-Length")
        try:
            n = int(raw)
            if n < 0:
                raise ValueError
        except (TypeError, ValueError):
            raise BadRequest(
                f"Content-Length: required non-negative integer, got {raw!r}",
                "Content-Length",
                411 if raw is None else 400,
            ) from None
        if n > MAX_BODY_BYTES:
            raise BadRequest(
                f"Content-Length: {n} bytes, more than {MAX_BODY_BYTES}", "Content-Length", 413
            )
        data = self.rfile.read(n)
        if len(data) != n:
            raise BadRequest(f"body: {len(data)} bytes, Content-Length said {n}", "body")
        return data

    # ------------------------------------------------------------------ relay
    def _relay(
        self,
        b: Backend,
        method: str,
        path: str | None,
        body: bytes | None,
        agent: str | None = None,
        done=None,
    ) -> bool:
        """Forward to ``b`` and relay its answer; True when a response was relayed whole."""
        svc = self.svc
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        conn = b.connection(svc.timeout_s)
        target = b.path + (path if path is not None else self.path)
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            svc.mark_down(b)
            if body is None:  # a GET (models): count it as the backend's error here
                with svc.lock:
                    b.errors += 1
            why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
            if isinstance(e, socket.timeout):
                why = f"no answer in {svc.timeout_s:g} s"
            self._error(
                502, f"backend {b.index} ({b.url}): unreachable ({why})", "backend", "bad_gateway"
            )
            return False
        try:
            self.send_response(resp.status, resp.reason)
            length = resp.getheader("Content-Length")
            for k, v in resp.getheaders():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("X-Topas-Backend", str(b.index))
            if resp.status in (204, 304) or 100 <= resp.status < 200:  # no body allowed
                self.end_headers()
            elif length is not None and not resp.chunked:
                self.send_header("Content-Length", length)
                self.end_headers()
                if length.isdigit() and int(length) <= 1 << 22:
                    # a whole answer (an LLM completion is small): read it, settle the
                    # bookkeeping, then relay it, so a client's next request already sees
                    # this one finished
                    data = resp.read()
                    if agent is not None and 200 <= resp.status < 300:
                        svc.learn_output(agent, data)
                    if done is not None:
                        done(200 <= resp.status < 400)
                    self.wfile.write(data)
                else:
                    while chunk := resp.read(65536):
                        self.wfile.write(chunk)
            else:  # streamed (SSE) or of unknown length: relay each piece as it comes
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while chunk := resp.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return 200 <= resp.status < 400
        except (OSError, http.client.HTTPException) as e:
            # the client went away or the backend broke off mid-answer: nothing more to say
            log.info("relay from backend %d broke off: %s", b.index, _one_line(e))
            self.close_connection = True
            return False
        finally:
            conn.close()
