"""LPM: SGLang's longest-prefix-match schedule policy, mapped onto agent prefixes.

SGLang (``python/sglang/srt/managers/schedule_policy.py``, ``CacheAwarePolicy.LPM``) sorts
the waiting queue by the number of prompt tokens its radix cache already holds, longest
first, and then admits in that order until the first request that does not fit.  Two
details of the real implementation are kept:

* **In-queue prefix check.**  A request whose cached match is at most
  ``check_threshold_tokens`` (32) is matched against the *waiting queue* itself; if it shares
  at least ``deprioritize_threshold_tokens`` (32) tokens with an earlier request that was not
  itself deprioritized, it is moved to the back of the queue, so that only one of several
  requests with the same uncached prefix computes it and the others hit it afterwards.
* **Large-queue fallback.**  With more than ``fcfs_above`` (128) waiting requests the
  sorting is skipped and the queue is served FCFS.

In this engine a prompt is ``agent prefix (l_a) + dynamic part``; two waiting requests share
exactly their agent prefix.  The cached match of a request is ``l_a`` when the prefix is
resident on the device, plus the tokens of its stage's held context (the previous call's
KV) when one is active.  Host-tier copies do not count: SGLang v0.5.3's default radix cache
matches device memory only.  Residency is SGLang's: idle prefixes evicted LRU first.
"""

from __future__ import annotations

from collections.abc import Sequence

from topas.engine.snapshot import Location, RequestState, Snapshot
from topas.policies import register
from topas.policies.base import OrderedAdmission, fcfs_queue
from topas.policies.params import integer

#: SGLang's IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD (tokens)
CHECK_THRESHOLD_TOKENS = 32
#: SGLang's IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD (tokens)
DEPRIORITIZE_THRESHOLD_TOKENS = 32
#: SGLang turns LPM off (FCFS) when more requests than this wait
FCFS_ABOVE = 128


def cached_match_tokens(snap: Snapshot, r: RequestState) -> int:
    """Prompt tokens of ``r`` the device cache already holds (SGLang's
    ``len(req.prefix_indices)``): its agent prefix ``l_a`` if resident, plus its stage's
    active held context, which sits below the prefix in the cache tree."""
    p = snap.prefixes[r.agent]
    if p.location != Location.DEVICE:
        return 0
    n = p.tokens
    h = snap.held.get((r.task_id, r.stage))
    if h is not None and h.expires_s > snap.time_s:
        n += h.tokens
    return n


def lpm_order(
    snap: Snapshot,
    check_threshold_tokens: int = CHECK_THRESHOLD_TOKENS,
    deprioritize_threshold_tokens: int = DEPRIORITIZE_THRESHOLD_TOKENS,
    fcfs_above: int = FCFS_ABOVE,
) -> Sequence[RequestState]:
    """Waiting requests in LPM admission order."""
    queue = fcfs_queue(snap)  # the engine's queue, as SGLang's list holds it before sorting
    if len(queue) > fcfs_above:
        return queue
    matched = {r.request_id: cached_match_tokens(snap, r) for r in queue}
    # the waiting-queue "radix tree": agents whose prefix an earlier short-match request
    # will compute; only such requests are inserted, as in SGLang
    inserted: set[str] = set()
    deprioritized: set[int] = set()
    for r in queue:
        if matched[r.request_id] > check_threshold_tokens:
            continue
        shared = r.prefix_tokens if r.agent in inserted else 0
        if shared >= deprioritize_threshold_tokens:
            deprioritized.add(r.request_id)
        else:
            inserted.add(r.agent)
    # stable sort: equal matches keep queue (arrival) order
    return sorted(
        queue,
        key=lambda r: float("inf") if r.request_id in deprioritized else -matched[r.request_id],
    )


@register(
    "lpm",
    "SGLang longest prefix match: most cached prompt tokens first, in-queue "
    "prefix dedup, FCFS above 128 waiting, LRU prefix eviction",
    source="SGLang schedule_policy.py (CacheAwarePolicy.LPM)",
)
class LPM(OrderedAdmission):
    """SGLang's LPM with its in-queue prefix check; head-of-line blocking admission."""

    name = "lpm"
    PARAMS = (
        *OrderedAdmission.PARAMS,
        integer(
            "check_threshold_tokens",
            CHECK_THRESHOLD_TOKENS,
            "in-queue prefix check: a request with at most this many cached tokens is checked",
            hi=10_000_000,
        ),
        integer(
            "deprioritize_threshold_tokens",
            DEPRIORITIZE_THRESHOLD_TOKENS,
            "in-queue prefix check: defer a request sharing more than this many "
            "tokens with one admitted before it",
            hi=10_000_000,
        ),
        integer(
            "fcfs_above",
            FCFS_ABOVE,
            "serve FCFS when more requests than this wait",
            hi=1_000_000_000,
        ),
    )

    def __init__(
        self,
        seed: int = 0,
        reserve_ratio: float = 0.5,
        check_threshold_tokens: int = CHECK_THRESHOLD_TOKENS,
        deprioritize_threshold_tokens: int = DEPRIORITIZE_THRESHOLD_TOKENS,
        fcfs_above: int = FCFS_ABOVE,
    ) -> None:
        if fcfs_above < 0:
            raise ValueError(f"fcfs_above {fcfs_above}: must be >= 0")
        super().__init__(seed, reserve_ratio)
        self.check_threshold_tokens = check_threshold_tokens
        self.deprioritize_threshold_tokens = deprioritize_threshold_tokens
        self.fcfs_above = fcfs_above

    def order(self, snap: Snapshot) -> Sequence[RequestState]:
        return lpm_order(
            snap, self.check_threshold_tokens, self.deprioritize_threshold_tokens, self.fcfs_above
        )
