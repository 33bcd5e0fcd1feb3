"""Shared fixtures for the in-process vLLM tests: one tiny model and one engine per session.

Every test here is marked ``vllm`` and the whole folder is skipped when vLLM is not importable
(install it with ``bash scripts/install_vllm.sh``; CI runs ``bash scripts/ci_vllm.sh``).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

try:  # the import is the check; it is slow (~8 s), so only once
    import vllm  # noqa: F401

    HAVE_VLLM = True
except Exception:  # pragma: no cover - depends on the environment
    HAVE_VLLM = False


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.vllm)
            if not HAVE_VLLM:
                item.add_marker(
                    pytest.mark.skip(reason="vllm is not importable (bash scripts/install_vllm.sh)")
                )


#: 8 MiB of KV = 4096 tokens = 32 blocks of 128: small enough to flood in a few requests
KV_BYTES = 8 << 20


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from topas.integrations.vllm.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def llm(tiny_model):
    from topas.integrations.vllm.driver import make_llm

    return make_llm(
        tiny_model, "fcfs", kv_cache_bytes=KV_BYTES, max_num_seqs=16, max_num_batched_tokens=1024
    )


@pytest.fixture
def engine(llm):
    """The shared engine with a clean slate: FCFS, no pins, empty prefix cache."""
    eng = llm.llm_engine
    sched = eng.engine_core.engine_core.scheduler
    assert not eng.has_unfinished_requests()
    sched.set_policy("fcfs")
    sched.unpin_all()
    assert llm.reset_prefix_cache()
    saved = sched.max_num_active_reqs
    yield eng, sched
    sched.max_num_active_reqs = saved
    sched.set_policy("fcfs")
