"""Number and table formatting for the report, and its HTML page (Markdown rendered with the
maintained ``markdown-it-py`` library, CommonMark plus pipe tables)."""

from __future__ import annotations

import html
import math
import re

from markdown_it import MarkdownIt

METRICS = (
    ("mean_jct_s", "mean JCT (s)", False),
    ("p99_jct_s", "p99 JCT (s)", False),
    ("throughput_requests_per_s", "throughput (req/s)", True),
)

# -- formatting ------------------------------------------------------------------------------


def fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    dec = max(0, digits - 1 - mag)
    return f"{x:,.{dec}f}"


def fmt_stat(s, digits: int = 3) -> str:
    if s is None or s.n == 0:
        return "failed"
    if s.n == 1:
        return fmt(s.mean, digits)
    return f"{fmt(s.mean, digits)} ± {fmt(s.sd, 2)}"


def pct(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.1f}%"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;"
    "padding:0 1em;line-height:1.45;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:90%}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th:first-child,td:first-child{text-align:left}"
    "code{background:#f4f4f4;padding:0 3px;font-size:90%}"
    "pre{background:#f4f4f4;padding:8px;overflow-x:auto}img{max-width:100%}"
)


def slug(text: str) -> str:
    """A heading's anchor, as the report's links write it (``#failed-runs``)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def md_to_html(md: str, title: str) -> str:
    """``md`` as a standalone HTML page: CommonMark with pipe tables; every heading gets the
    anchor :func:`slug` gives, so the report's in-page links work."""
    parser = MarkdownIt("commonmark").enable("table")
    tokens = parser.parse(md)
    for k, tok in enumerate(tokens):
        if tok.type == "heading_open" and k + 1 < len(tokens):
            tok.attrSet("id", slug(tokens[k + 1].content))
    body = parser.renderer.render(tokens, parser.options, {})
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        + body
        + "</body></html>\n"
    )
