"""A server's refusals (429, or 503/529 with retry-after, before any work) are requeued, not
failed: they spend neither the retry budget nor an attempt, pause the backend, and end typed at
the call's deadline (gptgate/shed.py). A storm of real failures is still throttled."""

from __future__ import annotations

import httpx2
import pytest

import gptgate as gg
from gptgate.shed import Refusals, is_shed
from gptgate.sim import LoopClock, run_virtual
from tests.mockbackend import USER, Script, backend, error, gateway, ok


def _bounded_queue(clock: LoopClock, status: int, room: int, sent: list[float]) -> Script:
    """A server holding ``room`` requests (slots and queue); each takes 1 s; beyond it every
    request is refused at once with ``status`` and a retry-after of 1 s."""
    held = 0

    async def serve(request: httpx2.Request) -> httpx2.Response:
        nonlocal held
        sent.append(clock.now())
        if held >= room:
            return error(status, "every slot and the queue are full", retry_after="1")
        held += 1
        try:
            await clock.sleep(1.0)
        finally:
            held -= 1
        return ok()

    return Script(serve)


@pytest.mark.parametrize("status", [429, 503])
def test_a_bounded_queue_s_refusals_are_requeued_not_failed(status: int) -> None:
    """200 calls at a cap of 16 on a server that holds 8: under the default retry budget (10%
    of the calls + 1/s) and 3 attempts, 96 calls failed with the server's 503 (1 with its 429,
    whose retry-after already paused the backend), while a plain client resending each refusal
    after its retry-after completes them all."""

    async def main() -> tuple[list[object], gg.BackendStats, int, int]:
        clock = LoopClock()
        sent: list[float] = []
        script = _bounded_queue(clock, status, room=8, sent=sent)
        async with gateway(
            backend(script, concurrency=16, timeout=30.0), clock=clock, backoff_base_s=0.5,
            backoff_cap_s=8.0,
        ) as gate:
            results = await gate.map([{"messages": USER} for _ in range(200)])
            stats = gate.stats()["mock"]
            budget = gate.retry_budget
            assert budget is not None
            denied = budget.statistics(clock.now()).denied
        return results, stats, denied, len(sent)

    results, stats, denied, sent = run_virtual(main)
    assert [r for r in results if not isinstance(r, gg.ChatResult)] == []
    assert denied == 0  # no refusal asked the retry budget
    assert stats.circuit == "closed"
    # each refusal paused the backend for its retry-after: the refusals sent are about one
    # cap's worth per second, not one per queued call per second
    assert sent - 200 <= 2 * 200


def test_refusals_spend_no_attempt() -> None:
    """Three refusals and a 500 under max_attempts=2: the 500 is the first counted failure."""
    refused = error(503, "full", retry_after_ms="10")
    script = Script(refused, refused, refused, error(500), ok("fine"))

    async def main() -> str:
        async with gateway(backend(script), clock=LoopClock(), max_attempts=2) as gate:
            return (await gate.chat(USER)).text

    assert run_virtual(main) == "fine"
    assert len(script.requests) == 5


def test_a_stream_s_refusals_spend_no_attempt() -> None:
    refused = error(429, "slow down", retry_after_ms="10")
    script = Script(refused, refused, refused, ok("streamed"))

    async def main() -> str:
        async with gateway(backend(script), clock=LoopClock(), max_attempts=2) as gate:
            return "".join([d async for d in gate.stream(USER)])

    assert run_virtual(main) == "streamed"
    assert len(script.requests) == 4


def test_refusals_do_not_open_the_circuit() -> None:
    """A busy server refusing is alive: its 503s with retry-after are no failures of health."""
    refused = error(503, "full", retry_after_ms="10")
    script = Script(*[refused] * 8, ok("fine"))

    async def main() -> tuple[str, str]:
        async with gateway(backend(script), clock=LoopClock(), breaker_threshold=3) as gate:
            text = (await gate.chat(USER)).text
            return text, gate.stats()["mock"].circuit

    assert run_virtual(main) == ("fine", "closed")


def test_a_refusal_pauses_the_whole_backend() -> None:
    """As a 429's retry-after always did: the next call waits it out instead of being sent
    into the full queue at once."""

    async def main() -> list[float]:
        clock = LoopClock()
        sent: list[float] = []

        def serve(request: httpx2.Request) -> httpx2.Response:
            sent.append(clock.now())
            return error(503, "full", retry_after="1") if len(sent) == 1 else ok()

        async with gateway(backend(Script(serve), concurrency=1), clock=clock) as gate:
            await gate.map([{"messages": USER} for _ in range(3)])
        return sent

    sent = run_virtual(main)
    assert len(sent) == 4
    assert min(sent[1:]) >= 1.0


@pytest.mark.parametrize("deadline", [None, 10.0])
def test_refusals_end_typed_at_the_deadline(deadline: float | None) -> None:
    """A server that refuses everything: the call ends with the server's own typed error at
    its deadline — or, without one, at the no-hang bound after its first refusal (3 attempts
    × the 5 s timeout + 2 back-off caps) — having sent a bounded number of requests."""
    script = Script(error(503, "full", retry_after="1"))

    async def main() -> tuple[BaseException | None, float]:
        clock = LoopClock()
        async with gateway(backend(script), clock=clock, backoff_cap_s=2.0) as gate:
            start = clock.now()
            try:
                await gate.chat(USER, timeout=deadline)
            except gg.GateError as exc:
                return exc, clock.now() - start
        return None, clock.now() - start

    failure, took = run_virtual(main)
    assert isinstance(failure, gg.BackendError) and failure.status == 503
    assert failure.retry_after == 1.0
    # without a deadline: the refusal after the bound, at most one back-off later
    limit = deadline if deadline is not None else 3 * 5.0 + 2 * 2.0 + 2.0
    assert limit - 4.0 <= took <= limit
    assert len(script.requests) <= limit  # one a retry-after at most


def test_a_5xx_storm_with_retry_after_is_still_budgeted() -> None:
    """A 500 is a failure whatever its headers: retries of 200 such calls stay within the
    budget's 10%."""
    script = Script(error(500, "boom", retry_after_ms="10"))

    async def main() -> list[object]:
        async with gateway(
            backend(script, concurrency=8), clock=LoopClock(), max_attempts=5,
            retry_budget_ratio=0.1, retry_budget_min_per_s=0.0, breaker_threshold=10_000,
        ) as gate:
            return await gate.map([{"messages": USER}] * 200)

    results = run_virtual(main)
    assert all(isinstance(r, gg.BackendError) for r in results)
    assert 0 < len(script.requests) - 200 <= 20


@pytest.mark.parametrize(
    ("error_", "shed"),
    [
        (gg.RateLimitedError("x", status=429, retry_after=1.0), True),
        (gg.BackendError("x", status=503, retry_after=1.0), True),
        (gg.BackendError("x", status=529, retry_after=0.5), True),
        (gg.BackendError("x", status=503), False),  # no pushback: a failure
        (gg.RateLimitedError("x", status=429), False),
        (gg.BackendError("x", status=500, retry_after=1.0), False),
        (gg.BackendError("x", status=503, retry_after=1.0, billed=True), False),
        (gg.RateLimitedError("x", status=429, retry_after=1.0, should_retry=False), False),
    ],
)
def test_what_counts_as_a_refusal(error_: gg.GateError, shed: bool) -> None:
    assert is_shed(error_) is shed


def test_a_refusal_without_any_end_counts_as_an_attempt() -> None:
    """No deadline and no bound: nothing may be requeued forever."""
    refusals = Refusals(gg.ScaledClock(1.0), deadline=None, bound_s=None)
    refusals.note(gg.BackendError("full", status=503, retry_after=1.0))
    assert not refusals.free and refusals.counted == 1 and refusals.stop(1)


@pytest.mark.parametrize("status", [429, 503])
def test_sdk_requests_on_http_client_are_requeued_too(status: int) -> None:
    """The openai SDK with ``max_retries=0`` on ``gate.http_client`` (the pattern the guard
    docs recommend) against the same bounded queue: a refusal before any work never reaches
    the SDK while the request's wait bound allows — before, every refused request was an
    ``openai`` error at the caller (97 of 192 on the simulator's bounded queue)."""
    import anyio
    import openai

    async def main() -> tuple[list[object], gg.BackendStats, int]:
        clock = LoopClock()
        sent: list[float] = []
        script = _bounded_queue(clock, status, room=4, sent=sent)
        async with gateway(backend(script, concurrency=8, timeout=30.0), clock=clock) as gate:
            client = openai.AsyncOpenAI(
                api_key="x", base_url="http://127.0.0.1:9/v1", max_retries=0,
                http_client=gate.http_client("mock"),
            )
            outcomes: list[object] = []

            async def one() -> None:
                try:
                    outcomes.append(await client.chat.completions.create(
                        model="m", messages=USER))  # type: ignore[arg-type]
                except openai.APIError as exc:
                    outcomes.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(40):
                    tg.start_soon(one)
            stats = gate.stats()["mock"]
        return outcomes, stats, len(sent)

    outcomes, stats, sent = run_virtual(main)
    assert [o for o in outcomes if isinstance(o, Exception)] == []
    assert sent > 40 and stats.retries == sent - 40  # each refusal sent again, counted
    assert stats.calls == 40 and (stats.in_flight, stats.queued) == (0, 0)


def test_anthropic_s_overload_without_a_retry_after_is_a_refusal() -> None:
    """Anthropic sends its 529 ``overloaded_error`` without ``retry-after``: taken as a 5xx, a
    storm of it drained the retry budget. It is shedding by definition: a refusal with the
    dialect's own wait. A 503 without one is still a failure."""
    from gptgate.wire.anthropic import OVERLOAD_WAIT_S, AnthropicDialect

    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    overloaded = AnthropicDialect.error_for_status(529, {}, body, backend="claude")
    assert is_shed(overloaded) and overloaded.retry_after == OVERLOAD_WAIT_S
    named = AnthropicDialect.error_for_status(529, {"retry-after": "7"}, body, backend="claude")
    assert named.retry_after == 7.0  # the server's own wait wins
    assert not is_shed(AnthropicDialect.error_for_status(503, {}, b"", backend="claude"))
