"""Clocks: where gptgate reads the time and sleeps.

Every stage reads time through a :class:`Clock` so that the simulator, the gateway and the tests
can share one *scaled* time base: a :class:`ScaledClock` of 100 makes a 2-second simulated call
take 20 ms of wall time while latencies, timeouts and back-off are all still expressed (and
reported) in simulated seconds.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Clock", "ScaledClock", "SystemClock", "from_real"]


@runtime_checkable
class Clock(Protocol):
    """The time base of a gateway or a simulator. ``now`` is monotonic, in (scaled) seconds."""

    scale: float

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def to_real(self, seconds: float) -> float:
        """Convert a duration in this clock's seconds to real seconds (for anyio deadlines)."""
        ...


def from_real(clock: Clock, seconds: float) -> float:
    """Convert real seconds (an httpx timeout, an SDK's) to ``clock``'s seconds."""
    return seconds * clock.scale


class SystemClock:
    """Real time. ``now`` is ``time.monotonic`` — cheap on the hot path."""

    scale: float = 1.0

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))

    def to_real(self, seconds: float) -> float:
        return seconds

    def __repr__(self) -> str:
        return "SystemClock()"


class ScaledClock:
    """Time that runs ``scale`` times faster than the wall clock.

    Give the same instance (or the same scale) to the simulator and the gateway: then a
    60-second timeout fires after 0.6 s of wall time at scale 100, exactly when the simulated
    server would have taken 60 s.
    """

    def __init__(self, scale: float = 100.0) -> None:
        if scale <= 0:
            raise ValueError("scale must be > 0")
        self.scale = float(scale)
        self._origin = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.scale

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds) / self.scale)

    def to_real(self, seconds: float) -> float:
        return seconds / self.scale

    def __repr__(self) -> str:
        return f"ScaledClock(scale={self.scale:g})"
