"""The *Limiter*: who waits, who is admitted, and every permit accounted for.

Admission order is a priority queue with aging: a waiter's key is
``enqueued_at - priority * aging_s``, so a more urgent call jumps ahead by ``aging_s`` seconds
per priority level but an old batch call eventually outranks new urgent ones — nothing starves,
and the key is fixed at enqueue time so a heap keeps it O(log n).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import anyio

from ..clock import Clock, SystemClock
from ..errors import OverloadedError
from .base import Limit, Sample, SampleKind

__all__ = ["Limiter", "LimiterStatistics", "Permit"]


@dataclass(frozen=True, slots=True)
class LimiterStatistics:
    limit: int
    in_flight: int
    queued: int
    admitted: int
    succeeded: int
    dropped: int
    ignored: int
    shed: int


class Permit:
    """The right to have one attempt in flight. Ends exactly once: ``success``, ``dropped``
    or ``ignore``; later calls are no-ops, so ``finally: permit.ignore()`` is always safe."""

    __slots__ = ("_done", "_limiter", "inflight", "start")

    def __init__(self, limiter: Limiter, start: float, inflight: int) -> None:
        self._limiter = limiter
        self._done = False
        self.start = start
        #: calls in flight at admission, this one included (the limit's ``inflight`` input)
        self.inflight = inflight

    @property
    def done(self) -> bool:
        return self._done

    def success(
        self,
        latency_s: float,
        *,
        ttft_s: float | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        self._finish("ok", latency_s, ttft_s, input_tokens, output_tokens)

    def dropped(self, latency_s: float) -> None:
        self._finish("dropped", latency_s, None, 0, 0)

    def ignore(self) -> None:
        self._finish("ignored", 0.0, None, 0, 0)

    def _finish(
        self,
        kind: SampleKind,
        latency_s: float,
        ttft_s: float | None,
        input_tokens: int,
        output_tokens: int,
    ) -> None:
        if self._done:
            return
        self._done = True
        sample = Sample(
            start=self.start,
            latency_s=latency_s,
            inflight=self.inflight,
            kind=kind,
            ttft_s=ttft_s,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        self._limiter._release(sample)


class _Waiter:
    __slots__ = ("admitted", "cancelled", "event", "permit")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.permit: Permit | None = None
        self.cancelled = False


class Limiter:
    """Permits enforcing ``limit.limit``, never more than ``max_inflight`` (the pool size)."""

    def __init__(
        self,
        limit: Limit,
        *,
        clock: Clock | None = None,
        max_inflight: int | None = None,
        max_queue: int = 100_000,
        aging_s: float = 5.0,
        name: str = "",
    ) -> None:
        self.limit = limit
        self.name = name
        self._clock = clock or SystemClock()
        self._max_inflight = max_inflight
        self._max_queue = max_queue
        self._aging_s = aging_s
        self._in_flight = 0
        self._heap: list[tuple[float, int, _Waiter]] = []
        self._queued = 0
        self._seq = itertools.count()
        self._admitted = self._succeeded = self._dropped = self._ignored = self._shed = 0

    @property
    def current_limit(self) -> int:
        limit = self.limit.limit
        if self._max_inflight is not None:
            limit = min(limit, self._max_inflight)
        return max(1, limit)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return self._queued

    def statistics(self) -> LimiterStatistics:
        return LimiterStatistics(
            limit=self.current_limit,
            in_flight=self._in_flight,
            queued=self._queued,
            admitted=self._admitted,
            succeeded=self._succeeded,
            dropped=self._dropped,
            ignored=self._ignored,
            shed=self._shed,
        )

    async def acquire(self, *, priority: int = 0, deadline: float | None = None) -> Permit:
        """Wait for a permit. ``deadline`` is a clock reading; past it → ``OverloadedError``."""
        if self._queued == 0 and self._in_flight < self.current_limit:
            return self._admit()
        if self._queued >= self._max_queue:
            self._shed += 1
            raise OverloadedError(f"admission queue full ({self._max_queue})", backend=self.name)
        now = self._clock.now()
        if deadline is not None and deadline <= now:
            self._shed += 1
            raise OverloadedError("deadline passed before admission", backend=self.name)
        waiter = _Waiter()
        key = now - priority * self._aging_s
        heapq.heappush(self._heap, (key, next(self._seq), waiter))
        self._queued += 1
        try:
            if deadline is None:
                await waiter.event.wait()
            else:
                with anyio.move_on_after(self._clock.to_real(deadline - now)):
                    await waiter.event.wait()
        except BaseException:
            self._abandon(waiter)
            raise
        if waiter.permit is None:
            self._abandon(waiter)
            self._shed += 1
            raise OverloadedError("not admitted before the deadline", backend=self.name)
        return waiter.permit

    def _abandon(self, waiter: _Waiter) -> None:
        if waiter.permit is not None:
            # admitted in the same instant we were cancelled: hand the permit back
            waiter.permit.ignore()
            return
        if not waiter.cancelled:
            waiter.cancelled = True
            self._queued -= 1

    def _admit(self) -> Permit:
        self._in_flight += 1
        self._admitted += 1
        return Permit(self, self._clock.now(), self._in_flight)

    def _release(self, sample: Sample) -> None:
        self._in_flight -= 1
        if sample.kind == "ok":
            self._succeeded += 1
        elif sample.kind == "dropped":
            self._dropped += 1
        else:
            self._ignored += 1
        if sample.kind != "ignored":
            self.limit.update(sample, self._clock.now())
        self._wake()

    def _wake(self) -> None:
        heap = self._heap
        while heap and self._in_flight < self.current_limit:
            _, _, waiter = heapq.heappop(heap)
            if waiter.cancelled:
                continue
            self._queued -= 1
            waiter.cancelled = True  # no longer in the queue
            waiter.permit = self._admit()
            waiter.event.set()

    def poke(self) -> None:
        """Admit waiters after the limit grew outside a release (e.g. a config change)."""
        self._wake()
