"""``--executor ray``: :class:`RayExecutor` runs each job as a Ray task on a local Ray or an
existing cluster; this process writes the results into the cache (see
:mod:`~topas.reproduce.executors` for the interface).  Ray is imported only here, and only
when asked for."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from topas.reproduce.executors import Executor, compute, store_result
from topas.reproduce.plan import Job

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

        raise ValueError(
            f"--executor ray: a worker on {socket.gethostname()} runs topas code "
            f"version {_worker_version}, this process {version}; install the "
            "same checkout on every node"
        )
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
            kw = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            if self.address:
                ray.init(address=self.address, **kw)
            else:
                # results are small: a small object store starts faster and fits any machine
                # "local": a new Ray, even when `ray start` left one running on this machine
                ray.init(
                    address="local", num_cpus=self.workers, object_store_memory=100 << 20, **kw
                )
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
        from ray.exceptions import RayError, RayTaskError

        import ray

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
                out = {
                    "workload": job.workload,
                    "policy": job.policy,
                    "rate": job.rate,
                    "seed": job.seed,
                    "error": f"{type(e).__name__}: {msg}",
                    "job_wall_s": 0.0,
                    "transient": True,
                    "job": asdict(job),
                }
            store_result(out, path)
            done.append((job, out))
        return done

    def stop(self) -> None:
        import ray

        # a Ray started here: shutting it down stops its workers.  ray.cancel(force=True)
        # racing a task that is just finishing trips a CHECK in Ray's task manager and kills
        # this process (seen on 2.60 after Ctrl-C), so it is used only on a cluster, and there
        # without force (the job's worker gets a KeyboardInterrupt)
        if not self._started:
            for ref in list(self._refs):
                try:
                    ray.cancel(ref, force=False)
                except Exception:  # noqa: BLE001 -- already finished or gone: nothing to stop
                    pass
        self._refs.clear()
        self.close()

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
