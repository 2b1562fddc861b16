"""The event loop's lateness, for the chaos diagnostics: a 10 ms timer asked again and again,
each waking recorded as (when it woke, how late), in real seconds."""

from __future__ import annotations

import asyncio
import time

PERIOD_S = 0.01


async def watch_lateness(lags: list[tuple[float, float]]) -> None:
    """Append ``(woke, late)`` to ``lags`` for every wake of a ``PERIOD_S`` timer, forever."""
    while True:
        asked = time.monotonic()
        await asyncio.sleep(PERIOD_S)
        woke = time.monotonic()
        lags.append((woke, woke - asked - PERIOD_S))
