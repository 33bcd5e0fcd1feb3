"""Our references on vLLM's KV blocks: agent-prefix pins and held contexts.

vLLM frees a block to its LRU free queue when its last reference goes; a block that is still
cached (has a hash) can then be hit by a later request until it is reused.  The topas
scheduler takes references of its own (``BlockPool.touch``) to keep blocks out of that queue:

* a **pin** on an agent's prefix blocks once they are fully computed and cached, so a flood of
  other requests cannot evict the prefix; unpinning drops the reference and, for an eviction,
  removes the blocks' hashes (``BlockPool.evict_blocks``) so the prefix is really gone;
* a **held context**: the cached blocks after the prefix of a finished call whose stage will
  call again (Continuum).  Offered to the next decision; held until a time, or dropped at once
  (the blocks become ordinary LRU cache).

This module is the only place that touches vLLM block reference counts.
"""

from __future__ import annotations

from topas.engine.snapshot import HeldContext

Key = tuple[int, str]  #: (task id, stage name)


class Held:
    """Our reference on a finished call's context blocks."""

    __slots__ = ("ctx", "blocks", "offered")

    def __init__(self, ctx: HeldContext, blocks: list) -> None:
        self.ctx = ctx
        self.blocks = blocks
        self.offered = True  #: not yet decided on by the policy


class BlockRefs:
    """The pins and held contexts of one scheduler, on its ``kv_cache_manager``."""

    def __init__(self, kv_cache_manager, block_size: int) -> None:
        self.kv = kv_cache_manager
        self.block_size = block_size
        self.pins: dict[str, list] = {}
        self.held: dict[Key, Held] = {}

    @property
    def pool(self):
        return self.kv.block_pool

    def _blocks(self, request_id: str) -> list | None:
        try:
            return list(self.kv.get_blocks(request_id).blocks[0])
        except (KeyError, IndexError):
            return None

    # -- prefix pins ---------------------------------------------------------------------
    def pin_prefix(self, agent: str, request_id: str, prefix_tokens: int) -> bool:
        """Pin the first ``prefix_tokens`` (whole blocks) of a running request's blocks as
        ``agent``'s prefix, if they are all cached; whether a pin was taken."""
        n = prefix_tokens // self.block_size
        if n == 0 or agent in self.pins:
            return False
        blocks = self._blocks(request_id)
        if blocks is None or len(blocks) < n:
            return False
        blocks = blocks[:n]
        if any(b.block_hash is None or b.is_null for b in blocks):
            return False
        self.pool.touch(blocks)
        self.pins[agent] = blocks
        return True

    def unpin(self, agent: str, evict: bool) -> bool:
        """Drop our reference on ``agent``'s prefix blocks; with ``evict`` also remove their
        hashes from the prefix cache so no later request can hit them.  Whether one was held."""
        blocks = self.pins.pop(agent, None)
        if not blocks:
            return False
        self.pool.free_blocks(reversed(blocks))
        if evict:
            self.pool.evict_blocks({b.block_id for b in blocks if b.ref_cnt == 0})
        return True

    # -- held contexts -------------------------------------------------------------------
    def context_blocks(self, request_id: str, prefix_tokens: int) -> list:
        """A finished request's cached blocks after its agent prefix, up to the first block
        without a hash (a cache hit needs an unbroken chain)."""
        blocks = self._blocks(request_id) or []
        ctx = []
        for b in blocks[prefix_tokens // self.block_size :]:
            if b.is_null or b.block_hash is None:
                break
            ctx.append(b)
        return ctx

    def offer(self, key: Key, ctx: HeldContext, blocks: list) -> None:
        """Take a reference on ``blocks`` for the context ``key`` (replacing an older one)."""
        self.drop(key)
        self.pool.touch(blocks)
        self.held[key] = Held(ctx, blocks)

    def drop(self, key: Key) -> Held | None:
        """Drop our reference: the blocks stay cached, as ordinary LRU free blocks."""
        h = self.held.pop(key, None)
        if h is not None:
            self.pool.free_blocks(reversed(h.blocks))
        return h

    def drop_all(self) -> None:
        for key in list(self.held):
            self.drop(key)
