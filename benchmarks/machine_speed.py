"""How steady is this machine's speed?  Times a fixed pure-Python loop (100k additions) over
and over for ``SECONDS`` and prints the median per 2-second window, the spread, and the
steal time the kernel reports meanwhile (``/proc/stat``, Linux only).

    python benchmarks/machine_speed.py 30

On a shared virtual machine the windows can differ by 1.5x with nothing else running in the
VM and almost no steal time (the physical core is shared): the reason the vLLM fidelity
runner measures the engine's speed around every run (docs/vllm.md, "Speed anchoring").
"""

from __future__ import annotations

import statistics
import sys
import time


def _steal_ticks() -> int | None:
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8])
    except (OSError, IndexError, ValueError):
        return None


def _loop() -> int:
    s = 0
    for i in range(100_000):
        s += i
    return s


def main(seconds: float) -> None:
    steal0, t0 = _steal_ticks(), time.perf_counter()
    windows: dict[int, list[float]] = {}
    while (now := time.perf_counter()) - t0 < seconds:
        _loop()
        windows.setdefault(int((now - t0) // 2), []).append(time.perf_counter() - now)
    med = [statistics.median(v) * 1e3 for _, v in sorted(windows.items())]
    print("median per 2 s window (ms):", " ".join(f"{m:.2f}" for m in med))
    print(
        f"fastest window {min(med):.2f} ms, slowest {max(med):.2f} ms, "
        f"ratio {max(med) / min(med):.2f}"
    )
    steal1 = _steal_ticks()
    if steal0 is not None and steal1 is not None:
        print(f"steal time: {(steal1 - steal0) / 100:.2f} s of {seconds:g} s (all CPUs)")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        try:
            secs = float(sys.argv[1])
        except ValueError:
            raise SystemExit(f"seconds {sys.argv[1]!r}: not a number") from None
        if secs <= 0:
            raise SystemExit(f"seconds {secs:g}: must be > 0")
    else:
        secs = 30.0
    main(secs)
