"""Where the driver's requests go (:func:`~topas.integrations.vllm.driver.drive`): an
in-process ``LLMEngine`` stepped by the driver, or an OpenAI-compatible server over HTTP."""

from __future__ import annotations

import json
import threading
import time
import urllib.request


class Backend:
    """Where requests go: ``submit`` returns immediately; ``poll`` returns finished and
    first-token events ``[(key, kind, n_cached, wall_s)]``."""

    def submit(self, key: str, prompt: list[int], out_tokens: int, tag: dict) -> None: ...
    def poll(self, timeout_s: float) -> list[tuple[str, str, int, float]]: ...
    def busy(self) -> bool: ...


class InProcessBackend(Backend):
    """An in-process ``LLMEngine`` stepped by the driver (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""

    def __init__(self, llm, on_step=None) -> None:
        self.llm = llm
        self.engine = llm.llm_engine
        self._seen_first: set[str] = set()
        #: called with the wall time (s) of every engine step (calibration traces)
        self.on_step = on_step

    def submit(self, key, prompt, out_tokens, tag) -> None:
        from vllm.inputs import TokensPrompt

        from vllm import SamplingParams

        sp = SamplingParams(
            max_tokens=out_tokens,
            min_tokens=out_tokens,
            ignore_eos=True,
            temperature=0.0,
            extra_args=tag,
        )
        self.engine.add_request(key, TokensPrompt(prompt_token_ids=prompt), sp)

    def busy(self) -> bool:
        return self.engine.has_unfinished_requests()

    def poll(self, timeout_s):
        if not self.busy():
            if timeout_s > 0:
                time.sleep(timeout_s)
            return []
        events = []
        t = time.perf_counter()
        outs = self.engine.step()
        if self.on_step is not None:
            self.on_step(time.perf_counter() - t)
        for o in outs:
            now = time.time()
            if o.request_id not in self._seen_first and o.outputs and o.outputs[0].token_ids:
                self._seen_first.add(o.request_id)
                events.append((o.request_id, "first", 0, now))
            if o.finished:
                events.append((o.request_id, "done", int(o.num_cached_tokens or 0), now))
        return events

    def scheduler(self):
        return self.engine.engine_core.engine_core.scheduler


class HTTPBackend(Backend):
    """An OpenAI-compatible server: one thread per in-flight request (non-streaming), so the
    first-token time is not observable and equals the finish time."""

    def __init__(self, endpoint: str, model: str, timeout_s: float = 600.0) -> None:
        self.url = endpoint.rstrip("/") + "/v1/completions"
        self.model = model
        self.timeout_s = timeout_s
        self._events: list = []
        self._cv = threading.Condition()
        self._inflight = 0

    def submit(self, key, prompt, out_tokens, tag) -> None:
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": out_tokens,
            "min_tokens": out_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "vllm_xargs": tag,
        }
        with self._cv:
            self._inflight += 1
        threading.Thread(target=self._run, args=(key, body), daemon=True).start()

    def _run(self, key, body) -> None:
        req = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        cached = 0
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                resp = json.loads(r.read())
            details = (resp.get("usage") or {}).get("prompt_tokens_details") or {}
            cached = int(details.get("cached_tokens") or 0)
        except Exception as e:  # recorded as finished so the run ends; reported by the caller
            cached = -1
            print(f"request {key}: {e}")
        now = time.time()
        with self._cv:
            self._events.append((key, "done", cached, now))
            self._inflight -= 1
            self._cv.notify_all()

    def busy(self) -> bool:
        return self._inflight > 0

    def poll(self, timeout_s):
        with self._cv:
            if not self._events and timeout_s > 0:
                self._cv.wait(timeout_s)
            ev, self._events = self._events, []
        return ev
