"""``concurrency="auto"`` on a server with a bounded queue (issue 31, round 10): slow start's
doubling runs past the server's slots + queue, and the server refuses the burst's last calls at
once (429/503). The lowest refused call's in-flight rank is where the capacity ends; slow start
used to end at half the doubled level — the level before, whatever it was — and probing's ±8%
windows took most of a 400-call job to climb back (family draw 1039: centre 8 for 4 × 3 slots
with a queue of 1 each, 74.5% of the best fixed limit's goodput). Virtual time, the server
family's draws, benchmarks/adaptive.py's job (~1-2 s of CPU per run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import adaptive
import pytest

from gptgate.limits import LLMLimit
from gptgate.limits.base import Sample
from gptgate.limits.refusal import centre_after_refusal
from gptgate.sim import SimProfile, family, run_virtual


def test_the_centre_after_a_refused_doubling_probes_just_below_the_refused_rank() -> None:
    # 2 × (5 slots + 1 queued): refused from the 13th call on; high probe 12
    assert centre_after_refusal(16, 13, probe=0.08) == pytest.approx(12 / 1.08)
    # below ~8 calls the low probe is held at the refused rank − 2 (the high one is at least
    # one above it): refused from the 4th call, probing 2 and 3, not 3 and 4
    assert centre_after_refusal(4, 4, probe=0.08) == pytest.approx(2 / 0.92)
    # never below the level before the doubling (it served all it was given) ...
    assert centre_after_refusal(32, 9, probe=0.08) == 16.0
    # ... nor above the doubled level
    assert centre_after_refusal(16, 40, probe=0.08) == 16.0


def _refused(start: float, rank: int) -> Sample:
    return Sample(start, 0.01, rank, "dropped", congestion=True)


def test_a_refused_burst_ends_slow_start_at_the_servers_edge() -> None:
    # slow start doubling 16 → 32 on 3 × (6 + 2): the burst is refused from its 22nd call on
    limit = LLMLimit(initial=16, max_limit=128)
    for _ in range(16):
        limit.update(Sample(0.0, 2.0, 16, "ok", output_tokens=100), 2.0)
    assert limit.limit == 32 and limit.in_slow_start
    for rank in (22, 26, 31):
        limit.update(_refused(3.0, rank), 3.01)
    assert not limit.in_slow_start
    assert limit.center == pytest.approx(21 / 1.08)  # was 16, the level before
    assert limit.limit == round(limit.center * 0.92)  # the low probe: 18
    assert limit.events["loss"] == 1


def test_a_timeout_in_slow_start_still_lands_on_the_level_before() -> None:
    # a timeout is no refusal: it says nothing of where the server's capacity ends
    limit = LLMLimit(initial=16, max_limit=128)
    for _ in range(16):
        limit.update(Sample(0.0, 2.0, 16, "ok", output_tokens=100), 2.0)
    for rank in (22, 26):
        limit.update(Sample(3.0, 30.0, rank, "dropped", congestion=True), 33.0)
    assert not limit.in_slow_start and limit.center == 16.0


@pytest.mark.parametrize(
    ("draw", "best_fixed", "share"),
    [
        # 4 × 3 slots, a queue of 1 per replica (503), spreads at 1 in flight: refused from
        # rank 16 at 16; main centred on 8 (74.5% of fixed 64's goodput), now on 13.9
        (1039, 64, 0.9),
        # 2 × 4 slots, a queue of 3 each (429): refused from rank 15 at 16; main centred on 8
        # (93.3% of fixed 16's goodput), now on 13
        (36, 16, 0.95),
    ],
)
def test_auto_after_a_refused_doubling_reaches_the_best_fixed_goodput(
    draw: int, best_fixed: int, share: float
) -> None:
    server = family(draw)
    assert server.max_queue is not None
    fixed = run_virtual(adaptive.run_row, server, best_fixed, 400, draw, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, draw, None, None, 3600.0)
    assert auto.failed == 0
    assert auto.goodput >= share * fixed.goodput, (auto.goodput, fixed.goodput)


@pytest.mark.xfail(
    strict=True, reason="slow start's pace to the plateau, not the window at 128 (round 11's bound)"
)
def test_auto_does_not_double_past_a_plateau_to_128() -> None:
    # family draw 67: 2 × 30 slots, unbounded queue. 32 → 64 read 0.59, so slow start doubled
    # to 128; its window there (64 calls, all queued behind the slots) took 22 s of a 108 s
    # job, read −0.33 and landed at 64 (probing 59/69): 80% of fixed 45's goodput, p99 2.3×
    # fixed 30's. But the queue keeps the slots busy: a limit frozen at 64, or at 45, the
    # instant slow start doubles to 128 reaches 80.5% or 84.1% — the goodput is lost before, in
    # slow start's 35 s to 64 (docs/adaptive.md, "Issue 31, round 11: the overshoot to 128")
    server = family(67)
    fixed = run_virtual(adaptive.run_row, server, 45, 400, 67, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, 67, None, None, 3600.0)
    assert auto.goodput >= 0.95 * fixed.goodput, (auto.goodput, fixed.goodput)


@pytest.mark.xfail(
    strict=True,
    reason="the refused doubling's latency shows no stair at the slots (round 11: slots or "
    "queue places)",
)
def test_auto_is_not_dominated_by_the_slots_below_a_refused_doubling() -> None:
    # family draw 34: 2 × 2 slots, a queue of 3 each (429). 4 → 8 is refused from rank 8, so
    # slow start ends centred on 6.5, in the queue: the calls there wait a turn, and fixed 4
    # has 1.04× auto's goodput at 0.61× its p99. The refusal cannot tell slots from queue
    # places, and neither can the doubling's latency by rank: one of its calls had answered at
    # the cut, and the four (69, 35, 50, 96 s) overlap the unqueued 20–69 s
    # (docs/adaptive.md, "Issue 31, round 11: slots or queue places")
    _assert_not_dominated(family(34), 34, fixed_limit=4)


@pytest.mark.xfail(
    strict=True,
    reason="8 -> 16 on 10 slots reads e = 0.32 even noise-free, and the window's first "
    "completions hide the queue (round 11: a queue among answers of one length)",
)
def test_auto_is_not_dominated_when_every_answer_fills_its_cap() -> None:
    # family draw 6: 2 × 5 slots, a queue of 13 (503), every call fills its 400-token cap, so
    # the fixed part has no lengths to fit a line on. Slow start's window at 16 (6 calls over
    # the 10 slots) closed on its 16 first completions — mean 32.8 s against 27.2 s at 8, e =
    # 0.73 — with the window's slowest calls (60–153 s) still in flight; the 16 first admitted
    # average 57.6 s against 43.8 s (e = 0.60), and the per-call log-variance (0.23) gives the
    # doubling's e a standard error of ~0.25. It doubled to 32, was refused and centred on
    # 20.8: fixed 10 has 1.01× auto's goodput at 0.70× its p99 (docs/adaptive.md, "Issue 31,
    # round 11: a queue among answers of one length")
    server = family(6)
    assert server.fills_max_tokens
    _assert_not_dominated(server, 6, fixed_limit=10)


def _assert_not_dominated(server: SimProfile, draw: int, *, fixed_limit: int) -> None:
    """The family's rule on one draw's 400-call job: no fixed limit with auto's goodput at
    ≤ 0.8× its p99."""
    fixed = run_virtual(adaptive.run_row, server, fixed_limit, 400, draw, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, draw, None, None, 3600.0)
    assert not (fixed.goodput >= auto.goodput and fixed.p99_s <= 0.8 * auto.p99_s), (
        fixed.goodput / auto.goodput,
        fixed.p99_s / auto.p99_s,
    )
