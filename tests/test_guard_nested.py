"""An async guarded function awaited inside another one on the same backend runs under the
outer call's permit; one on another backend takes a permit there. Each failure is retried by
one policy, never by two nested ones.

``@gate.guard() async def answer(): ... await summarize() ...`` with ``summarize`` guarded
too: each ``answer`` held a permit and waited for a second one for ``summarize``. With the
limit's permits all held by ``answer`` calls (one call at ``concurrency=1``, three at 3),
every call waited out its whole deadline (without ``deadline_s``: the ~200 s stall bound).
(The sync guard's same defect: tests/test_sync_guard_nested.py.) Virtual time: a hang fails fast at
``fail_after``.
"""

from __future__ import annotations

import anyio
import openai
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend

USER = [{"role": "user", "content": "Tell me about connection pools."}]


class _Unavailable(Exception):
    """An SDK's 503, as the guard classifies it: the backend's failure, retryable."""

    status_code = 503


def _gate(clock: LoopClock, limit: int = 1) -> gg.Gateway:
    one, _ = sim_backend("gpu", name="one", clock=clock, concurrency=limit)
    two, _ = sim_backend("gpu", name="two", clock=clock, seed=1, concurrency=1)
    # a circuit that stays closed: the retry tests count tries, not the breaker's verdict
    return gg.Gateway([one, two], clock=clock, seed=1, breaker_threshold=50)


async def _nested_same_backend(n: int) -> tuple[list[str], gg.BackendStats]:
    clock = LoopClock()
    async with _gate(clock, limit=n) as gate:

        @gate.guard(backend="one")
        async def summarize(text: str) -> str:
            await clock.sleep(0.1)
            return text.upper()

        @gate.guard(backend="one")
        async def answer(question: str) -> str:
            return await summarize(question) + "!"

        answers: list[str] = []
        with anyio.fail_after(60):  # virtual seconds: before the fix, forever
            async with anyio.create_task_group() as tg:
                for i in range(n):

                    async def one(i: int = i) -> None:
                        answers.append(await answer(f"q{i}"))

                    tg.start_soon(one)
        return sorted(answers), gate.stats()["one"]


@pytest.mark.parametrize("n", [1, 3])
def test_a_guard_inside_a_guard_on_its_backend_uses_the_outer_permit(n: int) -> None:
    answers, stats = run_virtual(_nested_same_backend, n)
    assert answers == [f"Q{i}!" for i in range(n)]
    assert (stats.in_flight, stats.queued, stats.calls) == (0, 0, n)  # one call each


async def _nested_elsewhere() -> tuple[str, int, gg.BackendStats]:
    clock = LoopClock()
    async with _gate(clock) as gate:
        seen: dict[str, int] = {}

        @gate.guard(backend="two")
        async def elsewhere() -> str:
            seen["two"] = gate.stats()["two"].in_flight
            return "two"

        @gate.guard(backend="one")
        async def outer() -> str:
            return await elsewhere()

        with anyio.fail_after(60):
            result = await outer()
        return result, seen["two"], gate.stats()["two"]


def test_a_guard_inside_a_guard_on_another_backend_takes_a_permit_there() -> None:
    result, in_flight_inside, stats = run_virtual(_nested_elsewhere)
    assert result == "two"
    assert in_flight_inside == 1  # a permit of its own backend's limit
    assert (stats.in_flight, stats.calls) == (0, 1)


async def _nested_sdk() -> tuple[str, gg.BackendStats, int]:
    clock = LoopClock()
    one, engine = sim_backend("gpu", name="one", clock=clock, concurrency=1)
    async with gg.Gateway([one], clock=clock, seed=1) as gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
            http_client=gate.http_client("one"), max_retries=0,
        )

        @gate.guard(backend="one")
        async def summarize() -> str:
            reply = await client.chat.completions.create(model="m", messages=USER, max_tokens=20)
            return reply.choices[0].message.content or ""

        @gate.guard(backend="one")
        async def answer() -> str:
            return await summarize()

        with anyio.fail_after(600):
            text = await answer()
        return text, gate.stats()["one"], engine.ledger.snapshot().requests


def test_an_sdk_request_in_the_nested_body_rides_the_outer_permit() -> None:
    text, stats, requests = run_virtual(_nested_sdk)
    assert text
    assert requests == 1
    assert (stats.in_flight, stats.queued, stats.calls) == (0, 0, 1)


async def _retried(inner_backend: str) -> tuple[int, int, int, int]:
    """How often the outer and inner bodies ran when the inner one always fails."""
    clock = LoopClock()
    async with _gate(clock) as gate:
        runs = {"outer": 0, "inner": 0}

        @gate.guard(backend=inner_backend)
        async def inner() -> str:
            runs["inner"] += 1
            raise _Unavailable("service unavailable")

        @gate.guard(backend="one")
        async def outer() -> str:
            runs["outer"] += 1
            return await inner()

        with anyio.fail_after(600), pytest.raises(_Unavailable):
            await outer()
        attempts = gate.runner.retry.max_attempts
        return runs["outer"], runs["inner"], attempts, gate.stats()["one"].failures


def test_a_covered_inner_failure_is_retried_by_the_outer_policy_alone() -> None:
    """Under the outer's permit the inner body is part of the outer's try: the outer's
    policy retries it (the whole outer body), the inner's never again inside it."""
    outer, inner, attempts, _ = run_virtual(_retried, "one")
    assert attempts > 1
    assert (outer, inner) == (attempts, attempts)  # not attempts × attempts


def test_an_inner_failure_on_another_backend_is_retried_there_and_not_again() -> None:
    """On another backend the inner guard's own policy retries it there; the outer does not
    retry what its nested guard gave up on (nor count it as its own backend's failure)."""
    outer, inner, attempts, failures_one = run_virtual(_retried, "two")
    assert (outer, inner) == (1, attempts)  # not attempts × attempts
    assert failures_one == 0  # two's failure, not the outer backend's
