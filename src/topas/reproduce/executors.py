"""Where :func:`~topas.reproduce.runner.run_jobs` runs its jobs: in this process, on a local
process pool (the default, no dependency) or on a Ray cluster (the optional ``ray`` extra,
:mod:`~topas.reproduce.ray_executor`).

An executor only moves jobs and results; ``run_jobs`` keeps all the bookkeeping (the cache,
the order, how many jobs are in flight, progress, what happens on Ctrl-C).  Each executor:

``start()`` / ``close()``
    bring the workers up and down (a normal end);
``submit(job, path)``
    queue one job whose result belongs in the cache file ``path``;
``in_flight()``
    how many submitted jobs have not been handed back;
``wait()``
    block until at least one job is done and return ``[(job, result), ...]``, each result
    already written to its cache file (or not, for a transient failure);
``stop()``
    on an interrupt or a failure: drop what has not started and stop the workers now.

Every cache file is written by :func:`store_result` (a temporary file and a rename), by the
pool's workers or, on Ray, by this process: the cluster's nodes need no shared file system.
"""

from __future__ import annotations

import json
import os
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path

from topas.metrics.summary import atomic_write_text
from topas.reproduce.plan import Job

#: ``--executor`` choices
EXECUTORS = ("pool", "ray")


def compute(job: Job) -> dict:
    """One job's result as cached: ``run_job``'s output plus the job itself."""
    from topas.reproduce import runner

    out = runner.run_job(job)
    out["job"] = asdict(job)
    return out


def store_result(out: dict, path: str | Path) -> None:
    """Write a result to its cache file atomically, unless the failure was transient (the
    machine's, not the code's: a rerun retries it)."""
    if not out.get("transient"):
        atomic_write_text(Path(path), json.dumps(out) + "\n")


def _run_and_cache(job: Job, path: str) -> tuple[Job, dict]:
    out = compute(job)
    store_result(out, path)
    return job, out


class Executor:
    """The interface (see the module docstring); ``workers`` is the parallelism, which sets
    how many jobs ``run_jobs`` keeps in flight (twice it)."""

    name = "?"
    workers = 1

    def start(self) -> None:
        pass

    def submit(self, job: Job, path: Path) -> None:
        raise NotImplementedError

    def in_flight(self) -> int:
        raise NotImplementedError

    def wait(self) -> list[tuple[Job, dict]]:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


class InlineExecutor(Executor):
    """Runs each job in this process when it is waited for (``--jobs 1``, or one job)."""

    name = "inline"

    def __init__(self) -> None:
        self._queue: deque[tuple[Job, Path]] = deque()

    def submit(self, job: Job, path: Path) -> None:
        self._queue.append((job, path))

    def in_flight(self) -> int:
        return len(self._queue)

    def wait(self) -> list[tuple[Job, dict]]:
        job, path = self._queue.popleft()
        return [_run_and_cache(job, str(path))]

    def stop(self) -> None:
        self._queue.clear()


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them (see ``run_jobs``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class PoolExecutor(Executor):
    """A local process pool; each worker writes its own result to the cache."""

    name = "pool"

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._pending: set = set()

    def start(self) -> None:
        self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_ignore_sigint)

    def submit(self, job: Job, path: Path) -> None:
        self._pending.add(self._pool.submit(_run_and_cache, job, str(path)))

    def in_flight(self) -> int:
        return len(self._pending)

    def wait(self) -> list[tuple[Job, dict]]:
        done, self._pending = wait(self._pending, return_when=FIRST_COMPLETED)
        return [f.result() for f in done]

    def stop(self) -> None:
        """Cancel what has not started and kill the workers now.  A killed worker leaves at
        most a temporary file (writes are temp + rename); complete cache entries stay."""
        pool = self._pool
        if pool is None:
            return
        pool.shutdown(wait=False, cancel_futures=True)
        kill = getattr(pool, "kill_workers", None)  # Python >= 3.14
        if kill is not None:
            kill()
            return
        for p in list((getattr(pool, "_processes", None) or {}).values()):
            p.kill()
        for p in list((getattr(pool, "_processes", None) or {}).values()):
            p.join(timeout=1)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def make_executor(
    name: str | Executor = "pool", workers: int | None = None, address: str | None = None
) -> Executor:
    """The executor called ``name`` (``pool`` or ``ray``); ``workers``: the pool's processes
    (default: the CPUs) or local Ray's CPUs; ``address``: a Ray cluster.  Fails at once (a
    ValueError naming ``--executor``) when Ray is asked for but not installed."""
    if isinstance(name, Executor):
        return name
    if workers is not None and workers < 1:
        raise ValueError(f"jobs {workers}: must be >= 1")
    if name == "pool":
        if address:
            raise ValueError("--ray-address: only with --executor ray")
        return PoolExecutor(workers or os.cpu_count() or 1)
    if name == "ray":
        from topas.reproduce.ray_executor import RayExecutor

        return RayExecutor(workers, address)
    raise ValueError(f"--executor {name!r}: unknown (one of {', '.join(EXECUTORS)})")
