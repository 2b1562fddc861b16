"""``concurrency="auto"`` with ``Backend(signals=True)`` on the server family (issue 31,
round 13): the server's own queue as the limit's evidence, on draws a production user would
run signals on (vLLM, llama.cpp). Virtual time, benchmarks/adaptive.py's 400-call job (~1-2 s
of CPU per run)."""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import adaptive
import pytest

from gptgate.sim import family, run_virtual


def _auto(draw: int, signals: bool) -> adaptive.Row:
    row = functools.partial(adaptive.run_row, timeout=3600.0, signals=signals)
    return run_virtual(row, family(draw), None, 400, draw)


def test_llama_servers_behind_one_url_do_not_cap_auto_at_one_replicas_slots() -> None:
    """Draw 34: two llama-servers of 2 slots behind one URL (queue 3 each). Each read of
    ``/slots`` shows one of them; taken as the server's, its 2 slots capped ``auto`` at 2 in
    flight and halved its goodput (0.121 calls/s against 0.208 without signals)."""
    plain, signals = _auto(34, False), _auto(34, True)
    assert signals.failed == plain.failed == 0
    assert signals.goodput >= 0.95 * plain.goodput


def test_the_servers_knee_holds_where_answers_slow_with_the_batch() -> None:
    """Draw 56: 1 × 38 slots, a queue of 15, every answer fills its 400 tokens. Fixed 38
    (the slots) has the best goodput; latency alone ends slow start where each call slows
    with the batch (94.1% of it, and so did signals until the ramp: the knee only capped).
    The server's reads say 38 run and none wait: the ramp climbs per read and holds there."""
    row = functools.partial(adaptive.run_row, timeout=3600.0)
    slots = run_virtual(row, family(56), 38, 400, 56)
    signals = _auto(56, True)
    assert signals.failed == 0
    assert signals.goodput >= 0.95 * slots.goodput


def test_calls_waiting_for_the_rate_pacer_are_not_missing_from_the_servers_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Draw 1029: 16 × 32 slots behind a 261-RPM limit. Calls paced below the limit hold
    their permit while they wait, so the server counted 3 of 7 "in flight": read as a
    balancer's partial view, its signals were dropped. Only calls sent are ours to find."""
    with caplog.at_level(logging.WARNING, logger="gptgate"):
        _auto(1029, True)
    assert not [r for r in caplog.records if "calls in flight" in r.getMessage()]


@pytest.mark.parametrize("draw", [60, 1048])
def test_first_reads_of_one_replica_behind_a_balancer_are_not_acted_on(draw: int) -> None:
    """Draws 60 (5 × 8 llama-server slots) and 1048 (12 × 5) behind one URL: each read is one
    replica's. The first reads, acted on before half of 8 reads had missed our calls, capped
    the limit at one replica's slots and ended slow start at its queue, and what they set
    outlived the verdict: ``auto`` + signals at 41% and 26% of plain ``auto``'s goodput. A
    read that counts a fraction of our calls is no view of the server from the first."""
    plain, signals = _auto(draw, False), _auto(draw, True)
    assert signals.failed == plain.failed == 0
    assert signals.goodput >= 0.95 * plain.goodput


def test_a_rate_limits_ceiling_bounds_the_servers_floor() -> None:
    """Draw 72: 1 × 64 slots behind a 1,993-RPM / 210,602-TPM limit. The server's KV cache
    filled at 64 in flight, so its knee (64) stayed a floor after slow start while the rate
    sustained ~20: the other calls held permits at the pacer, p99 4.7 s → 23.7 s at the
    same goodput (dominated by fixed 8)."""
    plain, signals = _auto(72, False), _auto(72, True)
    assert signals.failed == plain.failed == 0
    assert signals.goodput >= 0.99 * plain.goodput
    assert signals.p99_s <= 1.25 * plain.p99_s
