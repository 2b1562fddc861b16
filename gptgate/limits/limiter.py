"""The *Limiter*: who waits, who is admitted, and every permit accounted for.

Admission order is a priority queue with aging: a waiter's key is
``enqueued_at - priority * aging_s``, so a more urgent call jumps ahead by ``aging_s`` seconds
per priority level but an old batch call eventually outranks new urgent ones — nothing starves,
and the key is fixed at enqueue time so a heap keeps it O(log n).

Deadlines are enforced twice:

* **at once, by prediction.** A call that arrives with a deadline is told "no" immediately when
  its predicted wait — its queue position ÷ the recent completion rate — already exceeds the
  time it has left. Waiting until the deadline would only hold a queue slot and then fail
  anyway, later. The position counts the waiters that are certainly ahead (same or higher
  priority); the rate is the faster of an EWMA of the release rate measured while calls were
  waiting and Little's law (``limit / mean latency``). Both choices make the prediction
  optimistic, so a call is never shed that could have made it by this estimate.
* **by waiting**, as a fallback: a waiter still queued at its deadline gives up with
  :class:`~gptgate.errors.OverloadedError`.

The queue is bounded (``max_queue``); past it calls are shed at once. Never more than
``max_inflight`` (the connection pool) are admitted, whatever the limit says.

A queued call is not bound to its queue for good. A waiter that gave a ``tag`` can be moved:
:meth:`Limiter.evict` sends matching waiters back to their caller (:class:`Rerouted`: route
again — their backend died), and :meth:`Limiter.hand_over` moves waiters from the back of this
queue to *another* limiter (their backend fell behind its peers): admitted there at once when
it has room, else sent to queue there. ``on_release`` tells the owner after each release, so
that it can rebalance.

A limiter may have a shared ``admission`` layer (``Gateway(shared=...)``, gptgate/shared/):
a call admitted here then also takes a fleet-wide permit there before it is handed its
:class:`Permit`, and gives it back when the permit ends. The local limit still bounds this
process; the shared layer bounds the fleet.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from ..clock import Clock, SystemClock
from ..errors import OverloadedError
from .base import Limit, Sample, SampleKind

__all__ = ["Admission", "Limiter", "LimiterStatistics", "Permit", "Rerouted"]


class Admission(Protocol):
    """A second, shared gate behind the local one (e.g. fleet-wide leases in Redis)."""

    async def enter(self, deadline: float | None) -> object:
        """A token once admitted; ``OverloadedError`` past ``deadline`` (a clock reading)."""
        ...

    def leave(self, token: object, /) -> None:
        """Hand the token back; synchronous, called exactly once per token."""
        ...


class Rerouted(Exception):
    """This waiter was taken out of the queue without a permit: route the call again (its
    backend is no longer the place for it), or queue at ``to`` when given. Never escapes
    gptgate."""

    def __init__(self, to: Limiter | None = None) -> None:
        super().__init__()
        self.to = to


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
    #: of ``shed``: rejected on arrival because the predicted wait exceeded the deadline
    shed_predicted: int = 0
    #: predicted queue wait (s) for a new lowest-priority call; None without an estimate
    predicted_wait_s: float | None = None
    #: completions per second the prediction uses; None before enough releases
    completion_rate: float | None = None
    max_inflight: int | None = None
    #: of ``in_flight``: slots still taken by requests we hung up on, within their grace
    holding: int = 0


class Permit:
    """The right to have one attempt in flight. Ends exactly once: ``success``, ``dropped``,
    ``ignore`` or ``abandon``; later calls are no-ops, so ``finally: permit.ignore()`` is
    always safe."""

    __slots__ = ("_done", "_limiter", "inflight", "lease", "start", "until")

    def __init__(self, limiter: Limiter, start: float, inflight: int) -> None:
        self._limiter = limiter
        self._done = False
        #: the shared admission layer's token, given back when the permit ends
        self.lease: object | None = None
        self.start = start
        #: calls in flight at admission, this one included (the limit's ``inflight`` input)
        self.inflight = inflight
        #: abandoned, its slot is held until this is set (the answer read to its end in the
        #: background) rather than for the limiter's grace; None: the grace
        self.until: anyio.Event | None = None

    @property
    def done(self) -> bool:
        return self._done

    @property
    def limiter(self) -> Limiter:
        """The limiter that granted it (not the one waited at, after a hand-over)."""
        return self._limiter

    def success(
        self,
        latency_s: float,
        *,
        ttft_s: float | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        self._finish("ok", latency_s, ttft_s, input_tokens, output_tokens)

    def dropped(
        self,
        latency_s: float,
        *,
        congestion: bool = True,
        rate_limited: bool = False,
        abandoned: bool = False,
    ) -> None:
        """The attempt failed; ``congestion=False`` for a server failure that is not a sign of
        overload by itself (see :attr:`Sample.congestion`), ``rate_limited`` for a 429 (see
        :attr:`Sample.rate_limited`), ``abandoned`` when we cut a request the backend may
        still be running (a timeout): see :meth:`abandon`."""
        self._finish("dropped", latency_s, None, 0, 0, congestion, rate_limited, abandoned)

    def ignore(self) -> None:
        self._finish("ignored", 0.0, None, 0, 0)

    def abandon(self) -> None:
        """We hung up on a request the backend received (the caller cancelled, a deadline
        cut it): no sample, but the backend works on it until it notices the disconnect, so
        its slot stays taken for the limiter's ``abandon_grace_s`` — handed on at once, the
        next request would reach the backend while the old one still runs (one over the
        limit; a 503 on a server with a hard cap)."""
        self._finish("ignored", 0.0, None, 0, 0, abandoned=True)

    def _finish(
        self,
        kind: SampleKind,
        latency_s: float,
        ttft_s: float | None,
        input_tokens: int,
        output_tokens: int,
        congestion: bool = True,
        rate_limited: bool = False,
        abandoned: bool = False,
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
            congestion=congestion,
            rate_limited=rate_limited,
        )
        limiter = self._limiter
        hold: float | anyio.Event = 0.0
        if abandoned and limiter.defer is not None:
            until = self.until
            hold = until if until is not None and not until.is_set() else limiter.abandon_grace_s
        if isinstance(hold, anyio.Event) or hold > 0.0:
            assert limiter.defer is not None
            limiter._holding += 1
            limiter._release(sample, free=False)
            limiter.defer(hold, self._free_held)
        else:
            self._give_back()
            limiter._release(sample)

    def _give_back(self) -> None:
        """The shared layer's token, if any (before the local slot: one hand-on order)."""
        if self.lease is not None and self._limiter.admission is not None:
            lease, self.lease = self.lease, None
            self._limiter.admission.leave(lease)

    def _free_held(self) -> None:
        """The grace of an abandoned request is over: its slot is free, here and fleet-wide."""
        self._give_back()
        self._limiter._free_held()

    def __repr__(self) -> str:
        state = "done" if self._done else "held"
        return f"Permit({state}, start={self.start:.3f}, inflight={self.inflight})"


class _Waiter:
    __slots__ = ("cancelled", "event", "moved_to", "permit", "priority", "rerouted", "tag")

    def __init__(self, priority: int, tag: object) -> None:
        self.event = anyio.Event()
        self.permit: Permit | None = None
        #: True once the waiter has left the queue (admitted, timed out or cancelled)
        self.cancelled = False
        self.priority = priority
        #: what the owner needs to decide whether this call may move (None: it may not)
        self.tag = tag
        #: taken out of the queue without a permit: the caller routes again (or queues at
        #: ``moved_to``)
        self.rerouted = False
        self.moved_to: Limiter | None = None


class Limiter:
    """Permits enforcing ``limit.limit``, never more than ``max_inflight`` (the pool size)."""

    #: releases observed before the completion rate is trusted for shedding
    MIN_RELEASES = 8

    def __init__(
        self,
        limit: Limit,
        *,
        clock: Clock | None = None,
        max_inflight: int | None = None,
        max_queue: int = 100_000,
        aging_s: float = 5.0,
        name: str = "",
        shed_factor: float = 1.0,
        on_limit_change: Callable[[int], None] | None = None,
        on_release: Callable[[Limiter], None] | None = None,
        admission: Admission | None = None,
        abandon_grace_s: float = 0.0,
        defer: Callable[[float | anyio.Event, Callable[[], None]], None] | None = None,
    ) -> None:
        if max_inflight is not None and max_inflight < 1:
            raise ValueError("max_inflight must be >= 1")
        self.limit = limit
        self.name = name
        self._clock = clock or SystemClock()
        self._max_inflight = max_inflight
        self._max_queue = max_queue
        self._aging_s = aging_s
        #: shed at once when predicted wait > shed_factor × time left (inf: never predict)
        self.shed_factor = shed_factor
        self._in_flight = 0
        self._heap: list[tuple[float, int, _Waiter]] = []
        self._queued = 0
        self._by_priority: dict[int, int] = {}
        self._seq = itertools.count()
        self._admitted = self._succeeded = self._dropped = self._ignored = self._shed = 0
        self._shed_predicted = 0
        # completion-rate estimate
        self._releases = 0
        self._last_release = math.nan
        self._interval = math.nan  # EWMA of the gap between releases while calls waited
        self._latency = math.nan  # EWMA of attempt latency
        #: told the new limit whenever it moves (seen at the next release): who holds calls
        #: before this limiter — the prompt-cache gate — windows them against it
        self.on_limit_change = on_limit_change
        self._announced = self.current_limit
        #: told after each release (and its admissions): the owner may move calls queued
        #: here or at peers (see ``hand_over``)
        self.on_release = on_release
        #: the shared (fleet-wide) layer a permit must also pass, if any
        self.admission = admission
        #: how long the slot of a request we hung up on stays taken (see Permit.abandon)
        self.abandon_grace_s = abandon_grace_s
        #: ``defer(seconds or event, fn)`` calls ``fn`` that much later, or once the event is
        #: set (the owner's task group); without it an abandoned request's slot is freed at
        #: once
        self.defer = defer
        #: slots still taken by abandoned requests, within their grace
        self._holding = 0

    # ---- observation --------------------------------------------------------------------
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

    @property
    def max_inflight(self) -> int | None:
        return self._max_inflight

    def set_max_inflight(self, value: int | None) -> None:
        """Change the hard cap (e.g. the pool was resized); admits waiters if it grew."""
        if value is not None and value < 1:
            raise ValueError("max_inflight must be >= 1")
        self._max_inflight = value
        self._wake()

    def completion_rate(self) -> float | None:
        """Completions per second while saturated; None before enough releases."""
        if self._releases < self.MIN_RELEASES:
            return None
        rates = []
        if self._interval > 0.0:
            rates.append(1.0 / self._interval)
        if self._latency > 0.0:
            rates.append(self.current_limit / self._latency)
        return max(rates) if rates else None

    def predicted_wait(self, priority: int | None = None) -> float | None:
        """Predicted queue wait (s) for a call arriving now; None without an estimate.

        ``priority=None`` means behind everyone queued.
        """
        if self._queued == 0 and self._in_flight < self.current_limit:
            return 0.0
        rate = self.completion_rate()
        if rate is None:
            return None
        if priority is None:
            ahead = self._queued
        else:
            ahead = sum(n for p, n in self._by_priority.items() if p >= priority)
        return (ahead + 1) / rate

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
            shed_predicted=self._shed_predicted,
            predicted_wait_s=self.predicted_wait(),
            completion_rate=self.completion_rate(),
            max_inflight=self._max_inflight,
            holding=self._holding,
        )

    # ---- admission ----------------------------------------------------------------------
    async def acquire(
        self,
        *,
        priority: int = 0,
        deadline: float | None = None,
        tag: object = None,
        stall_s: float | None = None,
    ) -> Permit:
        """A permit of this limiter (or the one it was handed over to) and, when that limiter
        has a shared ``admission`` layer, a token of it too (see :meth:`_acquire_local`)."""
        permit = await self._acquire_local(
            priority=priority, deadline=deadline, tag=tag, stall_s=stall_s
        )
        admission = permit.limiter.admission
        if admission is None:
            return permit
        try:
            permit.lease = await admission.enter(deadline)
        except BaseException as error:
            permit.ignore()
            if isinstance(error, OverloadedError):
                permit.limiter._shed += 1
            raise
        return permit

    def borrow(self) -> Permit | None:
        """A permit now, one past the limit, for a hedge's duplicate of a request that holds
        a permit and shows nothing (gptgate/hedge_timing.py): at most one borrowed at a time
        (in flight ≤ the limit + 1, held slots of abandoned requests counted), within the pool
        and never with a shared ``admission`` layer (the fleet's cap is not ours to bend).
        None when the limit has room (``acquire`` admits at once) or nothing may be lent."""
        limit = self.current_limit
        if self.admission is not None or self._in_flight != limit:
            return None
        if self._max_inflight is not None and self._in_flight >= self._max_inflight:
            return None
        return self._admit()

    async def _acquire_local(
        self,
        *,
        priority: int = 0,
        deadline: float | None = None,
        tag: object = None,
        stall_s: float | None = None,
    ) -> Permit:
        """Wait for a permit. ``deadline`` is a clock reading; past it → ``OverloadedError``.
        ``stall_s`` (for calls without a deadline): give up only when the queue has not moved
        — no permit released — for that long, however long a moving queue takes.

        Raises :class:`OverloadedError` at once when the queue is full, the deadline has
        passed, or the predicted wait already exceeds the time left. A waiter with a ``tag``
        may be moved while it waits: it gets a permit of another limiter (``hand_over``:
        check ``permit.limiter``) or :class:`Rerouted` (``evict``).
        """
        if self._queued == 0 and self._in_flight < self.current_limit:
            return self._admit()
        if self._queued >= self._max_queue:
            self._shed += 1
            raise OverloadedError(f"admission queue full ({self._max_queue})", backend=self.name)
        now = self._clock.now()
        if deadline is not None:
            left = deadline - now
            if left <= 0.0:
                self._shed += 1
                raise OverloadedError("deadline passed before admission", backend=self.name)
            predicted = self.predicted_wait(priority)
            if predicted is not None and predicted > self.shed_factor * left:
                self._shed += 1
                self._shed_predicted += 1
                raise OverloadedError(
                    f"predicted queue wait {predicted:.3g}s exceeds the {left:.3g}s left",
                    backend=self.name,
                )
        waiter = _Waiter(priority, tag)
        key = now - priority * self._aging_s
        heapq.heappush(self._heap, (key, next(self._seq), waiter))
        self._queued += 1
        self._by_priority[priority] = self._by_priority.get(priority, 0) + 1
        try:
            if deadline is not None:
                with anyio.move_on_after(self._clock.to_real(deadline - now)):
                    await waiter.event.wait()
            elif stall_s is not None:
                await self._wait_while_moving(waiter, now, stall_s)
            else:
                await waiter.event.wait()
        except BaseException:
            self._abandon(waiter)
            raise
        if waiter.permit is None:
            if waiter.rerouted:
                raise Rerouted(waiter.moved_to)
            self._abandon(waiter)
            self._shed += 1
            if deadline is None:
                raise OverloadedError(
                    f"the queue has not moved for {stall_s:g}s (a stuck backend or call)",
                    backend=self.name,
                )
            raise OverloadedError("not admitted before the deadline", backend=self.name)
        return waiter.permit

    async def _wait_while_moving(self, waiter: _Waiter, since: float, stall_s: float) -> None:
        """Wait for ``waiter``'s event while permits keep being released (at least one every
        ``stall_s``); return without it once the queue has stalled that long."""
        while not waiter.event.is_set():
            last = since if math.isnan(self._last_release) else max(since, self._last_release)
            left = last + stall_s - self._clock.now()
            if left <= 0:
                return
            with anyio.move_on_after(self._clock.to_real(left)):
                await waiter.event.wait()

    # ---- moving queued calls ------------------------------------------------------------
    def evict(self, movable: Callable[[object], bool]) -> int:
        """Send every queued waiter whose tag ``movable`` accepts back to its caller with
        :class:`Rerouted` (e.g. this backend's circuit opened: its queue would only fail one
        call at a time). Returns how many left."""
        moved = 0
        for _, _, waiter in self._heap:
            if waiter.cancelled or waiter.tag is None or not movable(waiter.tag):
                continue
            waiter.rerouted = True
            self._take(waiter)
            moved += 1
        self._compact(moved)
        return moved

    def hand_over(
        self,
        to: Limiter,
        movable: Callable[[object], bool],
        worth: Callable[[object, int], bool],
    ) -> int:
        """Move waiters from the *back* of this queue to ``to``: the calls that would wait
        longest here go first. Each is admitted by ``to`` at once while it has room, else sent
        to queue there (:class:`Rerouted` with ``to``). ``movable(tag)`` says whether a call
        may run there at all (skipped if not); ``worth(tag, position)`` — position = waiters
        ahead of it here — whether the move gains enough (asked once per move, so it can count
        what it already sent); the scan stops at the first that does not gain, since those
        ahead of it wait less. Returns how many moved."""
        if self._queued == 0:
            return 0
        live = sorted((entry for entry in self._heap if not entry[2].cancelled), reverse=True)
        moved = 0
        for position, (_, _, waiter) in zip(range(len(live) - 1, -1, -1), live, strict=True):
            if waiter.tag is None or not movable(waiter.tag):
                continue
            if not worth(waiter.tag, position):
                break
            if to._queued == 0 and to._in_flight < to.current_limit:
                waiter.permit = to._admit()
            else:
                waiter.rerouted = True
                waiter.moved_to = to
            self._take(waiter)
            moved += 1
        self._compact(moved)
        return moved

    def _take(self, waiter: _Waiter) -> None:
        """Out of the queue and woken: with a permit (handed over) or ``rerouted``."""
        waiter.cancelled = True
        self._leave_queue(waiter)
        waiter.event.set()

    def _compact(self, removed: int) -> None:
        if removed:
            self._heap = [entry for entry in self._heap if not entry[2].cancelled]
            heapq.heapify(self._heap)

    def poke(self) -> None:
        """Admit waiters after the limit grew outside a release (e.g. a config change)."""
        self._wake()

    # ---- internals ----------------------------------------------------------------------
    def _abandon(self, waiter: _Waiter) -> None:
        if waiter.permit is not None:
            # admitted in the same instant we were cancelled: hand the permit back
            waiter.permit.ignore()
            return
        if not waiter.cancelled:
            waiter.cancelled = True
            self._leave_queue(waiter)
            # lazy deletion leaves the entry in the heap; compact when mostly garbage
            if len(self._heap) > 64 and len(self._heap) > 2 * self._queued:
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)

    def _leave_queue(self, waiter: _Waiter) -> None:
        self._queued -= 1
        left = self._by_priority[waiter.priority] - 1
        if left:
            self._by_priority[waiter.priority] = left
        else:
            del self._by_priority[waiter.priority]

    def _admit(self) -> Permit:
        self._in_flight += 1
        self._admitted += 1
        return Permit(self, self._clock.now(), self._in_flight)

    def _release(self, sample: Sample, *, free: bool = True) -> None:
        """Account for the finished attempt (and feed the limit); ``free=False``: its slot
        stays taken until :meth:`_free_held` (an abandoned request within its grace)."""
        if free:
            self._in_flight -= 1
        if sample.kind == "ok":
            self._succeeded += 1
        elif sample.kind == "dropped":
            self._dropped += 1
        else:
            self._ignored += 1
        try:
            now = self._clock.now()
            self._observe_release(sample, now)
            if sample.kind != "ignored":
                self.limit.update(sample, now)
        finally:
            self._wake()

    def _free_held(self) -> None:
        self._holding -= 1
        self._in_flight -= 1
        self._wake()

    def _observe_release(self, sample: Sample, now: float) -> None:
        self._releases += 1
        if self._queued > 0 and not math.isnan(self._last_release):
            gap = max(0.0, now - self._last_release)
            self._interval = (
                gap if math.isnan(self._interval) else self._interval + 0.1 * (gap - self._interval)
            )
        self._last_release = now
        if sample.kind != "ignored" and sample.latency_s > 0.0:
            lat = sample.latency_s
            self._latency = (
                lat if math.isnan(self._latency) else self._latency + 0.1 * (lat - self._latency)
            )

    def _wake(self) -> None:
        heap = self._heap
        while heap and self._in_flight < self.current_limit:
            _, _, waiter = heapq.heappop(heap)
            if waiter.cancelled:
                continue
            waiter.cancelled = True  # no longer in the queue
            self._leave_queue(waiter)
            waiter.permit = self._admit()
            waiter.event.set()
        # last: this limiter's own admissions never wait on (or fail with) the listener
        if self.on_limit_change is not None and self.current_limit != self._announced:
            self._announced = self.current_limit
            self.on_limit_change(self._announced)
        if self.on_release is not None:
            self.on_release(self)

    def __repr__(self) -> str:
        return (
            f"Limiter({self.name!r}, limit={self.current_limit}, in_flight={self._in_flight}, "
            f"queued={self._queued})"
        )
