"""The call surface a new user touches first: deadlines, argument checks and honest stats
(issue 11, defects 1, 5, 8 and 9). Timing tests run on the virtual clock: exact, no races."""

from __future__ import annotations

import dataclasses

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.sim import LoopClock, run_virtual

from .mockbackend import USER, Script, backend, error, gateway, ok

# -- 1. a caller's own deadline is not the backend's failure ----------------------------------


def test_a_caller_deadline_that_cuts_attempts_is_not_the_backends_failure() -> None:
    run_virtual(_deadline_cuts_attempts)


async def _deadline_cuts_attempts() -> None:
    """Ten calls with ``timeout=0.5`` on a backend that needs 1 s: each ends in a
    ``RequestTimeout(deadline=True)``, not retried; the breaker stays closed, the adaptive
    limit sees no loss, the backend is not charged a failure — but the ledger counts the
    prompts it was sent. The next ordinary call is served at once (it used to wait 5 s)."""
    clock = LoopClock()

    async def one_second(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(1.0)
        return ok()

    script = Script(one_second)
    gate = gateway(backend(script, concurrency="auto", timeout=30.0), clock=clock)
    async with gate:
        before = gate.stats()["mock"]
        for _ in range(10):
            with pytest.raises(gg.RequestTimeout) as caught:
                await gate.chat(USER, timeout=0.5)
            assert caught.value.deadline is True
            assert not caught.value.retryable
        stats = gate.stats()["mock"]
        start = clock.now()
        result = await gate.chat(USER)
        waited = clock.now() - start
    assert len(script.requests) == 11  # no retry of a call whose deadline passed
    assert stats.circuit == "closed"
    assert stats.limit == before.limit
    assert stats.limit_events.get("loss", 0) == 0
    assert (stats.calls, stats.failures, stats.timeouts) == (10, 0, 0)
    assert stats.wasted_tokens > 0  # sent, so possibly billed: still counted
    assert result.text and waited == pytest.approx(1.0, abs=0.01)


def test_a_deadline_that_passes_before_the_send_leaves_the_backend_alone() -> None:
    run_virtual(_deadline_before_send)


async def _deadline_before_send() -> None:
    """Five 500s open the circuit for 5 s. A call with ``timeout=5`` waits for it and wakes
    exactly at its deadline: nothing is sent, and the probe slot is left for the next call
    (today's code counted it as a sent, timed-out attempt and re-opened the circuit for 10 s)."""
    clock = LoopClock()
    script = Script(*([error(500)] * 5), ok())
    async with gateway(backend(script), clock=clock, max_attempts=1) as gate:
        for _ in range(5):
            with pytest.raises(gg.BackendError):
                await gate.chat(USER)
        assert gate.stats()["mock"].circuit == "open"
        with pytest.raises(gg.RequestTimeout) as caught:
            await gate.chat(USER, timeout=5.0)
        assert caught.value.deadline is True
        stats = gate.stats()["mock"]
        result = await gate.chat(USER)  # the half-open probe, at once
    assert len(script.requests) == 6
    assert (stats.calls, stats.failures, stats.timeouts, stats.circuit) == (5, 5, 0, "half_open")
    assert result.attempts == 1


# -- 9. honest stats ---------------------------------------------------------------------------


def test_calls_shed_on_the_client_side_are_not_backend_calls_or_failures() -> None:
    run_virtual(_shed_not_counted)


async def _shed_not_counted() -> None:
    clock = LoopClock()

    async def slow(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(10.0)
        return ok()

    script = Script(slow)
    async with gateway(backend(script, concurrency=1, timeout=30.0), clock=clock) as gate:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: gate.chat(USER))
            await clock.sleep(0.1)
            for _ in range(3):
                with pytest.raises(gg.OverloadedError):
                    await gate.chat(USER, timeout=1.0)
        stats = gate.stats()["mock"]
    assert len(script.requests) == 1
    assert (stats.calls, stats.failures, stats.shed) == (1, 0, 3)


async def test_a_retry_is_counted_on_the_backend_it_is_sent_to() -> None:
    """A dead backend whose failed calls are retried elsewhere shows no retries of its own:
    they are on the backend that got them."""
    dead, good = Script(error(500)), Script(ok())
    gate = gateway(
        backend(dead, name="dead"), backend(good, name="good"),
        retry_budget_ratio=None, breaker_threshold=100,
    )  # fmt: skip
    async with gate:
        results = [await gate.chat(USER) for _ in range(6)]
        stats = gate.stats()
    assert all(r.backend == "good" for r in results)
    assert len(dead.requests) >= 1
    assert stats["dead"].retries == 0
    assert stats["good"].retries == len(dead.requests)
    assert stats["dead"].failures == len(dead.requests)


def test_backend_stats_docstring_says_where_retries_are_counted() -> None:
    fields = {f.name for f in dataclasses.fields(gg.BackendStats)}
    assert "retries" in fields
    assert "sent to" in (gg.BackendStats.__doc__ or "")
