"""Where slow start's centre goes when a doubling's burst is refused (429/503 on overload).

A server with a bounded queue (vLLM's or llama-server's queue limit, a proxy's) refuses a call
at once when its slots and its queue are full: a doubling's burst, admitted at one instant, is
refused from the rank where the server's capacity ends. The refused calls' in-flight counts at
admission say where that is — on the family draws the lowest refused rank was the capacity
(slots + queue) give or take the router's imbalance: 13 for 2 × (5 + 1), 56 for 34 + 21, 22
for 3 × (6 + 2). Slow start's old answer, half the doubled level, is the level before the
doubling, however far below that edge it was (draw 27: 8 for 10 slots and a queue of 2;
1039: 8 for 12 + 4), and probing's ±8% windows took most of a 400-call job to climb back.
So the centre goes to the edge instead: its high probe one call below the lowest refused rank,
but never below the level before (which served all it was given) nor above the doubled level.
The refusals cannot tell slots from queue places: on a deep queue the edge fills it (draw 1007,
34 slots and 21 queued: 88% → 70% of the best fixed goodput; docs/adaptive.md, round 10).
Nor can the refused doubling's latency by rank: at the refusal 0–1 of its calls has answered,
and on slots already mid-service a queued call waits a fraction of a service time, inside the
jitter; the slots known exactly would not hold the draws either (docs/adaptive.md, round 11:
slots or queue places).
A pure function, so the rule is tested on numbers.
"""

from __future__ import annotations

import math

__all__ = ["centre_after_refusal"]


def centre_after_refusal(limit: int, refused_rank: float, *, probe: float) -> float:
    """The centre after slow start's doubling to ``limit`` was refused, the lowest refused
    call admitted as ``refused_rank``-th in flight: probing's high side at ``refused_rank − 1``,
    clamped to ``[limit / 2, limit]``. The high side is ``× (1 + probe)`` but at least one call
    above the low side (``× (1 − probe)``), so below ~8 calls the low side is held at
    ``refused_rank − 2``: centred at 2.8 for a refusal from the 4th call, probing 3 and 4 put
    every other window's last call into the refusals (family draw 1054: p99 1.5× fixed 2's)."""
    if math.isinf(refused_rank):
        return limit / 2.0  # no call refused at once (timeouts): the level before
    edge = min((refused_rank - 1.0) / (1.0 + probe), (refused_rank - 2.0) / (1.0 - probe))
    return min(max(edge, limit / 2.0), float(limit))
