"""The gateway's background task group, owned by a task of its own.

Micro-batchers, keep-warm, the fleet's loops and deferred slot frees run in one task group.
It used to be entered in the task that called ``start()``, so ``aclose()`` had to run in that
very task: a startup hook and a shutdown hook run as separate tasks (FastAPI, Starlette), or
``asyncio.run_coroutine_threadsafe(gate.aclose(), loop)``, ended in an untyped "Attempted to
exit cancel scope in a different task". Now a runner task owns the group and is told to stop,
so ``start()`` and ``aclose()`` may run in any tasks of the gateway's loop, under asyncio or
trio.

If the loop itself ends while the gateway is open (``asyncio.run`` returned without closing
it), the runner is cancelled from outside and says so through ``on_lost``: the gateway closes
its pools and is no longer open, and a later loop may open it again.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.abc
import sniffio

from .errors import GatewayClosedError

__all__ = ["Background"]

log = logging.getLogger("gptgate")


def _spawn_detached(run: Callable[[], Coroutine[Any, Any, None]]) -> object:
    """Start ``run()`` as a task of the current loop that no caller's task owns."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.spawn_system_task(run, context=contextvars.copy_context())
    return asyncio.get_running_loop().create_task(run())


class Background:
    """One runner task holding a task group open until :meth:`close` (or the loop's end)."""

    def __init__(self, on_lost: Callable[[], Awaitable[None]]) -> None:
        self._on_lost = on_lost
        #: the group, while the runner holds it open
        self.task_group: anyio.abc.TaskGroup | None = None
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._error: BaseException | None = None
        #: a strong reference: asyncio keeps only weak ones to its tasks
        self._task: object = None

    async def open(self) -> anyio.abc.TaskGroup:
        """Start the runner and return its group once it is open."""
        ready = anyio.Event()
        self._task = _spawn_detached(lambda: self._run(ready))
        try:
            await ready.wait()
        except BaseException:
            self._stop.set()  # the opener was cancelled: the runner need not stay
            raise
        if self.task_group is None:  # the loop is ending: the runner was cancelled at once
            raise GatewayClosedError("the event loop is shutting down: the gateway was not opened")
        return self.task_group

    async def _run(self, ready: anyio.Event) -> None:
        try:
            async with anyio.create_task_group() as task_group:
                self.task_group = task_group
                ready.set()
                await self._stop.wait()
                task_group.cancel_scope.cancel()  # a straggler of its own (there should be none)
        except Exception as error:  # a background task crashed: told at close, not lost
            log.error("gptgate: a background task of the gateway failed: %r", error)
            self._error = error
        finally:
            self.task_group = None
            ready.set()
            self._done.set()
            if not self._stop.is_set() and self._error is None:
                await self._lost()

    async def _lost(self) -> None:
        """Cancelled from outside, not told to stop: the loop is ending."""
        with anyio.CancelScope(shield=True):
            try:
                await self._on_lost()
            except Exception as error:  # a system task (trio) must not raise
                log.warning("gptgate: closing a gateway whose event loop ended: %r", error)

    async def close(self) -> None:
        """Cancel what still runs in the group and wait for it; a crash of a background task
        is raised here."""
        self._stop.set()
        await self._done.wait()
        self._task = None
        error, self._error = self._error, None
        if error is not None:
            raise error
