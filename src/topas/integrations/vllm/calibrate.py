"""Calibrate the ``cpu/tiny-llama`` simulator profile from the real engine, then measure
fidelity (same workload + policy in the simulator and in vLLM) and run real comparisons.

Calibration measures single engine iterations with ``LLMEngine.step()`` wall times:

* prefill: one request of ``n`` uncached tokens (``n`` <= the chunk size, one iteration),
* prefill after a cached context: ``n`` new tokens after ``c`` tokens already in the prefix
  cache (an agent-prefix hit: the dominant prefill of agent workflows),
* decode: ``b`` requests of context ``c`` each, steady decode iterations,

each the mean over repetitions interleaved across points (``--stat median|min`` exist), and fits the
roofline of :mod:`topas.engine.cost` --
``t = overhead_s + max((lin_flops + attn_flops / attn_eff) / F, bytes / B)`` -- with the tiny
model's true shape: ``overhead_s`` on a grid, ``F`` (= peak_flops * compute_eff) and
``attn_eff`` by relative least squares on the prefill points (``t - overhead_s`` is linear in
the GEMM and the attention FLOPs), then ``B`` (= hbm_bytes_per_s * memory_eff) on a log grid;
the objective is the median relative error over all points.  ``attn_eff`` exists because on
the CPU backend attention over a cached context runs far below the GEMM FLOP rate (measured:
64 new tokens after 3072 cached take ~6x the roofline with ``attn_eff = 1``), which is what
made the simulator under-predict real JCTs.  The fit's relative errors are stored in the
profile's ``calibration``.

Run as a script (``python -m topas.integrations.vllm.calibrate --help``); an
``if __name__ == "__main__":`` guard is required because vLLM runs in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from topas.engine.cost import Profile
from topas.integrations.vllm.driver import CPU_BLOCK, stage_stream
from topas.integrations.vllm.fit import IterationTrace, fit, rows_from_measurements

PROFILE_PATH = Path(__file__).resolve().parents[2] / "engine" / "profiles" / "cpu__tiny-llama.json"


def _sp(n_out: int):
    from vllm import SamplingParams

    return SamplingParams(max_tokens=n_out, min_tokens=n_out, ignore_eos=True, temperature=0.0)


def _prompt(seed: int, n: int) -> dict:
    return {"prompt_token_ids": stage_stream(seed, "cal", n, 4096, 7)}


def _stat(ts, stat: str) -> float:
    """``mean``: what a run's summed step times see (JCT is a sum of iterations, and the same
    decode batch takes 3 ms in one repetition and 5-6 ms in the next on this engine, so a
    median or minimum under-predicts the sum); ``median``: the typical iteration; ``min``:
    robust to other processes on a shared machine (noise only adds) but biased low."""
    if stat == "mean":
        return float(np.mean(ts))
    return float(np.median(ts) if stat == "median" else np.min(ts))


def measure(
    llm,
    *,
    prefill_sizes=(128, 256, 512, 1024, 1536, 2048),
    ctx_prefill_points=((64, 1024), (64, 3072), (128, 2048), (256, 3072), (512, 1024)),
    decode_points=((1, 256), (1, 2048), (4, 512), (8, 1024), (16, 256), (16, 512)),
    reps: int = 5,
    stat: str = "mean",
) -> dict:
    """Iteration wall times of the in-process engine (seconds), ``stat`` (see :func:`_stat`)
    over ``reps`` for prefill and over steady steps for decode.

    ``ctx_prefill`` points ``(n, c)`` time the first step of a request whose first ``c`` tokens
    (whole blocks) are already in the prefix cache and whose last ``n`` are new: the common
    case in agent workflows (agent prefix hit, short dynamic prompt), where the new tokens
    attend to a long cached context."""
    if stat not in ("mean", "median", "min"):
        raise ValueError(f"stat {stat!r}: must be 'mean', 'median' or 'min'")
    eng = llm.llm_engine
    seed = 1000
    # points longer than the engine's context (a small KV cache caps it) are left out
    max_len = eng.model_config.max_model_len
    prefill_sizes = [n for n in prefill_sizes if n < max_len]
    ctx_prefill_points = [(n, c) for n, c in ctx_prefill_points if n + c < max_len]
    decode_points = [(b, c) for b, c in decode_points if c + 24 < max_len]

    def first_step(rid: str, ids: list[int]) -> float:
        eng.add_request(rid, {"prompt_token_ids": ids}, _sp(1))
        t = time.perf_counter()
        eng.step()
        dt = time.perf_counter() - t
        while eng.has_unfinished_requests():
            eng.step()
        return dt

    # repetitions interleave the points (rep 0 of every point, then rep 1, ...), so a burst of
    # other work on a shared machine spoils one sample of several points, not a whole point
    p_ts: dict[int, list[float]] = {n: [] for n in prefill_sizes}
    c_ts: dict[tuple[int, int], list[float]] = {pt: [] for pt in ctx_prefill_points}
    for _ in range(reps):
        for n in prefill_sizes:
            seed += 1
            p_ts[n].append(first_step(f"cal-p{seed}", _prompt(seed, n)["prompt_token_ids"]))
        for n, c in ctx_prefill_points:
            seed += 1
            ctx = _prompt(seed, c)["prompt_token_ids"]
            first_step(f"cal-w{seed}", ctx + [17])  # caches ctx's full blocks
            new = _prompt(seed + 10**6, n)["prompt_token_ids"]
            c_ts[(n, c)].append(first_step(f"cal-c{seed}", ctx + new))
    prefill = [(n, _stat(ts, stat)) for n, ts in p_ts.items()]
    ctx_prefill = [(n, c, _stat(ts, stat)) for (n, c), ts in c_ts.items()]
    d_ts: dict[tuple[int, int], list[float]] = {pt: [] for pt in decode_points}
    for _ in range(reps):
        for b, c in decode_points:
            for _ in range(b):
                seed += 1
                eng.add_request(f"cal-d{seed}", _prompt(seed, c), _sp(24))
            while eng.has_unfinished_requests():
                sched = eng.engine_core.engine_core.scheduler
                all_decoding = (
                    len(sched.running) == b
                    and not len(sched.waiting)
                    and all(r.num_computed_tokens >= r.num_prompt_tokens for r in sched.running)
                )
                t = time.perf_counter()
                eng.step()
                if all_decoding:
                    d_ts[(b, c)].append(time.perf_counter() - t)
    # a point without steady all-decoding steps (e.g. preempted for lack of KV) is skipped
    decode = [
        (b, c, float(np.percentile(ts, 10)) if stat == "min" else _stat(ts, stat))
        for (b, c), ts in d_ts.items()
        if ts
    ]
    return {"prefill": prefill, "ctx_prefill": ctx_prefill, "decode": decode, "stat": stat}


#: the reference iterations :func:`speed_index` times: a cold prefill, an agent-prefix-hit
#: prefill and two steady decode batches (small enough for a 4 MiB KV cache)
ANCHOR = {
    "prefill_sizes": (256,),
    "ctx_prefill_points": ((64, 1024),),
    "decode_points": ((1, 256), (2, 512)),
}


def speed_index(llm, profile: Profile, reps: int = 4) -> float:
    """How many times slower than ``profile`` predicts this engine process runs *now*: the
    geometric mean over :data:`ANCHOR`'s iterations of measured / predicted time (about 1.5 s).

    Why: on a shared virtual machine the same engine step takes up to ~1.9x longer for
    minutes at a time (a pure-Python loop alone swings 1.8x while nothing else runs in the VM:
    ``benchmarks/machine_speed.py``; docs/vllm.md), so a profile fitted at one moment cannot
    predict absolute times at another.
    Timing a fixed reference right before and after a run, in the same engine process,
    measures the machine's speed without looking at the run itself.  Empties the prefix cache
    first (so the cold prefill is cold); call it between runs, never during one."""
    llm.reset_prefix_cache()
    meas = measure(llm, reps=reps, stat="mean", **ANCHOR)
    cm = profile.cost_model()
    ratios = [
        t / cm.iteration_time(lin, pairs, reads)
        for lin, pairs, reads, t, _ in rows_from_measurements(meas)
    ]
    return float(np.exp(np.mean(np.log(ratios))))


#: one engine iteration: (linear tokens, attention pairs, KV tokens read, seconds, kind)
#: in the cost model's terms (:meth:`topas.engine.cost.CostModel.iteration_time`); ``kind`` is
#: "prefill" when the iteration prefills anything, else "decode"


def write_profile(p: Profile, path: Path = PROFILE_PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(p), indent=2) + "\n")
    return path


def main(argv=None) -> int:
    from topas.integrations.vllm.fidelity import print_table, real_vs_sim, run_real

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["calibrate", "fidelity", "compare"])
    ap.add_argument("--model", default=None)
    ap.add_argument("--workload", default="toy-chain")
    ap.add_argument("--policies", default="fcfs,lpm,topas")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--seeds", default=None, help="fidelity/compare: comma-separated seeds (overrides --seed)"
    )
    ap.add_argument("--token-scale", type=float, default=0.25)
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--kv-cache-mb", type=float, default=32.0)
    ap.add_argument("--write", action="store_true", help="calibrate: write the shipped profile")
    ap.add_argument(
        "--self-calibrate",
        action="store_true",
        help="fidelity/compare: fit the simulator's profile per seed to the first "
        "policy's real run on the same engine process (others out of sample)",
    )
    ap.add_argument(
        "--no-anchor",
        action="store_true",
        help="fidelity/compare: skip the speed reference timed before and after "
        "each real run (and the simulator runs scaled to it)",
    )
    ap.add_argument(
        "--from-workload",
        default=None,
        metavar="NAME",
        help="calibrate: also fit every iteration of a real FCFS run of this "
        "workload (--tasks/--rate/--token-scale/--time-scale/--seed apply)",
    )
    ap.add_argument(
        "--stat",
        choices=["mean", "median", "min"],
        default="mean",
        help="calibrate: statistic over repetitions (min on a shared machine)",
    )
    ap.add_argument("--json", default=None, help="write results as JSON here")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch/OpenMP threads of the engine (OMP_NUM_THREADS; default 1)",
    )
    a = ap.parse_args(argv)
    if a.threads < 1:
        raise SystemExit(f"--threads {a.threads}: must be >= 1")
    # Must be set before torch loads.  vLLM's CPU worker cannot lower torch's thread count
    # after binding, so in-process it keeps one OpenMP thread per core; on a 2-core machine
    # every step then waits at OpenMP barriers for a core that any other process (even at
    # nice 19) may hold, and steps ran 10-70x slower.  One thread leaves the other core to the
    # driver and to other processes, and calibration and fidelity runs use the same setting.
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    from topas.integrations.vllm.cli import default_model
    from topas.integrations.vllm.driver import make_llm

    model = a.model or str(default_model())
    kv_bytes = int(a.kv_cache_mb * 2**20)
    kv_tokens = (kv_bytes // 2048 // CPU_BLOCK - 1) * CPU_BLOCK
    report: dict = {"args": vars(a)}
    if a.what == "calibrate":
        llm = make_llm(model, "fcfs", kv_cache_bytes=kv_bytes, seed=a.seed)
        meas = measure(llm, stat=a.stat)
        rows = None
        if a.from_workload:
            # the iterations of a real workload run (FCFS): the batch mixes and contexts the
            # simulator will have to predict, thousands of them
            trace = IterationTrace()
            run_real(
                model,
                a.from_workload,
                ["fcfs"],
                n_tasks=a.tasks,
                rate=a.rate,
                seed=a.seed,
                token_scale=a.token_scale,
                time_scale=a.time_scale,
                kv_cache_bytes=kv_bytes,
                llm=llm,
                trace=trace,
            )
            rows = trace.rows
            report["traced_iterations"] = len(rows)
        params = json.loads((Path(model) / "topas_tiny_model.json").read_text())["params"]
        prof = fit(meas, params, kv_budget_tokens=kv_tokens, rows=rows)
        report["profile"] = asdict(prof)
        print(
            json.dumps(
                {
                    "hardware": asdict(prof.hardware),
                    **{k: v for k, v in prof.calibration.items() if k != "measured"},
                },
                indent=2,
            )
        )
        print("measured:", json.dumps(meas))
        if a.write:
            print("wrote", write_profile(prof))
    else:
        seeds = [int(x) for x in a.seeds.split(",")] if a.seeds else [a.seed]
        out = real_vs_sim(
            model,
            a.workload,
            a.policies.split(","),
            seeds,
            n_tasks=a.tasks,
            rate=a.rate,
            token_scale=a.token_scale,
            time_scale=a.time_scale,
            kv_cache_bytes=kv_bytes,
            self_calibrate=a.self_calibrate,
            anchor=not a.no_anchor,
        )
        report.update(out)
        print_table(out["summary"])
    if a.json:
        from topas.metrics.summary import atomic_write_text

        atomic_write_text(Path(a.json), json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
