"""Workflow tags round-trip through the flat vllm_xargs format."""

from __future__ import annotations

import pytest

from topas.integrations.vllm.client import tagged
from topas.integrations.vllm.tags import TagError, make_tag, parse_tag

pytestmark = pytest.mark.vllm


def test_tag_round_trip_and_flat_values():
    tag = make_tag(task=7, stage="code", agent="eng", prefix_tokens=512, round_index=2,
                   workflow="metagpt", kind="Engineer",
                   dag=[("plan", "arch", "plan", ()), ("code", "eng", "Engineer", ("plan",))],
                   done=["plan"], arrival_s=12.5)
    for v in tag.values():  # what vllm_xargs accepts
        assert isinstance(v, (str, int, float, list))
    t = parse_tag(tag)
    assert (t.task, t.stage, t.agent, t.prefix_tokens, t.round_index) == ("7", "code", "eng",
                                                                          512, 2)
    assert [s.name for s in t.dag] == ["plan", "code"] and t.dag[1].deps == ("plan",)
    assert t.done == ("plan",) and t.kind == "Engineer" and t.arrival_s == 12.5
    assert not t.final and "topas_final" not in tag  # unknown: more calls may follow
    assert parse_tag(make_tag(task=1, stage="s", agent="a", final=True)).final
    assert tagged(task=1, stage="s", agent="a")["extra_body"]["vllm_xargs"]["topas_task"] == 1


def test_untagged_and_bad_tags():
    assert parse_tag(None) is None and parse_tag({"other": 1}) is None
    with pytest.raises(TagError, match="topas_agent"):
        parse_tag({"topas_task": "x", "topas_stage": "s"})
    with pytest.raises(TagError, match="topas_prefix_tokens"):
        make_tag(task="x", stage="s", agent="a", prefix_tokens=-1)
    with pytest.raises(TagError, match="topas_dag"):
        make_tag(task="x", stage="s", agent="a", dag=[("a|b", "x", "k", ())])
    with pytest.raises(TagError, match="topas_final"):
        parse_tag({"topas_task": "x", "topas_stage": "s", "topas_agent": "a", "topas_final": 2})
