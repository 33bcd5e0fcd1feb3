"""What the report is made from (:class:`Reproduction`) and the tables its sections share."""

from __future__ import annotations

from dataclasses import dataclass, field

from topas.reproduce.report.format import METRICS, fmt_stat, pct, table


@dataclass
class Reproduction:
    """Everything a report is made from."""

    cfg: object  #: topas.reproduce.Config
    plan: object  #: topas.reproduce.Plan
    results: dict  #: Job -> result dict
    alternation: list
    toy: dict
    command: str
    wall_s: float
    jobs: int
    version: str
    invocations: list = field(default_factory=list)  #: this code version's runs, oldest first


def _seeds(cfg) -> str:
    return ",".join(str(s) for s in cfg.seeds)


def _stats(rep: Reproduction, jobs, metric: str):
    from topas.reproduce import aggregate

    return aggregate(rep.results, jobs, metric)


def _by_rate(jobs) -> dict:
    out: dict = {}
    for j in jobs:
        out.setdefault(j.workload, set()).add(j.rate)
    return {w: sorted(r) for w, r in out.items()}


def main_table_rows(rep: Reproduction) -> list[dict]:
    """One entry per workload: per-policy stats at the busy rate and TOPAS's change vs the
    best baseline for each metric separately."""
    from topas.reproduce import PAPER_POLICY, TARGET_POLICY, change_vs_best

    cfg, pl = rep.cfg, rep.plan
    out = []
    for w in cfg.workloads:
        r = pl.busy_rate[w]
        jobs = [j for j in pl.sweep if j.workload == w and j.rate == r]
        entry = {
            "workload": w,
            "rate": r,
            "n_tasks": jobs[0].n_tasks if jobs else 0,
            "stats": {},
            "change": {},
            "change_paper": {},
        }
        for key, _, hib in METRICS:
            st = _stats(rep, jobs, key)
            entry["stats"][key] = {p: st.get((w, r, p)) for p in cfg.policies}
            vals = {p: s.mean for p, s in entry["stats"][key].items() if s is not None}
            for slot, pol in (("change", TARGET_POLICY), ("change_paper", PAPER_POLICY)):
                try:
                    entry[slot][key] = change_vs_best(vals, pol, hib)
                except ValueError:
                    entry[slot][key] = None
        out.append(entry)
    return out


def _overhead_sets(pl):
    from topas.reproduce import PAPER_OVERHEAD

    w, r = PAPER_OVERHEAD
    out = []
    jobs = [j for j in pl.paper_rate if j.workload == w and j.rate == r]
    if jobs:
        out.append((w, r, jobs))
    if w in pl.busy_rate:
        br = pl.busy_rate[w]
        out.append((w, br, [j for j in pl.sweep if j.workload == w and j.rate == br]))
    return out


def _sweep_table(rep: Reproduction, w: str, metric: str, digits: int = 3) -> str:
    pl, cfg = rep.plan, rep.cfg
    rates = _by_rate(pl.sweep).get(w, [])
    st = _stats(rep, [j for j in pl.sweep if j.workload == w], metric)
    rows = [[p] + [fmt_stat(st.get((w, r, p)), digits) for r in rates] for p in cfg.policies]
    head = [f"{metric} \\ rate"] + [
        f"**{r:g}**" if r == pl.busy_rate.get(w) else f"{r:g}" for r in rates
    ]
    return table(head, rows)


def _policy_table(rep: Reproduction, jobs, policies, offered: float) -> str:
    keys = (
        "mean_jct_s",
        "p99_jct_s",
        "jct_over_lower_bound",
        "throughput_tasks_per_s",
        "throughput_requests_per_s",
    )
    st = {k: _stats(rep, jobs, k) for k in keys}
    w, r = jobs[0].workload, jobs[0].rate
    rows = []
    for p in policies:
        rows.append([p] + [fmt_stat(st[k].get((w, r, p))) for k in keys])
    return table(
        [
            "policy",
            "mean JCT (s)",
            "p99 JCT (s)",
            "JCT / LB",
            f"task throughput (offered {offered:g})",
            "req/s",
        ],
        rows,
    )


def _ablation_table(rep: Reproduction, jobs, policies) -> str:
    w, r = jobs[0].workload, jobs[0].rate
    mean = _stats(rep, jobs, "mean_jct_s")
    p99 = _stats(rep, jobs, "p99_jct_s")
    from topas.reproduce import PAPER_POLICY

    full_m, full_p = mean.get((w, r, PAPER_POLICY)), p99.get((w, r, PAPER_POLICY))
    rows = []
    for p in policies:
        m, q = mean.get((w, r, p)), p99.get((w, r, p))
        if p == PAPER_POLICY or m is None or full_m is None:
            cm = cp = "" if p == PAPER_POLICY else "n/a"
        else:
            cm = pct(100 * (full_m.mean - m.mean) / m.mean)
            cp = pct(100 * (full_p.mean - q.mean) / q.mean)
        rows.append([p, fmt_stat(m), fmt_stat(q), cm, cp])
    return table(
        [
            "policy",
            "mean JCT (s)",
            "p99 JCT (s)",
            "topas-paper vs this: mean",
            "topas-paper vs this: p99",
        ],
        rows,
    )
