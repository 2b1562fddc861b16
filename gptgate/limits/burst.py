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

__all__ = ["STAIR_REFUTED", "STAIR_STEP", "served_in_burst"]

#: a call slower than this × the burst's fastest waited in the server's queue
STAIR_STEP = 1.6
#: the calls at the level a stair said is served, with a goodput this many times below the
#: burst's, refute it: the server serves more at a higher load (a router keeping a prompt's
#: calls on one replica until a few are in flight there). Low, because a stair believed
#: wrongly costs most of a run's goodput (family draw 1040, 14 replicas read as 2 served:
#: 0.99/s against 3.01/s; goodput 1.42× lower at 2), and one refuted wrongly only slow-starts
#: as before (one-slot draws measure 0.77–1.15×)
STAIR_REFUTED = 1.25


def served_in_burst(
    calls: Sequence[tuple[int, float]], *, step: float = STAIR_STEP, slow: int = 2
) -> int | None:
    """How many of a burst's calls the server serves at once; ``None`` while its answers show
    no queue (or too little to tell).

    ``calls``: the burst's calls answered so far, as ``(rank, latency)`` — the order it was
    admitted in (1 = first) and the latency per reference answer length, all priced at the
    same length. The calls served at once are those within ``step`` × the fastest; a queue
    shows when they are exactly the first ranks, at least ``slow`` later ones are beyond it,
    and no more calls were served than waited. Admission order decides who waits in a FIFO
    queue, whereas a straggler strikes any call: faking a queue takes ``slow`` stragglers on
    the burst's next ranks (at the family's ≤ 5% straggler rate, about 1 burst in 400). It
    needs no answer from the burst's last calls: they were admitted with the slow ones and
    wait at least as long.

    And each waiting call must have waited its turn: behind ``served`` slots, rank ``k``
    waits ``⌈k/served⌉ − 1`` service times, so its latency is at least ``0.8·⌈k/served⌉`` ×
    the served calls' mean. A server that prefills one prompt at a time but decodes them
    together also answers a burst in a stair, of shrinking steps (a 64-slot tpu draw: 1.2,
    2.7, 2.2 and 3.1 s for ranks 1 to 4, not 1.2, 2.4, 3.6): it serves them all at once.
    """
    if len(calls) < 1 + slow:
        return None
    floor = min(latency for _, latency in calls)
    if floor <= 0.0:
        return None
    ordered = sorted(calls)
    fast = [latency <= step * floor for _, latency in ordered]
    served = fast.index(False) if False in fast else len(fast)
    waited = len(fast) - served
    if any(fast[served:]) or waited < slow or served > waited:
        return None
    if [rank for rank, _ in ordered[:served]] != list(range(1, served + 1)):
        return None  # an earlier call is still out: who waits is not known yet
    service = sum(latency for _, latency in ordered[:served]) / served
    for rank, latency in ordered[served:]:
        if latency < max(step, 0.8 * -(-rank // served)) * service:
            return None
    return served
