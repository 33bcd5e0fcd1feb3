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

It also keeps **cache priorities** (``Decision.cache_priority``): the cached context blocks of a
finished call with a priority are remembered, and before each step vLLM's free queue is
reordered so that every other free block is evicted first, then those contexts lowest
priority first, least recently finished first among equals, each from its tail (as SGLang's
``--radix-eviction-policy priority`` orders its radix tree).  No reference is taken: the
blocks stay free and any request may hit or reuse them.

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


class Ranked:
    """A finished call's cached context blocks and the cache priority they are kept by."""

    __slots__ = ("priority", "seq", "blocks", "hashes")

    def __init__(self, priority: float, seq: int, blocks: list) -> None:
        self.priority = priority
        self.seq = seq  #: finish order (LRU among equal priorities)
        self.blocks = blocks
        self.hashes = [b.block_hash for b in blocks]  #: a block reused since has another


class BlockRefs:
    """The pins and held contexts of one scheduler, on its ``kv_cache_manager``."""

    #: most contexts kept by cache priority (each :meth:`reorder` walks their blocks)
    max_ranked = 256

    def __init__(self, kv_cache_manager, block_size: int) -> None:
        self.kv = kv_cache_manager
        self.block_size = block_size
        self.pins: dict[str, list] = {}
        self.held: dict[Key, Held] = {}
        #: cached contexts with a cache priority, by (task, stage)
        self.ranked: dict[Key, Ranked] = {}
        self._rank_seq = 0
        self._rank_dirty = False
        self._rank_tail = None  #: the free queue's last block after the latest reorder

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

    # -- cache priorities ----------------------------------------------------------------
    def rank(self, key: Key, priority: float, blocks: list) -> None:
        """Remember ``blocks`` (a finished call's cached context) as ``key``'s, kept by
        ``priority`` from the next :meth:`reorder` on (replacing an older context of ``key``).
        Past ``max_ranked`` contexts the lowest-ranked is forgotten: it would be evicted before
        every other ranked one anyway, and as an unranked free block it still is."""
        self.ranked.pop(key, None)
        if not blocks:
            return
        self._rank_seq += 1
        self.ranked[key] = Ranked(priority, self._rank_seq, list(blocks))
        self._rank_dirty = True
        if len(self.ranked) > self.max_ranked:
            low = min(self.ranked, key=lambda k: (self.ranked[k].priority, self.ranked[k].seq))
            del self.ranked[low]

    def reorder(self, alive) -> int:
        """Move the ranked contexts' free blocks to the end of vLLM's free queue (evicted last),
        lowest priority first, each context's tail block first; contexts whose task
        ``alive(task_id)`` denies, or whose leading block was reused, are forgotten.  Skipped
        when nothing was ranked or freed since the last reorder.  The blocks moved."""
        if not self.ranked:
            return 0
        queue = self.pool.free_block_queue
        if not self._rank_dirty and queue.fake_free_list_tail.prev_free_block is self._rank_tail:
            return 0
        live: list[Ranked] = []
        for key in list(self.ranked):
            e = self.ranked[key]
            n = 0
            for b, h in zip(e.blocks, e.hashes):
                if b.block_hash is None or b.block_hash != h:
                    break  # reused: the hash chain (what a hit needs) ends here
                n += 1
            if n == 0 or not alive(key[0]):
                del self.ranked[key]
                continue
            if n < len(e.blocks):
                del e.blocks[n:], e.hashes[n:]
            live.append(e)
        live.sort(key=lambda e: (e.priority, e.seq))
        moved = 0
        for e in live:
            for b in reversed(e.blocks):
                if b.ref_cnt == 0 and not b.is_null and b.prev_free_block is not None:
                    queue.remove(b)
                    queue.append(b)
                    moved += 1
        self._rank_dirty = False
        self._rank_tail = queue.fake_free_list_tail.prev_free_block
        return moved
