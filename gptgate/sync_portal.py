"""The event loop a :class:`~gptgate.SyncGateway` runs its gateway on, and how a plain thread
waits for it.

One loop for the whole process (not ``asyncio.run`` per call, which wedges a shared gateway):
either a background thread of our own, started on first use through anyio's blocking portal,
or an async app's running loop (``SyncGateway(gateway=app_gate)``), on which a portal is hosted
as a detached task. Every blocking verb is a task on that loop; a caller thread that is
interrupted while it waits (``KeyboardInterrupt``, a Celery soft time limit) cancels its task,
so the permit it held or waited for is given back.

The loops are stopped at interpreter exit (``atexit``: no daemon thread left mid-call, no
"event loop is closed" noise). After ``fork()`` the child has none of the parent's threads:
every portal is forgotten there (never joined, never closed — the sockets are the parent's)
and the owner builds a fresh one on its next use (gptgate/sync.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import CancelledError, Future
from typing import Any, Protocol, TypeVar

import anyio
import anyio.lowlevel
from anyio.from_thread import BlockingPortal

from .background import _spawn_detached
from .errors import GateError, GatewayClosedError

__all__ = [
    "CLOSED", "AppLoop", "LoopPortal", "OwnLoop", "call_on", "run_on", "spawn_on", "wait",
]

T = TypeVar("T")

#: what a verb of a closed SyncGateway raises
CLOSED = "the SyncGateway is closed: no new calls are accepted (build a new one to go on)"

#: SyncGateway(gateway=...) used from a thread that cannot reach the app's loop
UNREACHABLE = (
    "SyncGateway(gateway=...) reaches the app's event loop from the thread that built it on "
    "that loop (e.g. in the app's lifespan) or from the loop's worker threads (a sync "
    "endpoint run by anyio.to_thread); this thread is neither, or the loop has ended"
)

#: what a verb called on the loop it would block tells its caller
ON_ITS_OWN_LOOP = (
    "a SyncGateway verb was called on the event loop that runs its gateway (an on_result "
    "callback, or async code of the app's loop): it would wait for itself forever. On that "
    "loop await the async gateway instead: `await sync_gate.gateway.chat(...)`"
)


class LoopPortal(Protocol):
    """Where a SyncGateway's tasks run."""

    #: the thread running the loop (None before it started)
    thread_id: int | None

    def portal(self) -> BlockingPortal:
        """The running portal (started on first use)."""

    def stop(self) -> None:
        """Stop the portal; idempotent. A later :meth:`portal` raises GatewayClosedError."""

    def forget(self) -> None:
        """After fork, in the child: drop the parent's portal without touching it."""


def wait(future: Future[T]) -> T:
    """The result of a task started on the portal. If the waiting thread is interrupted, the
    task is cancelled (its permit and connection are given back on the loop) and the
    interruption goes on. A task the closing SyncGateway cancelled is a GatewayClosedError."""
    try:
        return future.result()
    except CancelledError:  # the portal stopped under it: close() ran out of grace
        raise GatewayClosedError(CLOSED) from None
    except BaseException:
        if not future.done():
            future.cancel()  # anyio cancels the task's scope on the loop
        raise


class _Portals:
    """Every live portal of the process: stopped at exit, forgotten in a forked child."""

    def __init__(self) -> None:
        self.live: weakref.WeakSet[LoopPortal] = weakref.WeakSet()

    def stop_all(self) -> None:
        for portal in list(self.live):
            with contextlib.suppress(Exception):  # at exit: nothing to tell anyone
                portal.stop()

    def forget_all(self) -> None:
        for portal in list(self.live):
            portal.forget()


_PORTALS = _Portals()
atexit.register(_PORTALS.stop_all)
os.register_at_fork(after_in_child=_PORTALS.forget_all)


class OwnLoop:
    """An event loop in a background thread of ours, started on first use.

    Started by hand rather than with ``anyio.from_thread.start_blocking_portal``: that context
    manager's generator, dropped in a forked child, would run its ``finally`` — a call to a
    portal whose thread does not exist there — and hang the child."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._portal: BlockingPortal | None = None
        self._stopped = False
        self.thread_id: int | None = None
        _PORTALS.live.add(self)

    def portal(self) -> BlockingPortal:
        portal = self._portal
        if portal is not None:
            return portal
        with self._lock:
            if self._stopped:
                raise GatewayClosedError(CLOSED)
            if self._portal is None:
                self._portal = self._start()
            return self._portal

    def _start(self) -> BlockingPortal:
        ready: Future[BlockingPortal] = Future()

        async def hold() -> None:
            async with BlockingPortal() as portal:
                self.thread_id = threading.get_ident()
                ready.set_result(portal)
                await portal.sleep_until_stopped()

        def run() -> None:
            try:
                anyio.run(hold)
            except BaseException as error:  # pragma: no cover - the loop failed to start
                if not ready.done():
                    ready.set_exception(error)

        self._thread = threading.Thread(target=run, name="gptgate-sync", daemon=True)
        self._thread.start()
        return ready.result()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            portal, self._portal = self._portal, None
            thread, self._thread = self._thread, None
        if portal is None or thread is None:
            return
        if threading.get_ident() == self.thread_id:
            raise GateError(ON_ITS_OWN_LOOP)
        # a stream still open is hung up on; the loop ends and its thread is joined
        with contextlib.suppress(RuntimeError):  # stopped meanwhile
            portal.call(portal.stop, True)
        thread.join()

    def forget(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._portal = None
        self._thread = None
        self.thread_id = None


class AppLoop:
    """An async app's running loop: a portal hosted there as a detached task, so its worker
    threads reach the app's open gateway. The loop is found from the thread that built the
    SyncGateway (when it runs the loop) or from an anyio worker thread of it (a Starlette or
    FastAPI sync endpoint)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._stopped = False
        self._forked = False
        self._task: object = None
        self.thread_id: int | None = None
        try:
            self._token: Any = anyio.lowlevel.current_token()
            self.thread_id = threading.get_ident()
        except RuntimeError:  # not on a loop: found from a worker thread on first use
            self._token = None
        _PORTALS.live.add(self)

    def portal(self) -> BlockingPortal:
        portal = self._portal
        if portal is not None and portal._event_loop_thread_id is not None:
            return portal
        with self._lock:
            if self._forked:
                raise GateError(
                    "this SyncGateway drives an async Gateway whose event loop stayed in the "
                    "parent process (fork): build the Gateway and SyncGateway(gateway=...) "
                    "in each worker process after the fork (e.g. in the app's lifespan)"
                )
            if self._stopped:
                raise GatewayClosedError(CLOSED)
            if threading.get_ident() == self.thread_id:
                raise GateError(ON_ITS_OWN_LOOP)
            try:
                self._portal = anyio.from_thread.run(self._host, token=self._token)
            except RuntimeError as error:  # no loop reachable from here, or it has ended
                raise GateError(f"{UNREACHABLE} ({error})") from None
            return self._portal

    async def _host(self) -> BlockingPortal:
        """On the app's loop: start a detached task holding a portal open; return it."""
        self._token = anyio.lowlevel.current_token()
        self.thread_id = threading.get_ident()
        ready = anyio.Event()
        box: list[BlockingPortal] = []

        async def hold() -> None:
            async with BlockingPortal() as portal:
                box.append(portal)
                ready.set()
                await portal.sleep_until_stopped()

        #: a strong reference: asyncio keeps weak ones to its tasks
        self._task = _spawn_detached(hold)
        await ready.wait()
        return box[0]

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            portal, self._portal = self._portal, None
        if portal is not None and portal._event_loop_thread_id is not None:
            # the app's loop goes on: only our portal's task ends (unless the loop has ended)
            with contextlib.suppress(RuntimeError):
                portal.call(portal.stop, True)

    def forget(self) -> None:
        self._lock = threading.Lock()
        self._portal = None
        self._forked = True


def run_on(loop: LoopPortal, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)`` on ``loop``, from a plain thread (see :func:`wait`)."""
    return wait(spawn_on(loop, fn, *args))


def spawn_on(loop: LoopPortal, fn: Callable[..., Awaitable[T]], *args: Any) -> Future[T]:
    """Start ``fn(*args)`` as a task on ``loop``; its future (cancel it to cancel the task)."""
    portal = loop.portal()
    if threading.get_ident() == loop.thread_id:
        raise GateError(ON_ITS_OWN_LOOP)
    try:
        return portal.start_task_soon(fn, *args)
    except RuntimeError:  # the portal stopped as this call came in
        raise GatewayClosedError(CLOSED) from None


def call_on(loop: LoopPortal, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` (a plain function: a snapshot of state) on ``loop``'s thread."""
    portal = loop.portal()
    if threading.get_ident() == loop.thread_id:
        return fn(*args)  # already on the loop: read it in place
    try:
        return portal.call(fn, *args)
    except RuntimeError:
        if portal._event_loop_thread_id is None:  # the portal stopped as this call came in
            raise GatewayClosedError(CLOSED) from None
        raise
