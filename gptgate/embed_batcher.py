"""The embeddings coalescer: many callers' texts, few requests, each caller's answer whole.

Why: every provider takes a list of inputs per ``/embeddings`` request, and the cost of a
request (a round trip, a permit, a slot at the server) dwarfs the cost of one more input.
Callers that each embed one text from many tasks (RAG ingestion, search) send one request per
text; this collects what arrives within ``window_s`` (or until a request is full) and sends it
as one request, splitting what exceeds the backend's caps into several. Pure of I/O: it is
given ``send`` (texts → vectors, a ``GateError`` on failure) and ``spawn`` (run a task that no
single caller owns, so a caller cancelled mid-wait strands nobody).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.trace import SpanContext

from .budget import Callers
from .clock import Clock
from .errors import (
    BadRequestError,
    BudgetExceededError,
    GateError,
    GatewayClosedError,
    RequestTimeout,
    RequestTooLargeError,
)

__all__ = ["Coalescer", "EmbedCaps", "Waiter"]

Vector = list[float]
#: (texts, the latest deadline of their callers (None: one has none), the callers' span
#: contexts, the callers the budget counts (several: merged, each sent alone if refused))
#: → their vectors
Send = Callable[
    [list[str], float | None, Sequence[SpanContext], Callers], Awaitable[list[Vector]]
]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], bool]


@dataclass(frozen=True, slots=True)
class EmbedCaps:
    """What one request may carry: inputs and (estimated) tokens; None: no token cap."""

    max_inputs: int
    max_tokens: int | None = None


class Waiter:
    """One caller's texts: their vectors fill in as requests return, or the first error."""

    __slots__ = ("cancelled", "deadline", "done", "error", "left", "trace", "vectors")

    def __init__(self, count: int, deadline: float | None = None) -> None:
        #: the caller's span: the request that serves its texts links it
        self.trace = trace.get_current_span().get_span_context()
        self.vectors: list[Vector | None] = [None] * count
        self.left = count
        self.error: GateError | None = None
        self.done = anyio.Event()
        self.cancelled = False
        self.deadline = deadline  # on the gateway's clock; None: the caller waits as long

    async def wait(self, clock: Clock) -> None:
        """Until the vectors or the error are in, at most until the caller's deadline (then a
        ``RequestTimeout``: the caller leaves, its request goes on for the others in it)."""
        if self.deadline is None:
            await self.done.wait()
            return
        with anyio.move_on_after(clock.to_real(self.deadline - clock.now())):
            await self.done.wait()
        if not self.done.is_set():
            raise RequestTimeout(
                "call deadline passed before the embeddings returned", deadline=True
            )

    def fill(self, index: int, vector: Vector) -> None:
        if self.done.is_set():
            return
        self.vectors[index] = vector
        self.left -= 1
        if self.left == 0:
            self.done.set()

    def fail(self, error: GateError) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()

    def result(self) -> list[Vector]:
        """The vectors in the caller's order, or its request's typed error (a copy: the same
        error may reach several callers' tasks, each with its own traceback)."""
        if self.error is not None:
            raise copy.copy(self.error)
        return [v for v in self.vectors if v is not None]


@dataclass(slots=True)
class _Entry:
    waiter: Waiter
    index: int
    text: str
    tokens: int


@dataclass(slots=True)
class Tally:
    """Requests sent and inputs in them: one per gateway, shared by its coalescers (which
    come and go with the request shapes in use)."""

    requests: int = 0
    inputs: int = 0


class Coalescer:
    """Queues texts for one (model, privacy) and sends them in requests within ``caps``."""

    def __init__(
        self, send: Send, spawn: Spawn, clock: Clock, caps: EmbedCaps, window_s: float,
        tally: Tally | None = None,
    ) -> None:
        self._send = send
        self._spawn = spawn
        self._clock = clock
        self.caps = caps
        self.window_s = window_s
        self._queue: deque[_Entry] = deque()
        self._queued_tokens = 0
        self._timer = False
        #: requests sent and inputs in them (for stats and the benchmark)
        self.tally = tally or Tally()

    @property
    def idle(self) -> bool:
        """Nothing queued and no window open (requests may be in flight: they count in the
        tally and answer their callers without it)."""
        return not self._queue and not self._timer

    def add(
        self, texts: Sequence[str], tokens: Sequence[int], deadline: float | None = None
    ) -> Waiter:
        """Queue one caller's texts; full requests go at once, the rest after the window."""
        waiter = Waiter(len(texts), deadline)
        for index, (text, count) in enumerate(zip(texts, tokens, strict=True)):
            self._queue.append(_Entry(waiter, index, text, count))
            self._queued_tokens += count
        while self._full():
            self._flush_one()
        if self._queue:
            if self.window_s <= 0:
                self.flush()
            elif not self._timer:
                self._timer = True
                if not self._spawn(self._after_window):
                    self._timer = False
                    self.flush()
        return waiter

    def flush(self) -> None:
        """Send everything queued now (split at the caps)."""
        while self._queue:
            self._flush_one()

    def _full(self) -> bool:
        caps = self.caps
        if len(self._queue) >= caps.max_inputs:
            return True
        return caps.max_tokens is not None and self._queued_tokens >= caps.max_tokens

    async def _after_window(self) -> None:
        """The window's end: what is queued goes now, from this task (a closing gateway
        spawns nothing new, yet the calls queued before it began have their grace)."""
        try:
            await self._clock.sleep(self.window_s)
        finally:
            self._timer = False
            batches = []
            while self._queue:
                batch = self._take()
                if batch:
                    self._count(batch)
                    batches.append(batch)
            async with anyio.create_task_group() as tg:
                for batch in batches:
                    tg.start_soon(self._deliver, batch)

    def _take(self) -> list[_Entry]:
        """The next request's entries: up to the input cap and the token cap (a text alone
        over the token cap still goes, alone: the server decides), skipping the texts of
        callers who have left."""
        caps = self.caps
        batch: list[_Entry] = []
        tokens = 0
        queue = self._queue
        while queue and len(batch) < caps.max_inputs:
            entry = queue[0]
            if entry.waiter.cancelled:
                queue.popleft()
                self._queued_tokens -= entry.tokens
                continue
            if batch and caps.max_tokens is not None and tokens + entry.tokens > caps.max_tokens:
                break
            queue.popleft()
            self._queued_tokens -= entry.tokens
            tokens += entry.tokens
            batch.append(entry)
        return batch

    def _flush_one(self) -> None:
        batch = self._take()
        if not batch:
            return
        self._count(batch)

        async def send() -> None:
            await self._deliver(batch)

        if not self._spawn(send):
            error = GatewayClosedError("the gateway is closing: the embeddings were not sent")
            for entry in batch:
                entry.waiter.fail(error)

    def _count(self, batch: list[_Entry]) -> None:
        self.tally.requests += 1
        self.tally.inputs += len(batch)

    async def _deliver(self, batch: list[_Entry], waited: bool = False) -> None:
        """One request; its vectors to each caller in it, or its error to each of them.
        ``waited``: its callers were counted throttled already (in the merged request it was
        split from), so the budget does not count them again."""
        try:
            callers = _by_caller(batch)
            counted = Callers(len(callers), split=len(callers) > 1, waited=waited)
            vectors = await self._send(
                [e.text for e in batch], _latest(batch), _links(batch), counted
            )
        except GateError as error:
            if len(callers) > 1 and (_refuses_an_input(error) or _refuses_the_sum(error)):
                # one caller's input (longer than the model takes, ...) made the provider
                # refuse the whole request: each caller's texts again alone, so the others
                # merged with it get their vectors and only its own caller the 400; or the
                # dollar budget refused what merging made of them — each alone may fit
                async with anyio.create_task_group() as tg:
                    for own in callers:
                        if own[0].waiter.cancelled:
                            continue  # its caller has left
                        self._count(own)
                        tg.start_soon(self._deliver, own, counted.waited)
                return
            for entry in batch:
                entry.waiter.fail(error)
            return
        except BaseException:
            closed = GatewayClosedError("the gateway closed before the embeddings returned")
            for entry in batch:
                entry.waiter.fail(closed)
            raise
        for entry, vector in zip(batch, vectors, strict=True):
            entry.waiter.fill(entry.index, vector)


def _links(batch: list[_Entry]) -> list[SpanContext]:
    """The spans of the callers a request serves, once each (those with one)."""
    seen: dict[int, SpanContext] = {}
    for entry in batch:
        context = entry.waiter.trace
        if context.is_valid:
            seen.setdefault(context.span_id, context)
    return list(seen.values())


def _by_caller(batch: list[_Entry]) -> list[list[_Entry]]:
    """A request's entries per caller, in the order they were queued."""
    callers: dict[int, list[_Entry]] = {}
    for entry in batch:
        callers.setdefault(id(entry.waiter), []).append(entry)
    return list(callers.values())


def _refuses_an_input(error: GateError) -> bool:
    """The provider refused the request for what one of its inputs is (a 400, 413 or 422:
    too long for the model, ...), not for who sent it (401, 403) or where (404)."""
    return isinstance(error, RequestTooLargeError) or (
        isinstance(error, BadRequestError) and error.status in (400, 413, 422)
    )


def _refuses_the_sum(error: GateError) -> bool:
    """The dollar budget refused the merged request (nothing was sent): its callers were
    each admitted or refused alone had they not been merged."""
    return isinstance(error, BudgetExceededError)


def _latest(batch: list[_Entry]) -> float | None:
    """A request's deadline: its most patient caller's (None when one has none)."""
    deadlines = [e.waiter.deadline for e in batch]
    return None if None in deadlines else max(d for d in deadlines if d is not None)
