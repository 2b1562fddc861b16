"""``P2Quantile``: one quantile of a stream in O(1) time and memory (the P² algorithm).

Jain & Chlamtac, "The P² algorithm for dynamic calculation of quantiles and histograms without
storing observations" (CACM 1985). Five markers track the minimum, the p/2, p and (1+p)/2
quantiles and the maximum; after each observation the inner markers move one position towards
their desired positions, their heights adjusted by a piecewise-parabolic (P²) fit, or linearly
when the parabola would break the ordering. The p99 of thousands of latencies costs five
floats and a handful of comparisons per sample, with no sorting.

P² summarises the whole stream; :class:`WindowedQuantile` follows a drifting one by keeping
two estimators and replacing the older every ``window`` observations.
"""

from __future__ import annotations

import math

__all__ = ["P2Quantile", "WindowedQuantile"]


class P2Quantile:
    """Streaming estimate of the ``p`` quantile (0 < p < 1)."""

    __slots__ = ("_count", "_dn", "_heights", "_n", "_np", "p")

    def __init__(self, p: float) -> None:
        if not 0.0 < p < 1.0:
            raise ValueError("p must be in (0, 1)")
        self.p = p
        self._count = 0
        self._heights: list[float] = []
        self._n = [1, 2, 3, 4, 5]
        self._np = [1.0, 1.0 + 2.0 * p, 1.0 + 4.0 * p, 3.0 + 2.0 * p, 5.0]
        self._dn = [0.0, p / 2.0, p, (1.0 + p) / 2.0, 1.0]

    @property
    def count(self) -> int:
        return self._count

    @property
    def value(self) -> float:
        """The estimate; exact below five observations, NaN before the first."""
        if self._count == 0:
            return math.nan
        if self._count < 5:
            ordered = sorted(self._heights)
            # nearest rank, as the markers are initialised
            rank = min(len(ordered) - 1, max(0, math.ceil(self.p * len(ordered)) - 1))
            return ordered[rank]
        return self._heights[2]

    def add(self, x: float) -> None:
        self._count += 1
        q = self._heights
        if self._count <= 5:
            q.append(x)
            if self._count == 5:
                q.sort()
            return
        n = self._n
        if x < q[0]:
            q[0] = x
            k = 0
        elif x >= q[4]:
            q[4] = x
            k = 3
        else:
            k = 0
            while x >= q[k + 1]:
                k += 1
        for i in range(k + 1, 5):
            n[i] += 1
        np_ = self._np
        dn = self._dn
        for i in range(5):
            np_[i] += dn[i]
        for i in (1, 2, 3):
            d = np_[i] - n[i]
            if (d >= 1.0 and n[i + 1] - n[i] > 1) or (d <= -1.0 and n[i - 1] - n[i] < -1):
                step = 1 if d > 0 else -1
                h = self._parabolic(i, step)
                if not q[i - 1] < h < q[i + 1]:
                    h = q[i] + step * (q[i + step] - q[i]) / (n[i + step] - n[i])
                q[i] = h
                n[i] += step

    def _parabolic(self, i: int, d: int) -> float:
        q = self._heights
        n = self._n
        return q[i] + d / (n[i + 1] - n[i - 1]) * (
            (n[i] - n[i - 1] + d) * (q[i + 1] - q[i]) / (n[i + 1] - n[i])
            + (n[i + 1] - n[i] - d) * (q[i] - q[i - 1]) / (n[i] - n[i - 1])
        )

    def __repr__(self) -> str:
        return f"P2Quantile(p={self.p}, value={self.value:.4g}, count={self._count})"


class WindowedQuantile:
    """A P² estimate over roughly the last ``window`` to ``2·window`` observations.

    Two estimators: the current one fills while the previous one answers; once the current has
    ``window`` observations it becomes the previous one and a fresh one starts. Before the
    first rotation the current one answers.
    """

    __slots__ = ("_current", "_previous", "p", "window")

    def __init__(self, p: float, window: int = 1_000) -> None:
        if window < 5:
            raise ValueError("window must be >= 5")
        self.p = p
        self.window = window
        self._current = P2Quantile(p)
        self._previous: P2Quantile | None = None

    @property
    def count(self) -> int:
        """Observations behind :attr:`value`."""
        return self._current.count if self._previous is None else self._previous.count

    @property
    def value(self) -> float:
        return self._current.value if self._previous is None else self._previous.value

    def add(self, x: float) -> None:
        self._current.add(x)
        if self._current.count >= self.window:
            self._previous = self._current
            self._current = P2Quantile(self.p)
