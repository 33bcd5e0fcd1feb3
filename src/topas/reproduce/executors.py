"""Where :func:`~topas.reproduce.runner.run_jobs` runs its jobs: in this process, on a local
process pool (the default, no dependency) or on a Ray cluster (the optional ``ray`` extra).

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


# -- Ray ---------------------------------------------------------------------------------------

RAY_MISSING = "ray is not installed (pip install 'topas[ray]', or bash scripts/install_ray.sh)"

_worker_version: str | None = None


def _ray_compute(job: Job, version: str) -> dict:
    """The Ray task: refuses to run code other than the driver's, whose version keys the
    cache (a node with another checkout would file its results under the wrong key)."""
    global _worker_version
    from topas.reproduce import runner

    if _worker_version is None:
        _worker_version = runner.code_version()
    if _worker_version != version:
        import socket

        raise ValueError(f"--executor ray: a worker on {socket.gethostname()} runs topas code "
                         f"version {_worker_version}, this process {version}; install the "
                         "same checkout on every node")
    return compute(job)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


class RayExecutor(Executor):
    """Ray tasks, one CPU each, on a local Ray started here (``workers`` CPUs) or on the
    cluster at ``address`` (``--ray-address``, else the ``RAY_ADDRESS`` variable).  This
    process writes every result to the cache as it comes back."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        if not ray_available():
            raise ValueError(f"--executor ray: {RAY_MISSING}")
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.workers = workers or (None if self.address else (os.cpu_count() or 1))
        self._refs: dict = {}  # ObjectRef -> (job, path)
        self._started = False  # this executor started Ray (and shuts it down)
        self._fn = None
        self._version = ""

    def start(self) -> None:
        import logging

        import ray

        from topas.reproduce import runner

        if not ray.is_initialized():
            kw = dict(include_dashboard=False, log_to_driver=False,
                      logging_level=logging.WARNING)
            if self.address:
                ray.init(address=self.address, **kw)
            else:
                # results are small: a small object store starts faster and fits any machine
                # "local": a new Ray, even when `ray start` left one running on this machine
                ray.init(address="local", num_cpus=self.workers,
                         object_store_memory=100 << 20, **kw)
            self._started = True
        if self.workers is None:  # a cluster: as many jobs at once as it has CPUs
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        # max_retries: Ray reruns a job whose worker died (a lost node), as the pool cannot
        self._fn = ray.remote(num_cpus=1, max_retries=3)(_ray_compute)
        self._version = runner.code_version()

    def submit(self, job: Job, path: Path) -> None:
        self._refs[self._fn.remote(job, self._version)] = (job, path)

    def in_flight(self) -> int:
        return len(self._refs)

    def wait(self) -> list[tuple[Job, dict]]:
        import ray
        from ray.exceptions import RayError, RayTaskError

        ready, rest = ray.wait(list(self._refs), num_returns=1)
        if rest:  # and whatever else is done by now
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        done = []
        for ref in ready:
            job, path = self._refs.pop(ref)
            try:
                out = ray.get(ref)
            except RayTaskError as e:  # the task raised: as the pool, re-raise its error
                cause = getattr(e, "cause", None)
                if isinstance(cause, Exception):
                    raise cause from None
                raise
            except RayError as e:
                # the worker or its node died (out of memory, lost), after Ray's retries: the
                # machine's failure, reported and not cached, like run_job's MemoryError
                msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                out = {"workload": job.workload, "policy": job.policy, "rate": job.rate,
                       "seed": job.seed, "error": f"{type(e).__name__}: {msg}",
                       "job_wall_s": 0.0, "transient": True, "job": asdict(job)}
            store_result(out, path)
            done.append((job, out))
        return done

    def stop(self) -> None:
        import ray

        for ref in list(self._refs):
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 -- already finished or gone: nothing to stop
                pass
        self._refs.clear()
        self.close()

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False


def make_executor(name: str | Executor = "pool", workers: int | None = None,
                  address: str | None = None) -> Executor:
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
        return RayExecutor(workers, address)
    raise ValueError(f"--executor {name!r}: unknown (one of {', '.join(EXECUTORS)})")
