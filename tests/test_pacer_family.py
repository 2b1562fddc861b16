"""The rate pacer on issue 31's rate-limited draws (benchmarks/family.py --only cache).

Family draw 83 (2 replicas × 4 slots, 281 RPM, 400 calls at a cap of 64): the hand warm-up
sends at the limit and retries its 257 429s after their retry-after; gptgate paced itself
below it and took 1.29× the hand client's time. Per call: the pacer read each response's
``remaining`` as of the response, but the server counted it at admission — by then the calls
sent meanwhile were counted too — so the budget looked larger than it was, 8 calls met 429s
at 15.5 s, and from there the 10% headroom held the job at 90% of the limit.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from gptgate.sim import family_draw, run_virtual

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from _strategies import job, run_gptgate, run_hand  # the clients of benchmarks/family.py


def test_paced_at_the_limit_like_a_client_that_retries_its_429s() -> None:
    """Before: gptgate 34.5 s against the hand client's 26.7 s (1.29×), 8 calls refused by 429s;
    now within 5% of the hand client's time."""
    d = family_draw(83)
    assert d.server.rpm == 281
    items = job(4, 400, d.seed)
    hand = run_virtual(run_hand, d.server, [items], 64, d.seed, 100, 3600.0)
    gate = run_virtual(functools.partial(run_gptgate, timeout=3600.0), d.server, [items], 64,
                       d.seed)
    assert gate.failed == 0
    assert gate.total_s <= 1.05 * hand.total_s, (gate.total_s, hand.total_s)
