"""Virtual time for the simulator: run an asyncio program whose sleeps take no wall time.

A :class:`~gptgate.clock.ScaledClock` still spends real time, and at large scales every
millisecond of CPU becomes a visible slice of simulated latency. For calibration and for
timing-sensitive tests this module runs the program on an event loop whose clock *jumps* to
the next timer whenever nothing is ready (like trio's ``MockClock(autojump_threshold=0)``):
results are exact and deterministic, and a run costs only its CPU.

Only for in-process programs (``SimTransport``): the loop still polls real file descriptors,
but a thread or a socket that is slow in *wall* time is not waited for before time jumps.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple

import anyio

__all__ = ["LoopClock", "VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; when nothing is ready, advances the loop's virtual clock by
    the timeout the loop asked to wait instead of waiting it."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._vloop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self._vloop.threads_busy:
            # work in a thread (``asyncio.to_thread``: the openai SDK's first request reads the
            # platform there) finishes in real time: wait for it instead of jumping the clock
            # past timers that would otherwise fire before it returns
            return super().select(0.05 if timeout is None else min(timeout, 0.05))
        events: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if events or timeout is None or timeout <= 0:
            if not events and timeout is None:  # nothing scheduled at all: really wait
                events = super().select(None)
            return events
        self._vloop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose ``time()`` is virtual and jumps to the next timer when idle."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        #: executor jobs not finished yet: time stands still while a thread works
        self.threads_busy = 0
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        return self._virtual_now

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.threads_busy += 1
        future.add_done_callback(self._thread_done)
        return future

    def _thread_done(self, _: object) -> None:
        self.threads_busy -= 1

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds


class LoopClock:
    """A :class:`~gptgate.clock.Clock` reading the event loop's own time (``anyio.current_time``)
    — virtual under :class:`VirtualTimeLoop`, real otherwise."""

    scale: float = 1.0

    def now(self) -> float:
        # asyncio's own clock directly: ``anyio.current_time`` first asks sniffio which
        # library runs, and the simulator reads the clock a few times per request
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:  # trio (no asyncio loop in this thread)
            pass
        try:
            return anyio.current_time()
        except RuntimeError:  # anyio's NoEventLoopError: no loop at all, so no time to read
            raise RuntimeError(
                "LoopClock reads the running event loop's clock, and none runs here: build the "
                "SimEngine / sim_backend(...) inside the coroutine run_virtual runs (or give "
                "it a clock of its own: gg.ScaledClock(...))"
            ) from None

    async def sleep(self, seconds: float) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # trio
            await anyio.sleep(max(0.0, seconds))
        else:  # what anyio's asyncio backend awaits, without asking sniffio first
            await asyncio.sleep(max(0.0, seconds))

    def to_real(self, seconds: float) -> float:
        return seconds

    def __repr__(self) -> str:
        return "LoopClock()"


def run_virtual(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run(func, *args)`` on a :class:`VirtualTimeLoop`: sleeps cost no wall time.
    Use a :class:`LoopClock` for every engine and client inside."""
    return anyio.run(
        func, *args, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop}
    )
