"""A slow-start exit read inside its noise is measured again once probing has settled.

Slow start ends when a doubling's elasticity ``e`` reads under the exit (0.3). On a noisy
server of a few slots that reading rests on a handful of calls (the level before's window is
its first cohort) and its standard error is as large as the reading (issue 31, round 16:
draw 51 read 0.26 ± 0.41 where the fixed grid scales to 7); the centre lands at the
linear-scaling target below the edge, and probing's ±8% steps cannot climb out. An exit
whose distance from the threshold is under ``z`` standard errors is *inconclusive*: after
probing's first windows at the centre, one window runs at the doubled level again, and its
goodput against the centre's windows — steady state against steady state, both sized as
probing's — is a second reading. Pooled with the first by inverse variance, it moves the
centre to the linear-scaling equivalent of what the doubled level bought when it says the
doubling scales (docs/adaptive.md, "Issue 31, round 18").
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["Reading", "inconclusive", "pooled", "reading", "scaled_centre"]


class Reading(NamedTuple):
    """An elasticity over one step in ``ln N`` and its standard error."""

    e: float
    se: float


def reading(
    ln_n0: float, ln_x0: float, n0: int, ln_n1: float, ln_x1: float, n1: int, log_var: float
) -> Reading | None:
    """``e`` from level 0 to level 1 (``ln N``, ``ln X``, calls of each), its standard error
    from the per-call variance of ``ln R``; None when the step is too small to read."""
    d_ln_n = ln_n1 - ln_n0
    if d_ln_n < 0.1 or n0 < 1 or n1 < 1:
        return None
    se = math.sqrt(max(0.0, log_var) * (1.0 / n0 + 1.0 / n1)) / d_ln_n
    return Reading((ln_x1 - ln_x0) / d_ln_n, se)


def inconclusive(r: Reading, *, exit_elasticity: float, z: float) -> bool:
    """Whether a reading under the exit is within ``z`` standard errors of it."""
    return r.e < exit_elasticity and exit_elasticity - r.e < z * r.se


def pooled(a: Reading, b: Reading | None) -> Reading:
    """Two readings of one doubling by inverse variance (``a`` alone without ``b``)."""
    if b is None:
        return a
    if a.se <= 0.0 or b.se <= 0.0:
        return a if a.se <= 0.0 else b
    wa, wb = 1.0 / a.se**2, 1.0 / b.se**2
    return Reading((wa * a.e + wb * b.e) / (wa + wb), math.sqrt(1.0 / (wa + wb)))


def scaled_centre(ln_n0: float, ln_x0: float, ln_n1: float, ln_x1: float) -> float:
    """The linear-scaling equivalent of the goodput level 1 bought over level 0:
    ``N0 · X1/X0``, between ``N0`` and ``N1``."""
    return min(max(math.exp(ln_n0 + ln_x1 - ln_x0), math.exp(ln_n0)), math.exp(ln_n1))
