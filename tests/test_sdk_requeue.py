"""A refusal of an SDK request on ``gate.http_client`` is sent again by the transport, and
every resend is cut at the request's bound, as ``gate.chat`` cuts its attempts at the deadline:
its wait for the headers and its body end there, and what it held is handed back
(gptgate/sdk_requeue.py). Without the cut a resend outlived the chaos suite's deadlines by ~8 s."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimServer, get_profile, run_virtual
from tests.mockbackend import USER, Script, backend, error, gateway, ok, sse

DEADLINE_S = 5.0


def _refused_then(then: Any) -> Script:
    """The first request refused (a 503 with a retry-after of 1 s), the next ones ``then``."""
    return Script(error(503, "queue full", retry_after="1"), then)


def _sdk(gate: gg.Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="x", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=600.0,
        http_client=gate.http_client("mock"),
    )


def _sleeping(clock: LoopClock, seconds: float) -> Any:
    """A server that answers after ``seconds``."""

    async def serve(request: httpx2.Request) -> httpx2.Response:
        await clock.sleep(seconds)
        return ok()

    return serve


async def _asked(client: openai.AsyncOpenAI) -> BaseException | None:
    """One plain SDK call: the SDK's error it raised, or None."""
    try:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    except openai.APIError as exc:
        return exc
    return None


def _held(gate: gg.Gateway) -> tuple[int, int]:
    stats = gate.stats()["mock"]
    return stats.in_flight, stats.queued


def test_a_resend_without_headers_is_cut_at_the_deadline() -> None:
    """The resend's server never answers: the SDK (600 s timeout) gets a timeout at the
    gateway's deadline, not 600 s later, and the permit is back."""

    async def main() -> tuple[BaseException | None, float, tuple[int, int]]:
        clock = LoopClock()
        script = _refused_then(_sleeping(clock, 10_000))
        async with gateway(backend(script), clock=clock, deadline_s=DEADLINE_S) as gate:
            start = clock.now()
            raised = await _asked(_sdk(gate))
            took = clock.now() - start
            await clock.sleep(0.2)  # the slot of a request hung up on: abandon_grace_s
            return raised, took, _held(gate)

    raised, took, held = run_virtual(main)
    assert isinstance(raised, openai.APITimeoutError)
    assert DEADLINE_S - 0.01 <= took <= DEADLINE_S + 0.01
    assert held == (0, 0)


def test_a_resent_stream_is_cut_at_the_deadline_mid_body() -> None:
    """The resend's stream sends one chunk and then nothing (its idle bound is longer than the
    deadline): the read in progress ends at the deadline with the SDK's own timeout error (as
    a cut before the headers) and the permit is back."""

    async def main() -> tuple[list[str], BaseException | None, float, tuple[int, int]]:
        clock = LoopClock()
        first, rest = sse(["a"], finish=False, done=False), sse(["b"])

        async def chunks() -> AsyncIterator[bytes]:
            yield first
            await clock.sleep(10_000)
            yield rest

        def stalls(request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(
                200, content=chunks(), headers={"content-type": "text/event-stream"}
            )

        script = _refused_then(stalls)
        mock = backend(script, idle_timeout=60.0, timeout=60.0)
        async with gateway(mock, clock=clock, deadline_s=DEADLINE_S) as gate:
            client = _sdk(gate)
            start = clock.now()
            read: list[str] = []
            raised: BaseException | None = None
            stream = await client.chat.completions.create(
                model="m", messages=USER, stream=True  # type: ignore[arg-type]
            )
            try:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        read.append(chunk.choices[0].delta.content)
            except openai.APITimeoutError as exc:
                raised = exc
            took = clock.now() - start
            await stream.close()
            await clock.sleep(0.2)  # the slot of a request hung up on: abandon_grace_s
            return read, raised, took, _held(gate)

    read, raised, took, held = run_virtual(main)
    assert read == ["a"]
    assert isinstance(raised, openai.APITimeoutError)
    assert DEADLINE_S - 0.01 <= took <= DEADLINE_S + 0.01
    assert held == (0, 0)


def test_a_refusal_past_the_bound_reaches_the_sdk() -> None:
    """A retry-after reaching past the deadline is not waited for: the SDK sees the 503 at
    once, as ``gate.chat`` ends a call on such a refusal."""

    async def main() -> tuple[BaseException | None, float, int]:
        clock = LoopClock()
        script = Script(error(503, "queue full", retry_after="30"), ok())
        async with gateway(backend(script), clock=clock, deadline_s=DEADLINE_S) as gate:
            start = clock.now()
            raised = await _asked(_sdk(gate))
            return raised, clock.now() - start, len(script.requests)

    raised, took, sent = run_virtual(main)
    assert isinstance(raised, openai.InternalServerError) and raised.status_code == 503
    assert took < 0.1 and sent == 1


@pytest.mark.parametrize("cancel_at", [0.5, 1.5])
def test_a_caller_cancelling_during_a_requeue_leaves_nothing_held(cancel_at: float) -> None:
    """Cancelled while waiting the retry-after, or during the resend: no permit held, and no
    request left open at the server."""

    async def main() -> tuple[tuple[int, int], int]:
        clock = LoopClock()
        script = _refused_then(_sleeping(clock, 10.0))
        async with gateway(backend(script), clock=clock, deadline_s=DEADLINE_S) as gate:
            client = _sdk(gate)
            with anyio.move_on_after(clock.to_real(cancel_at)):
                await _asked(client)
            await clock.sleep(0.2)  # the slot of a request hung up on: abandon_grace_s
            return _held(gate), script.in_flight

    held, open_at_server = run_virtual(main)
    assert held == (0, 0) and open_at_server == 0


def test_over_loopback_resends_end_by_the_deadline_and_hold_nothing() -> None:
    """A real server with one slot and no queue (503 + retry-after 1 s when busy), answers of
    3 s, the gateway's deadline 5 s, four plain SDK calls at once (``max_retries=0``): the
    refused ones are sent again until the bound, the last resends are cut at it, every call
    ends by the deadline, and afterwards no permit, no pooled connection and no request at
    the server is left."""
    scale = 5.0  # 1 s of the deadline is 0.2 s real: a loaded machine moves it little
    profile = get_profile("gpu").model_copy(update={
        "slots": 1, "max_queue": 0, "queue_retry_after_s": 1.0, "jitter_sigma": 0.0,
        "load_jitter_sigma": 0.0, "output_tokens_mean": 120.0, "output_tokens_sigma": 0.0,
        "base_step_s": 0.01, "ttft_overhead_s": 0.0, "usl_sigma": 0.0, "usl_kappa": 0.0,
    })
    sim = SimEngine(profile, clock=gg.ScaledClock(scale), seed=1)

    async def main(base_url: str) -> None:
        backend = gg.Backend(name="mock", base_url=base_url, model="m", concurrency=4,
                             timeout=60.0)
        clock = gg.ScaledClock(scale)
        async with gg.Gateway([backend], clock=clock, seed=1, deadline_s=DEADLINE_S) as gate:
            client = openai.AsyncOpenAI(
                api_key="x", base_url=base_url, max_retries=0, timeout=600.0,
                http_client=gate.http_client("mock"),
            )
            took: list[float] = []
            outcomes: list[str] = []

            async def one() -> None:
                start = clock.now()
                raised = await _asked(client)
                took.append(clock.now() - start)
                outcomes.append(type(raised).__name__ if raised is not None else "ok")

            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(one)
            await clock.sleep(0.5)  # abandon_grace_s, and the server noticing the hang-ups
            stats = gate.stats()["mock"]
            # which ones the bound cuts (a timeout) or leaves no time to requeue (the 503
            # handed over) moves with the machine's load; the cuts themselves are pinned in
            # virtual time above
            assert "ok" in outcomes, outcomes
            assert set(outcomes) <= {"ok", "APITimeoutError", "InternalServerError"}, outcomes
            assert max(took) <= DEADLINE_S + 1.0, took  # the chaos bound: + 1 s
            assert stats.retries > 0 and (stats.in_flight, stats.queued) == (0, 0)
            assert stats.pool.checked_out == 0
            load = sim.snapshot()
            assert (load.active, load.queued) == (0, 0)

    with SimServer(sim, time_scale=scale) as base_url:
        anyio.run(main, base_url)


async def _closed_while_answering(
    gate: gg.Gateway, clock: LoopClock, answer: anyio.Event, call: Callable[[], Awaitable[None]]
) -> BaseException | None:
    """``call`` accepted and at the server, then the gateway closed while the server answers
    (``answer``): what the call raised, or None."""
    raised: list[BaseException | None] = []

    async def run() -> None:
        try:
            await call()
            raised.append(None)
        except Exception as exc:  # before the fix: GatewayClosedError
            raised.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await clock.sleep(0.1)
        answer.set()
        await gate.aclose()
    return raised[0]


def test_a_refusal_arriving_while_the_gateway_closes_is_requeued_and_its_connection_back() -> None:
    """The chaos suite's "nothing held after close" (gpu: 1 connection out, 3 of 16 runs): a
    plain SDK request accepted before ``aclose``, whose 429 arrives during the shutdown grace.
    The transport looked its backend up again after the answer came (``self._backend()``, which
    refuses once the gateway is closing): that raised ``GatewayClosedError`` over the refusal,
    which nobody read or closed — its pooled connection stayed out — and the accepted call
    failed inside its grace. The backend is now looked up once, when the request is accepted:
    the refusal is read and closed, the request sent again within the grace and answered."""

    async def main() -> tuple[BaseException | None, int, int]:
        clock = LoopClock()
        closing = anyio.Event()

        async def refused_once_closing(request: httpx2.Request) -> httpx2.Response:
            await closing.wait()
            await clock.sleep(0.5)  # the refusal arrives inside the grace
            return error(429, "slow down", retry_after="1")

        script = Script(refused_once_closing, ok())
        gate = gateway(backend(script), clock=clock, deadline_s=DEADLINE_S, shutdown_grace_s=4.0)
        await gate.start()
        client = _sdk(gate)

        async def ask() -> None:
            if (raised := await _asked(client)) is not None:
                raise raised

        raised = await _closed_while_answering(gate, clock, closing, ask)
        pool = gate.backend_state("mock").pool.statistics()
        return raised, pool.checked_out, len(script.requests)

    raised, out, sent = run_virtual(main)
    assert out == 0  # the refusal's connection is back
    assert raised is None and sent == 2  # requeued within the grace, and answered


def test_a_stream_answered_while_the_gateway_closes_reaches_its_caller_and_the_ledger() -> None:
    """The chaos suite's "ledger near the bill" (gpu: billed 4,389 tokens, ledger 4,166): the
    same look-up after the answer, on a plain SDK stream whose headers arrive in the shutdown
    grace. It raised ``GatewayClosedError`` over the open stream: the caller lost an answer the
    server was generating, and the ledger booked only an uncertain guess for it (nothing was
    read; the server went on until the hang-up). Now the caller reads it and the ledger books
    what arrived."""

    async def main() -> tuple[BaseException | None, int, int]:
        clock = LoopClock()
        closing = anyio.Event()

        async def pieces() -> AsyncIterator[bytes]:
            for word in ("one ", "two ", "three "):
                yield sse([word], finish=False, done=False)
                await clock.sleep(0.05)
            yield sse(["end"])

        async def answered_once_closing(request: httpx2.Request) -> httpx2.Response:
            await closing.wait()
            await clock.sleep(0.5)  # the headers arrive inside the grace
            return httpx2.Response(
                200, content=pieces(), headers={"content-type": "text/event-stream"}
            )

        script = Script(answered_once_closing)
        gate = gateway(backend(script), clock=clock, deadline_s=DEADLINE_S, shutdown_grace_s=4.0)
        await gate.start()
        client = _sdk(gate)

        async def preview() -> None:  # the chaos suite's: two chunks read, then left
            stream = await client.chat.completions.create(
                model="m", messages=USER, stream=True  # type: ignore[arg-type]
            )
            read = 0
            async for _ in stream:
                read += 1
                if read == 2:
                    break
            await stream.close()

        raised = await _closed_while_answering(gate, clock, closing, preview)
        entry = gate.ledger.entries["mock"]
        return raised, entry.output_tokens, entry.uncertain_tokens

    raised, output, uncertain = run_virtual(main)
    assert raised is None
    assert output > 0 and uncertain == 0  # what arrived, booked as certain
