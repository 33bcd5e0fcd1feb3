"""Workflow tags (the vLLM adapter's ``topas_*`` keys): round trip through the flat vllm_xargs
format, and the parser's checks.  Pure Python: no vLLM import, so the fast suite runs these."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topas.integrations.vllm.client import tagged
from topas.integrations.vllm.tags import (
    MAX_DAG_STAGES,
    MAX_INT,
    TagError,
    WorkflowTag,
    encode_dag,
    make_tag,
    parse_tag,
)

BASE = {"topas_task": "t", "topas_stage": "code", "topas_agent": "eng"}
DAG = [("plan", "arch", "plan", ()), ("code", "eng", "Engineer", ("plan",))]


def bad(**kv) -> dict:
    return {**BASE, **kv}


def test_tag_round_trip_and_flat_values():
    tag = make_tag(
        task=7,
        stage="code",
        agent="eng",
        prefix_tokens=512,
        round_index=2,
        workflow="metagpt",
        kind="Engineer",
        dag=DAG,
        done=["plan"],
        arrival_s=12.5,
    )
    for v in tag.values():  # what vllm_xargs accepts
        assert isinstance(v, (str, int, float, list))
    t = parse_tag(tag)
    assert (t.task, t.stage, t.agent, t.prefix_tokens, t.round_index) == (
        "7",
        "code",
        "eng",
        512,
        2,
    )
    assert [s.name for s in t.dag] == ["plan", "code"] and t.dag[1].deps == ("plan",)
    assert t.done == ("plan",) and t.kind == "Engineer" and t.arrival_s == 12.5
    assert not t.final and "topas_final" not in tag  # unknown: more calls may follow
    assert parse_tag(make_tag(task=1, stage="s", agent="a", final=True)).final
    assert tagged(task=1, stage="s", agent="a")["extra_body"]["vllm_xargs"]["topas_task"] == 1


def test_untagged_and_defaults():
    assert parse_tag(None) is None and parse_tag({"other": 1}) is None and parse_tag({}) is None
    assert parse_tag(["topas_task"]) is None  # not a mapping: no tag at all
    t = parse_tag(
        bad(
            topas_prefix_tokens=None,
            topas_round=None,
            topas_dag=None,
            topas_done=None,
            topas_arrival_s=None,
            topas_final=None,
            topas_kind=None,
            topas_workflow="",
        )
    )
    assert (t.prefix_tokens, t.round_index, t.dag, t.done, t.arrival_s, t.final) == (
        0,
        0,
        (),
        (),
        None,
        False,
    )
    assert (t.kind, t.workflow) == ("code", "custom")
    # integral floats are integers (JSON clients send 512.0); the bounds are inclusive
    t = parse_tag(bad(topas_prefix_tokens=512.0, topas_round=MAX_INT, topas_final=1.0))
    assert (t.prefix_tokens, t.round_index, t.final) == (512, MAX_INT, True)


NUMERIC_BAD = [
    math.inf,
    -math.inf,
    math.nan,
    -1,
    -0.5,
    2.5,
    10**30,
    1e300,
    MAX_INT + 1,
    "12",
    "abc",
    "",
    [1],
    {"a": 1},
    True,
    False,
]


@pytest.mark.parametrize("key", ["topas_prefix_tokens", "topas_round"])
@pytest.mark.parametrize("value", NUMERIC_BAD, ids=repr)
def test_bad_integer_tags(key, value):
    with pytest.raises(TagError, match=key) as e:
        parse_tag(bad(**{key: value}))
    assert e.value.key == key and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "value", [math.inf, -math.inf, math.nan, -1, -1e-9, "1700000000", [1.0], {}, True], ids=repr
)
def test_bad_arrival(value):
    with pytest.raises(TagError, match="topas_arrival_s") as e:
        parse_tag(bad(topas_arrival_s=value))
    assert e.value.key == "topas_arrival_s"


def test_arrival_bounds():
    assert parse_tag(bad(topas_arrival_s=0)).arrival_s == 0.0
    assert parse_tag(bad(topas_arrival_s=1e300)).arrival_s == 1e300  # the engine clamps to now


@pytest.mark.parametrize(
    "value", [2, -1, 0.5, math.nan, math.inf, "1", "true", [1], {1: 1}], ids=repr
)
def test_bad_final(value):
    with pytest.raises(TagError, match="topas_final"):
        parse_tag(bad(topas_final=value))


@pytest.mark.parametrize("value", [None, True, 1.5, math.nan, [1], {}, "", 10**100], ids=repr)
def test_bad_task(value):
    with pytest.raises(TagError, match="topas_task"):
        parse_tag(bad(topas_task=value))


@pytest.mark.parametrize(
    "key,value",
    [
        ("topas_stage", ""),
        ("topas_stage", None),
        ("topas_stage", 3),
        ("topas_agent", ["a"]),
        ("topas_kind", 5),
        ("topas_workflow", ["w"]),
    ],
)
def test_bad_names(key, value):
    with pytest.raises(TagError, match=key):
        parse_tag(bad(**{key: value}))


@pytest.mark.parametrize(
    "dag,pattern",
    [
        (["a|x|k|b", "b|x|k|a", "code|eng|k|"], r"cycle through \['a', 'b'\]"),
        (["code|eng|k|code"], r"stage 'code': depends on itself"),
        (["code|eng|k|plan"], r"stage 'code': depends on unknown stage 'plan'"),
        (["code|eng|k|", "code|x|k|"], r"duplicate stage names \['code'\]"),
        (["code|eng|k"], r"is not 'stage\|agent\|kind\|dep1,dep2'"),
        (["|eng|k|"], r"is not 'stage"),
        (["code||k|"], r"is not 'stage"),
        ([3], r"entry 3 is not"),
        ("code|eng|k|", r"must be a list"),
        ({"code": 1}, r"must be a list"),
        ([f"s{i}|a|k|" for i in range(MAX_DAG_STAGES + 1)], r"more than 4096"),
    ],
)
def test_bad_dag(dag, pattern):
    with pytest.raises(TagError, match=pattern) as e:
        parse_tag(bad(topas_dag=dag))
    assert e.value.key == "topas_dag" and str(e.value).startswith("topas_dag")
    assert len(str(e.value)) < 300  # a long value is cut in the message


def test_dag_in_any_order_becomes_topological():
    t = parse_tag(
        bad(topas_dag=["test|qa|t|code", "code|eng|k|plan,spec", "plan|a|p|", "spec|a|s|plan"])
    )
    pos = {s.name: k for k, s in enumerate(t.dag)}
    assert all(pos[d] < pos[s.name] for s in t.dag for d in s.deps)
    assert sorted(pos) == ["code", "plan", "spec", "test"]
    # a topological order is kept as the client gave it
    given_order = ["plan|a|p|", "spec|a|s|plan", "code|eng|k|plan,spec"]
    assert [s.name for s in parse_tag(bad(topas_dag=given_order)).dag] == ["plan", "spec", "code"]


@pytest.mark.parametrize(
    "done,pattern",
    [
        ("plan", "must be a list"),
        ([1], "entry 1"),
        ([""], "entry ''"),
        (["nope"], "'nope' is not in topas_dag"),
        (["code"], "own stage"),
    ],
)
def test_bad_done(done, pattern):
    with pytest.raises(TagError, match=pattern):
        parse_tag(bad(topas_dag=encode_dag(DAG), topas_done=done))


def test_done_without_dag_is_not_checked_against_it():
    assert parse_tag(bad(topas_done=["plan", "spec"])).done == ("plan", "spec")


def test_make_tag_fails_on_the_client_with_tag_errors():
    for kw in (
        {"prefix_tokens": math.inf},
        {"round_index": math.nan},
        {"prefix_tokens": -1},
        {"arrival_s": math.nan},
        {"done": "plan"},
        {"final": 2},
        {"dag": [("a|b", "x", "k", ())]},
        {"dag": [("code", "eng", "k", "plan")]},
        {"dag": [("code", "eng", "k", ("code",))]},
    ):
        with pytest.raises(TagError):
            make_tag(task="x", stage="code", agent="a", **kw)


JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8)
    | st.sampled_from(["code", "plan", "a|b|c|", "code|eng|k|plan", "plan|a|p|", "plan|a|p|code"]),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=8,
)
KEYS = [
    "topas_task",
    "topas_stage",
    "topas_agent",
    "topas_kind",
    "topas_workflow",
    "topas_prefix_tokens",
    "topas_round",
    "topas_dag",
    "topas_done",
    "topas_arrival_s",
    "topas_final",
]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), JSONISH), st.booleans())
def test_parse_tag_raises_only_tag_errors(extra, with_base):
    """Whatever a client sends, parse_tag returns a sane tag or raises TagError."""
    if with_base:
        extra = {**BASE, **extra}
    try:
        t = parse_tag(extra)
    except TagError as e:
        assert e.key.startswith("topas") and "\n" not in str(e)
        return
    if t is None:
        return
    assert isinstance(t, WorkflowTag)
    assert 0 <= t.prefix_tokens <= MAX_INT and 0 <= t.round_index <= MAX_INT
    assert t.arrival_s is None or (math.isfinite(t.arrival_s) and t.arrival_s >= 0)
    names = [s.name for s in t.dag]
    assert len(set(names)) == len(names)
    seen: set[str] = set()
    for s in t.dag:
        assert all(d in seen for d in s.deps) and s.name not in s.deps
        seen.add(s.name)
    assert t.stage not in t.done


def test_tags_module_does_not_import_vllm():
    code = (
        "import sys, topas.integrations.vllm.tags, topas.integrations.vllm.client; "
        "assert 'vllm' not in sys.modules, 'vllm imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the start-up check of vLLM's private scheduler internals (no vLLM needed) ---------------


class _Pool:
    num_gpu_blocks = 8

    def touch(self, blocks): ...

    def free_blocks(self, blocks): ...

    def evict_blocks(self, ids): ...


class _KV:
    def __init__(self, pool):
        self.block_pool = pool

    def get_blocks(self, rid): ...


class _Sched:
    requests: dict = {}
    waiting = running = ()
    block_size = 16
    max_num_active_reqs = max_num_scheduled_tokens = 4
    policy = "fcfs"

    def __init__(self, pool):
        self.kv_cache_manager = _KV(pool)

    def schedule(self): ...

    def _preempt_request(self, r, t): ...

    def _free_request_blocks(self, r): ...


def test_vllm_compat_check_passes_a_scheduler_with_every_part():
    from topas.integrations.vllm.compat import check_vllm, missing_parts

    s = _Sched(_Pool())
    assert missing_parts(s) == []
    check_vllm(s)


def test_vllm_compat_check_names_the_supported_version_and_what_is_missing():
    from topas.integrations.vllm.compat import SUPPORTED_VLLM, UnsupportedVLLM, check_vllm

    class OldPool(_Pool):
        evict_blocks = None  # renamed in some other release

    class OldSched(_Sched):
        _preempt_request = None

    with pytest.raises(UnsupportedVLLM) as e:
        check_vllm(OldSched(OldPool()))
    msg = str(e.value)
    assert f"supports vllm {SUPPORTED_VLLM}" in msg and "\n" not in msg
    assert "Scheduler._preempt_request" in msg and "BlockPool.evict_blocks" in msg
    assert "Scheduler.schedule" not in msg


def test_vllm_compat_check_of_a_request():
    from types import SimpleNamespace

    from topas.integrations.vllm.compat import REQUEST_ATTRS, UnsupportedVLLM, check_request

    full = SimpleNamespace(**dict.fromkeys(REQUEST_ATTRS, 0))
    check_request(full)
    del full.num_preemptions
    with pytest.raises(UnsupportedVLLM, match="Request.num_preemptions"):
        check_request(full)


def test_vllm_prompts_continue_a_conversation_with_the_ids_the_simulator_credits():
    """The vLLM driver's prompt ids: a stage continuing a conversation (``shares_with``)
    begins with exactly ``shared_tokens`` of the earlier stage's prompt ids (so vLLM's prefix
    cache can find them), and scaling keeps that within both prompts."""
    import numpy as np

    from topas.integrations.vllm.driver import DriveConfig, prompt_stream, scale_tasks
    from topas.workflow.model import validate_task
    from topas.workloads import get_workload

    wl = get_workload("groupchat")
    tasks = wl.sample(30, wl.default_rate, np.random.default_rng(2))
    scaled, agents = scale_tasks(tasks, wl.agents, DriveConfig())
    checked = 0
    for t in scaled:
        validate_task(t, agents)
        streams: dict = {}
        by = {s.name: s for s in t.stages}
        for s in t.stages:
            ids = prompt_stream(streams, t, s, 4096, 0)[: s.calls[0].prompt_tokens]
            if not s.shares_with:
                continue
            src = by[s.shares_with]
            src_ids = prompt_stream(streams, t, src, 4096, 0)[: src.calls[0].prompt_tokens]
            n = s.shared_tokens
            assert ids[:n] == src_ids[:n] and ids[n] != src_ids[n]
            checked += 1
    assert checked > 20
