"""The report of ``topas reproduce``: ``results.md`` + ``results.html`` from its results.

The experiments are defined and run by :mod:`topas.reproduce` (the command is
:mod:`topas.reproduce.cli`); this package only renders: it turns their results into tables,
figures (:mod:`topas.metrics.plots`) and a report whose every number sits next to the command
and seeds that made it.  The paper's figures are data (:mod:`.paper`); the HTML page is the
same Markdown rendered by ``markdown-it-py`` (:mod:`.format`).  Every file is written
atomically.
"""

from __future__ import annotations

from pathlib import Path

from topas.metrics.summary import atomic_write_text
from topas.reproduce.report.figures import make_figures
from topas.reproduce.report.format import METRICS, fmt, fmt_stat, md_to_html, pct, table
from topas.reproduce.report.paper import PAPER, PAPER_CITATION
from topas.reproduce.report.render import render_markdown
from topas.reproduce.report.tables import Reproduction, main_table_rows

__all__ = [
    "METRICS",
    "PAPER",
    "PAPER_CITATION",
    "Reproduction",
    "fmt",
    "fmt_stat",
    "main_table_rows",
    "make_figures",
    "md_to_html",
    "pct",
    "render_markdown",
    "table",
    "write_report",
]


def write_report(rep: Reproduction, out_dir: Path) -> list[Path]:
    """Figures, ``results.md`` and ``results.html`` under ``out_dir`` (all atomic)."""
    out_dir = Path(out_dir)
    img = make_figures(rep, out_dir / "img")
    md = render_markdown(rep, img)
    atomic_write_text(out_dir / "results.md", md + "\n")
    atomic_write_text(out_dir / "results.html", md_to_html(md, "TOPAS reproduction results"))
    return [out_dir / "results.md", out_dir / "results.html", *[out_dir / p for p in img.values()]]
