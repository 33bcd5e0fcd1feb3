"""The HTTP router service against fake OpenAI backends (stdlib servers in threads): bodies
forwarded unchanged, each router's placement, streaming relayed, bad input and dead backends
answered with one-line errors, stats counted."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from topas.cli import main as cli_main
from topas.integrations.router_service import (
    RouterService,
    estimate_prompt_tokens,
    parse_backend_url,
    parse_router_params,
)
from topas.integrations.vllm.tags import make_tag


class FakeBackend:
    """An OpenAI-shaped server that records every request it got."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.got: list[tuple[str, str, bytes]] = []  # (method, path, body)
        #: a stream's last events wait for this (set it to prove the relay does not buffer)
        self.gate = threading.Event()
        self.gate.set()
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def _send(self, status: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Fake", fake.name)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.got.append(("GET", self.path, b""))
                if self.path == "/health":
                    self._send(200, {})
                else:
                    self._send(200, {"object": "list", "data": [{"id": "m", "owner": fake.name}]})

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                fake.got.append(("POST", self.path, body))
                obj = json.loads(body)
                if obj.get("fail"):  # the backend's own error: relayed as it is
                    self._send(400, {"error": {"message": "backend says no"}})
                    return
                if obj.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i in range(3):
                        ev = (
                            b"data: "
                            + json.dumps({"choices": [{"text": str(i)}]}).encode()
                            + b"\n\n"
                        )
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                        self.wfile.flush()
                        if i == 0:
                            fake.gate.wait(5)
                    ev = b"data: [DONE]\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev))
                    self.wfile.flush()
                    return
                self._send(
                    200,
                    {
                        "object": "text_completion",
                        "backend": fake.name,
                        "choices": [{"text": "ok", "index": 0}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": obj.get("out", 1)},
                    },
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def posts(self) -> list[dict]:
        return [json.loads(b) for m, _, b in self.got if m == "POST"]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def backends():
    bs = [FakeBackend(f"b{i}") for i in range(3)]
    yield bs
    for b in bs:
        b.stop()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed on exit: nobody listens


def _post(url: str, body, path: str = "/v1/completions", raw: bytes | None = None):
    """(status, headers dict, body bytes)."""
    u = url.removeprefix("http://")
    host, port = u.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    data = raw if raw is not None else json.dumps(body).encode()
    c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    c.close()
    return out


def _get(url: str, path: str):
    u = url.removeprefix("http://")
    host, port = u.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def _call(task, stage, agent, n_prompt=40, prefix=16, rnd=0):
    return {
        "model": "m",
        "prompt": list(range(n_prompt)),
        "max_tokens": 2,
        "vllm_xargs": make_tag(
            task=task, stage=stage, agent=agent, prefix_tokens=prefix, round_index=rnd
        ),
    }


def _where(svc_url, body) -> int:
    st, h, _ = _post(svc_url, body)
    assert st == 200
    return int(h["x-topas-backend"])


def test_body_forwarded_unchanged_and_response_relayed(backends):
    with RouterService([b.url for b in backends], router="round-robin") as svc:
        raw = b'{"model": "m",  "prompt": "hello there", "max_tokens": 3,\n "extra": [1, 2]}'
        st, h, body = _post(svc.url, None, raw=raw)
        assert st == 200
        assert h["x-fake"] == "b0" and h["x-topas-backend"] == "0"
        assert json.loads(body)["backend"] == "b0"
        assert backends[0].got[-1] == ("POST", "/v1/completions", raw)  # byte for byte
        chat = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "vllm_xargs": make_tag(task="t", stage="s", agent="a"),
        }
        st, h, _ = _post(svc.url, chat, path="/v1/chat/completions")
        assert st == 200 and h["x-topas-backend"] == "1"
        assert backends[1].got[-1][1] == "/v1/chat/completions"
        assert json.loads(backends[1].got[-1][2]) == chat


def test_backend_errors_are_relayed_and_counted(backends):
    with RouterService([b.url for b in backends[:1]]) as svc:
        st, h, body = _post(svc.url, {"prompt": "x", "fail": True})
        assert st == 400 and h["x-fake"] == "b0"
        assert json.loads(body)["error"]["message"] == "backend says no"
        s = json.loads(_get(svc.url, "/router/stats")[1])
        assert s["errors"] == 1 and s["bad_requests"] == 0 and s["in_flight"] == 0


def test_round_robin_alternates(backends):
    with RouterService([b.url for b in backends], router="round-robin") as svc:
        got = [_where(svc.url, _call("t1", "s", "a")) for _ in range(6)]
        assert got == [0, 1, 2, 0, 1, 2]


def test_task_affinity_keeps_tasks_and_stages_together(backends):
    with RouterService([b.url for b in backends], router="task-affinity") as svc:
        a = [_where(svc.url, _call("A", "plan", "pm", rnd=r)) for r in range(3)]
        b = [_where(svc.url, _call("B", "plan", "pm", rnd=r)) for r in range(3)]
        a += [_where(svc.url, _call("A", "code", "eng"))]  # another stage of task A
        assert len(set(a)) == 1 and len(set(b)) == 1
        assert a[0] != b[0]  # two tasks spread (both idle: the least-loaded tie goes by id)
        # the recorded contexts are visible in the stats
        s = json.loads(_get(svc.url, "/router/stats")[1])
        assert s["backends"][a[0]]["routed"] == 4 and s["backends"][b[0]]["routed"] == 3


def test_prefix_affinity_follows_the_agents_prefix(backends):
    # prefix 200 of 220 prompt tokens: the cached share clears the 0.3 threshold
    with RouterService([b.url for b in backends], router="prefix-affinity") as svc:
        first = {
            ag: _where(svc.url, _call(f"{ag}-0", "s", ag, n_prompt=220, prefix=200))
            for ag in ("coder", "critic")
        }
        again = {
            ag: [
                _where(svc.url, _call(f"{ag}-{k}", "s", ag, n_prompt=220, prefix=200))
                for k in range(1, 4)
            ]
            for ag in ("coder", "critic")
        }
        for ag in first:  # new tasks of the same agent: to the backend holding its prefix
            assert again[ag] == [first[ag]] * 3


def test_streaming_is_relayed_chunk_by_chunk(backends):
    with RouterService([b.url for b in backends[:1]], router="round-robin") as svc:
        host, port = svc.url.removeprefix("http://").split(":")
        c = http.client.HTTPConnection(host, int(port), timeout=10)
        body = json.dumps({"model": "m", "prompt": "x", "stream": True}).encode()
        backends[0].gate.clear()  # the backend holds the rest until the first event is here
        c.request(
            "POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"}
        )
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
        assert r.getheader("Transfer-Encoding") == "chunked"
        first = r.read1(65536)
        assert first.startswith(b"data: ") and b"[DONE]" not in first
        backends[0].gate.set()
        text = (first + r.read()).decode()
        c.close()
        events = [ln for ln in text.split("\n") if ln.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) == 4
        assert json.loads(events[0][6:])["choices"][0]["text"] == "0"


@pytest.mark.parametrize(
    "raw,needle",
    [
        (b"{not json", "body: not valid JSON"),
        (b"[1, 2]", "body: must be a JSON object"),
        (json.dumps({"prompt": "x", "vllm_xargs": "oops"}).encode(), "vllm_xargs: must be"),
        (
            json.dumps(
                {
                    "prompt": "x",
                    "vllm_xargs": {
                        "topas_task": "t",
                        "topas_stage": "s",
                        "topas_agent": "a",
                        "topas_round": -1,
                    },
                }
            ).encode(),
            "topas_round: must be an integer",
        ),
        (
            json.dumps(
                {"prompt": "x", "vllm_xargs": {"topas_task": "t", "topas_agent": "a"}}
            ).encode(),
            "topas_stage: required",
        ),
    ],
)
def test_bad_input_is_a_one_line_400(backends, raw, needle):
    with RouterService([b.url for b in backends[:1]]) as svc:
        st, h, body = _post(svc.url, None, raw=raw)
        assert st == 400, body
        assert body.count(b"\n") == 1 and body.endswith(b"\n")
        msg = json.loads(body)["error"]["message"]
        assert needle in msg and "\n" not in msg
        assert backends[0].posts() == []  # never forwarded
        assert json.loads(_get(svc.url, "/router/stats")[1])["bad_requests"] == 1


def test_dead_backend_is_a_502_naming_it(backends):
    dead = _dead_url()
    with RouterService([dead, backends[0].url], router="round-robin") as svc:
        st, _, body = _post(svc.url, _call("t", "s", "a"))
        assert st == 502
        msg = json.loads(body)["error"]["message"]
        assert dead in msg and "backend 0" in msg and "\n" not in msg
        # marked down for a while: the next calls go to the live backend
        assert [_where(svc.url, _call("t", "s", "a")) for _ in range(2)] == [1, 1]
        s = json.loads(_get(svc.url, "/router/stats")[1])
        assert s["backends"][0]["errors"] == 1 and s["backends"][0]["down"]
        assert _get(svc.url, "/health")[0] == 200  # one backend is healthy
    with RouterService([dead]) as svc:
        assert _get(svc.url, "/health")[0] == 503


def test_stats_models_and_health(backends):
    with RouterService([b.url for b in backends[:2]], router="round-robin") as svc:
        for _ in range(3):
            _where(svc.url, _call("t", "s", "a"))
        st, body = _get(svc.url, "/router/stats")
        s = json.loads(body)
        assert st == 200 and s["router"] == "round-robin" and s["routed"] == 3
        assert [b["routed"] for b in s["backends"]] == [2, 1]
        assert s["in_flight"] == 0 and s["errors"] == 0
        assert s["backends"][0]["cached_agents"] == ["a"]
        st, body = _get(svc.url, "/v1/models")
        assert st == 200 and json.loads(body)["data"][0]["owner"] == "b0"
        assert _get(svc.url, "/health")[0] == 200
        assert _get(svc.url, "/nope")[0] == 404


def test_untagged_requests_are_routed_as_tasks_of_their_own(backends):
    with RouterService([b.url for b in backends[:2]], router="task-affinity") as svc:
        got = {_where(svc.url, {"model": "m", "prompt": "same"}) for _ in range(4)}
        assert got == {0}  # idle backends: least-loaded tie by id; nothing recorded


def test_helpers_and_validation():
    assert estimate_prompt_tokens({"prompt": [1, 2, 3]}) == 3
    assert estimate_prompt_tokens({"prompt": [[1, 2], [3]]}) == 3
    assert estimate_prompt_tokens({"prompt": "abcdefghi"}) == 3  # ceil(9 / 4)
    assert (
        estimate_prompt_tokens(
            {"messages": [{"content": "abcd"}, {"content": [{"type": "text", "text": "abcd"}]}]}
        )
        == 2
    )
    assert parse_backend_url("http://h:81/x/") == ("http", "h", 81, "/x")
    for bad in ("ftp://h", "http://", "http://h:99999", "http://h:1/v1", "http://h?q=1"):
        with pytest.raises(ValueError) as e:
            parse_backend_url(bad)
        assert "\n" not in str(e.value) and "backend" in str(e.value)
    assert parse_router_params(["a=1", "b=0.5", "c=x"]) == {"a": 1, "b": 0.5, "c": "x"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_router_params(["oops"])
    with pytest.raises(ValueError, match="same server"):
        RouterService(["http://127.0.0.1:9", "http://127.0.0.1:9/"])
    with pytest.raises(ValueError, match="unknown"):
        RouterService(["http://127.0.0.1:9"], router="nope")


def test_cli_errors_are_one_line(capsys):
    assert cli_main(["router", "--backend", "ftp://x"]) == 2
    assert cli_main(["router", "--backend", "http://127.0.0.1:9", "--router", "nope"]) == 2
    assert cli_main(["router", "--backend", "http://127.0.0.1:9", "--router-param", "bogus=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(ln.startswith("topas router: error: ") for ln in err)
    assert "scheme" in err[0] and "unknown" in err[1] and "bad parameters" in err[2]


def test_output_lengths_are_learned_per_agent_from_usage(backends):
    """The backends' ``usage.completion_tokens`` become the routers' expected output
    length of that agent's next call (the simulator's cluster does the same)."""
    from topas.routing import RoundRobin

    seen = []

    class Spy(RoundRobin):
        def route(self, req, view):
            seen.append((req.agent, req.expected_output_tokens))
            return super().route(req, view)

    with RouterService([b.url for b in backends[:2]], router=Spy()) as svc:
        for out in (10, 30):
            assert _post(svc.url, {**_call("t1", "s", "coder"), "out": out})[0] == 200
        assert _post(svc.url, {**_call("t2", "s", "critic"), "out": 7})[0] == 200
        assert _post(svc.url, _call("t3", "s", "coder"))[0] == 200
        assert _post(svc.url, _call("t4", "s", "critic"))[0] == 200
    assert seen == [
        ("coder", None),
        ("coder", 10.0),
        ("critic", None),
        ("coder", 20.0),
        ("critic", 7.0),
    ]
