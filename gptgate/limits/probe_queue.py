"""Probing's high side read against its low side by the calls' fixed part.

After slow start the limit alternates two levels around its centre and moves it by the
goodput elasticity between them. On a plateau that elasticity is ~0, only ``knee_elasticity``
(0.15) below the knee, and with the per-call noise of these servers (σ of ``ln R`` 0.2–0.5,
windows of 16+ calls) an estimate's dead band is ±0.5–0.7: a centre left one call or a few
past the edge stays there for a 400-call job, the high probe's calls wait in the server's
queue, and they set the p99 (issue 31, round 15: 18 family draws at ≥ 95% of the best fixed
goodput, dominated by a fixed limit at the edge).

A queue adds the same wait to a short answer as to a long one, so it shows in the fixed part
``c`` of ``latency ≈ c + n·t`` (gptgate/limits/overhead_fit.py), which slow start already reads
on a doubling. Pooled over every window of one side since the centre last moved, the high
side's line against the low side's says how many of its calls waited; beyond ``z`` standard
errors, with the decode slope unchanged and a pair that bought little goodput, the high side
is past the edge: the centre steps down so that the new high probe is the old low one.
"""

from __future__ import annotations

from .overhead_fit import QUEUED_DOUBLING_ELASTICITY, LengthLine, queued_by_fixed_part

__all__ = ["high_side_queued", "centre_below"]


def high_side_queued(
    low: LengthLine,
    high: LengthLine,
    n_high: float,
    elasticity: float,
    *,
    z: float,
    tolerance: float,
) -> bool:
    """Whether more than ``tolerance`` of the high probe's ``n_high`` calls in flight waited
    in a queue the low probe's did not, and the pair bought an elasticity under
    :data:`QUEUED_DOUBLING_ELASTICITY` (a NaN elasticity, none measured yet, counts as low)."""
    before, after = low.fixed_part(), high.fixed_part()
    if before is None or after is None or high.k <= 0.0:
        return False
    if elasticity >= QUEUED_DOUBLING_ELASTICITY:
        return False
    queued = queued_by_fixed_part(before, after, n_high, high.y / high.k, z=z)
    return queued > tolerance * n_high


def centre_below(centre: float, low: int, probe: float) -> float:
    """The centre one probe step down, at most where the new high probe is the old low one."""
    return min(centre * (1.0 - probe) / (1.0 + probe), low - 0.5)
