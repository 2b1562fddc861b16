"""``concurrency="auto"`` at the plateau's edge of a server of a few slots (issue 31, round
15): 18 family draws have ≥ 95% of the best fixed limit's goodput and are dominated only by a
fixed limit at the edge. On the smallest, slow start's first level (4) is already past the
slots, and probing's estimates (a ±1-call step, windows of 16–20 calls) are far noisier than
the −0.15 a flat plateau reads below the knee, so the centre never comes down; the server's
own queue (``signals=True``) caps the limit at the slots from its first read. Virtual time,
the family's draws, benchmarks/adaptive.py's job (~1-2 s of CPU per run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import adaptive
import pytest

from gptgate.sim import family, run_virtual

DRAW = 1090  # 3 replicas × 1 slot, gpu, 0.94-s calls; plain auto probes 4/5 for the whole run
EDGE = 3


def _dominated(*, signals: bool) -> tuple[float, float] | None:
    """The family's rule against the edge: ``(goodput ratio, p99 ratio)`` when fixed 3 has
    auto's goodput at ≤ 0.8× its p99, else None."""
    server = family(DRAW)
    fixed = run_virtual(adaptive.run_row, server, EDGE, 400, DRAW, None, None, 3600.0)
    auto = run_virtual(
        adaptive.run_row, server, None, 400, DRAW, None, None, 3600.0, None, signals
    )
    if fixed.goodput >= auto.goodput and fixed.p99_s <= 0.8 * auto.p99_s:
        return fixed.goodput / auto.goodput, fixed.p99_s / auto.p99_s
    return None


def test_with_the_servers_queue_auto_sits_at_the_edge() -> None:
    # the reads' knee (in flight × running / (running + waiting)) is the 3 slots: p99 7.97 s
    # against fixed 3's 7.84 s
    assert _dominated(signals=True) is None


@pytest.mark.xfail(
    strict=True,
    reason="the edge of a 3-slot server is a one-call decision that non-streamed latencies do "
    "not resolve in 400 calls (docs/adaptive.md, 'Issue 31, round 15')",
)
def test_without_signals_auto_is_not_dominated_by_the_edge() -> None:
    # plain auto: slow start 4 → 8 → exit at 4, then probing 4/5 for the rest of the run —
    # every call after slow start above the 3 slots, 73 calls over the bar of 9.7 s; fixed 3
    # has 1.01× its goodput at 0.43× its p99 (18.1 s). A sparse high probe (1 window in 4)
    # reached 14.6 s, still 0.54×
    assert _dominated(signals=False) is None
