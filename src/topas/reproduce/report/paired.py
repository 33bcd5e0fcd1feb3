"""The report's paired sections: the flagship ``topas`` (and the paper's TOPAS) against the
best baseline per workload and engine setting, and the flagship's departures from the paper
one at a time.  Rendering only: the runs are :class:`topas.reproduce.Plan`'s ``paired`` and
``departures`` jobs."""

from __future__ import annotations

from pathlib import Path

from topas.metrics.paired import paired, paired_rows, verdict


def _cell(p) -> str:
    return f"{p.mean_pct:+.1f}% [{p.lo_pct:+.1f}, {p.hi_pct:+.1f}]"


def rows_of(rep) -> list[dict]:
    from topas.reproduce import BASELINES, PAPER_POLICY, TARGET_POLICY

    bases = [p for p in rep.cfg.policies if p in BASELINES]
    others = [PAPER_POLICY] if PAPER_POLICY in rep.cfg.policies else []
    return paired_rows(rep.results, rep.plan.paired, TARGET_POLICY, bases, others)


def scoreboard(rows: list[dict]) -> dict:
    """Counts over (workload, cache) rows: the flagship's point estimate at or below the best
    baseline, significant wins and losses, p99 within 5 %."""
    from topas.reproduce import TARGET_POLICY

    ok = [r for r in rows if TARGET_POLICY in r]
    t = [r[TARGET_POLICY] for r in ok]
    return {
        "cells": len(rows),
        "compared": len(ok),
        "at_or_below": sum(x["vs_best"].mean_pct <= 0 for x in t),
        "wins": sum(x["vs_best"].significant_gain for x in t),
        "losses": sum(x["vs_best"].significant_loss for x in t),
        "p99_within_5": sum(x["p99_vs_best"].mean_pct <= 5.0 for x in t),
        "worst": max((x["vs_best"].mean_pct for x in t), default=float("nan")),
    }


def render_paired(rep, img: dict[str, str]) -> list[str]:
    from topas.reproduce import PAPER_POLICY, TARGET_POLICY

    pl = rep.plan
    if not pl.paired:
        return []
    rows = rows_of(rep)
    seeds = rows[0]["seeds"] if rows else []
    sc = scoreboard(rows)
    L = ["## Paired comparison: topas against the best baseline", ""]
    L.append(
        f"Every policy runs the same seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} seeds, never "
        "used for tuning) at each workload's busy rate (1.25x its default rate), with the "
        "engine's context cache on (the default, vLLM APC / SGLang radix semantics: unheld "
        "contexts stay in free memory) and off (contexts are reused only when a policy holds "
        "them). The best "
        "baseline is the one with the lowest mean JCT over the seeds; the cell is the mean "
        "per-seed relative difference `(policy - best) / best` with its 95 % t-interval "
        "(negative: faster than the best baseline). A verdict of *win* / *loss* means the "
        "interval excludes 0. p99 is compared with the best baseline by p99."
    )
    L.append("")
    L.append(
        f"**Scoreboard** ({sc['compared']} workload x cache cells): `topas` at or below "
        f"the best baseline's mean JCT in {sc['at_or_below']}, a significant win in "
        f"{sc['wins']}, a significant loss in {sc['losses']}; p99 within 5 % of the best "
        f"baseline's in {sc['p99_within_5']}; worst mean difference "
        f"{sc['worst']:+.1f} %."
    )
    L.append("")
    if "paired" in img:
        L += [f"![paired comparison]({img['paired']})", ""]
    hdr = [
        "workload (rate, tasks)",
        "cache",
        "best baseline: mean JCT (s)",
        f"{TARGET_POLICY}: mean JCT (s)",
        "topas vs best [95% CI]",
        "wins",
        "verdict",
        "p99 vs best p99 [95% CI]",
        f"{PAPER_POLICY} vs best [95% CI]",
    ]
    trs = []
    for r in rows:
        t = r.get(TARGET_POLICY)
        lab = f"{r['workload']} ({r['rate']:g}, {r['n_tasks']})"
        cc = "on" if r["cache"] else "off"
        if t is None or "best" not in r:
            trs.append([lab, cc, "failed: " + ", ".join(r["failed"]), "", "", "", "", "", ""])
            continue
        pp = r.get(PAPER_POLICY)
        trs.append(
            [
                lab,
                cc,
                f"{r['best']} {r['best_mean']:.1f}",
                f"{t['mean']:.1f}",
                _cell(t["vs_best"]),
                f"{t['vs_best'].wins}/{t['vs_best'].n}",
                verdict(t["vs_best"]),
                f"{_cell(t['p99_vs_best'])} ({r['best_p99']})",
                _cell(pp["vs_best"]) if pp else "n/a",
            ]
        )
    from topas.reproduce.report.format import table

    L += [table(hdr, trs), ""]
    L.append(
        f"Made by `{rep.command}`; one cell: `topas run --workload W --policy P --rate R "
        "--tasks N --seed S` (add `--no-context-cache` for cache off). The same table from "
        "the cache alone: `python benchmarks/paired.py --seeds 3-12 --cache-dir docs/cache "
        "--also topas-paper`."
    )
    L.append("")
    return L


def render_departures(rep) -> list[str]:
    from topas.policies.topas import DEPARTURES
    from topas.reproduce import TARGET_POLICY

    pl = rep.plan
    if not pl.departures:
        return []
    full: dict = {}
    for j in pl.paired:
        r = rep.results.get(j)
        if j.policy == TARGET_POLICY and j.context_cache and r and "error" not in r:
            full[(j.workload, j.seed)] = r["mean_jct_s"]
    off: dict = {}
    for j in pl.departures:
        r = rep.results.get(j)
        if r and "error" not in r:
            off.setdefault((j.workload, dict(j.params)["off"]), {})[j.seed] = r["mean_jct_s"]
    wls = list(dict.fromkeys(j.workload for j in pl.departures))
    seeds = sorted({j.seed for j in pl.departures})
    L = ["## The flagship's departures from the paper, one at a time", ""]
    L.append(
        f"`topas` is `topas-paper` with {len(DEPARTURES)} departures switched on "
        "(`topas.policies.topas.DEPARTURES`; docs/topas.md explains each). Each column "
        "reverts one of them to the paper's choice (`--param off=NAME`) and gives the paired "
        "change of mean JCT against the full flagship (positive: the departure helps), with "
        f"its 95 % interval, engine context cache on, seeds {seeds[0]}-{seeds[-1]}, busy "
        "rates."
    )
    L.append("")
    trs = []
    for w in wls:
        cells = [w]
        for d in DEPARTURES:
            got = off.get((w, d), {})
            ss = [s for s in seeds if s in got and (w, s) in full]
            if len(ss) < 2:
                cells.append("n/a")
                continue
            p = paired([got[s] for s in ss], [full[(w, s)] for s in ss])
            cells.append(f"{p.mean_pct:+.1f} [{p.lo_pct:+.1f}, {p.hi_pct:+.1f}]")
        trs.append(cells)
    from topas.reproduce.report.format import table

    L += [table(["workload", *[f"without {d}" for d in DEPARTURES]], trs), ""]
    L.append(
        f"Made by `{rep.command}`; one cell: `topas run --workload W --policy topas "
        "--param off=NAME --rate R --tasks N --seed S`."
    )
    L.append("")
    return L


def paired_figure(rep, img_dir: Path) -> dict[str, str]:
    from topas.metrics import plots
    from topas.reproduce import PAPER_POLICY, TARGET_POLICY

    if not rep.plan.paired:
        return {}
    rows = rows_of(rep)
    panels: dict = {}
    for cc, title in ((False, "engine context cache off"), (True, "engine context cache on")):
        panel = []
        for r in rows:
            if r["cache"] != cc:
                continue
            d = {
                p: (r[p]["vs_best"].mean_pct, r[p]["vs_best"].lo_pct, r[p]["vs_best"].hi_pct)
                for p in (TARGET_POLICY, PAPER_POLICY)
                if p in r
            }
            panel.append((r["workload"], d))
        panels[title] = panel
    seeds = rows[0]["seeds"] if rows else []
    path = plots.paired_forest(
        img_dir / "paired.png",
        f"topas and topas-paper vs the best baseline per workload (seeds {seeds[0]}-{seeds[-1]})",
        panels,
    )
    return {"paired": f"img/{path.name}"}
