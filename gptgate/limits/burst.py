"""The first burst's stair: how many calls a server serves at once, read before any doubling.

Slow start opens with ``initial`` calls admitted at one instant, before any answer is back. A
server with fewer slots than that serves the first few and queues the rest in arrival order:
their latencies climb in a stair, by about one service time per ``slots`` calls (issue 31,
family draw 1, one slot: 24, 43, 75 and 105 s for the calls admitted 1st to 4th). A server
with the slots serves them side by side: one flat step. Waiting for the first window to
compare with a second one instead doubled 4 → 8 on that one-slot server, and the ~30 calls
admitted at 8 in flight (150–206 s each) set the run's p99 (188 s against fixed 2's 83 s),
after which slow start's exit floored the centre at the level before the doubling (4, four
times the one slot). Pure: the rule is tested on numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["served_in_burst"]


def served_in_burst(latencies: Sequence[float], *, step: float = 1.6) -> int | None:
    """How many of a burst's calls the server served at once; ``None`` when the burst shows
    no queue (or too little to tell).

    ``latencies``: the burst's calls' latencies (per reference answer length) in the order
    they were admitted. The calls served at once are the leading ones within ``step`` × the
    fastest; a queue shows only when every later call is beyond it — admission order decides
    who waits in a FIFO queue, whereas a straggler strikes any call. At most half the burst
    may be served, so one straggler cannot fake a queue: two would have to land on the
    burst's last calls (at the family's ≤ 5% straggler rate, about 1 burst in 400).
    """
    if len(latencies) < 3:
        return None
    floor = min(latencies)
    if floor <= 0.0:
        return None
    fast = [r <= step * floor for r in latencies]
    served = fast.index(False) if False in fast else len(fast)
    if any(fast[served:]) or 2 * served > len(latencies):
        return None
    return served
