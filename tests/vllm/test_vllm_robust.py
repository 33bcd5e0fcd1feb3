"""Bad input never crashes the engine (issue 14): malformed workflow tags, client aborts, and
workflow state the engine lost (restart, or a task forgotten after ``task_idle_s``)."""

from __future__ import annotations

import logging
import math
import time
import zlib

import pytest

from topas.engine.snapshot import StageStatus
from topas.estimators.longest_path import expected_remaining_s
from topas.integrations.vllm.driver import prefix_ids, stage_stream
from topas.integrations.vllm.tags import MAX_INT, encode_dag, make_tag

pytestmark = pytest.mark.vllm

BS = 128
DAG = [
    ("plan", "arch", "plan", ()),
    ("code", "eng", "code", ("plan",)),
    ("test", "qa", "test", ("code",)),
]


def _prompt(key: str, agent: str = "eng", prefix: int = BS, dyn: int = 60) -> list[int]:
    return prefix_ids(agent, prefix, 4096) + stage_stream(
        zlib.crc32(key.encode()), "s", dyn, 4096, 0
    )


def _submit(eng, key, prompt, out=2, tag=None):
    from vllm.inputs import TokensPrompt

    from vllm import SamplingParams

    sp = SamplingParams(
        max_tokens=out, min_tokens=out, ignore_eos=True, temperature=0.0, extra_args=tag
    )
    eng.add_request(key, TokensPrompt(prompt_token_ids=prompt), sp)


def _run(eng, limit=3000):
    """Step to completion; returns {request_id: (finish_reason, n_out)}; then lets the
    scheduler see the last finishes (they are synced at the start of a schedule call)."""
    done = {}
    for _ in range(limit):
        if not eng.has_unfinished_requests():
            eng.engine_core.engine_core.scheduler._sync()
            return done
        for o in eng.step():
            if o.finished:
                assert o.request_id not in done, f"{o.request_id} finished twice"
                done[o.request_id] = (o.outputs[0].finish_reason, len(o.outputs[0].token_ids))
    raise AssertionError("engine did not drain")


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def warnings_log():
    h = _Lines()
    logger = logging.getLogger("vllm.topas")
    logger.addHandler(h)
    yield h.lines
    logger.removeHandler(h)


def _good(task, **kw):
    return make_tag(
        task=task, stage="code", agent="eng", prefix_tokens=BS, dag=DAG, done=["plan"], **kw
    )


def _malformed() -> list[tuple[str, str, dict]]:
    """(case id, the key the warning must name, tag) for every malformed tag."""
    cases = [
        (
            "cyclic-dag",
            "topas_dag",
            {
                **_good("m"),
                "topas_dag": ["plan|arch|plan|test", "code|eng|code|plan", "test|qa|test|code"],
            },
        ),
        (
            "self-dep",
            "topas_dag",
            {**_good("m"), "topas_dag": ["plan|arch|plan|plan", "code|eng|code|plan"]},
        ),
        (
            "unknown-dep",
            "topas_dag",
            {**_good("m"), "topas_dag": ["plan|arch|plan|", "code|eng|code|spec"]},
        ),
        (
            "duplicate-stage",
            "topas_dag",
            {**_good("m"), "topas_dag": ["plan|arch|plan|", "plan|qa|plan|", "code|eng|code|plan"]},
        ),
        ("dag-entry", "topas_dag", {**_good("m"), "topas_dag": ["code|eng"]}),
        ("dag-type", "topas_dag", {**_good("m"), "topas_dag": "plan|arch|plan|"}),
        ("done-unknown", "topas_done", {**_good("m"), "topas_done": ["spec"]}),
        ("done-type", "topas_done", {**_good("m"), "topas_done": "plan"}),
        (
            "agent-missing",
            "topas_agent",
            {k: v for k, v in _good("m").items() if k != "topas_agent"},
        ),
        ("stage-type", "topas_stage", {**_good("m"), "topas_stage": 7}),
    ]
    bad_numbers = [
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("nan", math.nan),
        ("neg", -1),
        ("past-max", MAX_INT + 1),
        ("huge", 2**63 - 1),
        ("huge-float", 1e300),
        ("frac", 2.5),
        ("non-numeric", "abc"),
        ("numeric-str", "12"),
        ("list", [1]),
        ("bool", True),
    ]
    for key in (
        "topas_prefix_tokens",
        "topas_round",
        "topas_arrival_s",
        "topas_final",
        "topas_task",
    ):
        for name, v in bad_numbers:
            if key == "topas_final" and v is True:
                continue  # True == 1: a valid final flag
            if key == "topas_arrival_s" and name in ("past-max", "huge", "huge-float", "frac"):
                continue  # finite times >= 0 are valid (the engine clamps to now)
            if key == "topas_task" and name in (
                "neg",
                "numeric-str",
                "non-numeric",
                "past-max",
                "huge",
            ):
                continue  # any string or 64-bit integer is a valid task id
            cases.append((f"{key}={name}", key, {**_good("m"), key: v}))
    return [
        (
            cid,
            key,
            {**tag, "topas_task": tag.get("topas_task", "m")} if key != "topas_task" else tag,
        )
        for cid, key, tag in cases
    ]


def test_malformed_tags_are_served_untagged_and_logged(engine, warnings_log, monkeypatch):
    """Every malformed tag, through a real engine under the estimator-driven policy: every
    request completes, each is served untagged with one warning naming the request id, the
    key and the problem; a well-formed tag right after is still served tagged."""
    eng, sched = engine
    sched.set_policy("topas")
    monkeypatch.setattr(sched, "tag_warn_interval_s", 0.0)  # every line, for this test
    cases = _malformed()
    for k, (cid, _key, tag) in enumerate(cases):
        tag = dict(tag)
        if tag.get("topas_task") == "m":
            tag["topas_task"] = f"m{k}"
        _submit(eng, f"bad-{cid}", _prompt(cid), tag=tag)
    # a DAG out of topological order is not malformed: it is reordered and served tagged
    rev = {**_good("rev"), "topas_dag": encode_dag(DAG[::-1])}
    _submit(eng, "rev", _prompt("rev"), tag=rev)
    _submit(eng, "ok", _prompt("ok"), tag=_good("ok"))
    done = _run(eng)
    assert sorted(done) == sorted([f"bad-{c}" for c, _, _ in cases] + ["rev", "ok"])
    assert all(n == 2 for _, n in done.values())
    assert sched.topas_stats["bad_tags"] == len(cases)
    assert sched.topas_stats["policy_errors"] == 0
    assert len(warnings_log) == len(cases)
    for (cid, key, _), line in zip(cases, warnings_log):
        # vLLM appends a suffix to the client's id for its internal one
        assert f"request bad-{cid}-" in line and key in line and "served untagged" in line, line
        assert "\n" not in line and len(line) < 300
    for key in ("rev", "ok"):
        task = sched._tasks[sched._task_ids[key]]
        pos = {n: k for k, n in enumerate(task.order)}
        assert all(pos[d] < pos[n] for n in task.order for d in task.stages[n].deps)
        assert task.stages["plan"].status == StageStatus.DONE
        assert set(task.stages) == {"plan", "code", "test"}
        lp = expected_remaining_s(sched.build_snapshot(), task)
        assert math.isfinite(lp) and 0 <= lp < 1e4, lp
    assert not any(k.startswith("m") for k in sched._task_ids if not k.startswith("untagged"))


def test_repeated_bad_tags_are_rate_limited(engine, warnings_log, monkeypatch):
    eng, sched = engine
    monkeypatch.setattr(sched, "tag_warn_interval_s", 3600.0)
    sched._tag_warned.clear()
    for k in range(3):
        _submit(eng, f"rl{k}", _prompt(f"rl{k}"), tag={**_good(f"rl{k}"), "topas_round": math.inf})
    _submit(eng, "rl-dag", _prompt("rl-dag"), tag={**_good("rld"), "topas_dag": ["x|y"]})
    assert len(_run(eng)) == 4
    assert len(warnings_log) == 2  # one per key
    assert "request rl0-" in warnings_log[0] and "request rl-dag-" in warnings_log[1]
    _submit(eng, "rl3", _prompt("rl3"), tag={**_good("rl3"), "topas_round": math.inf})
    monkeypatch.setattr(sched, "tag_warn_interval_s", 0.0)
    _run(eng)
    # rl1 and rl2 were not logged; the next line that is says so
    assert "request rl3-" in warnings_log[-1], warnings_log
    assert "(2 more bad topas_round tags not logged)" in warnings_log[-1], warnings_log


def _step_until_decoding(eng, rid, min_tokens=3, limit=500):
    sched = eng.engine_core.engine_core.scheduler
    for _ in range(limit):
        eng.step()
        r = next((r for k, r in sched.requests.items() if k.startswith(f"{rid}-")), None)
        assert r is not None, f"{rid} finished before it could be aborted"
        if r.num_output_tokens >= min_tokens:
            return
    raise AssertionError(f"{rid} never decoded")


@pytest.mark.parametrize("policy", ["fcfs", "topas"])
def test_an_aborted_call_is_no_history_and_no_progress(engine, policy):
    """A client abort (even of a ``final`` call) leaves no history record and does not advance
    its stage; a retry that completes does."""
    eng, sched = engine
    sched.set_policy(policy)
    agent = f"abort-{policy}"
    t = f"ab-{policy}"
    tag = dict(
        task=t,
        stage="code",
        agent=agent,
        prefix_tokens=BS,
        kind="code",
        dag=[("plan", "arch", "plan", ()), ("code", agent, "code", ("plan",))],
        done=["plan"],
    )
    # 1) the stage's first call, final, aborted mid-decode: no progress at all
    _submit(eng, f"{t}-0", _prompt(f"{t}-0", agent), out=64, tag=make_tag(**tag, final=True))
    _step_until_decoding(eng, f"{t}-0")
    eng.abort_request([f"{t}-0"])
    _run(eng)
    task = sched._tasks[sched._task_ids[t]]
    st = task.stages["code"]
    assert (agent, "code") not in sched._history
    assert st.status == StageStatus.PENDING and st.rounds_done == 0 and st.output_tokens == 0
    assert st.started_s is None and task.stages_done == 1  # plan only (from topas_done)
    assert sched.topas_stats["aborted"] == 1 and not sched._held
    # 2) call 0 completes (not final), call 1 (final) is aborted: one call of progress, open
    _submit(eng, f"{t}-1", _prompt(f"{t}-1", agent), out=2, tag=make_tag(**tag))
    _run(eng)
    assert st.rounds_done == 1 and st.status == StageStatus.TOOL
    _submit(
        eng,
        f"{t}-2",
        _prompt(f"{t}-1", agent, dyn=200),
        out=64,
        tag=make_tag(**tag, round_index=1, final=True),
    )
    _step_until_decoding(eng, f"{t}-2")
    eng.abort_request([f"{t}-2"])
    _run(eng)
    assert st.rounds_done == 1 and st.output_tokens == 2 and st.status == StageStatus.TOOL
    assert (agent, "code") not in sched._history and task.stages_done == 1
    # 3) the retry of call 1 completes: the stage is done, one record of two calls
    _submit(
        eng,
        f"{t}-3",
        _prompt(f"{t}-1", agent, dyn=200),
        out=2,
        tag=make_tag(**tag, round_index=1, final=True),
    )
    _run(eng)
    assert st.status == StageStatus.DONE and task.stages_done == 2
    (rec,) = sched._history[(agent, "code")]
    assert rec.rounds == 2 and rec.output_tokens == 4
    assert sched.topas_stats["aborted"] == 2 and sched.topas_stats["policy_errors"] == 0


def test_forgotten_task_is_rebuilt_from_topas_done_and_round(engine, monkeypatch):
    """The engine keeps workflow state in memory only: after a restart, or once a task has had
    no live request for ``task_idle_s``, its stages' progress is gone.  A client resends it
    with every request -- ``topas_done`` (every finished stage), ``topas_round`` (calls of
    this stage already made) and ``topas_arrival_s`` -- and the task is rebuilt from those;
    the rebuilt stage's service time is unknown, so it enters no history."""
    eng, sched = engine
    agent, t = "rs-eng", "rs"
    dag = [
        ("plan", "rs-arch", "plan", ()),
        ("code", agent, "code", ("plan",)),
        ("test", "rs-qa", "test", ("code",)),
    ]
    arrival = time.time() - 5.0
    common = dict(task=t, dag=dag, arrival_s=arrival, prefix_tokens=BS)
    _submit(
        eng,
        "rs-plan",
        _prompt("rs-plan", "rs-arch"),
        tag=make_tag(stage="plan", agent="rs-arch", final=True, **common),
    )
    _submit(
        eng,
        "rs-code0",
        _prompt("rs-code", agent),
        tag=make_tag(stage="code", agent=agent, done=["plan"], **common),
    )
    _run(eng)
    tid = sched._task_ids[t]
    assert sched._tasks[tid].stages["code"].rounds_done == 1
    n_code_hist = len(sched._history.get((agent, "code"), ()))
    # the task is forgotten (as after task_idle_s of tool time, or an engine restart)
    monkeypatch.setattr(sched, "task_idle_s", 0.0)
    _submit(eng, "rs-flush", _prompt("rs-flush"))
    _run(eng)
    assert tid not in sched._tasks
    monkeypatch.setattr(sched, "task_idle_s", 300.0)
    # the client resends its progress: plan is done, this is code's call 1 (without
    # topas_done the rebuilt task would wait for plan forever)
    _submit(
        eng,
        "rs-code1",
        _prompt("rs-code", agent, dyn=200),
        tag=make_tag(stage="code", agent=agent, done=["plan"], round_index=1, final=True, **common),
    )
    _step_until_decoding(eng, "rs-code1", min_tokens=1)
    task = sched._tasks[tid]
    assert task.stages["plan"].status == StageStatus.DONE
    assert task.stages["code"].rounds_done == 1
    assert task.stages["test"].status == StageStatus.PENDING
    assert abs(task.arrival_s - (arrival - sched.t0)) < 1e-6  # the task's age survives
    lp = expected_remaining_s(sched.build_snapshot(), task)
    assert math.isfinite(lp) and lp >= 0
    _run(eng)
    assert task.stages["code"].status == StageStatus.DONE
    assert task.stages["code"].rounds_done == 2 and task.stages_done == 2
    assert len(sched._history.get((agent, "code"), ())) == n_code_hist  # no partial record
    # the next stage, with the full done list, is an ordinary tagged call
    _submit(
        eng,
        "rs-test",
        _prompt("rs-test", "rs-qa"),
        tag=make_tag(stage="test", agent="rs-qa", done=["plan", "code"], final=True, **common),
    )
    _run(eng)
    assert task.stages_done == 3 and sched.topas_stats["bad_tags"] == 0
    assert len(sched._history[("rs-qa", "test")]) == 1
