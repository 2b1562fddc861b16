"""Tell an adaptive limit what the rate-limit pacer's budget funds and spills, per response.

Kept out of ``calls.py``: the one place that reads the pacer for the limit's rate ceiling.
"""

from __future__ import annotations

from typing import Any

from .pacing import RateLimitPacer

__all__ = ["tell_rate_budget"]


def tell_rate_budget(
    limit: Any, pacer: RateLimitPacer, now: float, demand: int, *, unsent: int | None = None
) -> None:
    """``limit.set_rate_budget`` (when the limit has it) with the calls the budget funds now,
    the ``demand`` (calls waiting or in flight), the refill a full budget would lose over
    the limit's latency (:meth:`RateLimitPacer.spilled_calls`) and, when running ``map``
    jobs know it (``unsent``: their items not yet pulled), the job's length: ``job=``."""
    set_budget = getattr(limit, "set_rate_budget", None)
    if set_budget is None:
        return
    horizon = float(getattr(limit, "rate_latency_s", 0.0))
    funded, spilled = pacer.funded_calls(now), pacer.spilled_calls(now, horizon)
    if unsent is None:
        set_budget(funded, demand=demand, spilled=spilled)
    else:
        set_budget(funded, demand=demand, spilled=spilled, job=demand + unsent)
