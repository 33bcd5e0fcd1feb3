"""`topas sweep`: grid parsing and expansion, the outputs, resumption from the cache, and the
executor interface that run_jobs drives (pool and inline here; Ray in tests/ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from topas.cli import main
from topas.reproduce import executors as EX
from topas.reproduce import grid as G
from topas.reproduce import ray_executor as RX
from topas.reproduce import runner as RR
from topas.reproduce.plan import Job, rate_of

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sweep_small.yaml"

TINY = """workloads: [chain3]
policies: [fcfs, spf]
baseline: fcfs
seeds: 3..4
rates: [0.25]
n_tasks: 3
params: {spf: {}}
"""


def test_seed_forms():
    assert G.parse_seeds("3..6") == (3, 4, 5, 6)
    assert G.parse_seeds([1, "4..5", 9]) == (1, 4, 5, 9)
    assert G.parse_seeds(7) == (7,)
    for bad, msg in (
        ("6..3", "empty range"),
        ("a..3", "A..B"),
        ("3-5", "A..B"),
        ([3, 3], "twice"),
        ("-2..1", ">= 0"),
        ([], "at least one"),
        (True, "A..B"),
        (1.5, "A..B"),
    ):
        with pytest.raises(ValueError, match=msg):
            G.parse_seeds(bad)


def test_grid_expands_to_the_runners_jobs():
    g = G.parse_grid(
        {
            "workloads": ["chain3", "dag4"],
            "policies": ["fcfs", "topas"],
            "seeds": "3..4",
            "rate_multipliers": [1.0, 1.25],
            "n_tasks": {"dag4": 5},
            "params": {"topas": {"rho": 0.5}},
            "context_cache": [False, True],
        }
    )
    jobs = g.jobs()
    assert len(jobs) == 2 * 2 * 2 * 2 * 2 == len(set(jobs))
    assert {j.rate for j in jobs if j.workload == "chain3"} == {
        rate_of("chain3", 1.0),
        rate_of("chain3", 1.25),
    }
    from topas.workloads import get_workload

    assert {j.n_tasks for j in jobs if j.workload == "chain3"} == {
        get_workload("chain3").default_tasks
    }
    assert {j.n_tasks for j in jobs if j.workload == "dag4"} == {5}
    assert {j.params for j in jobs if j.policy == "topas"} == {(("rho", 0.5),)}
    assert {j.params for j in jobs if j.policy == "fcfs"} == {()}
    # plain Job values, as the reproduction's plan makes them: the same cache keys
    n = get_workload("chain3").default_tasks
    assert Job("chain3", "fcfs", rate_of("chain3", 1.0), 3, n, False) in jobs


@pytest.mark.parametrize(
    "doc,msg",
    [
        ({"policies": ["fcfs"]}, "workloads: missing"),
        ({"workloads": ["chain3"], "policies": ["fcfs"], "sedes": [3]}, "unknown key 'sedes'"),
        ({"workloads": ["chain3"], "policies": ["nope"]}, "policy 'nope': unknown"),
        ({"workloads": ["nope"], "policies": ["fcfs"]}, "workload 'nope': unknown"),
        (
            {"workloads": ["chain3"], "policies": ["fcfs"], "rates": [1], "rate_multipliers": [1]},
            "one of them",
        ),
        ({"workloads": ["chain3"], "policies": ["fcfs"], "rates": [-1]}, "rates -1"),
        ({"workloads": ["chain3"], "policies": ["fcfs"], "n_tasks": 0}, "n_tasks 0"),
        (
            {"workloads": ["chain3"], "policies": ["fcfs"], "n_tasks": {"dag4": 3}},
            "'dag4' is not one of the workloads",
        ),
        (
            {"workloads": ["chain3"], "policies": ["fcfs"], "params": {"topas": {"rho": 1}}},
            "'topas' is not one of the policies",
        ),
        (
            {"workloads": ["chain3"], "policies": ["topas"], "params": {"topas": {"rho": "x"}}},
            "rho='x'",
        ),
        ({"workloads": ["chain3"], "policies": ["fcfs"], "context_cache": "yes"}, "context_cache"),
        ({"workloads": ["chain3"], "policies": ["fcfs"], "baseline": "spf"}, "baseline 'spf'"),
        (
            {"workloads": ["chain3"], "policies": ["fcfs", "spf"], "baseline": "spf", "seeds": 3},
            "at least 2 seeds",
        ),
        ({"workloads": ["chain3"], "policies": ["fcfs", "fcfs"]}, "twice"),
        ({"workloads": ["chain3"], "policies": ["fcfs"], "seeds": "0..2000000"}, "more than"),
        ([1, 2], "top level must be a mapping"),
    ],
)
def test_bad_grids_name_the_key(doc, msg):
    with pytest.raises(ValueError, match=msg):
        G.parse_grid(doc)


def test_example_grid_parses():
    g = G.load_grid(EXAMPLE)
    assert g.baseline in g.policies and len(g.seeds) >= 2 and g.jobs()


def _tiny(tmp_path) -> Path:
    p = tmp_path / "g.yaml"
    p.write_text(TINY)
    return p


def test_sweep_writes_results_atomically_and_resumes(tmp_path, monkeypatch, capsys):
    import topas.metrics.summary as summary_mod

    monkeypatch.setattr(RR, "code_version", lambda: "v1")
    renamed: list[str] = []
    real = summary_mod.os.replace
    monkeypatch.setattr(
        summary_mod.os, "replace", lambda s, d: (renamed.append(Path(d).name), real(s, d))[1]
    )
    out = tmp_path / "o"
    assert main(["sweep", str(_tiny(tmp_path)), "--jobs", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mean JCT" in text and "against fcfs" in text and "spf" in text
    assert {"sweep.csv", "summary.json"} <= set(renamed)
    rows = (out / "sweep.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 and rows[0].startswith("workload,rate,context_cache,policy")
    doc = json.loads((out / "summary.json").read_text())
    assert doc["code_version"] == "v1" and len(doc["cells"]) == 2
    (pair,) = doc["paired"]
    assert pair["policy"] == "spf" and pair["n"] == 2 and pair["lo_pct"] <= pair["mean_pct"]
    assert "wall" not in json.dumps(doc)
    assert len(list((out / "cache").glob("*.json"))) == 4
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    # a rerun takes every result from the cache and writes the same bytes
    def boom(job):
        raise AssertionError(f"re-ran {job}")

    monkeypatch.setattr(RR, "run_job", boom)
    assert main(["sweep", str(_tiny(tmp_path)), "--jobs", "2", "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_sweep_failed_run_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(RR, "code_version", lambda: "v1")
    monkeypatch.setattr(RR, "run_job", lambda job: {"error": "ValueError: no", "job_wall_s": 0})
    assert main(["sweep", str(_tiny(tmp_path)), "--jobs", "1", "--out", str(tmp_path / "o")]) == 1
    cap = capsys.readouterr()
    assert "4 of 4 runs failed" in cap.err
    assert "ValueError: no" in (tmp_path / "o" / "sweep.csv").read_text()


# -- the executor interface ------------------------------------------------------------------


class Recording(EX.Executor):
    """A custom executor: runs in this process and records what run_jobs asked of it."""

    name, workers = "rec", 2

    def __init__(self):
        self.calls, self.q, self.max_in_flight = [], [], 0

    def start(self):
        self.calls.append("start")

    def submit(self, job, path):
        self.q.append((job, path))
        self.max_in_flight = max(self.max_in_flight, len(self.q))

    def in_flight(self):
        return len(self.q)

    def wait(self):
        job, path = self.q.pop(0)
        out = EX.compute(job)
        EX.store_result(out, path)
        return [(job, out)]

    def stop(self):
        self.calls.append("stop")

    def close(self):
        self.calls.append("close")


def test_run_jobs_drives_any_executor(tmp_path):
    jobs = [Job("chain3", "fcfs", 0.25, s, 2) for s in (3, 4, 5, 6, 7)]
    ex = Recording()
    got = RR.run_jobs(jobs, tmp_path, progress=False, version="v", executor=ex)
    assert set(got) == set(jobs) and ex.calls == ["start", "close"]
    assert ex.max_in_flight == 2 * ex.workers  # a few in flight, not the whole queue
    pool = RR.run_jobs(jobs, tmp_path / "pool", 2, progress=False, version="v")
    for j in jobs:
        a = (tmp_path / f"{j.key('v')}.json").read_text()
        b = (tmp_path / "pool" / f"{j.key('v')}.json").read_text()
        assert json.loads(a)["jct_s"] == json.loads(b)["jct_s"] == pool[j]["jct_s"]


def test_run_jobs_stops_the_executor_on_interrupt(tmp_path):
    class Interrupted(Recording):
        def wait(self):
            raise KeyboardInterrupt

    ex = Interrupted()
    (tmp_path / ".x.json.tmp123").write_text("partial")  # a killed writer's leftover
    with pytest.raises(KeyboardInterrupt):
        RR.run_jobs(
            [Job("chain3", "fcfs", 0.25, 3, 2), Job("chain3", "fcfs", 0.25, 4, 2)],
            tmp_path,
            progress=False,
            version="v",
            executor=ex,
        )
    assert ex.calls == ["start", "stop"]
    assert not list(tmp_path.glob(".*.json.*"))


def test_make_executor_choices():
    assert isinstance(EX.make_executor("pool", 2), EX.PoolExecutor)
    with pytest.raises(ValueError, match="unknown"):
        EX.make_executor("dask")
    with pytest.raises(ValueError, match="--ray-address"):
        EX.make_executor("pool", 2, "auto")
    with pytest.raises(ValueError, match="jobs 0"):
        EX.make_executor("pool", 0)


def test_executor_ray_without_ray_is_an_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ValueError, match="ray is not installed"):
        EX.make_executor("ray", 2)


def test_a_ray_worker_with_other_code_refuses_to_run(monkeypatch):
    """The Ray task checks its own code version against the driver's (the cache key's)."""
    monkeypatch.setattr(RX, "_worker_version", None)
    monkeypatch.setattr(RR, "code_version", lambda: "mine")
    with pytest.raises(ValueError, match="code version mine, this process theirs"):
        RX._ray_compute(Job("chain3", "fcfs", 0.25, 3, 2), "theirs")
    assert RX._ray_compute(Job("chain3", "fcfs", 0.25, 3, 2), "mine")["tasks"] == 2
