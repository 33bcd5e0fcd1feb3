"""``--executor ray``: the same results, byte for byte, as the process pool (but for measured
times), the same cache and resumption, Ctrl-C, and an existing cluster via --ray-address.

Each test starts (and stops) its own local Ray, ~5 s on 2 cores."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from topas.cli import main
from topas.reproduce import cli as RC
from topas.reproduce import runner as RR
from topas.reproduce.plan import Config, plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep_small.yaml"

#: the cached fields that are wall-clock measurements (decision times and run times), the
#: only ones that differ between two runs of the same job, on any executor
TIMING = (
    "mean_decision_ms",
    "p99_decision_ms",
    "decision_share_of_wall",
    "sim_wall_s",
    "decision_total_s",
    "decision_share_of_sim",
    "job_wall_s",
)
_TIMING_RE = re.compile(r'"({})": [-+0-9.eE]+'.format("|".join(TIMING)))
#: the report's wall times and dates (its header line)
_REPORT_RE = re.compile(
    r"(\*\*|<strong>)[0-9.]+ min(\*\*|</strong>)|took [0-9.]+ min|\d{4}-\d\d-\d\d \d\d:\d\d"
)


def _mask(text: str) -> str:
    return _TIMING_RE.sub(lambda m: f'"{m.group(1)}": T', text)


def _files(d: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(d)): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != "invocations.log"
    }


def test_quick_plan_subset_is_identical_on_pool_and_ray(tmp_path):
    """The quick plan on chain3 (every run of 2 tasks it plans): the same cache files (names, and bytes
    but for the timing fields), the same report text (but for its wall times and date) and
    the same figures, byte for byte.  Both write to the same folder name (the report quotes
    its command line), moved away after each run."""
    cfg = Config(quick=True, seeds=(3,), workloads=("chain3",), tasks=2)
    out = tmp_path / "rep"
    trees = {}
    for ex in ("pool", "ray"):
        t0 = time.perf_counter()
        rep, _ = RC.reproduce(
            cfg, out, jobs=2, progress=False, command="topas reproduce t", executor=ex
        )
        assert not [r for r in rep.results.values() if "error" in r]
        print(f"{ex}: {len(rep.results)} runs in {time.perf_counter() - t0:.1f} s")
        shutil.move(out, tmp_path / ex)
        trees[ex] = _files(tmp_path / ex)
    pool, ray_ = trees["pool"], trees["ray"]
    assert set(pool) == set(ray_)
    version = RR.code_version()
    jobs = list(plan(cfg).all_jobs())
    cache = {f"cache/{j.key(version)}.json" for j in jobs}
    # every planned run is cached, once (a plan of a few runs would prove little)
    assert cache <= set(pool) and len(cache) == len(jobs) == len(rep.results) > 500
    raw_same = 0
    for name in sorted(pool):
        a, b = pool[name], ray_[name]
        if name.startswith("cache/") and name.endswith(".json") and name != "cache/.gitignore":
            raw_same += a == b
            assert _mask(a.decode()) == _mask(b.decode()), name
            assert set(json.loads(a)) == set(json.loads(b))
        elif name in ("results.md", "results.html"):
            assert _REPORT_RE.sub("T", a.decode()) == _REPORT_RE.sub("T", b.decode()), name
        else:
            assert a == b, name  # figures, .gitignore
    print(f"cache files identical before masking the timing fields: {raw_same}/{len(cache)}")


def test_sweep_results_are_byte_identical_and_ray_resumes_the_pools_cache(tmp_path, capsys):
    outs = {}
    for ex in ("pool", "ray"):
        out = tmp_path / ex
        assert (
            main(["sweep", str(EXAMPLE), "--jobs", "2", "--executor", ex, "--out", str(out)]) == 0
        )
        outs[ex] = out
    for name in ("sweep.csv", "summary.json"):
        assert (outs["pool"] / name).read_bytes() == (outs["ray"] / name).read_bytes(), name
    assert {p.name for p in (outs["pool"] / "cache").iterdir()} == {
        p.name for p in (outs["ray"] / "cache").iterdir()
    }
    # Ray on the pool's cache: the same keys, so nothing runs and the outputs are the same
    before = (outs["pool"] / "summary.json").read_bytes()
    n = len(list((outs["pool"] / "cache").glob("*.json")))
    capsys.readouterr()
    assert main(["sweep", str(EXAMPLE), "--executor", "ray", "--out", str(outs["pool"])]) == 0
    assert (outs["pool"] / "summary.json").read_bytes() == before
    assert len(list((outs["pool"] / "cache").glob("*.json"))) == n


def _default_sigint() -> None:
    """The child takes Ctrl-C even when this run inherited SIGINT ignored (a background job
    of a non-interactive shell, e.g. `nohup .ci/run &`): Python leaves an ignored SIGINT
    ignored, and the reproduce would then finish instead of stopping."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_stops_a_ray_reproduce_and_keeps_a_resumable_cache(tmp_path):
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
            "--executor",
            "ray",
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
        while len(list(cache.glob("*.json"))) < 5 and time.monotonic() - t0 < 120:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        stopped_s = time.monotonic() - t1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(f"stopped {stopped_s:.1f} s after SIGINT")
    # Ray's shutdown takes a few seconds on 2 cores
    assert proc.returncode == 130 and stopped_s < 15, (proc.returncode, stopped_s, err)
    assert "interrupted" in err and "resumes" in err and "Traceback" not in err
    assert not (out / "results.md").exists()
    assert not [p for p in cache.iterdir() if p.name.startswith(".") and p.name != ".gitignore"]
    version = RR.code_version()
    keys = {
        j.key(version)
        for j in plan(Config(quick=True, seeds=(3,), workloads=("chain3",), tasks=2)).all_jobs()
    }
    entries = list(cache.glob("*.json"))
    assert entries and all(p.stem in keys for p in entries)
    for p in entries:
        assert "job" in json.loads(p.read_text())  # complete, parseable results


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_existing_cluster_via_ray_address(tmp_path):
    """A Ray head started in another process (``ray start --head --block``), then
    --ray-address: the jobs run there (its workers pass the code-version check), and the
    cluster is still up afterwards (not ours to stop).  The head is stopped by its process
    group, which this test started."""
    import os

    ray_bin = str(Path(sys.executable).parent / "ray")
    addr = f"127.0.0.1:{_free_port()}"
    head = subprocess.Popen(
        [
            ray_bin,
            "start",
            "--head",
            "--block",
            "--num-cpus",
            "2",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            addr.split(":")[1],
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def up() -> bool:
        return (
            subprocess.run(
                [ray_bin, "status", "--address", addr], capture_output=True, timeout=60
            ).returncode
            == 0
        )

    try:
        t0 = time.monotonic()
        while not up():
            assert head.poll() is None and time.monotonic() - t0 < 90, "ray head did not start"
            time.sleep(1)
        out = tmp_path / "o"
        assert (
            main(
                [
                    "sweep",
                    str(EXAMPLE),
                    "--executor",
                    "ray",
                    "--ray-address",
                    addr,
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        assert len(list((out / "cache").glob("*.json"))) == 80
        assert up()
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(head.pid, signal.SIGKILL)
        # the head leaves its address behind; a later plain ray.init() would try it
        cur = Path("/tmp/ray/ray_current_cluster")
        try:
            if cur.read_text().strip().endswith(":" + addr.split(":")[1]):
                cur.unlink()
        except OSError:
            pass
