"""The report's figures (:mod:`topas.metrics.plots`), one PNG per study."""

from __future__ import annotations

from pathlib import Path

from topas.reproduce.report.tables import (
    Reproduction,
    _seeds,
    _stats,
)


def make_figures(rep: Reproduction, img_dir: Path) -> dict[str, str]:
    """Write every PNG; return name -> path relative to the report."""
    from topas.metrics import plots

    pl, cfg = rep.plan, rep.cfg
    rel: dict[str, str] = {}
    ratio_panels = {}
    for w in cfg.workloads:
        jobs = [j for j in pl.sweep if j.workload == w]
        mean = _stats(rep, jobs, "mean_jct_s")
        p99 = _stats(rep, jobs, "p99_jct_s")
        ratio = _stats(rep, jobs, "jct_over_lower_bound")

        def series(st):
            s: dict = {}
            for (_, r, p), v in sorted(st.items()):
                s.setdefault(p, []).append((r, v.mean, v.sd))
            return {p: s[p] for p in cfg.policies if p in s}

        path = plots.load_sweep(
            img_dir / f"sweep-{w}.png",
            f"{w}: JCT vs load (seeds {_seeds(cfg)})",
            series(mean),
            series(p99),
            marks=[pl.busy_rate[w]],
        )
        rel[f"sweep-{w}"] = f"img/{path.name}"
        ratio_panels[w] = series(ratio)
    rel["ratio"] = (
        "img/" + plots.ratio_sweep(img_dir / "jct-over-lower-bound.png", ratio_panels).name
    )
    cdf = {}
    for w in cfg.workloads:
        r = pl.busy_rate[w]
        by: dict = {}
        for j in pl.sweep:
            res = rep.results.get(j)
            if j.workload == w and j.rate == r and res is not None and "error" not in res:
                by.setdefault(j.policy, []).extend(res["jct_s"])
        cdf[w] = {p: by[p] for p in cfg.policies if p in by}
    rel["cdf"] = (
        "img/"
        + plots.jct_cdf(
            img_dir / "jct-cdf.png",
            cdf,
            {w: f"@ {pl.busy_rate[w]:g} task/s" for w in cfg.workloads},
        ).name
    )
    if pl.ablation:
        r = pl.busy_rate.get("metagpt-tl", pl.ablation_rates[0])
        jobs = [j for j in pl.ablation if j.rate == r]
        groups = {}
        for key, lab in (("mean_jct_s", "mean JCT (s)"), ("p99_jct_s", "p99 JCT (s)")):
            st = _stats(rep, jobs, key)
            groups[lab] = {
                p: (st[("metagpt-tl", r, p)].mean, st[("metagpt-tl", r, p)].sd)
                for p in cfg.ablation_policies
                if ("metagpt-tl", r, p) in st
            }
        rel["ablation"] = (
            "img/"
            + plots.ablation_bars(
                img_dir / "ablation.png",
                f"metagpt-tl ablation at {r:g} task/s (seeds {_seeds(cfg)})",
                groups,
            ).name
        )
    from topas.reproduce.report.paired import paired_figure

    rel.update(paired_figure(rep, img_dir))
    if rep.toy:
        rel["toy"] = (
            "img/"
            + plots.gantt(
                img_dir / "toy-gantt.png", rep.toy, "two-task toy: prefix residency and requests"
            ).name
        )
    return rel
