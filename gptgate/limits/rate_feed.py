"""Tell an adaptive limit what the rate-limit pacer's budget funds and spills, per response.

Kept out of ``calls.py``: the one place that reads the pacer for the limit's rate ceiling.
"""

from __future__ import annotations

from typing import Any

from .pacing import RateLimitPacer

__all__ = ["tell_rate_budget"]


def tell_rate_budget(
    limit: Any, pacer: RateLimitPacer, now: float, demand: int, ahead: int | None = None
) -> None:
    """``limit.set_rate_budget`` (when the limit has it) with the calls the budget funds now,
    the ``demand`` (calls waiting or in flight), the calls still to come beyond it when known
    (``ahead``: gptgate/map_demand.py) and the refill a full budget would lose over the
    limit's latency (:meth:`RateLimitPacer.spilled_calls`)."""
    set_budget = getattr(limit, "set_rate_budget", None)
    if set_budget is None:
        return
    horizon = float(getattr(limit, "rate_latency_s", 0.0))
    set_budget(
        pacer.funded_calls(now),
        demand=demand,
        spilled=pacer.spilled_calls(now, horizon),
        ahead=ahead,
    )
