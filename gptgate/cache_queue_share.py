"""Whether a backend's calls wait in a queue at its server: the fixed part of their latency.

A call's latency is ``c + n·t`` — a fixed part ``c`` and ``t`` per output token ``n``
(gptgate/limits/overhead_fit.py). Where the server has room for the calls in flight, ``c``
is the prefill and a network round trip, a small part of a call; where calls wait in the
server's queue (more in flight than its slots), the wait is the same for a short answer as for
a long one, and it is ``c``. So the fixed part's share of the calls' mean latency tells a
server that queues the gate's calls from one with room for them.

Why the gate asks (issue 31, round 16: docs/caching.md): on a backend where the ramp does not
pay (gptgate/cache_release.py) the released warm groups wait at the gate while the backend's
limit is taken, so that their latency measures the server, not the limiter's queue, and an
order can still be chosen — that bound won family draw 96 (the floor 1.19× → 1.06×) but lost
12 and 1094, servers whose calls queue at the server (36 and 25 slots at a cap of 64): there
the gate's order cost more than the limiter's mix. The gate's calls before the release measured
a fixed part of 0.30–0.35 of their latency on 96 and 0.12–0.14 on 40, against 0.55–0.69 on
12, 0.69–0.78 on 10, 0.66–0.85 on 1018, 0.67–0.77 on 1068 and 0.87–0.98 on 1037 (servers of 5
to 36 slots at 64; 1014, 22 slots at 30, read 0.06 on one engine seed and 0.76 on another).
Where every answer has the same length (it fills ``max_tokens``: draws 44, 98 and 1094) there
is no slope to tell ``c`` from: unknown, and the bound stays off.
"""

from __future__ import annotations

from .limits.overhead_fit import LengthLine

__all__ = ["ROOM_SHARE", "QueueShare"]

#: the fixed part's share of the mean latency below which the server has room for the calls
ROOM_SHARE = 0.5
#: calls measured before the share is believed (and answers spread in length: a slope)
MIN_CALLS = 20


class QueueShare:
    """Per backend: the least-squares line of the gate's calls' latency on their length."""

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: dict[str, LengthLine] = {}

    def record(self, backend: str, output_tokens: int, latency_s: float) -> None:
        self._lines.setdefault(backend, LengthLine()).add(float(output_tokens), latency_s)

    def share(self, backend: str) -> float | None:
        """The fixed part over the mean latency of the calls recorded (None: too few, or their
        lengths too alike for a slope)."""
        line = self._lines.get(backend)
        if line is None:
            return None
        fit = line.fixed_part(min_calls=MIN_CALLS, min_spread=0.2)
        if fit is None or fit[2] <= 0.0 or line.y <= 0.0:
            return None
        return fit[0] / (line.y / line.k)

    def room(self, backend: str) -> bool:
        """Whether the calls measured show a server with room for them (not known: False)."""
        share = self.share(backend)
        return share is not None and share < ROOM_SHARE

    def reset(self, backend: str) -> None:
        """Measure fresh calls from now (a verdict was taken on these)."""
        self._lines.pop(backend, None)
