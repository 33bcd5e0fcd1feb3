"""The command line's argument checks: a parser whose errors are one line, numeric argument
types that name the problem, and the output-folder check."""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path

from rich.console import Console

err = Console(stderr=True)
out = Console()

#: the keys ``topas run --json`` always prints


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with errors on one line (``topas run: error: argument --seed: ...``), no usage
    block; ``--help`` still prints the usage."""

    def error(self, message: str):  # noqa: D102 -- argparse's hook
        msg = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {msg} (see {self.prog} --help)\n")


# -- argument types: each names the problem; argparse adds "argument --flag:" ------------------


def int_arg(lo: int | None = None, hi: int | None = None) -> callable:
    """An argparse type: an integer in ``[lo, hi]`` (``1e6`` accepted when integral)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r}: must be an integer") from None
            if not (math.isfinite(f) and f.is_integer()):
                raise argparse.ArgumentTypeError(f"{text!r}: must be an integer") from None
            v = int(f)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{text}: must be {_range_text(lo, hi)}")
        return v

    parse.__name__ = "integer"
    return parse


def float_arg(lo: float = 0.0, hi: float | None = None, lo_open: bool = True) -> callable:
    """An argparse type: a finite number above ``lo`` (or at it, ``lo_open=False``)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: must be a number") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text}: must be a finite number")
        if (v <= lo if lo_open else v < lo) or (hi is not None and v > hi):
            lo_txt = f"> {lo:g}" if lo_open else f">= {lo:g}"
            raise argparse.ArgumentTypeError(
                f"{text}: must be {lo_txt}" + (f" and <= {hi:g}" if hi is not None else "")
            )
        return v

    parse.__name__ = "number"
    return parse


def _range_text(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"an integer in [{lo:_}, {hi:_}]"
    return f"an integer >= {lo}" if lo is not None else f"an integer <= {hi}"


#: the most tasks a run may sample (a bound on memory and time, not on what is sensible)
MAX_TASKS = 10_000_000


def check_out_dir(path: str, flag: str = "--out") -> None:
    """Fail before any work when ``path`` cannot become an output folder: it is a file, a
    parent of it is a file, or the folder it would be made in is not writable.  Creates
    nothing (a probe file is made and removed)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CliError(f"{flag} {path}: exists and is not a directory")
    anc = p
    while not anc.exists():
        if anc.parent == anc:
            break
        anc = anc.parent
    if anc.exists() and not anc.is_dir():
        raise CliError(f"{flag} {path}: {anc} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".topas-probe.", dir=anc)
    except OSError as e:
        raise CliError(f"{flag} {path}: cannot write in {anc} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)
