"""Per-task and per-request metrics, run summaries and atomic result files."""

from topas.metrics.summary import summarize, write_results

__all__ = ["summarize", "write_results"]
