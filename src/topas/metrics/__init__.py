"""Per-task and per-request metrics, run summaries and atomic result files."""

from topas.metrics.summary import summarize, summarize_cluster, write_results

__all__ = ["summarize", "summarize_cluster", "write_results"]
