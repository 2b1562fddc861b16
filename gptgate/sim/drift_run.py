"""A drift run: profile a simulated backend with the defaults (as ``gptgate profile`` does),
then serve hours of steady traffic *unlike the profile's* against the same, unchanged
deployment — and, optionally, slow its decoding down part-way (a noisy neighbour, a bad
driver) — in virtual time, counting the drift episodes and when the first one began.

The live workload differs from the profile's on purpose in every way a real one does: short
single-message prompts (nothing cacheable), long one-off documents, a long shared system
prompt other than the profile's, ``max_tokens`` from 16 to 1,024, streamed and not. An
unchanged backend must start no episode; a slowed-down one must start one within the
documented time (``window_s`` + 2 × ``step_s`` after the change, with ``min_samples`` calls a
step). ``benchmarks/drift.py`` prints the table; ``tests/test_drift.py`` asserts both.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

import gptgate as gg
from gptgate.drift import DriftPolicy
from gptgate.sim.engine import SimEngine
from gptgate.sim.profiles import get_profile
from gptgate.sim.transport import SimTransport
from gptgate.sim.virtual import LoopClock

__all__ = ["DriftRun", "run_drift"]

_SYSTEM = "You are a terse assistant for a hardware shop's support desk. " * 60  # ~2,300 tokens
_DOCUMENT = "The quarterly report covers revenue, churn and the new warehouse. "


class _Switch(httpx2.AsyncBaseTransport):
    """The deployment behind one URL, swappable mid-run."""

    def __init__(self, current: httpx2.AsyncBaseTransport) -> None:
        self.current = current

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self.current.handle_async_request(request)


@dataclass(frozen=True, slots=True)
class DriftRun:
    """One run's outcome. ``detected_after_s``: from the slowdown to the first episode's
    start being reported (None: none, or no slowdown)."""

    seed: int
    concurrency: int
    hours: float
    slowdown: float | None
    calls: int
    episodes: int
    first_episode_at_s: float | None
    detected_after_s: float | None
    metrics: tuple[str, ...]


def _call(rng: random.Random, i: int) -> dict[str, Any]:
    """One call of the live workload (none is like the profile's review job)."""
    kind = rng.random()
    if kind < 0.4:  # a short question: nothing cacheable, a short answer
        messages = [{"role": "user", "content": f"Q{i}: a name for a cat?"}]
        max_tokens = rng.choice((16, 64, 256))
    elif kind < 0.6:  # a one-off long document: long, but never seen before
        messages = [{"role": "user", "content": f"Doc {i}: " + _DOCUMENT * rng.randint(40, 200)}]
        max_tokens = rng.choice((128, 512))
    else:  # a shared long system prompt (cacheable), answers of any length
        messages = [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": f"Ticket {i}: my order {rng.randint(1, 10**6)} is late."},
        ]
        max_tokens = rng.choice((32, 256, 1024))
    return {"messages": messages, "max_tokens": max_tokens, "stream": rng.random() < 0.5}


async def run_drift(
    *,
    seed: int = 1,
    hours: float = 1.0,
    concurrency: int = 2,
    slowdown: float | None = None,
    slow_after_s: float = 1_800.0,
    policy: DriftPolicy | None = None,
    profile: str = "gpu",
) -> DriftRun:
    """Run under :func:`gptgate.sim.run_virtual` (a :class:`LoopClock`)."""
    clock = LoopClock()
    healthy = SimTransport(SimEngine(profile, clock=clock, seed=seed))
    switch = _Switch(healthy)
    sim = get_profile(profile)
    backend = gg.Backend(
        name="sim", base_url="http://127.0.0.1:8000/v1", model=sim.model,
        hardware=sim.hardware, concurrency=concurrency, transport=switch,
    )
    baseline = await gg.profile(gg.Gateway([backend], clock=clock))  # the defaults
    rng = random.Random(seed)
    end = clock.now() + hours * 3_600.0
    slow_at = clock.now() + slow_after_s if slowdown is not None else None
    slower = sim.model_copy(update={"base_step_s": sim.base_step_s * (slowdown or 1.0)})
    calls = 0
    detected: float | None = None
    async with gg.Gateway(
        [backend], clock=clock, baseline=baseline, drift_policy=policy or DriftPolicy(),
        max_attempts=1,
    ) as gate:
        monitor = gate.backend_state("sim").drift
        assert monitor is not None

        async def worker() -> None:
            nonlocal calls, detected
            while clock.now() < end:
                if slow_at is not None and clock.now() >= slow_at and switch.current is healthy:
                    switch.current = SimTransport(SimEngine(slower, clock=clock, seed=seed + 1))
                call = _call(rng, calls)
                calls += 1
                await gate.chat(call["messages"], max_tokens=call["max_tokens"],
                                stream=call["stream"])
                if detected is None and monitor.status.drifting:
                    detected = clock.now()

        async with anyio.create_task_group() as group:
            for _ in range(concurrency):
                group.start_soon(worker)
        status = monitor.status
    first = status.since
    return DriftRun(
        seed=seed, concurrency=concurrency, hours=hours, slowdown=slowdown, calls=calls,
        episodes=status.episodes,
        first_episode_at_s=first,
        detected_after_s=(
            detected - slow_at if detected is not None and slow_at is not None else None
        ),
        metrics=status.metrics,
    )
