"""Where a chaos call's time past its deadline goes: the chaos suite run with every batched
item's stages timed (route, cache gate, limiter, release) and the event loop's stalls recorded
(a 10 ms timer, and each garbage collection over 20 ms), then each item that ended over 1 s
(simulated) past its deadline printed with its stages and the stalls it met.

A diagnostic, not a benchmark: the wrappers cost time themselves. It found that an item over
its deadline has waited in the limiter exactly as long as its deadline allowed, and woke late
only as much as the event loop was stopped — by full (generation 2) garbage collections of
0.1-0.25 s every ~3 s real, and by the closing burst's 1,000 calls starting at once.

    python benchmarks/chaos_stalls.py [chaos.py options, e.g. --seeds 2 --calls 3000 --duration 120]
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import runpy
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _loop_lag import watch_lateness

import gptgate.cache as cache
import gptgate.calls as calls
import gptgate.gateway as gateway
import gptgate.limits.limiter as limiter
from gptgate.clock import Clock

_STAGES: contextvars.ContextVar[list[tuple[float, str]] | None] = contextvars.ContextVar(
    "stages", default=None
)
_clock: list[Clock] = []
#: (woke, real seconds late) of the 10 ms watcher; (ended, real seconds, generation) of each GC
_lags: list[tuple[float, float]] = []
_collections: list[tuple[float, float, int]] = []
_gc_began = [0.0]
_watcher: list[asyncio.Task[None]] = []


def _note(what: str) -> None:
    stages = _STAGES.get()
    if stages is not None and _clock:
        stages.append((_clock[0].now(), what))


def _timed(owner: type, name: str) -> None:
    original: Callable[..., Awaitable[Any]] = getattr(owner, name)
    label = f"{owner.__name__}.{name}"

    @functools.wraps(original)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        _note(label + " >")
        try:
            result = await original(*args, **kwargs)
        except BaseException as error:
            _note(f"{label} ! {type(error).__name__}: {str(error)[:70]}")
            raise
        _note(label + " <")
        return result

    setattr(owner, name, wrapper)


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_began[0] = time.monotonic()
        return
    took = time.monotonic() - _gc_began[0]
    if took > 0.02:
        _collections.append((time.monotonic(), took, info["generation"]))


def _stalls(since: float, until: float) -> str:
    lag = max((late for woke, late in _lags if since <= woke <= until + 0.1), default=0.0)
    gcs = [f"gen{g} {t:.2f} s" for end, t, g in _collections if since <= end <= until + 0.1]
    return f"loop stalled up to {lag:.2f} s real; collections {gcs or 'none'}"


_original_item = gateway.Gateway._chat_kwargs


async def _item(self: gateway.Gateway, kwargs: dict[str, Any]) -> Any:
    if not _clock:
        _clock.append(self.clock)
        # runs to the end
        _watcher.append(asyncio.get_running_loop().create_task(watch_lateness(_lags)))
    deadline = kwargs.get(gateway._DEADLINE_KEY)
    stages = [(self.clock.now(), "item start")]
    _STAGES.set(stages)
    outcome = "ok"
    try:
        return await _original_item(self, kwargs)
    except BaseException as error:
        outcome = repr(error)[:120]
        raise
    finally:
        past = self.clock.now() - deadline if deadline is not None else 0.0
        if deadline is not None and past > 1.0:
            now = time.monotonic()
            print(f"{past:.2f} s past the deadline: {outcome}; "
                  f"{_stalls(now - self.clock.to_real(past) - 0.1, now)}", file=sys.stderr)
            for at, what in stages:
                print(f"    {at - deadline:+8.2f} {what}", file=sys.stderr)


def main() -> None:
    gateway.Gateway._chat_kwargs = _item  # type: ignore[method-assign]
    for owner, name in [
        (calls.CallRunner, "run"), (calls.CallRunner, "route"), (calls.CallRunner, "_admit"),
        (calls.CallRunner, "_pass_cache_gate"), (calls._Attempt, "admit"),
        (calls._Attempt, "pace"), (calls._Attempt, "release"),
        (limiter.Limiter, "_acquire_local"), (cache.CacheGate, "enter"),
    ]:
        _timed(owner, name)
    gc.callbacks.append(_on_gc)
    sys.argv = ["chaos.py", *sys.argv[1:]]
    try:
        runpy.run_path(str(Path(__file__).with_name("chaos.py")), run_name="__main__")
    finally:
        print("\ngarbage collections over 20 ms (ended, real s, generation):", file=sys.stderr)
        for end, took, generation in _collections:
            print(f"    {end:.3f} {took:.3f} gen{generation}", file=sys.stderr)


if __name__ == "__main__":
    main()
