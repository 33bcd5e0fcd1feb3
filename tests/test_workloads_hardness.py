"""Correlated work: the per-task ``hardness`` factor of the declarative format."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
import yaml

from topas.workloads import get_workload
from topas.workloads.declarative import BUILTIN_DIR, parse_workload
from topas.workloads.dists import SpecError

#: sha256 (first 16 hex digits) of repr() of 60 tasks sampled at the default rate with seeds
#: 0, 1 and 2, computed at main 298f4c0, *before* the hardness feature existed: a workload
#: without ``hardness`` must keep sampling exactly these tasks.  The conversation fields added
#: later (``Stage.shares_with``, ``shared_tokens``; no random draw) are left out of the repr.
DIGESTS_BEFORE_HARDNESS = {
    "chain3": "6eee92be42bb55ae",
    "dag10wide": "7f4b822422304461",
    "dag4": "bf32f9fa5b4ffb45",
    "debate": "5ab4a2076d7ec89e",
    "groupchat": "f098fe2cf41ca168",
    "mapreduce": "fa2683006d3c2292",
    "metagpt-sop": "866c08c9622e423d",
    "metagpt-tl": "4d413fd74420b8f4",
    "plan-execute": "04ba71fd2a30c9d2",
    "react": "abada57fe0d46ac7",
    "supervisor": "b893b33b33ab846c",
    "toy-chain": "982140285962e663",
}
HARD = {"mapreduce-hard": "mapreduce", "plan-execute-hard": "plan-execute"}


_NO_SHARE = re.compile(r", shares_with='[^']*', shared_tokens=\d+")


def digest(name: str) -> str:
    wl = get_workload(name)
    h = hashlib.sha256()
    for seed in (0, 1, 2):
        text = repr(wl.sample(60, wl.default_rate, np.random.default_rng(seed)))
        h.update(_NO_SHARE.sub("", text).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(DIGESTS_BEFORE_HARDNESS))
def test_existing_workloads_sample_identical_tasks(name):
    assert digest(name) == DIGESTS_BEFORE_HARDNESS[name]


def _doc(name: str) -> dict:
    return yaml.safe_load((BUILTIN_DIR / f"{name}.yaml").read_text())


def _strip(tasks):
    return [(t.arrival_s, t.stages) for t in tasks]


@pytest.mark.parametrize("hard,base", sorted(HARD.items()))
def test_hard_variant_is_its_base_plus_the_factor(hard, base):
    doc = _doc(hard)
    assert "hardness" in doc
    del doc["hardness"]
    doc["name"] = base
    plain = parse_workload(doc, "test")
    ref = get_workload(base)
    for seed in (0, 5):
        a = plain.sample(40, ref.default_rate, np.random.default_rng(seed))
        b = ref.sample(40, ref.default_rate, np.random.default_rng(seed))
        assert _strip(a) == _strip(b)
    # a constant factor of 1 is the same as no factor
    doc["hardness"] = {"factor": 1, "scales": ["count", "output", "prompt"]}
    one = parse_workload(doc, "test")
    rng = np.random.default_rng(3)
    assert _strip(one.sample(40, ref.default_rate, rng)) == _strip(
        ref.sample(40, ref.default_rate, np.random.default_rng(3))
    )


def test_hardness_keeps_arrivals_and_reports_factors():
    hard, base = get_workload("mapreduce-hard"), get_workload("mapreduce")
    th, f = hard.sample_with_factors(200, 0.04, np.random.default_rng(1))
    tb, f0 = base.sample_with_factors(200, 0.04, np.random.default_rng(1))
    assert [t.arrival_s for t in th] == [t.arrival_s for t in tb]  # arrivals untouched
    assert f0 == [1.0] * 200
    assert len(set(f)) == 200 and min(f) > 0
    assert 0.55 < float(np.median(f)) < 0.95  # median 0.726
    assert 0.8 < float(np.mean(f)) < 1.25  # mean 1


def test_hardness_correlates_fields_within_a_task():
    """The 8 mappers of a mapreduce-hard task share one factor: their outputs move together
    across tasks (and track the factor); in mapreduce they are independent."""

    def halves(name):
        wl = get_workload(name)
        tasks, f = wl.sample_with_factors(300, wl.default_rate, np.random.default_rng(0))
        a, b = [], []
        for t in tasks:
            outs = [np.log(s.calls[0].output_tokens) for s in t.stages if s.kind == "map"]
            assert len(outs) == 8
            a.append(np.mean(outs[:4]))
            b.append(np.mean(outs[4:]))
        return np.corrcoef(a, b)[0, 1], np.corrcoef(np.log(f), a)[0, 1] if np.std(f) else 0.0

    r_hard, r_factor = halves("mapreduce-hard")
    r_base, _ = halves("mapreduce")
    assert r_hard > 0.7 and r_factor > 0.8
    assert abs(r_base) < 0.2
    # rounds and outputs of the executor stages of plan-execute-hard both follow the factor
    wl = get_workload("plan-execute-hard")
    tasks, f = wl.sample_with_factors(300, wl.default_rate, np.random.default_rng(0))
    rounds = [np.mean([len(s.calls) for s in t.stages if s.kind == "execute"]) for t in tasks]
    outs = [
        np.mean([c.output_tokens for s in t.stages if s.kind == "execute" for c in s.calls])
        for t in tasks
    ]
    assert np.corrcoef(np.log(f), np.log(rounds))[0, 1] > 0.5
    assert np.corrcoef(np.log(f), np.log(outs))[0, 1] > 0.5
    assert np.corrcoef(np.log(rounds), np.log(outs))[0, 1] > 0.3


TINY = {
    "name": "tiny",
    "default_rate": 1.0,
    "agents": {"A": 100},
    "stages": [
        {
            "name": "a",
            "agent": "A",
            "prompt": {"uniform": [100, 200]},
            "calls": {
                "count": 3,
                "output": {"lognormal": {"median": 100, "sigma": 0.5}},
                "tool_delay": {"uniform": [1.0, 2.0]},
            },
        },
        {
            "name": "b",
            "agent": "A",
            "deps": ["a"],
            "prompt": 50,
            "calls": {"output": 40, "count": {"uniform": [2, 2]}},
        },
    ],
}


def test_factor_multiplies_the_raw_draw_of_chosen_fields_only():
    base = parse_workload(TINY, "t")
    doc = dict(TINY, hardness={"factor": 2.0, "scales": ["output", "tool_delay"]})
    hard = parse_workload(doc, "t")
    for seed in range(5):
        tb = base.sample(3, 1.0, np.random.default_rng(seed))
        th, f = hard.sample_with_factors(3, 1.0, np.random.default_rng(seed))
        assert f == [2.0] * 3
        for x, y in zip(tb, th):
            a0, a1 = x.stages[0], y.stages[0]
            assert len(a0.calls) == len(a1.calls) == 3  # counts not in scales
            assert a1.calls[0].prompt_tokens == a0.calls[0].prompt_tokens  # prompt not scaled
            for c0, c1 in zip(a0.calls, a1.calls):
                assert abs(c1.output_tokens - 2 * c0.output_tokens) <= 1
            for c0, c1 in zip(a0.calls[:-1], a1.calls[:-1]):
                assert c1.tool_delay_s == pytest.approx(2 * c0.tool_delay_s)
            # constants are structure: never scaled (stage b: output 40, count uniform [2, 2])
            assert [c.output_tokens for c in y.stages[1].calls] == [40, 40]


def test_caps_apply_after_the_factor():
    doc = dict(TINY)
    doc["stages"] = [
        {
            "name": "a",
            "agent": "A",
            "calls": {"count": {"uniform": [4, 4]}, "output": {"uniform": [100, 100], "max": 150}},
        }
    ]
    doc["hardness"] = {"factor": 3.0, "scales": ["count", "output"]}
    t = parse_workload(doc, "t").sample(1, 1.0, np.random.default_rng(0))[0]
    assert len(t.stages[0].calls) == 12
    assert {c.output_tokens for c in t.stages[0].calls} == {150}
    # the short form: a distribution alone scales count and output
    doc["hardness"] = {"lognormal": {"median": 1.0, "sigma": 0.5}}
    wl = parse_workload(doc, "t")
    assert wl.hardness.fields == ("count", "output")


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"factor": 1.0, "scales": ["rounds"]}, "t: hardness.scales: unknown field 'rounds'"),
        ({"factor": 1.0, "scales": []}, "t: hardness.scales: must be a non-empty list"),
        ({"factor": 1.0, "what": 1}, "t: hardness: unknown field(s) ['what']"),
        (
            {"factor": {"lognormal": {"median": -1, "sigma": 1}}},
            "t: hardness.factor.lognormal.median: must be > 0",
        ),
        ("hard", "t: hardness: must be a number or a distribution mapping"),
    ],
)
def test_hardness_errors_name_the_field(bad, msg):
    with pytest.raises(SpecError) as e:
        parse_workload(dict(TINY, hardness=bad), "t")
    assert str(e.value).startswith(msg), str(e.value)
