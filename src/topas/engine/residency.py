"""Where KV lives in the simulator: agent prefixes moving over the host link (swap in/out,
recompute), held contexts released, and the context cache in free memory.
"""

from __future__ import annotations

from topas.engine.core import SimCore
from topas.engine.jobs import (
    _SWAP_IN,
    _SWAP_OUT,
    _PrefixJob,
)
from topas.engine.records import PrefixIn, PrefixOut
from topas.engine.snapshot import (
    HeldContext,
    Location,
    RequestState,
)


class Residency(SimCore):
    """Prefix movement, held contexts and the context cache (a part of :class:`~topas.engine.simulator.Simulator`)."""

    # ------------------------------------------------------------------ prefix movement
    def _link(self, tokens: int) -> float:
        start = max(self.now, self._link_free_s)
        self._link_free_s = start + self.cost.swap_time(tokens)
        return self._link_free_s

    def _host_add(self, agent: str) -> bool:
        """Give ``agent`` a host copy, LRU-dropping other idle host copies if needed."""
        cap = self.config.host_capacity_tokens
        p = self.prefixes[agent]
        if cap <= 0 or p.tokens > cap:
            return False
        while self.host_used + p.tokens > cap and self._host_lru:
            victim = self._host_lru.pop(0)
            v = self.prefixes[victim]
            if v.transfer == "in":  # in use by a swap-in: keep
                self._host_lru.append(victim)
                if all(self.prefixes[x].transfer == "in" for x in self._host_lru):
                    return False
                continue
            v.on_host = False
            self.host_used -= v.tokens
            if v.location == Location.HOST:
                v.location = Location.NONE
        if self.host_used + p.tokens > cap:
            return False
        p.on_host = True
        self.host_used += p.tokens
        self._host_lru.append(agent)
        return True

    def _make_resident(self, agent: str) -> None:
        p = self.prefixes[agent]
        if p.location == Location.DEVICE:
            return
        self.used_kv += p.tokens
        if p.on_host:
            p.location = Location.DEVICE
            p.ready = False
            p.transfer = "in"
            self.counters.swap_in_bytes += p.tokens * self.cost.mu
            self._push(self._link(p.tokens), _SWAP_IN, agent)
            if agent in self._host_lru:  # refresh host LRU position
                self._host_lru.remove(agent)
                self._host_lru.append(agent)
        elif p.tokens == 0:
            p.location = Location.DEVICE
            p.ready = True
        else:
            p.location = Location.DEVICE
            p.ready = False
            p.transfer = "compute"
            self.counters.recomputed_prefix_tokens += p.tokens
            self.prefix_jobs[agent] = _PrefixJob(agent, p.tokens)
        if self.record_timeline:
            self.timeline.append(PrefixIn("prefix-in", agent, self.now, p.transfer or "ready"))

    def _drop_prefix(self, agent: str, keep_host_copy: bool) -> None:
        p = self.prefixes[agent]
        self.used_kv -= p.tokens
        if self.ctx_cache_tokens:
            self._uncache_agent(agent)
        p.ready = False
        p.transfer = None
        p.location = Location.HOST if (p.on_host and keep_host_copy) else Location.NONE
        if self.record_timeline:
            self.timeline.append(PrefixOut("prefix-out", agent, self.now, "drop"))

    def _evict_prefix(self, agent: str) -> None:
        p = self.prefixes[agent]
        if p.on_host:  # unchanged copy already on host: free
            self._drop_prefix(agent, keep_host_copy=True)
            return
        if self.config.host_capacity_tokens <= 0 or not self._host_add(agent):
            self._drop_prefix(agent, keep_host_copy=False)
            return
        # memory is released now (staged copy); the host copy is usable once transferred
        self.used_kv -= p.tokens
        if self.ctx_cache_tokens:
            self._uncache_agent(agent)
        p.location = Location.HOST
        p.ready = False
        p.transfer = "out"
        self.counters.swap_out_bytes += p.tokens * self.cost.mu
        self._push(self._link(p.tokens), _SWAP_OUT, agent)
        if self.record_timeline:
            self.timeline.append(PrefixOut("prefix-out", agent, self.now, "swap"))

    def _release_held(self, key: tuple[int, str]) -> None:
        h = self.held.pop(key)
        if h.expires_s > self.now:
            self.used_kv -= h.tokens
            self.prefixes[h.agent].users -= 1
        self._cache_ctx(h)

    def _drop_offers(self) -> None:
        """Contexts offered this instant that the decision did not hold (never counted in
        used_kv) leave ``held``: at most the engine's context cache keeps them."""
        for key in [k for k, h in self.held.items() if h.expires_s <= self.now]:
            self._cache_ctx(self.held.pop(key))

    # ------------------------------------------------------------------ context cache
    def _cache_ctx(self, h: HeldContext) -> None:
        """A context nobody holds any more stays cached in free memory (``context_cache``)."""
        if not self.context_cache or h.tokens <= 0:
            return
        if self.prefixes[h.agent].location != Location.DEVICE:
            return  # its prefix is gone: the context can never be hit
        key = (h.task_id, h.stage)
        old = self.ctx_cache.pop(key, None)
        if old is not None:
            self.ctx_cache_tokens -= old[1]
        self.ctx_cache[key] = (h.agent, h.tokens, h.computed_tokens)
        self.ctx_cache_tokens += h.tokens
        self._trim_ctx_cache()

    def _trim_ctx_cache(self) -> None:
        """Evict cached contexts until they fit the free KV: least recently finished first,
        each from its tail in whole blocks, so a context that gave up only some room keeps
        its leading blocks (vLLM frees a request's blocks in reverse order, so its tail is
        evicted first; SGLang evicts radix-tree leaves, the unshared tails).  With cache
        priorities (``Decision.cache_priority``) the lowest priority goes first, least
        recently finished first among equals (SGLang's priority eviction)."""
        free = self.config.kv_budget_tokens - self.used_kv
        block = max(1, self.config.block_size)
        cache = self.ctx_cache
        prio = self.ctx_priority
        while cache and self.ctx_cache_tokens > free:
            key = next(iter(cache)) if not prio else self._trim_victim()
            agent, tokens, computed = cache[key]
            cut = -(-(self.ctx_cache_tokens - free) // block) * block
            if cut < tokens:
                keep = tokens - cut  # whole blocks: tokens is a block multiple
                cache[key] = (agent, keep, min(computed, keep))
                self.ctx_cache_tokens -= cut
                return
            del cache[key]
            self.ctx_cache_tokens -= tokens

    def _trim_victim(self) -> tuple[int, str]:
        """The cached context to trim next: lowest priority (0 unless a decision set one),
        then least recently finished."""
        prio = self.ctx_priority
        best: tuple[int, str] | None = None
        low = float("inf")
        for key in self.ctx_cache:  # least recently finished first: ties keep the first
            p = prio.get(key, 0.0)
            if p < low:
                best, low = key, p
        assert best is not None
        return best

    def _set_ctx_priority(self, r: RequestState) -> None:
        """Record admitted or running request ``r``'s cache priority for its stage's context."""
        key = (r.task_id, r.stage)
        if r.cache_priority:
            self.ctx_priority[key] = r.cache_priority
        elif self.ctx_priority:
            self.ctx_priority.pop(key, None)

    def _uncache_agent(self, agent: str) -> None:
        """The agent's prefix left the device: its cached contexts are unreachable."""
        for key in [k for k, v in self.ctx_cache.items() if v[0] == agent]:
            self.ctx_cache_tokens -= self.ctx_cache.pop(key)[1]
