"""The routers the field uses, and a TOPAS-aware one.  Each is a pure function of a
:class:`~topas.routing.base.RouteRequest` and a :class:`~topas.routing.base.ClusterView`.

* ``round-robin``: the ``routed``-th call goes to replica ``routed mod N`` (vLLM
  production-stack's and most HTTP balancers' default).
* ``least-outstanding``: fewest running + queued requests, then least used KV, then lowest
  id (llm-d / Envoy "least request").
* ``prefix-affinity``: SGLang router's cache-aware policy.  When the load is imbalanced
  (``max - min > balance_abs`` and ``max > balance_rel * min`` outstanding requests) it
  sends the call to the least-loaded replica; otherwise to the replica that has the largest
  share of the call's prompt cached (resident prefix + the stage's context) if that share
  exceeds ``cache_threshold``, else to the replica with the most free KV.
* ``task-affinity``: Autellix-style program locality: a call goes where its stage's context
  is, else where its task started, else to the least-outstanding replica; a task is moved
  only when its replica has ``balance_abs`` more outstanding requests than the least loaded.
* ``topas``: the replica where the call is expected to *finish* soonest: queued prefill
  work ahead of it, plus its prefix's miss cost there (a swap-in when the host has a copy,
  else a recompute), plus prefilling the part of its prompt not cached there, plus its
  share of the running batch, plus (weight ``externality``) the delay it imposes on that
  replica's other requests: its prefill (and prefix recompute) stalls the running batch, and
  each of its decode steps makes everyone's step longer.  The task's remaining path after
  this call does not depend on the replica, so the first part is the TOPAS gain of the
  placement for this task and the second its cost to the tasks already there, all in
  seconds from the replica's cost model.  The output length is the agent's mean so far
  (``RouteRequest.expected_output_tokens``), else ``expected_output_tokens``.
"""

from __future__ import annotations

from topas.routing.base import ClusterView, ReplicaView, Router, RouteRequest

__all__ = ["LeastOutstanding", "PrefixAffinity", "RoundRobin", "TaskAffinity", "TopasRouter"]


def _least_loaded(view: ClusterView) -> ReplicaView:
    return min(view.replicas, key=lambda r: (r.outstanding, r.used_kv_tokens, r.replica_id))


class RoundRobin(Router):
    name = "round-robin"

    def route(self, req: RouteRequest, view: ClusterView) -> int:
        return view.replicas[view.routed % len(view.replicas)].replica_id


class LeastOutstanding(Router):
    name = "least-outstanding"

    def route(self, req: RouteRequest, view: ClusterView) -> int:
        return _least_loaded(view).replica_id


class PrefixAffinity(Router):
    """SGLang-router cache-aware routing.  Defaults are the router's documented ones
    (``--cache-threshold 0.3 --balance-abs-threshold 64 --balance-rel-threshold 1.5``)."""

    name = "prefix-affinity"

    def __init__(
        self, cache_threshold: float = 0.3, balance_abs: int = 64, balance_rel: float = 1.5
    ) -> None:
        if not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold {cache_threshold}: must be in [0, 1]")
        if balance_abs < 0 or balance_rel < 1.0:
            raise ValueError(
                f"balance_abs {balance_abs} / balance_rel {balance_rel}: must be >= 0 / >= 1"
            )
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel

    def route(self, req: RouteRequest, view: ClusterView) -> int:
        loads = [r.outstanding for r in view.replicas]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.balance_abs and hi > self.balance_rel * lo:
            return _least_loaded(view).replica_id
        total = max(req.prefix_tokens + req.prompt_tokens, 1)
        best = max(
            view.replicas, key=lambda r: (r.cached_tokens(req), -r.outstanding, -r.replica_id)
        )
        if best.cached_tokens(req) / total > self.cache_threshold:
            return best.replica_id
        return max(view.replicas, key=lambda r: (r.free_kv_tokens, -r.replica_id)).replica_id


class TaskAffinity(Router):
    """Autellix-style: keep a program where its KV is, unless that replica is
    ``balance_abs`` outstanding requests above the least loaded."""

    name = "task-affinity"

    def __init__(self, balance_abs: int = 64) -> None:
        if balance_abs < 0:
            raise ValueError(f"balance_abs {balance_abs}: must be >= 0")
        self.balance_abs = balance_abs

    def route(self, req: RouteRequest, view: ClusterView) -> int:
        least = _least_loaded(view)
        by_id = {r.replica_id: r for r in view.replicas}
        for rid in (req.context_at, req.home):
            r = by_id.get(rid) if rid is not None else None
            if r is not None and r.outstanding - least.outstanding <= self.balance_abs:
                return r.replica_id
        return least.replica_id


class TopasRouter(Router):
    """Route to the replica with the earliest expected completion of this call (module
    docstring).  All terms are seconds from the replica's cost model; the call's output
    length is unknown at routing time, so ``expected_output_tokens`` stands for it."""

    name = "topas"

    def __init__(self, expected_output_tokens: int = 128, externality: float = 1.0) -> None:
        if expected_output_tokens < 1:
            raise ValueError(f"expected_output_tokens {expected_output_tokens}: must be >= 1")
        if not 0.0 <= externality <= 10.0:
            raise ValueError(f"externality {externality}: must be in [0, 10]")
        self.out = expected_output_tokens
        self.externality = externality

    def expected_finish_s(self, req: RouteRequest, r: ReplicaView) -> float:
        """Seconds until ``req`` would finish on ``r``: wait + prefix miss + prefill + decode.

        * wait: prefilling the queue ahead, plus, when the call would not fit the free KV
          after the queue, one batch generation (``out`` decode steps) per budget's worth of
          tokens over the budget (the running batch must drain that much first);
        * miss: a swap-in if the host has the prefix, else its recompute, 0 if resident;
        * prefill of the prompt part not cached there (the stage's context may be);
        * decode: ``out`` steps of a batch of every running and queued request plus this one.
        """
        c = r.cost
        out = req.expected_output_tokens or self.out
        resident = r.prefix_resident(req.agent)
        swap = not resident and r.prefix_on_host(req.agent)
        if resident:
            miss = 0.0
        elif swap:
            miss = c.swap_time(req.prefix_tokens)
        else:
            miss = c.prefill_time(req.prefix_tokens)
        ctx = r.cached_tokens(req) - (req.prefix_tokens if resident else 0)
        need = req.prompt_tokens + out + (0 if resident else req.prefix_tokens)
        step = c.decode_step_time(
            r.outstanding + 1, r.used_kv_tokens + r.queued_prompt_tokens + need
        )
        wait = c.prefill_time(r.queued_prompt_tokens) if r.queued_prompt_tokens else 0.0
        excess = r.used_kv_tokens + r.queued_prompt_tokens + need - r.kv_budget_tokens
        if excess > 0:
            wait += excess / r.kv_budget_tokens * out * step
        own = c.prefill_time(max(req.prompt_tokens - ctx, 1), req.prefix_tokens + ctx)
        finish = wait + miss + own + out * step
        if self.externality and r.outstanding:
            # the delay this call imposes on the replica's other requests: its prefill
            # iterations (and a prefix recompute) stall the running batch, and each of its
            # decode steps makes everyone's step longer
            stall = own + (0.0 if resident or swap else miss)
            base = c.decode_step_time(r.outstanding, r.used_kv_tokens + r.queued_prompt_tokens)
            finish += self.externality * (r.running * stall + r.outstanding * out * (step - base))
        return finish

    def route(self, req: RouteRequest, view: ClusterView) -> int:
        return min(
            view.replicas, key=lambda r: (self.expected_finish_s(req, r), r.replica_id)
        ).replica_id
