"""`topas reproduce`: the experiment plan, the cached parallel runner, the report writer and
the "change vs best baseline" arithmetic, on tiny configurations and hand-made numbers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from topas import reproduce as R
from topas.reproduce import cli as RC
from topas.reproduce import report as rep
from topas.reproduce import runner as RR

# -- arithmetic on hand-made numbers --------------------------------------------------------


def test_change_vs_best_lower_is_better():
    vals = {"fcfs": 100.0, "spf": 80.0, "lpm": 90.0, "topas": 60.0}
    assert R.change_vs_best(vals) == ("spf", 80.0, pytest.approx(-25.0))


def test_change_vs_best_higher_is_better_and_losing():
    vals = {"fcfs": 1.0, "autellix-las": 1.25, "lpm": 0.5, "topas": 1.1}
    best, bv, ch = R.change_vs_best(vals, higher_is_better=True)
    assert (best, bv) == ("autellix-las", 1.25)
    assert ch == pytest.approx(-12.0)


def test_change_vs_best_ignores_failed_baselines_and_needs_target():
    assert R.change_vs_best({"fcfs": float("nan"), "lpm": 50.0, "topas": 55.0}) == (
        "lpm",
        50.0,
        pytest.approx(10.0),
    )
    with pytest.raises(ValueError, match="target"):
        R.change_vs_best({"fcfs": 1.0})
    with pytest.raises(ValueError, match="no baseline"):
        R.change_vs_best({"topas": 1.0})


def test_stat_mean_and_sample_sd():
    s = R.Stat.of([1.0, 2.0, 3.0])
    assert (s.mean, s.sd, s.n) == (2.0, 1.0, 3)
    assert R.Stat.of([5.0]).sd == 0.0
    assert R.Stat.of([]).n == 0


def _fake(mean, p99, thr):
    return {"mean_jct_s": mean, "p99_jct_s": p99, "throughput_requests_per_s": thr}


def test_main_table_picks_the_best_baseline_per_metric():
    """spf is best on mean JCT, lpm on p99, autellix-las on throughput: each metric is
    compared with its own best baseline, averaged over seeds first."""
    cfg = R.Config(
        workloads=("chain3",),
        policies=("spf", "lpm", "autellix-las", "topas"),
        seeds=(3, 4),
        tasks=5,
        paper_rates=False,
    )
    pl = R.plan(cfg)
    r = pl.busy_rate["chain3"]
    per = {  # per policy, per seed
        "spf": [_fake(10, 40, 1.0), _fake(12, 44, 1.0)],  # mean 11, p99 42
        "lpm": [_fake(20, 30, 1.1), _fake(22, 34, 1.1)],  # mean 21, p99 32
        "autellix-las": [_fake(30, 50, 2.0), _fake(30, 50, 2.0)],
        "topas": [_fake(8.8, 36, 1.5), _fake(8.8, 28, 1.5)],  # mean 8.8, p99 32
    }
    results = {}
    for j in pl.sweep:
        if j.rate == r:
            results[j] = per[j.policy][cfg.seeds.index(j.seed)]
    fake = rep.Reproduction(
        cfg=cfg,
        plan=pl,
        results=results,
        alternation=[],
        toy={},
        command="x",
        wall_s=0,
        jobs=1,
        version="v",
    )
    (row,) = rep.main_table_rows(fake)
    assert row["change"]["mean_jct_s"] == ("spf", 11.0, pytest.approx(-20.0))
    assert row["change"]["p99_jct_s"] == ("lpm", 32.0, pytest.approx(0.0))
    assert row["change"]["throughput_requests_per_s"] == ("autellix-las", 2.0, pytest.approx(-25.0))
    assert row["stats"]["mean_jct_s"]["spf"].sd == pytest.approx(2**0.5)


# -- plan and configuration -----------------------------------------------------------------


def test_plan_full_has_five_seeds_four_rates_and_paper_rates():
    pl = R.plan(R.Config())
    assert {j.seed for j in pl.sweep} == {3, 4, 5, 6, 7}
    for w in ("chain3", "dag4", "dag10wide", "metagpt-sop", "metagpt-tl"):
        rates = {j.rate for j in pl.sweep if j.workload == w}
        assert len(rates) >= 4 and pl.busy_rate[w] in rates
    assert {(j.workload, j.rate) for j in pl.paper_rate} == {
        ("metagpt-tl", 0.0175),
        ("metagpt-sop", 0.15),
    }
    assert 0.0175 in pl.ablation_rates
    assert {j.policy for j in pl.ablation} == set(R.ABLATION_POLICIES)
    # jobs shared between experiments run once
    assert len(pl.all_jobs()) == len(set(pl.all_jobs()))


def test_config_rejects_tuning_seeds_and_unknown_workloads():
    with pytest.raises(ValueError, match="tuned"):
        R.Config(seeds=(1, 3))
    with pytest.raises(ValueError, match="react"):
        R.Config(workloads=("react",))


def test_cli_rejects_tuning_seed(capsys):
    from topas.cli import main

    assert main(["reproduce", "--seeds", "2", "--out", "/nonexistent/x"]) == 2
    assert "tuned" in capsys.readouterr().err


# -- motivating measurements and the Gantt conversion ----------------------------------------


def test_toy_srpt_beats_lpm():
    out = R.motivation_toy(("spf", "lpm"))
    assert out["spf"]["mean_jct_s"] < out["lpm"]["mean_jct_s"]
    # LPM finishes the long task (0) first, SRPT the short one (1)
    assert out["lpm"]["jct_s"][0] < out["lpm"]["jct_s"][1]
    assert out["spf"]["jct_s"][1] < out["spf"]["jct_s"][0]


def test_alternation_shrinks_batches_and_stretches_makespan():
    (row,) = R.motivation_alternation(prefix_tokens=(12000,), n_requests=40)
    assert row["batch_ratio"] < 0.8
    assert row["makespan_ratio"] > 1.2


def test_gantt_splits_preempted_requests():
    timeline = [
        ("prefix-in", "A", 0.0, "compute"),
        ("preempt", 7, 2.0),
        ("prefix-out", "A", 2.0, "swap"),
        ("prefix-in", "A", 5.0, "in"),
        ("request", 7, 0, "s", "A", 0.0, 9.0),
    ]
    g = R.gantt(timeline, [(7, 0.0), (7, 5.0)], end_s=10.0)
    assert g["prefixes"]["A"] == [(0.0, 2.0, "compute"), (5.0, 10.0, "in")]
    assert [(b["start_s"], b["end_s"], b["finished"]) for b in g["requests"]] == [
        (0.0, 2.0, False),
        (5.0, 9.0, True),
    ]


# -- markdown -> html ------------------------------------------------------------------------


def test_md_to_html_tables_code_images():
    """The page is markdown-it-py's CommonMark + tables; headings carry the anchors the
    report's in-page links use."""
    md = (
        "# T\n\ntext with `a|b` and **bold**\n\n| x | y |\n|---|---|\n| 1 | 2 |\n\n"
        "![plot](img/p.png)\n\n```\nx < y\n```\n- one\n- two\n\n"
        "see [failed](#failed-runs)\n\n## Failed runs\n"
    )
    h = rep.md_to_html(md, "t <title>")
    assert h.startswith("<!DOCTYPE html>") and "<title>t &lt;title&gt;</title>" in h
    assert '<h1 id="t">T</h1>' in h and '<h2 id="failed-runs">Failed runs</h2>' in h
    assert '<a href="#failed-runs">failed</a>' in h
    assert "<td>1</td>\n<td>2</td>" in h and "<th>x</th>" in h
    assert '<img src="img/p.png" alt="plot" />' in h
    assert "<pre><code>x &lt; y\n</code></pre>" in h
    assert "<li>one</li>\n<li>two</li>" in h
    assert "<code>a|b</code>" in h and "<strong>bold</strong>" in h


# -- end to end ------------------------------------------------------------------------------

TINY = dict(
    workloads=("chain3", "metagpt-tl"),
    policies=("fcfs", "spf", "topas-paper", "topas"),
    ablation_policies=("topas-paper", "topas-base"),
    seeds=(3,),
    tasks=2,
    paired_seeds=(3, 4),
    other_workloads=("react",),
)


def test_end_to_end_tiny_writes_report_atomically_and_resumes(tmp_path, monkeypatch):
    import topas.metrics.summary as summary_mod

    replaced: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((str(src), str(dst)))
        return real_replace(src, dst)

    # every report file (text and PNG) goes through summary.atomic_write_bytes
    monkeypatch.setattr(summary_mod.os, "replace", spy)

    # other engineers may edit sources while this runs: pin the code version
    monkeypatch.setattr(RR, "code_version", lambda: "v1")
    cfg = R.Config(**TINY)
    out = tmp_path / "rep"
    res, files = RC.reproduce(cfg, out, jobs=1, progress=False, command="topas reproduce t")
    md = (out / "results.md").read_text()
    html_text = (out / "results.html").read_text()
    for needle in (
        "## Main table",
        "topas vs best baseline (ours)",
        "-27.5%",
        "topas-paper vs best baseline (ours)",
        "## Paired comparison: topas against the best baseline",
        "**Scoreboard**",
        "## The flagship's departures from the paper, one at a time",
        "without hol_block",
        "react (0.025, 2)",
        "## Ablation (metagpt-tl)",
        "## Scheduling overhead",
        "(a) Two agents served alternately",
        "(b) Two-task toy",
        "topas run --workload chain3 --policy P --rate 0.25 --tasks 2 --seed S",
        "seeds 3",
    ):
        assert needle in md, needle
    assert "<table>" in html_text and 'src="img/toy-gantt.png"' in html_text
    pngs = sorted(p.name for p in (out / "img").glob("*.png"))
    assert {
        "toy-gantt.png",
        "ablation.png",
        "jct-cdf.png",
        "sweep-chain3.png",
        "paired.png",
    } <= set(pngs)
    for p in (out / "img").glob("*.png"):
        assert p.read_bytes()[:4] == b"\x89PNG"
    # every report file arrived by a rename from a temporary file in the same folder
    dsts = {Path(d).name: s for s, d in replaced}
    for name in ("results.md", "results.html", *pngs):
        assert name in dsts, name
        assert Path(dsts[name]).name.startswith(f".{name}.")
    assert not [p for p in out.rglob(".*") if p.name != ".gitignore"]
    cached = list((out / "cache").glob("*.json"))
    assert len(cached) == len(R.plan(cfg).all_jobs())
    one = json.loads(cached[0].read_text())
    assert "job" in one and ("mean_jct_s" in one or "error" in one)

    # a rerun resumes from the cache: nothing is simulated again
    def boom(job):
        raise AssertionError(f"re-ran {job}")

    monkeypatch.setattr(RR, "run_job", boom)
    res2, _ = RC.reproduce(cfg, out, jobs=1, progress=False, command="topas reproduce t")
    assert set(res2.results) == set(res.results)
    # report-only rebuilds from the cache of the last computing run, even after a code change
    monkeypatch.setattr(RR, "code_version", lambda: "changed")
    res3, _ = RC.reproduce(
        cfg, out, jobs=1, progress=False, command="topas reproduce t", report_only=True
    )
    assert res3.version == res.version and set(res3.results) == set(res.results)
    assert f"code version `{res.version}`" in (out / "results.md").read_text()
    with pytest.raises(ValueError, match="no cached run that computed"):
        RC.reproduce(cfg, tmp_path / "empty", jobs=1, progress=False, report_only=True)


def test_missing_cache_entry_is_rerun(tmp_path):
    job = R.Job("chain3", "fcfs", 0.2, 3, 2)
    got = R.run_jobs([job], tmp_path, n_workers=1, progress=False)
    assert got[job]["tasks"] == 2 and len(got[job]["jct_s"]) == 2
    (path,) = tmp_path.glob("*.json")
    path.write_text("{truncated")  # a corrupt file is treated as missing
    again = R.run_jobs([job], tmp_path, n_workers=1, progress=False)
    assert again[job]["mean_jct_s"] == pytest.approx(got[job]["mean_jct_s"])


# -- bad input and interrupts (issue 14) -------------------------------------------------------


def test_transient_failures_are_reported_not_cached(tmp_path, monkeypatch):
    import topas.api

    job = R.Job("chain3", "fcfs", 0.2, 3, 2)

    def oom(*a, **k):
        raise MemoryError("no room")

    monkeypatch.setattr(topas.api, "simulate", oom)
    got = R.run_jobs([job], tmp_path, n_workers=1, progress=False, version="v")
    assert got[job]["error"].startswith("MemoryError") and got[job]["transient"]
    assert not list(tmp_path.glob("*.json"))  # retried by the next run
    monkeypatch.undo()
    again = R.run_jobs([job], tmp_path, n_workers=1, progress=False, version="v")
    assert "error" not in again[job] and len(list(tmp_path.glob("*.json"))) == 1


def _default_sigint() -> None:
    """The child takes Ctrl-C even when this run inherited SIGINT ignored (a background job
    of a non-interactive shell, e.g. `nohup .ci/run &`): Python leaves an ignored SIGINT
    ignored, and the reproduce would then finish instead of stopping."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_stops_reproduce_fast_and_keeps_a_resumable_cache(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "rep"
    cache = out / "cache"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "topas.cli",
            "reproduce",
            "--quick",
            "--workloads",
            "chain3",
            "--tasks",
            "2",
            "--jobs",
            "2",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        t0 = time.monotonic()
        while not list(cache.glob("*.json")) and time.monotonic() - t0 < 120:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        stopped_s = time.monotonic() - t1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and stopped_s < 2.0, (proc.returncode, stopped_s, err)
    assert "interrupted" in err and "resumes" in err and "Traceback" not in err
    assert not (out / "results.md").exists()
    assert not [
        p for p in cache.iterdir() if p.name.startswith(".") and p.name != ".gitignore"
    ]  # no temporary file of a killed writer
    entries = list(cache.glob("*.json"))
    version = R.code_version()
    plan_jobs = {
        j.key(version): j
        for j in R.plan(R.Config(quick=True, seeds=(3,), workloads=("chain3",), tasks=2)).all_jobs()
    }
    assert entries and all(p.stem in plan_jobs for p in entries)
    done = [plan_jobs[p.stem] for p in entries]
    for p in entries:
        assert "job" in json.loads(p.read_text())

    # resumable: a rerun takes every kept entry from the cache and simulates none of them
    def boom(job):
        raise AssertionError(f"re-ran {job}")

    orig, R.run_job = R.run_job, boom
    try:
        again = R.run_jobs(done, cache, n_workers=1, progress=False, version=version)
    finally:
        R.run_job = orig
    assert set(again) == set(done)


def test_atomic_writes_get_ordinary_file_permissions(tmp_path):
    """A result file written atomically is readable as any file the user writes (0o666 less
    the umask), not owner-only like the temporary file it is renamed from."""
    import stat

    from topas.metrics.summary import atomic_write_text

    p = tmp_path / "report.md"
    atomic_write_text(p, "x\n")
    plain = tmp_path / "plain.md"
    plain.write_text("x\n")
    mode = stat.S_IMODE(p.stat().st_mode)
    assert mode == stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
