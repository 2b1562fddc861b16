"""The micro-batcher: collect a few, then send them as one cache-friendly burst.

Items are collected until ``policy.max_size`` are pending, or ``policy.max_wait_s`` (clock
seconds) after the first pending item — a timer, so nothing waits forever for a next arrival —
or the batcher closes. A flushed batch is dispatched as a burst, its items grouped by
``group_of`` (their prefix group) so same-prefix items go out together: the CacheGate lets the
first warm the prefix and the rest follow behind it.

Each item runs ``run_item`` in its own task in the batcher's task group, with its submitter's
context variables (the trace span current at ``submit``, a request id); its result or error
lands in the :class:`ItemHandle` that ``submit`` returned, and one item failing never affects
another. ``submit`` waits while ``policy.max_pending`` items are accepted but unfinished
(queued or running), so a producer of 100,000 items runs in bounded memory: results live in the
handles the caller holds, nowhere else. When backpressure stops the pending batch from growing,
it is flushed at once (counted as a size flush) rather than left to its timer.

Closing flushes what is pending and waits until every dispatched item has finished, also when
the body raised (the error is re-raised after the drain). If the batcher's scope is
*cancelled*, unfinished items end in :class:`ItemCancelledError`: every accepted item resolves
exactly once. ``ItemHandle.cancel()`` drops one item: a pending one is never sent, a running
one is cancelled (its ``run_item`` unwinds as a cancelled call does); either way the handle
ends in :class:`ItemCancelledError` and its place counts as free for backpressure.
Cancelling the task that awaits a handle does the same, as a cancelled ``gate.chat`` is
cancelled, once no other task awaits it: a caller that gave up on ``await handle`` (its
timeout, its own cancellation) does not leave its item to be sent for no one. An item already
running was possibly sent: a server that received it bills it, as for any cancelled call.

>>> async with MicroBatcher(BatchPolicy.MICRO, call) as batcher:   # doctest: +SKIP
...     handles = [await batcher.submit(item) for item in items]
>>> results = [await h for h in handles]                            # doctest: +SKIP
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import anyio
from anyio.abc import TaskGroup

from .clock import Clock, SystemClock
from .errors import GateError
from .scenarios import BatchPolicy

__all__ = [
    "BatcherStatistics",
    "FlushReason",
    "ItemCancelledError",
    "ItemHandle",
    "MicroBatcher",
]

T = TypeVar("T")
R = TypeVar("R")

FlushReason = Literal["size", "timer", "close"]


class ItemCancelledError(GateError):
    """The item was cancelled (by ``ItemHandle.cancel()`` or with the batcher) before it
    finished; it may or may not have been sent."""

    retryable = True


def _adopt(context: contextvars.Context) -> None:
    """Give the running task (it has its own copy of the context it was started from: the
    flusher's) the values ``context`` holds — the submitter's, for an item's task."""
    for var, value in context.items():
        if var.get(_UNSET) is not value:
            var.set(value)


_UNSET = object()


class ItemHandle(Generic[R]):
    """The future result of one submitted item. ``await handle`` (any number of times) gives
    the result or raises the item's error. ``submitted_at`` and ``dispatched_at`` are the
    batcher's clock readings when the item was accepted and when its batch was flushed
    (``None`` until then); ``wait_s`` is the time it spent collecting."""

    __slots__ = (
        "_awaiters",
        "_canceller",
        "_context",
        "_error",
        "_event",
        "_result",
        "_scope",
        "_set",
        "dispatched_at",
        "submitted_at",
    )

    def __init__(
        self,
        submitted_at: float = 0.0,
        canceller: Callable[[ItemHandle[R]], None] | None = None,
    ) -> None:
        self._canceller = canceller
        #: tasks awaiting the handle now: the last one cancelled cancels the item
        self._awaiters = 0
        #: the scope ``run_item`` runs in once dispatched (cancelled by ``cancel()``)
        self._scope: anyio.CancelScope | None = None
        self._event = anyio.Event()
        self._set = False
        self._result: R | None = None
        self._error: BaseException | None = None
        #: the submitter's context variables (its trace span, a request id): the item runs
        #: with them, not with those of whoever flushed its batch
        self._context = contextvars.copy_context()
        self.submitted_at = submitted_at
        self.dispatched_at: float | None = None

    @property
    def wait_s(self) -> float | None:
        """Seconds between ``submit`` and the flush that dispatched the item (None: not yet)."""
        if self.dispatched_at is None:
            return None
        return self.dispatched_at - self.submitted_at

    def done(self) -> bool:
        return self._set

    def cancel(self) -> bool:
        """Drop the item: never sent if still pending, cancelled if running (its permit and
        connection are returned); the handle then holds ``ItemCancelledError``. Returns False
        when the item had already finished (or has no batcher to cancel it in)."""
        if self._set or self._canceller is None:
            return False
        self._canceller(self)
        return True

    def result(self) -> R:
        """The result, or the item's error raised; ``RuntimeError`` if not done yet."""
        if not self._set:
            raise RuntimeError("item not done yet")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        if not self._set:
            raise RuntimeError("item not done yet")
        return self._error

    async def wait(self) -> R:
        """The result; cancelled while no other task awaits it, the item is cancelled too
        (:meth:`cancel`)."""
        self._awaiters += 1
        try:
            await self._event.wait()
        except anyio.get_cancelled_exc_class():
            if self._awaiters == 1:  # no one is left to read the answer
                self.cancel()
            raise
        finally:
            self._awaiters -= 1
        return self.result()

    def __await__(self) -> Generator[Any, None, R]:
        return self.wait().__await__()

    def _set_result(self, result: R) -> None:
        if self._set:
            raise RuntimeError("item handle resolved twice")
        self._set = True
        self._result = result
        self._event.set()

    def _set_error(self, error: BaseException) -> None:
        if self._set:
            raise RuntimeError("item handle resolved twice")
        self._set = True
        self._error = error
        self._event.set()

    def __repr__(self) -> str:
        if not self._set:
            return "<ItemHandle pending>"
        if self._error is not None:
            return f"<ItemHandle error={type(self._error).__name__}>"
        return "<ItemHandle done>"


@dataclass(frozen=True, slots=True)
class BatcherStatistics:
    #: submitted, not yet flushed
    pending: int
    #: flushed, ``run_item`` not finished
    in_flight: int
    flushed_batches: int
    flushed_by_size: int
    flushed_by_timer: int
    flushed_by_close: int
    completed: int
    failed: int
    submitted: int = 0
    #: ``submit`` calls waiting for room (backpressure)
    blocked_submitters: int = 0
    #: mean seconds a dispatched item waited for its flush (None: nothing dispatched yet)
    mean_wait_s: float | None = None


class MicroBatcher(Generic[T, R]):
    """Collect items by size or time, dispatch each flushed batch as a grouped burst.

    ``max_size == 1`` (with ``max_wait_s == 0``, the real-time policy) dispatches every item the
    moment it is submitted.
    """

    def __init__(
        self,
        policy: BatchPolicy,
        run_item: Callable[[T], Awaitable[R]],
        *,
        clock: Clock | None = None,
        group_of: Callable[[T], str | None] | None = None,
    ) -> None:
        self.policy = policy
        self._run_item = run_item
        self._clock = clock or SystemClock()
        self._group_of = group_of
        self._tg: TaskGroup | None = None
        self._closed = False
        self._pending: list[tuple[T, ItemHandle[R]]] = []
        #: dispatched, not finished (so close can resolve items cancelled before they ran)
        self._running: set[ItemHandle[R]] = set()
        self._timer_scope: anyio.CancelScope | None = None
        self._space = anyio.Event()
        self._blocked = 0
        self._submitted = 0
        self._completed = 0
        self._failed = 0
        self._batches = 0
        self._by: dict[FlushReason, int] = {"size": 0, "timer": 0, "close": 0}
        self._dispatched = 0
        self._waited_s = 0.0

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MicroBatcher[T, R]:
        if self._tg is not None or self._closed:
            raise RuntimeError("a MicroBatcher can be entered once")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._closed = True
        self._flush("close")
        self._wake_submitters()
        # Drain: an ordinary error in the body must not cancel the dispatched items, so the
        # task group is told nothing about it; a cancellation is passed on as such.
        cancelled = exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())
        try:
            if cancelled:
                await self._tg.__aexit__(exc_type, exc, tb)
            else:
                await self._tg.__aexit__(None, None, None)
        finally:
            self._resolve_leftovers()
        return None

    # ------------------------------------------------------------------ the public verbs

    async def submit(self, item: T) -> ItemHandle[R]:
        """Accept an item; wait while ``policy.max_pending`` are unfinished (never drop).

        Returns the item's handle. Raises ``anyio.ClosedResourceError`` once the batcher is
        closing or closed, and ``RuntimeError`` before it is entered.
        """
        if self._tg is None:
            raise RuntimeError("enter the MicroBatcher (async with) before submitting")
        while not self._closed and self._outstanding() >= self.policy.max_pending:
            if self._pending:
                # the batch cannot grow any further: send it rather than wait for the timer
                self._flush("size")
                continue
            self._blocked += 1
            try:
                await self._space.wait()
            finally:
                self._blocked -= 1
        if self._closed:
            raise anyio.ClosedResourceError("the batcher is closed")
        handle: ItemHandle[R] = ItemHandle(self._clock.now(), self._cancel)
        self._submitted += 1
        self._pending.append((item, handle))
        if len(self._pending) >= self.policy.max_size:
            self._flush("size")
        elif len(self._pending) == 1:
            self._arm_timer()
        return handle

    def statistics(self) -> BatcherStatistics:
        return BatcherStatistics(
            pending=len(self._pending),
            in_flight=len(self._running),
            flushed_batches=self._batches,
            flushed_by_size=self._by["size"],
            flushed_by_timer=self._by["timer"],
            flushed_by_close=self._by["close"],
            completed=self._completed,
            failed=self._failed,
            submitted=self._submitted,
            blocked_submitters=self._blocked,
            mean_wait_s=self._waited_s / self._dispatched if self._dispatched else None,
        )

    # ------------------------------------------------------------------ internals

    def _outstanding(self) -> int:
        return len(self._pending) + len(self._running)

    def _arm_timer(self) -> None:
        assert self._tg is not None
        scope = anyio.CancelScope()
        self._timer_scope = scope
        self._tg.start_soon(self._timer, scope)

    async def _timer(self, scope: anyio.CancelScope) -> None:
        with scope:
            await self._clock.sleep(self.policy.max_wait_s)
            if self._timer_scope is scope:
                self._flush("timer")

    def _flush(self, reason: FlushReason) -> None:
        if self._timer_scope is not None:
            self._timer_scope.cancel()
            self._timer_scope = None
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self._batches += 1
        self._by[reason] += 1
        assert self._tg is not None
        now = self._clock.now()
        self._dispatched += len(batch)
        for item, handle in self._grouped(batch):
            handle.dispatched_at = now
            handle._scope = anyio.CancelScope()
            self._waited_s += now - handle.submitted_at
            self._running.add(handle)
            self._tg.start_soon(self._run, item, handle)

    def _grouped(self, batch: list[tuple[T, ItemHandle[R]]]) -> list[tuple[T, ItemHandle[R]]]:
        """Same-group items together, groups in order of first appearance, submission order
        within a group; an item without a group stays a group of its own."""
        group_of = self._group_of
        if group_of is None or len(batch) < 2:
            return batch
        groups: dict[object, list[tuple[T, ItemHandle[R]]]] = {}
        for entry in batch:
            key: object = group_of(entry[0])
            if key is None:
                key = object()
            groups.setdefault(key, []).append(entry)
        return [entry for members in groups.values() for entry in members]

    def _cancel(self, handle: ItemHandle[R]) -> None:
        """``handle.cancel()``: a pending item leaves the batch; a dispatched one has its
        scope cancelled, and ``_run`` resolves it once ``run_item`` has unwound."""
        for index, (_, pending) in enumerate(self._pending):
            if pending is handle:
                del self._pending[index]
                self._failed += 1
                handle._set_error(ItemCancelledError("cancelled before the item was sent"))
                self._wake_submitters()
                return
        if handle._scope is not None:
            handle._scope.cancel()

    async def _run(self, item: T, handle: ItemHandle[R]) -> None:
        _adopt(handle._context)
        scope = handle._scope or anyio.CancelScope()
        try:
            with scope:
                result = await self._run_item(item)
        except anyio.get_cancelled_exc_class():
            self._fail(handle, ItemCancelledError("cancelled before the item finished"))
            raise
        except Exception as error:
            self._fail(handle, error)
        else:
            if scope.cancelled_caught:
                self._fail(handle, ItemCancelledError("cancelled by its caller"))
            elif handle in self._running:
                self._running.discard(handle)
                self._completed += 1
                handle._set_result(result)
                self._wake_submitters()

    def _fail(self, handle: ItemHandle[R], error: BaseException) -> None:
        if handle not in self._running:
            return
        self._running.discard(handle)
        self._failed += 1
        handle._set_error(error)
        self._wake_submitters()

    def _wake_submitters(self) -> None:
        if self._blocked:
            self._space.set()
            self._space = anyio.Event()

    def _resolve_leftovers(self) -> None:
        for handle in list(self._running):
            self._fail(handle, ItemCancelledError("cancelled before the item ran"))
        for _, handle in self._pending:
            self._failed += 1
            handle._set_error(ItemCancelledError("cancelled before the item was dispatched"))
        self._pending.clear()

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"MicroBatcher(max_size={self.policy.max_size}, max_wait_s={self.policy.max_wait_s:g},"
            f" pending={s.pending}, in_flight={s.in_flight})"
        )
