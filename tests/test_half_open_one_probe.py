"""A half-open circuit lets ONE probe through, on every path; the calls waiting on it go after
its verdict.

Before, every caller waiting on an open circuit checked it as it woke and only the try that
was *sent* took the probe (``on_attempt``) — after the permit, the pacer, the budget: all 10
waiters passed the check first, and 10 of 10 went at the half-open moment on ``gate.chat``, on
``gate.http_client`` and on ``@gate.guard``. A recovering backend got a burst; a broken one
failed them all. Now the probe is claimed as its try is admitted, and a try that finds it
taken hands its permit back and waits for the verdict. A probe cancelled before it is sent
(in the pacer) hands the probe back: the next call probes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual

USER = [{"role": "user", "content": "x"}]
BODY = {"model": "m", "messages": USER, "max_tokens": 5}
URL = "http://127.0.0.1:1/v1/chat/completions"
ANSWER = {
    "id": "r", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
COOLDOWN_S = 5.0
TAKE_S = 1.0  # how long the recovered backend takes to answer


def _caller(path: str, gate: gg.Gateway) -> Callable[[], Awaitable[Any]]:
    client = gate.http_client("a")

    async def by_chat() -> Any:
        return await gate.chat(USER, max_tokens=5, backend="a")

    async def by_sdk() -> Any:
        response = await client.post(URL, json=BODY)
        if response.status_code != 200:
            raise gg.BackendError(f"{response.status_code}", backend="a")
        return response.json()

    @gate.guard(backend="a")
    async def by_guard() -> Any:
        response = await client.post(URL, json=BODY)
        response.raise_for_status()
        return response.json()

    return {"chat": by_chat, "sdk": by_sdk, "guard": by_guard}[path]


class Recovering:
    """Backend "a": 500s while ``down``, then answers after ``TAKE_S``; records when each
    request reached it."""

    def __init__(self, clock: LoopClock, concurrency: int) -> None:
        self.clock = clock
        self.down = True
        self.sent: list[float] = []
        self.backend = gg.Backend(
            name="a", base_url="http://127.0.0.1:1/v1", model="m", concurrency=concurrency,
            timeout=30.0, transport=httpx2.MockTransport(self),
        )

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(self.clock.now())
        if self.down:
            return httpx2.Response(500, json={"error": {"message": "down"}})
        await self.clock.sleep(TAKE_S)
        return httpx2.Response(200, json=ANSWER)


async def _ten_waiters(path: str, recovered: bool) -> tuple[float, list[float], int]:
    """The circuit opens at 0; 10 callers wait on it from 1; it turns half-open at 5.
    → (the half-open moment, when each request reached the backend, calls that succeeded)."""
    clock = LoopClock()
    server = Recovering(clock, concurrency=16)
    sent = server.sent
    async with gg.Gateway(
        [server.backend], clock=clock, seed=1, max_attempts=1, breaker_threshold=5,
        breaker_cooldown_s=COOLDOWN_S, max_breaker_wait_s=5.0,
    ) as gate:
        call = _caller(path, gate)
        for _ in range(5):
            with contextlib.suppress(Exception):
                await call()
        breaker = gate.backend_state("a").breaker
        assert gate.stats()["a"].circuit == "open"
        half_open_at = breaker.opened_until
        server.down = not recovered
        sent.clear()
        await clock.sleep(1.0)
        succeeded = 0

        async def waiter() -> None:
            nonlocal succeeded
            with contextlib.suppress(Exception):
                await call()
                succeeded += 1

        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(waiter)
        return half_open_at, sent, succeeded


PATHS = ["chat", "sdk", "guard"]


@pytest.mark.parametrize("path", PATHS)
def test_a_recovered_backend_gets_one_probe_then_the_waiters(path: str) -> None:
    half_open_at, sent, succeeded = run_virtual(_ten_waiters, path, True)
    at_half_open = [t for t in sent if t < half_open_at + TAKE_S / 2]
    assert len(at_half_open) == 1, f"{len(at_half_open)} of 10 went at the half-open moment"
    assert at_half_open[0] == pytest.approx(half_open_at, abs=0.01)
    # the others went on the probe's success, not before
    assert all(t >= half_open_at + TAKE_S - 1e-6 for t in sent[1:])
    assert len(sent) == 10 and succeeded == 10


@pytest.mark.parametrize("path", PATHS)
def test_a_still_broken_backend_fails_one_probe_not_every_waiter(path: str) -> None:
    half_open_at, sent, succeeded = run_virtual(_ten_waiters, path, False)
    # the probe failed: the circuit re-opened (for 10 s, past max_breaker_wait_s), and the
    # waiters were refused without being sent
    assert sent == [pytest.approx(half_open_at, abs=0.01)]
    assert succeeded == 0


async def _probe_cancelled_in_pace() -> tuple[str, str, int]:
    clock = LoopClock()
    server = Recovering(clock, concurrency=4)
    async with gg.Gateway(
        [server.backend], clock=clock, seed=1, max_attempts=1, breaker_cooldown_s=COOLDOWN_S
    ) as gate:
        for _ in range(5):
            with contextlib.suppress(gg.GateError):
                await gate.chat(USER, max_tokens=5)
        server.down = False
        await clock.sleep(COOLDOWN_S + 1.0)
        state = gate.backend_state("a")
        # a 429's pause holds the next send for 100 s: the probe waits in the pacer
        state.pacer._paused_until = clock.now() + 100.0
        sent = len(server.sent)
        with anyio.move_on_after(clock.to_real(2.0)):  # its caller gives up there
            await gate.chat(USER, max_tokens=5)
        assert len(server.sent) == sent  # nothing was sent
        after = state.breaker.state(clock.now())
        state.pacer._paused_until = clock.now()
        await gate.chat(USER, max_tokens=5)  # the next call probes
        return after, state.breaker.state(clock.now()), len(server.sent) - sent


def test_a_probe_cancelled_in_the_pacer_hands_the_probe_back() -> None:
    assert run_virtual(_probe_cancelled_in_pace) == ("half_open", "closed", 1)


async def test_a_probe_cancelled_in_the_pacer_hands_the_fleets_lease_back(
    redis_url: str,
) -> None:
    """``shared=``: the fleet's probe lease, granted as the probe was admitted, goes back
    too. Before, it was handed back only by a probe that had been sent: this one kept it
    for the backend's whole timeout (30 s), and every other process was refused the probe."""
    from tests.test_shared_probe_paths import Recovering, _open_then_cooled, _pair

    server = Recovering(take_s=0.05)
    a, b = _pair(redis_url, server, timeout=30.0)
    async with a, b:
        await _open_then_cooled(redis_url, a, b, server)
        paced = a.backend_state("mock").pacer
        paced._paused_until = a.clock.now() + 100.0  # a's probe waits in its pacer
        with anyio.move_on_after(0.3):
            await a.chat(USER)
        assert server.probes == []  # nothing was sent
        with anyio.fail_after(4.0):  # before: refused the probe for the lease's 30 s
            await b.chat(USER)
        assert len(server.probes) == 1


def test_the_probe_is_claimed_once_at_admission_and_handed_back_without_a_verdict() -> None:
    from gptgate.routing import CircuitBreaker

    breaker = CircuitBreaker(threshold=1, cooldown_s=5.0)
    assert breaker.claim_probe(0.0) == 0  # closed: no probe to claim
    breaker.on_failure(0.0)
    assert breaker.claim_probe(1.0) is None  # open: the try waits
    first = breaker.claim_probe(5.0)
    assert first and breaker.probing
    assert breaker.claim_probe(5.0) is None  # one probe: the next waits for its verdict
    assert breaker.on_attempt(5.0) == 0  # and it is sent as no probe of its own
    breaker.probe_left(first)  # cancelled before it was sent: the next try probes
    second = breaker.claim_probe(5.0)
    assert second and second != first
    breaker.on_success()
    assert breaker.claim_probe(6.0) == 0 and not breaker.probing
