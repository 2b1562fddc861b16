"""The fixed part of a non-streamed call, fitted from the calls themselves.

A call that is not streamed reports only its latency and its answer length ``n``. Its latency
is ``c + n·t``: a fixed part ``c`` (prefill, first token, network; queue wait when there is
one) and ``t`` per output token. :class:`~gptgate.limits.normalise.LatencyNormaliser` prices it
at the reference length as ``latency·(K + n0)/(n + n0)`` with ``n0 = c/t``, and used to
*guess* ``n0`` at 20 decode tokens when no streamed call told it better. Where the fixed part
is ~140 tokens' worth (issue 31, family draw 1080: an 18-token answer takes 0.90 s, a
400-token one 3.07 s) a short answer was priced 3× slower than a long one at the same load,
and slow start, whose first completions at a doubled level are the short answers, read a
doubling that bought 0.71 of its calls in goodput as 0.05.

So ``n0`` is the least-squares line of latency on ``n`` over the calls: cumulative sums, then
an exponential forgetting of ``horizon`` calls, O(1) per call. It is believed once the calls
spread enough in length for a slope (``min_calls`` of them, a coefficient of variation of
``n`` of at least ``min_spread``) and the slope is positive; before that the guess stands.
"""

from __future__ import annotations

import math

__all__ = [
    "FIXED_PART_Z",
    "QUEUED_DOUBLING_ELASTICITY",
    "LengthLine",
    "OverheadFit",
    "fixed_part_exit",
    "queued_by_fixed_part",
]

#: a rise of the fixed part counts as a queue beyond this many standard errors (the plateau's
#: half-formed queue at 8 → 16: 1.6–5; 3 missed seed 15's, which then ran on to 32)
FIXED_PART_Z = 2.0


class OverheadFit:
    """Online least squares ``latency ≈ c + n·t`` (a :class:`LengthLine` whose sums forget
    past ``horizon`` calls); :attr:`overhead_tokens` is ``c/t``."""

    __slots__ = ("_horizon", "_line", "_min_calls", "_min_spread", "_n")

    def __init__(self, *, horizon: int = 256, min_calls: int = 8, min_spread: float = 0.2) -> None:
        self._horizon = horizon
        self._min_calls = min_calls
        self._min_spread = min_spread
        self._n = 0
        self._line = LengthLine()

    def add(self, tokens: float, latency_s: float) -> None:
        self._n += 1
        if self._n > self._horizon:
            self._line.forget(1.0 - 1.0 / self._horizon)
        self._line.add(tokens, latency_s)

    def overhead_tokens(self, cap: float) -> float | None:
        """``c/t`` in ``[0, cap]``, or ``None`` while the calls cannot tell it."""
        if self._n < self._min_calls:
            return None
        fit = self._line.fixed_part(min_calls=0, min_spread=self._min_spread)
        if fit is None or fit[2] <= 0.0:
            return None
        intercept, _, slope = fit
        return min(max(0.0, intercept / slope), cap)


class LengthLine:
    """The least-squares line ``latency ≈ c + n·t`` of one window's calls, for the fixed
    part ``c`` and its standard error: a queue at the server adds the same wait to a short
    answer as to a long one, so it raises ``c`` and leaves ``t`` (the decode speed, which a
    growing batch slows instead). ``k`` is the calls' weight: a count, or less where
    :meth:`forget` discounted the older ones."""

    __slots__ = ("k", "x", "xx", "xy", "y", "yy")

    def __init__(self) -> None:
        self.k = 0.0
        self.x = 0.0
        self.y = 0.0
        self.xx = 0.0
        self.xy = 0.0
        self.yy = 0.0

    def add(self, tokens: float, latency_s: float) -> None:
        self.k += 1.0
        self.x += tokens
        self.y += latency_s
        self.xx += tokens * tokens
        self.xy += tokens * latency_s
        self.yy += latency_s * latency_s

    def forget(self, keep: float) -> None:
        """Discount every call so far by ``keep`` (an exponential forgetting)."""
        self.k *= keep
        self.x *= keep
        self.y *= keep
        self.xx *= keep
        self.xy *= keep
        self.yy *= keep

    def merge(self, other: LengthLine) -> None:
        self.k += other.k
        self.x += other.x
        self.y += other.y
        self.xx += other.xx
        self.xy += other.xy
        self.yy += other.yy

    def fixed_part(
        self, min_calls: int = 4, min_spread: float = 0.2
    ) -> tuple[float, float, float] | None:
        """``(c, standard error of c, t)``, or ``None`` with fewer than ``min_calls`` calls or
        lengths spread less than ``min_spread`` (coefficient of variation): no slope to
        tell the fixed part from."""
        k = self.k
        if k < max(3, min_calls):
            return None
        mx, my = self.x / k, self.y / k
        sxx = self.xx - k * mx * mx
        if mx <= 0.0 or sxx <= 0.0 or sxx < k * (min_spread * mx) ** 2:
            return None
        slope = (self.xy - k * mx * my) / sxx
        c = my - slope * mx
        resid = max(0.0, self.yy - k * my * my - slope * slope * sxx)
        s2 = resid / (k - 2)
        return c, math.sqrt(s2 * (1.0 / k + mx * mx / sxx)), slope


def queued_by_fixed_part(
    before: tuple[float, float, float],
    after: tuple[float, float, float],
    n_mean: float,
    latency_s: float,
    *,
    z: float,
    slope_change: float = 1.3,
) -> float:
    """Calls in flight that waited in a server queue, read from how much a doubling raised the
    calls' fixed part (``(c, standard error)`` of the window before and after, from
    :class:`LengthLine`): ``N · rise / latency`` by Little's law, as a streamed call's time to
    first token above its floor is read. 0 unless the rise is beyond ``z`` standard errors: on
    a batching server a doubling slows the decode (the slope), not the fixed part."""
    rise = after[0] - before[0]
    if latency_s <= 0.0 or rise <= z * math.hypot(before[1], after[1]):
        return 0.0
    if before[2] <= 0.0 or not 1.0 / slope_change <= after[2] / before[2] <= slope_change:
        # the decode speed moved too: the lines are not one server's before and after a
        # queue (a batch that grew mid-window bends the line), and their intercepts, far
        # outside the calls' lengths, differ by the bend
        return 0.0
    return n_mean * min(1.0, rise / latency_s)


#: a doubling whose calls visibly queued ends slow start if it bought less than this
#: elasticity; above it the wait is contention that still pays (a llama.cpp server that
#: prefills one prompt at a time: family draw 78 read a rise of 1.9 s at 16 → 32 and 0.64)
QUEUED_DOUBLING_ELASTICITY = 0.5


def fixed_part_exit(queued_share: float, elasticity: float, *, tolerance: float) -> bool:
    """Whether slow start ends on a doubling: more than ``tolerance`` of its calls in flight
    waited in a server queue (:func:`queued_by_fixed_part` / N) and it bought less than
    :data:`QUEUED_DOUBLING_ELASTICITY`."""
    return queued_share > tolerance and elasticity < QUEUED_DOUBLING_ELASTICITY
