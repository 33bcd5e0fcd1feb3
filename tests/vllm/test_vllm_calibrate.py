"""Calibration fit and the cost model's ``attn_eff`` term, on synthetic measurements (no engine
needed, but the folder is only collected with vLLM installed, like the rest of tests/vllm)."""

from __future__ import annotations

import numpy as np
import pytest

from topas.engine.cost import CostModel, Hardware, ModelShape
from topas.integrations.vllm import calibrate
from topas.integrations.vllm.calibrate import measure
from topas.integrations.vllm.fit import fit, iteration_row
from topas.integrations.vllm.tiny_model import SHAPE

PARAMS = 4_458_752.0
SHAPE_T = ModelShape(params=PARAMS, **SHAPE)


def _hw(attn_eff: float = 1.0, overhead: float = 0.001) -> Hardware:
    return Hardware(
        "t",
        peak_flops=2e11,
        hbm_bytes_per_s=5e9,
        swap_bytes_per_s=1e9,
        compute_eff=1.0,
        memory_eff=1.0,
        overhead_s=overhead,
        attn_eff=attn_eff,
    )


def test_attn_eff_scales_only_the_attention_flops():
    base, slow = CostModel(_hw(1.0, 0.0), SHAPE_T), CostModel(_hw(0.25, 0.0), SHAPE_T)
    n, c = 64, 3072
    pairs = n * (c + (n + 1) / 2.0)
    lin_s = 2 * PARAMS * n / 2e11
    attn_s = 4 * SHAPE["layers"] * SHAPE["q_heads"] * SHAPE["head_dim"] * pairs / 2e11
    # prefill is compute-bound here: the attention part grows 4x, the GEMM part does not
    assert base.prefill_time(n, c) == pytest.approx(lin_s + attn_s)
    assert slow.prefill_time(n, c) == pytest.approx(lin_s + 4 * attn_s)


def test_attn_eff_closed_form_decode_matches_stepping():
    # low attn_eff moves decode from the memory arm to the compute arm as contexts grow, so
    # the closed form must cross arms exactly as step-by-step summation does
    cm = CostModel(_hw(0.002), SHAPE_T)
    batch, ctx, steps = 4, 4 * 900, 300
    stepped = sum(cm.decode_step_time(batch, ctx + batch * k) for k in range(steps))
    assert cm.decode_run_time(batch, ctx, steps) == pytest.approx(stepped, rel=1e-9)
    horizon = stepped / 2
    k = cm.decode_steps_within(batch, ctx, horizon, steps)
    assert cm.decode_run_time(batch, ctx, k) <= horizon < cm.decode_run_time(batch, ctx, k + 1)


def test_attn_eff_must_be_positive():
    with pytest.raises(ValueError, match="attn_eff"):
        CostModel(_hw(0.0), SHAPE_T)


def _synthetic(cm: CostModel) -> dict:
    return {
        "prefill": [(n, cm.prefill_time(n)) for n in (128, 256, 512, 1024, 2048)],
        "ctx_prefill": [
            (n, c, cm.prefill_time(n, c))
            for n, c in ((64, 1024), (64, 3072), (128, 2048), (256, 3072))
        ],
        "decode": [
            (b, c, cm.decode_step_time(b, b * c))
            for b, c in ((1, 256), (1, 2048), (4, 512), (8, 1024), (16, 512))
        ],
    }


def test_fit_recovers_a_known_profile_with_slow_attention():
    truth = CostModel(_hw(attn_eff=0.3, overhead=0.0012), SHAPE_T)
    prof = fit(_synthetic(truth), PARAMS, kv_budget_tokens=4096)
    assert prof.hardware.attn_eff == pytest.approx(0.3, rel=0.1)
    assert prof.calibration["prefill_median_rel_err"] < 0.03
    assert prof.calibration["decode_median_rel_err"] < 0.05


def test_fit_ignores_one_slowed_sample():
    truth = CostModel(_hw(attn_eff=0.3, overhead=0.0012), SHAPE_T)
    meas = _synthetic(truth)
    n, c, t = meas["ctx_prefill"][1]
    meas["ctx_prefill"][1] = (n, c, 8 * t)  # another process held the core
    prof = fit(meas, PARAMS, kv_budget_tokens=4096)
    cm = prof.cost_model()
    for n, c in ((64, 1024), (128, 2048), (256, 3072)):
        assert cm.prefill_time(n, c) == pytest.approx(truth.prefill_time(n, c), rel=0.1)


def test_measure_rejects_unknown_statistic():
    with pytest.raises(ValueError, match="stat .avg."):
        measure(None, stat="avg")


def test_fit_from_traced_iterations_alone():
    """A workload trace (mixed batches: decodes of many context lengths, prefill chunks
    piggy-backing decodes) is enough to recover the roofline, with no synthetic points."""
    truth = CostModel(_hw(attn_eff=0.4, overhead=0.002), SHAPE_T)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(400):
        sched = [(1, int(c)) for c in rng.integers(100, 3000, size=rng.integers(1, 6))]
        if rng.random() < 0.3:
            sched.append((int(rng.integers(16, 1500)), int(rng.integers(0, 2000))))
        r = iteration_row(sched, 0.0)
        rows.append(iteration_row(sched, truth.iteration_time(r[0], r[1], r[2])))
    assert {r[4] for r in rows} == {"prefill", "decode"}
    prof = fit({}, PARAMS, kv_budget_tokens=4096, rows=rows)
    assert prof.hardware.attn_eff == pytest.approx(0.4, rel=0.1)
    assert prof.calibration["decode_total_rel_err"] < 0.02
    assert prof.calibration["prefill_total_rel_err"] < 0.02
    with pytest.raises(ValueError, match="prefill and decode"):
        fit({}, PARAMS, kv_budget_tokens=4096, rows=[r for r in rows if r[4] == "decode"])


def test_speed_index_is_the_geometric_mean_of_measured_over_predicted(monkeypatch):
    """Each reference iteration's measured time over the profile's prediction, combined by
    geometric mean; the prefix cache is emptied first so the cold prefill is cold."""
    from topas.engine.cost import get_profile

    prof = get_profile("cpu/tiny-llama")
    cm = prof.cost_model()

    def t(sched, factor):  # the profile's own prediction for this iteration, times factor
        lin, pairs, reads, _, _ = iteration_row(sched, 0.0)
        return factor * cm.iteration_time(lin, pairs, reads)

    slow = {
        "prefill": [(256, t([(256, 0)], 1.5))],
        "ctx_prefill": [(64, 1024, t([(64, 1024)], 2.0))],
        "decode": [(1, 256, t([(1, 256)], 1.5)), (2, 512, t([(1, 512)] * 2, 1.0))],
        "stat": "mean",
    }
    seen = {}
    monkeypatch.setattr(calibrate, "measure", lambda llm, **kw: seen.update(kw) or slow)

    class FakeLLM:
        resets = 0

        def reset_prefix_cache(self):
            FakeLLM.resets += 1
            return True

    got = calibrate.speed_index(FakeLLM(), prof, reps=4)
    assert got == pytest.approx((1.5 * 2.0 * 1.5 * 1.0) ** 0.25)
    assert FakeLLM.resets == 1
    assert seen["reps"] == 4 and seen["decode_points"] == calibrate.ANCHOR["decode_points"]
