"""Report figures (matplotlib, Agg backend, PNG).  Every function writes one file and
returns its path; inputs are plain aggregates so the figures never re-run a simulation.

matplotlib is imported inside the functions: ``topas --help`` must not pay for it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from topas.metrics.summary import atomic_write_bytes

#: one colour per policy, the same in every figure; TOPAS variants in warm colours
_COLORS = {
    "fcfs": "#7f7f7f",
    "spf": "#1f77b4",
    "lpm": "#2ca02c",
    "dfs-weight": "#98df8a",
    "parrot-fcfs": "#9467bd",
    "autellix-las": "#17becf",
    "kvflow": "#8c564b",
    "continuum": "#e377c2",
    "topas": "#d62728",
    "topas-paper": "#ff7f0e",
    "topas-base": "#ff9896",
    "topas-noreuse": "#c49c94",
    "topas-noaging": "#ffbb78",
    "topas-oracle": "#bcbd22",
}


def color(policy: str) -> str:
    return _COLORS.get(policy, "#333333")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panel_grid(n: int):
    """A figure with ``n`` panels, at most three per row (unused cells are switched off by
    the caller)."""
    plt = _plt()
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    return plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)


def _save(fig, path: Path) -> Path:
    """PNG via an in-memory buffer and an atomic rename (a crash never leaves half a file)."""
    buf = io.BytesIO()
    fig.savefig(
        buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None}
    )  # no version string: stable bytes across reruns
    _plt().close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


Series = Mapping[str, Sequence[tuple[float, float, float]]]  # policy -> [(x, mean, sd)]


def load_sweep(
    path: Path, title: str, mean_jct: Series, p99_jct: Series, marks: Sequence[float] = ()
) -> Path:
    """Mean and p99 JCT (s) against arrival rate (task/s), one line per policy, error bars =
    spread over seeds.  ``marks``: rates to flag with a vertical line (the main table's)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, series, lab in ((axes[0], mean_jct, "mean JCT (s)"), (axes[1], p99_jct, "p99 JCT (s)")):
        for pol, pts in series.items():
            pts = sorted(pts)
            x, m, sd = (np.array(v, dtype=float) for v in zip(*pts))
            ax.errorbar(
                x,
                m,
                yerr=sd,
                label=pol,
                color=color(pol),
                marker="o",
                ms=3,
                lw=2.2 if pol == "topas" else 1.1,
                capsize=2,
            )
        for r in marks:
            ax.axvline(r, color="#bbbbbb", ls=":", lw=1)
        ax.set_xlabel("arrival rate (task/s)")
        ax.set_ylabel(lab)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=7, ncol=2, loc="upper left")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def ratio_sweep(path: Path, panels: Mapping[str, Series]) -> Path:
    """Distance to the limit: mean JCT / mean lower bound against rate, one panel per
    workload.  1 is an empty engine (every task runs its critical path alone)."""
    fig, axes = _panel_grid(len(panels))
    for ax, (wl, series) in zip(axes.flat, panels.items()):
        for pol, pts in series.items():
            x, m, sd = (np.array(v, dtype=float) for v in zip(*sorted(pts)))
            ax.errorbar(
                x,
                m,
                yerr=sd,
                label=pol,
                color=color(pol),
                marker="o",
                ms=3,
                lw=2.2 if pol == "topas" else 1.0,
                capsize=2,
            )
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(wl, fontsize=9)
        ax.set_xlabel("arrival rate (task/s)")
        ax.set_ylabel("mean JCT / mean lower bound")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    list(axes.flat)[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return _save(fig, path)


def jct_cdf(
    path: Path,
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    subtitle: Mapping[str, str] | None = None,
) -> Path:
    """Empirical CDF of task JCT (all seeds pooled), one panel per workload."""
    fig, axes = _panel_grid(len(panels))
    for ax, (wl, by_pol) in zip(axes.flat, panels.items()):
        for pol, jcts in by_pol.items():
            x = np.sort(np.asarray(jcts, dtype=float))
            if x.size == 0:
                continue
            y = np.arange(1, x.size + 1) / x.size
            ax.step(
                x, y, where="post", label=pol, color=color(pol), lw=2.2 if pol == "topas" else 1.0
            )
        ax.set_title(f"{wl} {(subtitle or {}).get(wl, '')}", fontsize=9)
        ax.set_xlabel("JCT (s)")
        ax.set_ylabel("fraction of tasks")
        ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    list(axes.flat)[0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def ablation_bars(
    path: Path, title: str, groups: Mapping[str, Mapping[str, tuple[float, float]]]
) -> Path:
    """Grouped bars: ``groups[metric label][policy] = (mean, sd)``."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(groups), figsize=(4.4 * len(groups), 3.4), squeeze=False)
    for ax, (lab, vals) in zip(axes[0], groups.items()):
        pols = list(vals)
        m = [vals[p][0] for p in pols]
        sd = [vals[p][1] for p in pols]
        ax.bar(range(len(pols)), m, yerr=sd, color=[color(p) for p in pols], capsize=3)
        ax.set_xticks(range(len(pols)))
        ax.set_xticklabels(pols, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def gantt(path: Path, per_policy: Mapping[str, Mapping], title: str) -> Path:
    """One panel per policy: prefix residency rows (``prefix A``) and one row per task with
    its request run segments (hatched = preempted before finishing)."""
    plt = _plt()
    pols = list(per_policy)
    fig, axes = plt.subplots(
        len(pols), 1, figsize=(9, 1.55 * len(pols) + 0.6), sharex=True, squeeze=False
    )
    agent_cols = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]
    for ax, pol in zip(axes[:, 0], pols):
        g = per_policy[pol]["gantt"]
        agents = sorted({*g["prefixes"], *(b["agent"] for b in g["requests"])})
        acol = {a: agent_cols[k % len(agent_cols)] for k, a in enumerate(agents)}
        tasks = sorted({b["task"] for b in g["requests"]})
        labels = [f"prefix {a}" for a in agents] + [f"task {t}" for t in tasks]
        for k, a in enumerate(agents):
            for s, e, _how in g["prefixes"].get(a, []):
                ax.barh(k, e - s, left=s, color=acol[a], alpha=0.35, edgecolor=acol[a])
        for b in g["requests"]:
            k = len(agents) + tasks.index(b["task"])
            ax.barh(
                k,
                b["end_s"] - b["start_s"],
                left=b["start_s"],
                color=acol[b["agent"]],
                edgecolor="black",
                lw=0.6,
                hatch=None if b["finished"] else "///",
            )
            if b["finished"]:
                ax.text(
                    (b["start_s"] + b["end_s"]) / 2,
                    k,
                    b["stage"],
                    ha="center",
                    va="center",
                    fontsize=7,
                )
        for t, jct in per_policy[pol]["jct_s"].items():
            k = len(agents) + tasks.index(int(t))
            ax.plot([jct], [k], marker="|", color="black", ms=14)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(
            f"{pol}: mean JCT {per_policy[pol]['mean_jct_s']:.1f} s", fontsize=9, loc="left"
        )
        ax.grid(alpha=0.3, axis="x")
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def paired_forest(
    path: Path, title: str, panels: Mapping[str, Sequence[tuple[str, Mapping[str, tuple]]]]
) -> Path:
    """One panel per engine setting: for each workload (a row), each policy's paired mean
    difference against the best baseline with its 95 % interval, in percent.  ``panels`` maps
    a panel title to ``[(workload, {policy: (mean, lo, hi)})]``."""
    plt = _plt()
    n_rows = max(len(v) for v in panels.values())
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.2 * len(panels), 0.42 * n_rows + 1.4), squeeze=False, sharey=True
    )
    for ax, (ptitle, rows) in zip(axes[0], panels.items()):
        names = [w for w, _ in rows]
        pols = sorted({p for _, d in rows for p in d})
        for k, pol in enumerate(pols):
            off = (k - (len(pols) - 1) / 2) * 0.25
            for i, (_, d) in enumerate(rows):
                if pol not in d:
                    continue
                m, lo, hi = d[pol]
                ax.errorbar(
                    [m],
                    [i + off],
                    xerr=[[m - lo], [hi - m]],
                    fmt="o",
                    ms=4,
                    color=color(pol),
                    capsize=2,
                    label=pol if i == 0 else None,
                )
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_yticks(range(len(names)), names)
        ax.set_xlabel("mean JCT vs best baseline (%, paired by seed; 95% CI)")
        ax.set_title(ptitle, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].invert_yaxis()  # the first workload on top (the axes share y: invert once)
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


#: one colour per router (docs/cluster.md's figure)
_ROUTER_COLORS = {
    "round-robin": "#7f7f7f",
    "least-outstanding": "#1f77b4",
    "prefix-affinity": "#2ca02c",
    "task-affinity": "#9467bd",
    "topas": "#d62728",
}


def router_comparison(
    path: Path,
    title: str,
    panels: Mapping[str, Mapping[str, Sequence[tuple[int, float, float, float]]]],
) -> Path:
    """One panel per (workload, policy): for each router, its paired mean-JCT difference
    against round-robin (percent, 95 % interval) at each replica count.  ``panels`` maps a
    panel title to ``{router: [(replicas, mean, lo, hi)]}``."""
    fig, axes = _panel_grid(len(panels))
    flat = [ax for row in axes for ax in row]
    for ax, (ptitle, routers) in zip(flat, panels.items()):
        names = list(routers)
        for k, r in enumerate(names):
            pts = routers[r]
            xs = [i + (k - (len(names) - 1) / 2) * 0.14 for i in range(len(pts))]
            ms = [m for _, m, _, _ in pts]
            err = [[m - lo for _, m, lo, _ in pts], [hi - m for _, m, _, hi in pts]]
            ax.errorbar(
                xs,
                ms,
                yerr=err,
                fmt="o",
                ms=4,
                capsize=2,
                label=r,
                color=_ROUTER_COLORS.get(r, "#333333"),
            )
        reps = [n for n, _, _, _ in next(iter(routers.values()))]
        ax.set_xticks(range(len(reps)), [f"{n} replicas" for n in reps])
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_ylabel("mean JCT vs round-robin (%)")
        ax.set_title(ptitle, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _save(fig, path)
