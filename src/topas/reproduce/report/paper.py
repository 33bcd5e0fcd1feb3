"""The TOPAS paper's reported figures, in one place: copied from ``shared/spec/topas.md``
section 4, which records the paper (arXiv 2608.25523) as far as it is known.  Where and how
the reproduction runs them (workload, rate) is the plan's (:mod:`topas.reproduce.plan`)."""

from __future__ import annotations

PAPER_CITATION = (
    "TOPAS, arXiv 2608.25523, section 4 (as recorded in `shared/spec/topas.md` section 4)"
)

#: The paper's main results: TOPAS's change against the best baseline, in percent.
#: ``None`` = the paper states no number for that metric.
PAPER: dict[str, dict] = {
    "chain3": {
        "mean_jct_s": -27.5,
        "p99_jct_s": -31.7,
        "throughput_requests_per_s": None,
        "note": "",
    },
    "dag4": {
        "mean_jct_s": -39.8,
        "p99_jct_s": -49.4,
        "throughput_requests_per_s": None,
        "note": "headline result",
    },
    "dag10wide": {
        "mean_jct_s": -27.7,
        "p99_jct_s": -30.8,
        "throughput_requests_per_s": None,
        "note": "",
    },
    "metagpt-sop": {
        "mean_jct_s": -9.8,
        "p99_jct_s": -4.5,
        "throughput_requests_per_s": 6.7,
        "note": "mean vs SPF; the review says TOPAS loses SOP p99 to LPM and "
        "throughput to Autellix-LAS",
    },
    "metagpt-tl": {
        "mean_jct_s": -22.0,
        "p99_jct_s": -26.6,
        "throughput_requests_per_s": None,
        "note": "gap grows with load",
    },
}
#: the paper's reported ablation and overhead figures (where they were run, workload and
#: rate, is the plan's: ``topas.reproduce.PAPER_ABLATION`` / ``PAPER_OVERHEAD``)
PAPER_ABLATION_FIGURES = {
    "vs_base_mean": -60.5,
    "vs_base_p99": -53.6,
    "vs_single_mean": (-44.9, -51.0),
}
PAPER_OVERHEAD_FIGURES = {"mean_decision_ms": 1.9, "share_pct": 0.31}
PAPER_TOY = {"srpt": 21.5, "lpm": 24.0, "unit": "time units"}
PAPER_ALTERNATION = {"batch": "halves", "makespan_ratio": (1.8, 1.9)}
