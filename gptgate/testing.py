"""Helpers for testing code that uses gptgate — no key, no network (like ``trio.testing``).

``sim_backend`` gives a ``Backend`` wired to an in-process simulated server; ``run_virtual``
runs a coroutine on an event loop whose clock jumps to the next timer when idle, so a test of
minutes of simulated traffic takes milliseconds and is exactly repeatable (give the gateway
and the engine a ``LoopClock``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio

from .clock import Clock, ScaledClock
from .config import Backend, Price
from .sim import FaultPlan, LoopClock, SimEngine, SimProfile, SimTransport, run_virtual

__all__ = [
    "FaultPlan",
    "LoopClock",
    "ScaledClock",
    "SimEngine",
    "max_rise_within",
    "run_virtual",
    "sim_backend",
    "spend_curve",
]


def sim_backend(
    profile: str | SimProfile = "gpu",
    *,
    name: str | None = None,
    clock: Clock | None = None,
    seed: int = 0,
    faults: FaultPlan | None = None,
    engine_type: type[SimEngine] = SimEngine,
    **backend_options: Any,
) -> tuple[Backend, SimEngine]:
    """A ``Backend`` served in-process by a fresh ``SimEngine`` (or a subclass: a benchmark's
    oracle); returns both so a test can read the engine's billing ledger (the ground truth
    for cost)."""
    engine = engine_type(profile, clock=clock or LoopClock(), seed=seed, faults=faults)
    options: dict[str, Any] = {
        "name": name or f"sim-{engine.profile.name}",
        "base_url": "http://127.0.0.1:8000/v1",
        "model": engine.profile.model,
        "hardware": engine.profile.hardware,
    }
    options.update(backend_options)
    return Backend(transport=SimTransport(engine), **options), engine


def max_rise_within(samples: Sequence[tuple[float, float]], window_s: float) -> float:
    """The most a running total rose within any ``window_s``, from ``(time, total)`` samples
    in time order: a budget's worst hour from a spend curve."""
    best, start = 0.0, 0
    for at, total in samples:
        while samples[start][0] < at - window_s:
            start += 1
        best = max(best, total - samples[start][1])
    return best


async def spend_curve(
    clock: Clock,
    engine: SimEngine,
    price: Price,
    tasks: Sequence[Callable[[], Coroutine[Any, Any, None]]],
    every_s: float = 10.0,
) -> list[tuple[float, float]]:
    """Run ``tasks`` together, sampling what the simulated server has billed at ``price``
    every ``every_s`` and once at the end: the curve ``max_rise_within`` reads."""
    samples: list[tuple[float, float]] = []

    def sample() -> None:
        samples.append((clock.now(), engine.ledger.snapshot().billed_usd(price)))

    async def sampler() -> None:
        while True:
            sample()
            await clock.sleep(every_s)

    async with anyio.create_task_group() as outer:
        outer.start_soon(sampler)
        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(task)
        sample()
        outer.cancel_scope.cancel()
    return samples
