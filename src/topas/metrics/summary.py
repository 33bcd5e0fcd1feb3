"""Summaries of a simulated (or real-engine) run.

``summarize`` turns a :class:`~topas.engine.simulator.SimResult` into a flat dict of
aggregates (JCT statistics, distance to the lower bound, throughput, batch size, prefix and
swap counters, policy decision time).  ``write_results`` writes per-task and per-request CSVs
plus the JSON summary, each atomically (temporary file + rename), so an interrupted run never
leaves a half-written result.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np


def _pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if a.size else float("nan")


def summarize(res) -> dict:
    """Aggregate metrics of one run.  Times in seconds, memory in tokens/bytes."""
    jct = np.array([t.jct_s for t in res.tasks], dtype=float)
    lb = np.array([t.lower_bound_s for t in res.tasks], dtype=float)
    req = res.requests
    queue = np.array([r.admitted_s - r.ready_s for r in req], dtype=float)
    ttft = np.array([r.first_token_s - r.ready_s for r in req], dtype=float)
    lat = np.array([r.finished_s - r.ready_s for r in req], dtype=float)
    dec_ms = np.asarray(res.decision_s, dtype=float) * 1e3
    c = res.counters
    first_arrival = min((t.arrival_s for t in res.tasks), default=0.0)
    span = max(res.makespan_s - first_arrival, 1e-12)
    out_tokens = sum(r.output_tokens for r in req)
    hits = c.prefix_hits + c.prefix_misses
    return {
        "policy": res.policy,
        "profile": res.profile,
        "seed": res.seed,
        "tasks": len(res.tasks),
        "requests": len(req),
        "mean_jct_s": float(jct.mean()) if jct.size else float("nan"),
        "p50_jct_s": _pct(jct, 50),
        "p90_jct_s": _pct(jct, 90),
        "p99_jct_s": _pct(jct, 99),
        "mean_lower_bound_s": float(lb.mean()) if lb.size else float("nan"),
        "jct_over_lower_bound": float(jct.mean() / lb.mean()) if lb.size else float("nan"),
        "mean_queue_s": float(queue.mean()) if queue.size else float("nan"),
        "mean_ttft_s": float(ttft.mean()) if ttft.size else float("nan"),
        "mean_request_latency_s": float(lat.mean()) if lat.size else float("nan"),
        "p99_request_latency_s": _pct(lat, 99),
        "throughput_tasks_per_s": len(res.tasks) / span,
        "throughput_requests_per_s": len(req) / span,
        "throughput_tokens_per_s": out_tokens / span,
        "makespan_s": res.makespan_s,
        "mean_batch_size": c.batch_time_product / c.busy_s if c.busy_s > 0 else 0.0,
        "busy_fraction": c.busy_s / span,
        "prefix_hit_rate": c.prefix_hits / hits if hits else float("nan"),
        "swapped_in_bytes": c.swap_in_bytes,
        "swapped_out_bytes": c.swap_out_bytes,
        "recomputed_prefix_tokens": c.recomputed_prefix_tokens,
        "recomputed_tokens": c.recomputed_tokens,
        "context_hit_tokens": c.context_hit_tokens,
        "preemptions": c.preemptions,
        "engine_preemptions": c.engine_preemptions,
        "peak_kv_tokens": c.peak_kv_tokens,
        "decisions": c.decisions,
        "mean_decision_ms": float(dec_ms.mean()) if dec_ms.size else 0.0,
        "p99_decision_ms": _pct(dec_ms, 99) if dec_ms.size else 0.0,
        "decision_share_of_wall": float(dec_ms.sum() / 1e3 / res.wall_s) if res.wall_s else 0.0,
        "sim_wall_s": res.wall_s,
    }


def summarize_cluster(cres) -> dict:
    """:func:`summarize` of a :class:`~topas.engine.cluster.ClusterResult` as one run, with
    ``busy_fraction`` the mean over replicas, plus the cluster's own figures."""
    s = summarize(cres.as_sim_result())
    n = len(cres.replicas)
    s["busy_fraction"] /= n
    s["replicas"] = n
    s["router"] = cres.router
    s["routed_per_replica"] = "/".join(str(k) for k in cres.routed)
    s["moved_contexts"] = cres.moved_contexts
    per = []
    for rid, (r, routed) in enumerate(zip(cres.replicas, cres.routed)):
        one = summarize(r)
        # busy share of the cluster's span, not of the replica's own
        c = r.counters
        per.append(
            {
                "replica": rid,
                "routed": routed,
                "requests": one["requests"],
                "tasks_finished": one["tasks"],
                "busy_fraction": c.busy_s / max(s["makespan_s"] - _first_arrival(cres), 1e-12),
                "mean_batch_size": one["mean_batch_size"],
                "prefix_hit_rate": one["prefix_hit_rate"],
                "context_hit_tokens": one["context_hit_tokens"],
                "preemptions": one["preemptions"],
                "peak_kv_tokens": one["peak_kv_tokens"],
            }
        )
    s["per_replica"] = per
    return s


def _first_arrival(cres) -> float:
    return min((t.arrival_s for r in cres.replicas for t in r.tasks), default=0.0)


def _process_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: read once at import (os.umask can only be read by setting it)
_UMASK = _process_umask()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename, so a
    crash never leaves a half-written file.  The file gets the permissions an ordinary
    ``open(path, "w")`` would give it (``0o666`` less the umask), not the temporary file's
    owner-only ``0o600``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8 (newlines written as given)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def records_csv(records) -> str:
    buf = io.StringIO()
    if not records:
        return ""
    cols = [f.name for f in fields(records[0])]
    w = csv.writer(buf)
    w.writerow(cols + (["jct_s"] if hasattr(records[0], "jct_s") else []))
    for r in records:
        row = [getattr(r, k) for k in cols]
        if hasattr(r, "jct_s"):
            row.append(r.jct_s)
        w.writerow(row)
    return buf.getvalue()


def write_results(res, out_dir: Path, summary: dict | None = None) -> dict:
    """Write ``tasks.csv``, ``requests.csv`` and ``summary.json`` into ``out_dir``."""
    out_dir = Path(out_dir)
    summary = summary if summary is not None else summarize(res)
    atomic_write_text(out_dir / "tasks.csv", records_csv(res.tasks))
    atomic_write_text(out_dir / "requests.csv", records_csv(res.requests))
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(out_dir / "counters.json", json.dumps(asdict(res.counters), indent=2) + "\n")
    return summary
