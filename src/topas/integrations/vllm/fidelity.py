"""Real engine against simulator: the same scaled workload run in vLLM and in the embedded
simulator under each policy, with the speed reference that anchors the comparison
(``topas calibrate --compare``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from topas.engine.cost import Profile
from topas.integrations.vllm.calibrate import speed_index
from topas.integrations.vllm.driver import CPU_BLOCK
from topas.integrations.vllm.fit import IterationTrace, fit


def run_real(
    model: str,
    workload: str,
    policies,
    *,
    n_tasks: int,
    rate: float | None,
    seed: int,
    token_scale: float,
    time_scale: float,
    kv_cache_bytes: int,
    llm=None,
    profile: Profile | None = None,
    trace: IterationTrace | None = None,
    anchor: bool = False,
) -> tuple:
    """Real-engine runs of ``policies`` on the same scaled tasks; one engine, policy swapped
    between runs (prefix cache, pins, held contexts and counters reset).  Returns
    ``({policy: SimResult}, scaled tasks, agents, llm, {policy: engine counters})``.

    ``anchor``: time :func:`speed_index` (against ``profile``, default the shipped
    ``cpu/tiny-llama``) right before and right after each run; the counters then also hold
    ``speed_before``, ``speed_after`` and ``speed_index`` (their geometric mean)."""
    from topas.api import sample_tasks
    from topas.integrations.vllm.backends import InProcessBackend
    from topas.integrations.vllm.driver import (
        DriveConfig,
        drive,
        make_llm,
        scale_tasks,
    )

    wl, tasks = sample_tasks(workload, n_tasks, rate, seed)
    scaled, agents = scale_tasks(
        tasks, wl.agents, DriveConfig(token_scale=token_scale, time_scale=time_scale, seed=seed)
    )
    if llm is None:
        llm = make_llm(model, policies[0], kv_cache_bytes=kv_cache_bytes, seed=seed)
    backend = InProcessBackend(llm, on_step=trace.on_step if trace is not None else None)
    sched = backend.scheduler()
    if trace is not None:
        trace.attach(sched)
    ref = profile
    if anchor and ref is None:
        from topas.engine.cost import get_profile

        ref = get_profile("cpu/tiny-llama")

    def speed() -> float:
        # the reference iterations run under FCFS with nothing pinned; they step the engine
        # directly, not through the backend, so a trace records none of them
        sched.set_policy("fcfs", seed=seed)
        sched.unpin_all()
        return speed_index(llm, ref)

    out, stats = {}, {}
    for pol in policies:
        before = speed() if anchor else None
        sched.set_policy(pol, seed=seed)
        sched.unpin_all()
        llm.reset_prefix_cache()
        backend._seen_first = set()
        out[pol] = drive(
            scaled,
            agents,
            backend,
            policy=pol,
            seed=seed,
            profile=profile,
            run_id=f"{pol}-{time.time_ns()}",
        )
        stats[pol] = dict(sched.topas_stats)
        if anchor:
            after = speed()
            stats[pol].update(
                speed_before=before, speed_after=after, speed_index=float(np.sqrt(before * after))
            )
    return out, scaled, agents, llm, stats


def run_sim(
    scaled,
    agents,
    policy: str,
    profile: Profile,
    seed: int,
    kv_budget_tokens: int,
    context_cache: bool = True,
):
    """The simulator on the engine's setting: no host tier, vLLM's KV budget, and (as vLLM's
    automatic prefix caching does) finished contexts cached in free memory."""
    from topas.engine.simulator import Simulator
    from topas.policies import make_policy

    sim = Simulator(
        scaled,
        agents,
        profile,
        make_policy(policy, seed=seed),
        seed=seed,
        host_tier=False,
        kv_budget_tokens=kv_budget_tokens,
        context_cache=context_cache,
    )
    return sim.run()


#: engine counters reported per real run
COUNTERS = ("policy_preemptions", "guard_admissions", "evictions", "holds", "hold_hits")


def real_vs_sim(
    model: str,
    workload: str,
    policies,
    seeds,
    *,
    n_tasks: int,
    rate: float | None,
    token_scale: float,
    time_scale: float,
    kv_cache_bytes: int,
    progress=print,
    self_calibrate: bool = False,
    anchor: bool = True,
) -> dict:
    """Every policy on every seed in the real engine and in the simulator (the same scaled
    tasks, the ``cpu/tiny-llama`` profile, the engine's KV budget): per-run rows and a
    summary per policy (mean over seeds; ratios to FCFS are per seed, then the median).

    ``self_calibrate``: per seed, the simulator's profile is instead fitted to the traced
    iterations of the *first* policy's real run on this very engine process (joined by the
    shipped profile's synthetic points if the trace alone cannot be fitted), and predicts the
    others out of sample -- what is left of the error once the engine process's own speed
    (which varies between processes on the CPU backend) is known.

    ``anchor`` (default): each real run is bracketed by :func:`speed_index`, and the
    simulator also runs the shipped profile scaled to that speed (``anchored_*`` fields):
    the error that is left once the machine's speed at the time of the run is known, measured
    on fixed reference iterations, never on the run itself."""
    from topas.engine.cost import get_profile
    from topas.metrics import summarize

    shipped = get_profile("cpu/tiny-llama")
    kv_tokens = (kv_cache_bytes // 2048 // CPU_BLOCK - 1) * CPU_BLOCK
    params = (
        json.loads((Path(model) / "topas_tiny_model.json").read_text())["params"]
        if self_calibrate
        else None
    )
    runs: list[dict] = []
    llm = None
    kw = dict(
        n_tasks=n_tasks,
        rate=rate,
        token_scale=token_scale,
        time_scale=time_scale,
        kv_cache_bytes=kv_cache_bytes,
        anchor=anchor,
    )
    for seed in seeds:
        t = time.perf_counter()
        prof = shipped
        if self_calibrate:
            trace = IterationTrace()
            res, scaled, agents, llm, stats = run_real(
                model,
                workload,
                policies[:1],
                seed=seed,
                llm=llm,
                profile=shipped,
                trace=trace,
                **kw,
            )
            IterationTrace.detach(llm.llm_engine.engine_core.engine_core.scheduler)
            try:
                prof = fit({}, params, kv_budget_tokens=kv_tokens, rows=trace.rows)
            except ValueError:
                # a short run may have too few prefill iterations for the slopes: add the
                # shipped profile's synthetic points (the trace's rows still dominate)
                prof = fit(
                    (shipped.calibration or {}).get("measured") or {},
                    params,
                    kv_budget_tokens=kv_tokens,
                    rows=trace.rows,
                )
            more, *_, stats2 = run_real(
                model, workload, policies[1:], seed=seed, llm=llm, profile=shipped, **kw
            )
            res.update(more)
            stats.update(stats2)
        else:
            res, scaled, agents, llm, stats = run_real(
                model, workload, policies, seed=seed, llm=llm, profile=prof, **kw
            )
        for pol, r in res.items():
            real = summarize(r)
            sim_res = run_sim(scaled, agents, pol, prof, seed, kv_tokens)
            sim = summarize(sim_res)
            anchored = {}
            if anchor:
                speed = stats[pol]["speed_index"]
                a_sim = summarize(
                    run_sim(scaled, agents, pol, shipped.time_scaled(speed), seed, kv_tokens)
                )
                anchored = {
                    "speed_before": stats[pol]["speed_before"],
                    "speed_after": stats[pol]["speed_after"],
                    "speed_index": speed,
                    "anchored_sim_mean_jct_s": a_sim["mean_jct_s"],
                    "anchored_mean_jct_rel_err": abs(a_sim["mean_jct_s"] - real["mean_jct_s"])
                    / real["mean_jct_s"],
                }
            runs.append(
                {
                    "policy": pol,
                    "seed": seed,
                    "real_mean_jct_s": real["mean_jct_s"],
                    "real_p99_jct_s": real["p99_jct_s"],
                    "real_prefix_hit_rate": real["prefix_hit_rate"],
                    "sim_mean_jct_s": sim["mean_jct_s"],
                    "sim_p99_jct_s": sim["p99_jct_s"],
                    "sim_prefix_hit_rate": sim["prefix_hit_rate"],
                    "sim_preemptions": sim_res.counters.preemptions,
                    "mean_jct_rel_err": abs(sim["mean_jct_s"] - real["mean_jct_s"])
                    / real["mean_jct_s"],
                    "profile": "self-calibrated on " + policies[0] if self_calibrate else prof.name,
                    **{k: stats[pol][k] for k in COUNTERS},
                    **anchored,
                }
            )
        progress(f"seed {seed}: {len(res)} policies in {time.perf_counter() - t:.0f} s")
    summary: dict[str, dict] = {}
    for pol in policies:
        mine = [r for r in runs if r["policy"] == pol]
        row = {
            k: float(np.mean([r[k] for r in mine]))
            for k in (
                "real_mean_jct_s",
                "real_p99_jct_s",
                "sim_mean_jct_s",
                "sim_p99_jct_s",
                "mean_jct_rel_err",
                "real_prefix_hit_rate",
                *COUNTERS,
                "sim_preemptions",
                *(
                    ("speed_index", "anchored_sim_mean_jct_s", "anchored_mean_jct_rel_err")
                    if anchor
                    else ()
                ),
            )
        }
        if "fcfs" in policies:
            for side in ("real", "sim"):
                ratios = [
                    r[f"{side}_mean_jct_s"] / f[f"{side}_mean_jct_s"]
                    for r in mine
                    for f in runs
                    if f["policy"] == "fcfs" and f["seed"] == r["seed"]
                ]
                row[f"{side}_mean_jct_vs_fcfs"] = float(np.median(ratios))
        summary[pol] = row
    return {"runs": runs, "summary": summary}


def print_table(summary: dict) -> None:
    cols = [
        ("real_mean_jct_s", "real mean"),
        ("real_p99_jct_s", "real p99"),
        ("sim_mean_jct_s", "sim mean"),
        ("mean_jct_rel_err", "sim err"),
        ("speed_index", "speed"),
        ("anchored_sim_mean_jct_s", "anchored sim"),
        ("anchored_mean_jct_rel_err", "anchored err"),
        ("real_mean_jct_vs_fcfs", "real vs fcfs"),
        ("sim_mean_jct_vs_fcfs", "sim vs fcfs"),
        ("policy_preemptions", "preempt"),
        ("sim_preemptions", "sim preempt"),
        ("holds", "holds"),
        ("hold_hits", "hold hits"),
    ]
    cols = [c for c in cols if any(c[0] in r for r in summary.values())]
    print("| policy | " + " | ".join(h for _, h in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for pol, r in summary.items():
        cells = []
        for k, _ in cols:
            v = r.get(k)
            cells.append(
                ""
                if v is None
                else f"{v:.1%}"
                if k.endswith("rel_err")
                else f"{v:.3f}"
                if "vs_fcfs" in k
                else f"{v:.2f}"
            )
        print(f"| {pol} | " + " | ".join(cells) + " |")
