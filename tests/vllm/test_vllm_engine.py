"""In-process vLLM engine driven by topas policies (tiny random model, CPU)."""

from __future__ import annotations

import pytest

from topas.engine.decision import Decision
from topas.engine.snapshot import Location
from topas.integrations.vllm.driver import prefix_ids, stage_stream
from topas.integrations.vllm.tags import make_tag

pytestmark = pytest.mark.vllm

BS = 128


def _submit(eng, key, prompt, out=4, tag=None):
    from vllm.inputs import TokensPrompt

    from vllm import SamplingParams

    sp = SamplingParams(
        max_tokens=out, min_tokens=out, ignore_eos=True, temperature=0.0, extra_args=tag
    )
    eng.add_request(key, TokensPrompt(prompt_token_ids=prompt), sp)


def _run(eng, limit=2000, admitted=None):
    """Step to completion; returns {request_id: (finish order, num_cached_tokens, n_out)}.
    ``admitted`` (a list) receives request ids in the order they first started running."""
    done = {}
    sched = eng.engine_core.engine_core.scheduler
    for _ in range(limit):
        if not eng.has_unfinished_requests():
            return done
        outs = eng.step()
        if admitted is not None:
            admitted.extend(r.request_id for r in sched.running if r.request_id not in admitted)
        for o in outs:
            if o.finished:
                assert o.request_id not in done, f"{o.request_id} finished twice"
                done[o.request_id] = (len(done), o.num_cached_tokens, len(o.outputs[0].token_ids))
    raise AssertionError("engine did not drain")


def _req(eng, key, agent, prefix, dyn, out=4, task=None, stage="s", final=None):
    prompt = prefix_ids(agent, prefix, 4096) + stage_stream(hash(key) % 10**6, stage, dyn, 4096, 0)
    tag = make_tag(task=task or key, stage=stage, agent=agent, prefix_tokens=prefix, final=final)
    _submit(eng, key, prompt, out, tag)


def test_untagged_requests_complete_as_single_request_tasks(engine):
    eng, sched = engine
    for i in range(3):
        _submit(eng, f"u{i}", stage_stream(i, "u", 200 + 50 * i, 4096, 1), out=5)
    done = _run(eng)
    assert sorted(done) == ["u0", "u1", "u2"]
    assert all(n_out == 5 for _, _, n_out in done.values())
    assert sched.topas_stats["decisions"] > 0


def test_bad_tag_is_served_untagged(engine):
    eng, _ = engine
    _submit(
        eng,
        "bad",
        stage_stream(9, "b", 100, 4096, 1),
        out=3,
        tag={"topas_task": "x", "topas_stage": "", "topas_agent": "a"},
    )
    assert list(_run(eng)) == ["bad"]


def _order(engine, policy):
    """A crafted queue: agent W's prefix is resident (warmed and pinned), agent C's is not.
    One request runs at a time; returns the order in which requests first started."""
    eng, sched = engine
    sched.set_policy(policy)
    _req(eng, f"{policy}-warm", "W", 5 * BS, 100)
    _run(eng)
    assert "W" in sched.pinned_agents()
    sched.max_num_active_reqs = 1
    _req(eng, f"{policy}-c1", "C", 10 * BS, 300, out=8)
    _req(eng, f"{policy}-c2", "C", 10 * BS, 300, out=8)
    _req(eng, f"{policy}-w1", "W", 5 * BS, 100, out=8)
    admitted: list[str] = []
    done = _run(eng, admitted=admitted)
    assert len(done) == 3
    # vLLM appends a random suffix to request ids internally: "fcfs-c1-1a2b" -> "c1"
    return [k.split("-")[1] for k in admitted]


def test_admission_order_follows_the_policy(engine):
    fcfs = _order(engine, "fcfs")
    assert fcfs == ["c1", "c2", "w1"]  # arrival order
    eng, sched = engine
    sched.unpin_all()
    eng.reset_prefix_cache()  # C's prefix must not be cached from the FCFS run
    sched.max_num_active_reqs = 16
    lpm = _order(engine, "lpm")
    # LPM serves the request whose prefix is cached first
    assert lpm[0] == "w1" and lpm != fcfs


def test_admission_order_topas_differs_from_fcfs(engine):
    topas = _order(engine, "topas")
    # TOPAS starts the request whose prefix is resident (no prefill of a 1280-token prefix);
    # what it does after that (it may preempt) is its own business
    assert topas[0] == "w1"


class _EvictIdle:
    """A test policy: FCFS admission, and evict every idle resident prefix at each step."""

    name = "evict-idle"

    def __init__(self, keep: bool):
        from topas.policies import make_policy

        self.inner = make_policy("fcfs")
        self.keep = keep

    def decide(self, snap):
        d = self.inner.decide(snap)
        if self.keep:  # never evict: admit only what fits beside the resident prefixes
            return Decision(admit=d.admit)
        idle = tuple(
            a for a, p in snap.prefixes.items() if p.location == Location.DEVICE and p.users == 0
        )
        return Decision(admit=d.admit, evict=d.evict + tuple(a for a in idle if a not in d.evict))


@pytest.mark.parametrize("keep", [True, False])
def test_prefix_kept_resident_survives_a_flood_and_evicted_one_does_not(engine, keep):
    eng, sched = engine
    sched.topas_policy = _EvictIdle(keep)
    prefix = 5 * BS  # 640 tokens
    _req(eng, f"p-first-{keep}", "P", prefix, 60)
    _run(eng)
    # flood: unique prompts totalling more than the whole cache (4096 tokens)
    for i in range(6):
        _req(eng, f"flood-{keep}-{i}", f"F{i}", 0, 1000)
    _run(eng)
    _req(eng, f"p-again-{keep}", "P", prefix, 60)
    done = _run(eng)
    cached = done[f"p-again-{keep}"][1]
    if keep:
        assert cached >= prefix
    else:
        assert cached == 0
        assert sched.topas_stats["evictions"] > 0


def test_small_workflow_completes_under_every_policy(engine):
    from topas.api import sample_tasks
    from topas.integrations.vllm.backends import InProcessBackend
    from topas.integrations.vllm.driver import DriveConfig, drive, scale_tasks
    from topas.policies import list_policies

    eng, sched = engine
    wl, tasks = sample_tasks("toy-chain", 2, 50.0, seed=3)  # ~1 s per policy
    scaled, agents = scale_tasks(tasks, wl.agents, DriveConfig(token_scale=0.04, time_scale=0.05))
    n_calls = sum(t.n_calls for t in scaled)

    class _Backend(InProcessBackend):
        def __init__(self, eng):
            self.engine = eng
            self._seen_first = set()
            self.on_step = None

    names = [p.name for p in list_policies()]
    assert {"fcfs", "lpm", "topas"} <= set(names)
    for name in names:
        sched.set_policy(name)
        res = drive(scaled, agents, _Backend(eng), policy=name, run_id=f"wf-{name}")
        keys = [(r.task_id, r.stage, r.round_index) for r in res.requests]
        assert len(keys) == n_calls and len(set(keys)) == n_calls, name
        assert all(t.finished_s >= t.arrival_s for t in res.tasks), name
        assert not eng.has_unfinished_requests()


def test_snapshot_built_from_tags_and_queues(engine):
    from topas.engine.snapshot import Phase, StageStatus

    eng, sched = engine
    dag = [
        ("plan", "arch", "plan", ()),
        ("code", "eng", "code", ("plan",)),
        ("test", "qa", "test", ("code",)),
    ]
    prompt = prefix_ids("eng", 2 * BS, 4096) + stage_stream(1, "code", 300, 4096, 0)
    _submit(
        eng,
        "snap-code",
        prompt,
        4,
        make_tag(
            task="snap-t",
            stage="code",
            agent="eng",
            prefix_tokens=2 * BS + 5,
            round_index=1,
            dag=dag,
            done=["plan"],
        ),
    )
    _submit(eng, "snap-untagged", stage_stream(2, "u", 100, 4096, 0), 4)
    sched._sync()
    snap = sched.build_snapshot()
    assert snap.kv_budget_tokens == sched.topas_config.kv_budget_tokens > 0
    assert snap.config.block_size == BS and not snap.running
    by_stage = {r.stage: r for r in snap.waiting}
    code = by_stage["code"]
    assert code.phase == Phase.WAITING and code.round_index == 1
    assert code.prefix_tokens == 2 * BS  # only whole blocks can be shared
    assert code.prompt_tokens == len(prompt) - 2 * BS
    task = snap.tasks[code.task_id]
    assert [task.stages[s].status for s in ("plan", "code", "test")] == [
        StageStatus.DONE,
        StageStatus.READY,
        StageStatus.PENDING,
    ]
    assert task.stages["test"].deps == ("code",) and task.stages["plan"].succs == ("code",)
    assert by_stage["call"].agent == "__untagged__" and by_stage["call"].task_id != code.task_id
    assert snap.prefixes["eng"].location == Location.NONE
    done = _run(eng)
    assert sorted(done) == ["snap-code", "snap-untagged"]
    snap = sched.build_snapshot()
    assert snap.prefixes["eng"].location == Location.DEVICE  # pinned after it was computed


def test_cli_subcommands_register(tmp_path):
    import argparse

    from topas.integrations.vllm.cli import add_arguments

    ap = argparse.ArgumentParser()
    add_arguments(ap.add_subparsers(dest="cmd"))
    a = ap.parse_args(["drive", "--workload", "toy-chain", "--policy", "lpm", "--in-process"])
    assert a.cmd == "drive" and a.policy == "lpm" and a.in_process and a.fn.__name__ == "cli_drive"
    a = ap.parse_args(["tiny-model", str(tmp_path / "m"), "--seed", "3"])
    assert a.fn(a) == 0
    assert (tmp_path / "m" / "config.json").exists() and (
        tmp_path / "m" / "tokenizer.json"
    ).exists()


def test_tiny_model_is_seeded(tmp_path, tiny_model):
    import hashlib
    from pathlib import Path

    from topas.integrations.vllm.tiny_model import build_tiny_model

    def digest(p):
        return [
            hashlib.sha256((Path(p) / f).read_bytes()).hexdigest()
            for f in ("model.safetensors", "tokenizer.json")
        ]

    assert digest(build_tiny_model(tmp_path / "same", seed=0)) == digest(tiny_model)
    assert digest(build_tiny_model(tmp_path / "other", seed=1)) != digest(tiny_model)


class _HoldAll:
    """A test policy: FCFS admission; hold every offered context for a minute (or never)."""

    name = "hold-all"

    def __init__(self, hold: bool):
        from topas.policies import make_policy

        self.inner = make_policy("fcfs")
        self.hold = hold
        self.offered: list = []

    def decide(self, snap):
        d = self.inner.decide(snap)
        new = {k: h for k, h in snap.held.items() if h.expires_s <= snap.time_s}
        self.offered.extend(new.values())
        assert all(h.agent == "HP" for h in new.values()), "a final call offered its context"
        hold = {k: snap.time_s + 60.0 for k in new} if self.hold else {}
        return Decision(admit=d.admit, evict=d.evict, hold=hold)


def _call(eng, key, k, *, final, dyn):
    """Call ``k`` of stage "s" of task ``key`` (agent HP, 2-block prefix): prompt = prefix + the
    stage's stream, so call 1 starts with call 0's prompt (a ReAct context)."""
    prompt = prefix_ids("HP", 2 * BS, 4096) + stage_stream(77, "s", 1024, 4096, 0)[:dyn]
    tag = make_tag(
        task=key, stage="s", agent="HP", prefix_tokens=2 * BS, round_index=k, final=final
    )
    _submit(eng, f"{key}-{k}", prompt, 4, tag)


@pytest.mark.parametrize("hold", [True, False])
def test_held_context_survives_a_flood_and_an_unheld_one_does_not(engine, hold):
    eng, sched = engine
    pol = sched.topas_policy = _HoldAll(hold)
    _call(eng, f"H{hold}", 0, final=False, dyn=4 * BS)
    _run(eng)
    for i in range(6):  # the flood (more than the 4096-token cache) triggers the decisions
        _req(eng, f"hflood-{hold}-{i}", f"G{i}", 0, 1000, final=True)
    _run(eng)
    # the context was offered once: the call's 4 full blocks after the prefix
    assert [(h.stage, h.agent, h.tokens) for h in pol.offered] == [("s", "HP", 4 * BS)]
    _call(eng, f"H{hold}", 1, final=True, dyn=5 * BS)
    done = _run(eng)
    cached = done[f"H{hold}-1"][1]
    if hold:
        assert cached >= 6 * BS  # prefix + the held context
        assert sched.topas_stats["holds"] == 1 and sched.topas_stats["hold_hits"] == 1
    else:
        assert cached < 6 * BS
        assert sched.topas_stats["holds"] == 0
    assert not sched._held  # used up (or never held); no reference is left behind


def test_final_call_offers_no_context(engine):
    eng, sched = engine
    pol = sched.topas_policy = _HoldAll(True)
    _call(eng, "F", 0, final=True, dyn=4 * BS)
    _run(eng)
    _req(eng, "after-final", "G", 0, 300, final=True)
    _run(eng)
    assert pol.offered == [] and sched.topas_stats["holds"] == 0


def test_iteration_trace_records_every_engine_step(engine):
    from topas.api import sample_tasks
    from topas.integrations.vllm.backends import InProcessBackend
    from topas.integrations.vllm.driver import DriveConfig, drive, scale_tasks
    from topas.integrations.vllm.fit import IterationTrace

    eng, sched = engine
    steps = []
    trace = IterationTrace()

    class _Backend(InProcessBackend):
        def __init__(self, eng):
            self.engine = eng
            self._seen_first = set()
            self.on_step = lambda dt: (steps.append(dt), trace.on_step(dt))

    wl, tasks = sample_tasks("toy-chain", 2, 50.0, seed=4)
    scaled, agents = scale_tasks(tasks, wl.agents, DriveConfig(token_scale=0.04, time_scale=0.05))
    trace.attach(sched)
    try:
        drive(scaled, agents, _Backend(eng), policy="fcfs", run_id="trace")
    finally:
        IterationTrace.detach(sched)
    assert "schedule" not in sched.__dict__
    rows = trace.rows
    assert 0 < len(rows) <= len(steps) and all(r[3] > 0 for r in rows)
    assert {r[4] for r in rows} == {"prefill", "decode"}
    # every generated token after the first went through the engine, and at most every prompt
    # token (prefix-cache hits skip some; no preemption in this small run)
    n_prompt = sum(
        agents[s.agent].prefix_tokens + c.prompt_tokens
        for t in scaled
        for s in t.stages
        for c in s.calls
    )
    n_decode = sum(c.output_tokens - 1 for t in scaled for s in t.stages for c in s.calls)
    assert n_decode <= sum(r[0] for r in rows) <= n_prompt + n_decode


def test_real_vs_sim_self_calibrated(engine, llm, tiny_model, monkeypatch):
    """The fidelity runner end to end on the shared engine: every policy runs for real and in
    the simulator; with ``self_calibrate`` the profile comes from the first policy's trace
    (and the scheduler is left unwrapped afterwards)."""
    from topas.integrations.vllm import driver, fidelity

    _, sched = engine
    monkeypatch.setattr(driver, "make_llm", lambda *a, **k: llm)  # the shared engine
    out = fidelity.real_vs_sim(
        tiny_model,
        "toy-chain",
        ["fcfs", "topas"],
        [3],
        n_tasks=2,
        rate=50.0,
        token_scale=0.04,
        time_scale=0.05,
        kv_cache_bytes=8 << 20,
        progress=lambda m: None,
        self_calibrate=True,
    )
    assert [(r["policy"], r["seed"]) for r in out["runs"]] == [("fcfs", 3), ("topas", 3)]
    assert all(r["profile"] == "self-calibrated on fcfs" for r in out["runs"])
    assert all(r["real_mean_jct_s"] > 0 and r["sim_mean_jct_s"] > 0 for r in out["runs"])
    assert out["summary"]["fcfs"]["real_mean_jct_vs_fcfs"] == 1.0
    assert "schedule" not in sched.__dict__
    # every run is bracketed by the speed reference, and the anchored simulator run uses it
    for r in out["runs"]:
        assert r["speed_index"] == pytest.approx((r["speed_before"] * r["speed_after"]) ** 0.5)
        assert 0.1 < r["speed_index"] < 20 and r["anchored_sim_mean_jct_s"] > 0


def test_speed_index_is_measured_over_predicted_on_the_engine(engine, llm):
    """Against a profile that predicts everything twice as fast, the same engine is about
    twice as slow (two measurements, so only roughly: the machine's speed drifts)."""
    from topas.engine.cost import get_profile
    from topas.integrations.vllm.calibrate import speed_index

    eng, _ = engine
    shipped = get_profile("cpu/tiny-llama")
    a = speed_index(llm, shipped, reps=2)
    b = speed_index(llm, shipped.time_scaled(0.5), reps=2)
    assert not eng.has_unfinished_requests()
    assert 0.1 < a < 20
    assert 1.2 < b / a < 3.4


class _FCFSWithCachePriority:
    """Admits every waiting request; calls of stage ``hi`` get cache priority 2, of ``lo`` 1."""

    name = "fcfs-cache-priority"

    def decide(self, snap):
        prio = {"hi": 2.0, "lo": 1.0}
        return Decision(
            admit=tuple(r.request_id for r in snap.waiting),
            cache_priority={r.request_id: prio[r.stage] for r in snap.waiting if r.stage in prio},
        )


@pytest.mark.parametrize("with_priority", [False, True])
def test_cache_priority_decides_which_context_vllm_evicts(engine, with_priority):
    """Decision.cache_priority on vLLM: two finished calls' contexts (6 blocks each; ``hi``
    finished first, so vLLM's LRU free queue evicts it first) and then a flood that needs
    all free blocks but 6.  With LRU (FCFS, no priorities) ``hi``'s context is gone and
    ``lo``'s found again; with priorities the scheduler's reorder of the free queue makes the
    flood take ``lo``'s blocks instead, and ``hi``'s next call finds them (all but the last
    block, which vLLM always recomputes)."""
    eng, sched = engine
    if with_priority:
        sched.topas_policy = _FCFSWithCachePriority()
    ids = {s: stage_stream(7, s, 6 * BS, 4096, 3) for s in ("hi", "lo")}
    for s in ("hi", "lo"):  # one after the other: hi's blocks are freed first
        tag = make_tag(task=f"T-{s}-{with_priority}", stage=s, agent="X", prefix_tokens=0)
        _submit(eng, f"{s}-{with_priority}", ids[s], out=1, tag=tag)
        _run(eng)
    pool = sched.kv_cache_manager.block_pool
    # lo's context is still offered to the policy (referenced) until the flood's first step
    # drops the offer; then every block but the null one is free: the flood leaves 6
    flood = pool.num_gpu_blocks - 1 - 6
    _submit(eng, f"flood-{with_priority}", stage_stream(8, "f", flood * BS - 1, 4096, 3), out=1)
    _run(eng)
    hit = {}
    for s in ("lo", "hi"):  # one at a time: lo's new blocks come from the free queue's head
        _submit(eng, f"{s}-again-{with_priority}", ids[s], out=1)
        hit[s] = _run(eng)[f"{s}-again-{with_priority}"][1]
    if with_priority:
        assert hit["hi"] == 6 * BS - BS and hit["lo"] == 0  # the last block is recomputed
        assert sched.topas_stats["cache_reorders"] > 0
    else:
        assert hit["hi"] == 0 and hit["lo"] == 6 * BS - BS


def test_block_refs_reorder_vllms_free_queue_by_priority_and_forget_the_lowest_past_the_cap():
    """BlockRefs.reorder on vLLM's own BlockPool: ranked contexts go to the end of the free
    queue (evicted after every other free block), lowest priority first, each tail block
    first; a context whose leading block was reused, or whose task is gone, is forgotten; past
    ``max_ranked`` the lowest-ranked context is forgotten."""
    from vllm.v1.core.block_pool import BlockPool

    from topas.integrations.vllm.blocks import BlockRefs

    class _KV:
        block_pool = BlockPool(num_gpu_blocks=16, enable_caching=True, hash_block_size=16)

    pool = _KV.block_pool
    refs = BlockRefs(_KV(), 16)
    blocks = pool.get_new_blocks(9)
    for k, b in enumerate(blocks):
        b._block_hash = f"h{k}".encode()  # cached blocks (a test stand-in for real hashes)
    ctx = {"a": blocks[0:3], "b": blocks[3:6], "c": blocks[6:9]}
    pool.free_blocks(reversed(blocks))  # vLLM's order: the last block is evicted first

    def queue() -> list[int]:
        out, b = [], pool.free_block_queue.fake_free_list_head.next_free_block
        while b is not pool.free_block_queue.fake_free_list_tail:
            out.append(b.block_id)
            b = b.next_free_block
        return out

    others = [i for i in queue() if i not in {b.block_id for b in blocks}]
    for name, prio, task in (("a", 3.0, 1), ("b", 1.0, 2), ("c", 2.0, 3)):
        refs.rank((task, name), prio, ctx[name])
    assert refs.reorder(lambda t: True) == 9
    ids = {n: [b.block_id for b in bl] for n, bl in ctx.items()}
    tail = [*reversed(ids["b"]), *reversed(ids["c"]), *reversed(ids["a"])]
    assert queue() == others + tail
    assert refs.reorder(lambda t: True) == 0  # nothing ranked or freed since: skipped
    # c's leading block is reused (its hash changes) and b's task is gone: both forgotten
    ctx["c"][0]._block_hash = b"other"
    refs.rank((4, "d"), 0.5, [])  # an empty context ranks nothing (marks no change)
    refs._rank_dirty = True
    refs.reorder(lambda t: t != 2)
    assert set(refs.ranked) == {(1, "a")}
    # the cap: the lowest (priority, finish order) goes
    refs.max_ranked = 2
    refs.rank((5, "e"), 9.0, ctx["b"])
    refs.rank((6, "f"), 0.1, ctx["c"][1:])
    assert set(refs.ranked) == {(1, "a"), (5, "e")}
