"""The ramp's release where a hit saves little (issue 31, round 18; gptgate/cache_release.py).

A hit saves its prefix's prefill; kept on a full home replica it pays for that in decode
steps. Where the prefill is a small part of a call (family draw 1064: 0.25–0.39 s against
calls of 20–35 s), hits 1.25–1.5× the misses' time cost far more than they save, below the
release's general 1.6× (the bar the named profiles need: there a miss's prefill is a large
part of a call). The draw itself: tests/test_cache_full_homes.py."""

from __future__ import annotations

import pytest

from gptgate.cache_release import LOW_SLOWER, MIN_HITS, MIN_MISSES, PAYBACK, SLOWER, ReleaseJudge


def judged(hit_s: float, prefill_s: float | None, *, room: bool = True) -> bool:
    """Misses of 1 s, hits of ``hit_s`` that each saved ``prefill_s``, on a server with room
    for the calls or not (calls queued there): released?"""
    judge = ReleaseJudge()
    for k in range(MIN_HITS):
        judge.record("b", hit=True, latency_s=hit_s, now=float(k), prefill_s=prefill_s,
                     room=room)
    for k in range(MIN_MISSES):
        judge.record("b", hit=False, latency_s=1.0, now=float(MIN_HITS + k), room=room)
    return judge.released("b", float(MIN_HITS + MIN_MISSES))


def test_hits_slower_by_many_prefills_release_the_backend() -> None:
    """1.3× the misses' time for a hit that saved 1% of a call: released."""
    assert LOW_SLOWER < 1.3 < SLOWER and 1.0 + PAYBACK * 0.01 < 1.3
    assert judged(1.3, 0.01)


@pytest.mark.parametrize(
    ("hit_s", "prefill_s"),
    [
        (1.3, 0.1),  # the prefill a large part of a call: the general bar (1.6×) holds
        (1.3, None),  # the prefill not measured: the general bar
        (1.2, 0.001),  # never under LOW_SLOWER × the misses' time
    ],
)
def test_hits_that_save_enough_keep_the_ramp(hit_s: float, prefill_s: float | None) -> None:
    assert not judged(hit_s, prefill_s)


def test_calls_queued_at_the_server_keep_the_general_bar() -> None:
    """Where the calls wait in the server's queue their latency is mostly that wait, the same
    for a hit and a miss: the hits' extra time is not their decode (family draw 12: 9 × 4
    slots at a cap of 64, released at 1.25× it took 1.23× the plain client's time)."""
    assert not judged(1.3, 0.01, room=False)


def test_the_general_bar_stands() -> None:
    """Past 1.6× the hits release whatever they save."""
    assert judged(1.7, 1.0)
