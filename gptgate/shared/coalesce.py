"""Group commit for one fleet client's Redis operations: one connection, one round trip in
flight, and everything that queued meanwhile in the next pipeline.

redis-py's asyncio pool opens a connection per *concurrent* operation: a burst of 64 calls on
a fresh gateway (limit 32) left 32 connections open, and each acquire in the burst paid a TCP
connect, redis-py's handshake and a script load inside its 50 ms budget — an outage at start
on an idle machine, and a socket per call to poll ever after. Here every operation of a
:class:`~gptgate.shared.fleet.FleetClient` (acquires with their RPM/TPM riders, releases,
renewals, leadership rounds, health polls) is queued; one sender task sends the queue as one
pipeline of scripts by their SHA, and while that round trip is in flight the next batch
gathers. Each script is still its own atomic operation on the server; a batch is only how
they travel.

Each caller keeps its own budget: the time its batch took, from when the sender sent it (with
``op_budget``'s busy-loop rule). Not from when it queued: a burst of calls keeps the event loop
busy before the sender runs, and that time is the loop's, not Redis's. Waiting in the queue is
bounded all the same (behind a batch that hangs: two budgets), and an outage declared by
another caller fails what is still queued at once. A batch that fails fails its callers, each
an outage as before; a script Redis lost (a
restart, ``SCRIPT FLUSH``) is loaded and its commands sent once more. A caller that leaves
(its budget, a deadline, a cancelled task group) takes its operation off the queue if it is
still there — nothing of it ran — or else is told it may have run (``on_cancel(True)``):
an acquire then releases the grant it may have had, in a later round trip, so after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from .loop_budget import op_budget, overrun

if TYPE_CHECKING:
    from .fleet import FleetClient

__all__ = ["Coalescer", "Command", "SenderStopped"]

#: one script to run: its name (``gptgate.shared.scripts``), its keys and its arguments
Command = tuple[str, list[str], list[Any]]


class SenderStopped(ConnectionError):
    """The sender stopped (the gateway is closing) before this caller's commands were
    answered: not Redis's fault, so not an outage; what they carried is sent at the close."""


class _Entry:
    """One caller's commands, waiting in the queue or in flight."""

    __slots__ = ("answers", "commands", "done", "error", "scope", "sent")

    def __init__(self, commands: list[Command], scope: anyio.CancelScope) -> None:
        self.commands = commands
        self.answers: list[Any] = []
        self.error: BaseException | None = None
        self.done = anyio.Event()
        #: taken off the queue by the sender: it may have run
        self.sent = False
        #: the caller's budget: its deadline moves to one budget after the send
        self.scope = scope


class Coalescer:
    """The queue of one client's operations and the task that sends it (see the module
    docstring). Before :meth:`serve` runs (the client's start) and after it stopped (the
    gateway's close), a caller sends its commands itself: those are one at a time."""

    def __init__(self, client: FleetClient) -> None:
        self.client = client
        self._queue: list[_Entry] = []
        self._wake = anyio.Event()
        #: the sender task is running: callers queue
        self.serving = False
        #: pipelined round trips sent (a NOSCRIPT reload and its resend count two more),
        #: and the operations (scripts) they carried
        self.round_trips = 0
        self.operations = 0

    async def run(
        self, commands: list[Command], on_cancel: Callable[[bool], None] | None = None
    ) -> list[Any]:
        """The answers to ``commands``, sent with whatever else is queued, within the op
        budget (``TimeoutError`` / ``LoopBusy`` past it); a failed batch's error, or a
        command's own error reply, is raised. Cancelled while waiting: ``on_cancel(sent)``
        — False, nothing of it ran; True, it may have run."""
        budget = self.client.shared.op_budget_s
        if not self.serving:
            try:
                with op_budget(budget):
                    return _checked(await self.exchange(commands))
            except anyio.get_cancelled_exc_class():
                if on_cancel is not None:
                    on_cancel(True)
                raise
        # queued: at most two budgets (the batch in flight, then its own); sent: one budget
        scope = anyio.CancelScope(deadline=anyio.current_time() + 2 * budget)
        entry = _Entry(commands, scope)
        self._queue.append(entry)
        self._wake.set()
        try:
            with scope:
                await entry.done.wait()
        except anyio.get_cancelled_exc_class():
            sent = self._withdraw(entry)
            if on_cancel is not None:
                on_cancel(sent)
            raise
        if scope.cancelled_caught and not entry.done.is_set():  # (answered just in time: kept)
            self._withdraw(entry)
            raise overrun(scope.deadline, budget)
        if entry.error is not None:
            raise entry.error
        return _checked(entry.answers)

    def fail_queued(self, error: BaseException) -> None:
        """An outage was declared: what is still queued fails now (its callers go local),
        rather than wait for a Redis that another caller has just found wanting."""
        queued, self._queue = self._queue, []
        for entry in queued:
            entry.error = error
            entry.done.set()

    def _withdraw(self, entry: _Entry) -> bool:
        """Take a caller's entry off the queue if it is still there; whether it was sent."""
        if not entry.sent and entry in self._queue:  # else failed unsent by a stopped sender
            self._queue.remove(entry)
        return entry.sent

    async def serve(self) -> None:
        """The sender: one pipelined round trip at a time, each carrying the whole queue."""
        self.serving = True
        batch: list[_Entry] = []
        try:
            while True:
                if not self._queue:
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    continue
                batch, self._queue = self._queue, []
                await self._send(batch)
                batch = []
        finally:
            self.serving = False
            # closed under them: their callers hear it at once, not at their budget
            for entry in batch + self._queue:
                if not entry.done.is_set():
                    entry.error = SenderStopped("the fleet client is closing")
                    entry.done.set()
            self._queue = []

    async def _send(self, batch: list[_Entry]) -> None:
        commands: list[Command] = []
        deadline = anyio.current_time() + self.client.shared.op_budget_s
        for entry in batch:
            entry.sent = True
            entry.scope.deadline = deadline
            commands += entry.commands
        try:
            answers = await self.exchange(commands)
        except Exception as error:  # every caller of the batch hears it (an outage)
            for entry in batch:
                entry.error = error
                entry.done.set()
            return
        start = 0
        for entry in batch:
            end = start + len(entry.commands)
            entry.answers = answers[start:end]
            start = end
            entry.done.set()

    async def exchange(self, commands: list[Command]) -> list[Any]:
        """One pipelined round trip of scripts by their SHA; a command's error reply is its
        answer. redis-py's own script pipelining asks ``SCRIPT EXISTS`` first — a second
        round trip on every batch — so a missing script is reloaded after the fact, and the
        commands Redis refused for it are sent once more (they did not run)."""
        from redis.exceptions import NoScriptError

        answers = await self._pipeline(commands)
        missing = [i for i, answer in enumerate(answers) if isinstance(answer, NoScriptError)]
        if missing:
            await self.load({commands[i][0] for i in missing})
            again = await self._pipeline([commands[i] for i in missing])
            for i, answer in zip(missing, again, strict=True):
                answers[i] = answer
        return answers

    async def load(self, names: set[str] | None = None) -> None:
        """Load scripts into Redis (all of the client's by default), in one round trip."""
        redis = self.client._redis
        if redis is None:
            raise ConnectionError("not connected")
        scripts = self.client._scripts
        self.round_trips += 1
        async with redis.pipeline(transaction=False) as pipe:
            for name in sorted(scripts if names is None else names):
                pipe.script_load(scripts[name].script)
            for answer in await pipe.execute(raise_on_error=False):
                if isinstance(answer, BaseException):
                    raise answer

    async def _pipeline(self, commands: list[Command]) -> list[Any]:
        redis = self.client._redis
        if redis is None:
            raise ConnectionError("not connected")
        scripts = self.client._scripts
        self.round_trips += 1
        self.operations += len(commands)
        async with redis.pipeline(transaction=False) as pipe:
            for name, keys, args in commands:
                pipe.execute_command("EVALSHA", scripts[name].sha, len(keys), *keys, *args)
            answers: list[Any] = await pipe.execute(raise_on_error=False)
        return answers


def _checked(answers: list[Any]) -> list[Any]:
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    return answers
