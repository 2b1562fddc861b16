"""The pace an adaptive limit's rate ceiling is sized by: the refill, or more while the
budget in hand covers most of the work in sight (issue 31, round 11).

The ceiling is ``rate_headroom × pace × latency`` calls in flight (Little's law: more only wait
for the pacer). With the pace at the refill ``r`` alone, goodput is capped at ``2r`` however
much budget the bucket holds — on the server family's draw 83 (281 RPM, a 250-call bucket,
400 calls) `auto` ran at 74% of fixed 64's goodput, which spent the bucket at the server's
pace and finished while `auto` still held 100 calls of it. While the bucket covers
``COVERED_SHARE`` of the calls waiting or in flight, the pace is the refill plus the bucket
spread over one window (the limits' minute): what the budget sends without ever running dry
within that window — twice the refill for a full bucket, the refill again as it is spent. Below
that share the work in sight outlasts the budget whatever the pace, and a faster start only
adds latency at the server (draw 1018: p99 3.9 → 5.7 s at the same goodput, dominated by
fixed 8).

Where the job's length is known (``gate.map`` over a sized iterable, gptgate/map_demand.py),
the share of it in sight is no longer the test. The pace that spends the bucket as the known
work ends is ``r·job/(job − funds)``; the sustained ceiling already sends up to twice the refill
(its headroom), so that pace is beyond it exactly when the bucket funds more than half of the
calls left. Then the bucket is spread as fast as a window ever spreads it, twice the refill,
whatever share of the work is in sight (issue 31, round 13: on a 35-s job, draw 1029, the share
fell below 3/4 a third of the way in, the pace fell to the refill, and the job ended with ~50
calls of its bucket unspent). Faster than that the ceiling only queued calls at a server that
bounded the job itself (draw 83: ``r·job/(job − funds)`` itself ran to 33 in flight on 8
slots).
"""

from __future__ import annotations

__all__ = ["COVERED_SHARE", "WINDOW_S", "ceiling_pace"]

#: the limits' window: RPM/TPM are per minute, so a full bucket holds a minute's refill
WINDOW_S = 60.0
#: the share of the work in sight (calls waiting or in flight) the bucket must cover before it
#: is spread over the window: it then covers that work even at twice the sustained pace
#: (the refill over it adds the rest); measured on the family's rate-limited draws (round 11)
COVERED_SHARE = 0.75


def ceiling_pace(rate: float, funds: float, demand: int, job: int | None = None) -> float:
    """Calls per second the rate ceiling is sized by: ``rate`` (the refill), plus ``funds``
    (the calls the bucket funds now) over one window while they cover ``COVERED_SHARE`` of
    ``demand`` — at most the refill again: a bucket holds no more than a window's refill.

    ``job``: all the calls left of the work when known (``demand`` and those not sent yet),
    else None. While the bucket funds more than half of them but not all, twice the refill
    whatever the share in sight; a bucket funding them all is left to the rules above."""
    if job is not None and job / 2.0 < funds < job:
        return 2.0 * rate
    if funds <= 0.0 or funds < COVERED_SHARE * demand:
        return rate
    return rate + min(rate, funds / WINDOW_S)
