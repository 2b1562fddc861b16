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
from gptgate.sim import family, run_virtual


def test_the_centre_after_a_refused_doubling_probes_just_below_the_refused_rank() -> None:
    # 2 × (5 slots + 1 queued): refused from the 13th call on; high probe 12
    assert centre_after_refusal(16, 13, probe=0.08) == pytest.approx(12 / 1.08)
    # never below the level before the doubling (it served all it was given) ...
    assert centre_after_refusal(32, 9, probe=0.08) == 16.0
    # ... nor above the doubled level
    assert centre_after_refusal(16, 40, probe=0.08) == 16.0


def _refused(start: float, rank: int) -> Sample:
    return Sample(start, 0.01, rank, "dropped", congestion=True)


def test_a_refused_burst_ends_slow_start_at_the_servers_edge() -> None:
    # slow start at 32 on 3 × (6 + 2): the server refuses the burst from its 22nd call on
    limit = LLMLimit(initial=32, max_limit=128)
    for rank in (22, 26, 31):
        limit.update(_refused(1.0, rank), 1.01)
    assert not limit.in_slow_start
    assert limit.center == pytest.approx(21 / 1.08)  # was 16, the level before
    assert limit.limit == round(limit.center * 0.92)  # the low probe: 18
    assert limit.events["loss"] == 1


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
