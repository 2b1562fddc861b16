"""``@gate.guard`` governed and seen like ``gate.chat`` (issue 13): a returned SDK stream keeps
its permit, token-less or cached returns teach the limit nothing, the server's retry-after and
``x-should-retry`` and the retry budget are honoured, the SDK's own retries spend the same
budget, ``stats()`` counts what happened, a span per guarded call, a ledger entry from the
return value's usage, and the shutdown ends a running body."""

from __future__ import annotations

import contextlib
import itertools
import logging
from typing import Any

import anyio
import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend

from .mockbackend import RecordingLimit, Script, error, ok

USER = [{"role": "user", "content": "Tell me about connection pools."}]
BASE = "http://127.0.0.1:8000/v1"


def _status_error(
    cls: type[openai.APIStatusError], status: int, **headers: str
) -> openai.APIStatusError:
    request = httpx2.Request("POST", BASE + "/chat/completions")
    response = httpx2.Response(status, headers=headers, request=request)
    return cls(f"HTTP {status}", response=response, body=None)


def _sdk(gate: gg.Gateway, name: str, **options: Any) -> openai.AsyncOpenAI:
    options.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url=BASE, http_client=gate.http_client(name), **options
    )


# -- defect 1: a returned stream keeps the permit ------------------------------------------


async def _returned_streams(n: int) -> tuple[int, int, int, int]:
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="l", clock=clock, concurrency=5)
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        client = _sdk(gate, "l")

        @gate.guard(backend="l")
        async def open_stream() -> Any:
            return await client.chat.completions.create(
                model="m", messages=USER, max_tokens=20, stream=True
            )

        peak = 0
        done = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, engine.snapshot().active + engine.snapshot().queued)
                await clock.sleep(0.005)

        async def one() -> None:
            nonlocal done
            chunks = await open_stream()
            async for _ in chunks:
                pass
            done += 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            async with anyio.create_task_group() as calls:
                for _ in range(n):
                    calls.start_soon(one)
            tg.cancel_scope.cancel()
        stats = gate.stats()["l"]
        return peak, done, stats.in_flight, stats.calls


def test_a_returned_sdk_stream_keeps_its_permit_to_its_end() -> None:
    """50 guarded calls returning SDK streams under ``concurrency=5`` put 32 streams in flight
    at the server: the permit went back when the stream object was returned."""
    peak, done, in_flight, calls = run_virtual(_returned_streams, 50)
    assert done == 50 and calls == 50
    assert peak <= 5
    assert in_flight == 0


async def _stream_span() -> tuple[list[Any], list[Any]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="l", clock=clock, concurrency=5)
    async with gg.Gateway([backend], clock=clock, seed=1, tracer_provider=provider) as gate:
        client = _sdk(gate, "l")

        @gate.guard(backend="l", scenario="realtime_chat")
        async def open_stream() -> Any:
            return await client.chat.completions.create(
                model="m", messages=USER, max_tokens=20, stream=True,
                stream_options={"include_usage": True},
            )

        chunks = await open_stream()
        finished = [s.name for s in exporter.get_finished_spans()]
        assert not [n for n in finished if n.startswith("guard")]  # not over while it is read
        async for _ in chunks:
            pass
    spans = list(exporter.get_finished_spans())
    return [s for s in spans if s.name.startswith("guard")], [
        s for s in spans if s.kind == SpanKind.CLIENT
    ]


def test_a_returned_streams_guard_span_ends_with_the_stream() -> None:
    guards, clients = run_virtual(_stream_span)
    assert len(guards) == 1 and len(clients) == 1
    guard, client = guards[0], clients[0]
    assert guard.name == "guard _stream_span.<locals>.open_stream"
    attributes = dict(guard.attributes or {})
    assert attributes["gptgate.outcome"] == "ok"
    assert attributes["gptgate.scenario"] == "realtime_chat"
    assert attributes["gptgate.backend"] == "l"
    # the usage is its request's, on the request's span only: never counted twice in a trace
    assert "gen_ai.usage.output_tokens" not in attributes
    assert dict(client.attributes or {})["gen_ai.usage.output_tokens"] > 0
    assert client.parent is not None and client.parent.span_id == guard.context.span_id


# -- defect 2: returns with no usage, or the app's cache, teach the limit nothing -----------


async def _cache_hits() -> tuple[list[Any], int]:
    script = Script(ok("fresh answer " * 10))
    backend = gg.Backend(
        name="mock", base_url=BASE, model="m", concurrency=4,
        transport=httpx2.MockTransport(script),
    )
    async with gg.Gateway([backend], seed=1) as gate:
        recorder = RecordingLimit()
        gate.backend_state("mock").limiter.limit = recorder  # type: ignore[assignment]
        client = _sdk(gate, "mock")
        cache: dict[str, Any] = {}

        @gate.guard(backend="mock")
        async def plain_text() -> str:
            return "from the application's cache"

        @gate.guard(backend="mock")
        async def cached_completion() -> Any:
            if "answer" not in cache:
                cache["answer"] = await client.chat.completions.create(model="m", messages=USER)
            return cache["answer"]

        for _ in range(2):
            await plain_text()
        for _ in range(3):
            await cached_completion()
        return recorder.samples, gate.ledger.entries["mock"].attempts


def test_returns_without_new_work_do_not_teach_the_limit() -> None:
    """Two guarded calls that returned at once (an application cache hit) made the next 200
    calls take 72.6 s instead of 10.0 s: their 0-token latencies became the baseline."""
    samples, attempts = anyio.run(_cache_hits)
    assert len(samples) == 1  # the one request that reached the backend
    assert samples[0].output_tokens > 0
    assert attempts == 1  # the cached answer was billed once


# -- defects 5 and 13: the server's say on retries, the retry budget, stats -----------------


async def _retry_after(status: int, headers: dict[str, str]) -> tuple[list[float], gg.BackendStats]:
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="l", clock=clock)
    cls = openai.RateLimitError if status == 429 else openai.InternalServerError
    # a refusal (a 429 with retry-after) is requeued free of max_attempts until the deadline
    # (gptgate/shed.py): 10 s leaves room for 4 tries 3 s apart
    async with gg.Gateway(
        [backend], clock=clock, seed=1, max_attempts=3, deadline_s=10.0
    ) as gate:
        tries: list[float] = []

        @gate.guard(backend="l")
        async def body() -> str:
            tries.append(clock.now())
            raise _status_error(cls, status, **headers)

        with pytest.raises(cls):
            await body()
        return tries, gate.stats()["l"]


def test_a_guarded_retry_waits_the_servers_retry_after() -> None:
    """A 429 with ``retry-after: 3`` was retried after 0.24 s and 0.75 s."""
    tries, stats = run_virtual(_retry_after, 429, {"retry-after": "3"})
    assert len(tries) == 4  # at 0, 3, 6, 9 s: the next retry-after reaches past 10 s
    assert all(later - earlier >= 3.0 for earlier, later in itertools.pairwise(tries))
    assert stats.rate_limited == 4 and stats.failures == 4 and stats.retries == 3
    tries, _ = run_virtual(_retry_after, 429, {"retry-after-ms": "1500"})
    assert all(later - earlier >= 1.5 for earlier, later in itertools.pairwise(tries))


def test_a_guarded_call_is_not_retried_when_the_server_says_so() -> None:
    """A 500 with ``x-should-retry: false`` was retried twice."""
    tries, stats = run_virtual(_retry_after, 500, {"x-should-retry": "false"})
    assert len(tries) == 1
    assert stats.failures == 1 and stats.retries == 0


async def _budgeted(n: int) -> tuple[int, gg.BackendStats]:
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="l", clock=clock)
    async with gg.Gateway(
        [backend], clock=clock, seed=1, retry_budget_ratio=0.1, retry_budget_min_per_s=0.0
    ) as gate:
        met: set[int] = set()
        sent = 0

        @gate.guard(backend="l")
        async def body(i: int) -> str:
            nonlocal sent
            sent += 1
            if i not in met:  # each call meets one 429
                met.add(i)
                raise _status_error(openai.RateLimitError, 429)
            return "ok"

        async def one(i: int) -> None:
            with contextlib.suppress(openai.RateLimitError):
                await body(i)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        return sent - n, gate.stats()["l"]


def test_guarded_retries_spend_the_retry_budget() -> None:
    """60 guarded calls that each met one 429: all 60 retried, and ``stats().retries`` said 0."""
    retried, stats = run_virtual(_budgeted, 60)
    assert retried <= 6 + 1  # 10% of 60 first tries (and the budget's rounding)
    assert retried == stats.retries and retried > 0
    assert stats.rate_limited == 60


# -- defect 12: the SDK's own retries --------------------------------------------------------


async def _sdk_retries(
    ratio: float | None, status: int = 429
) -> tuple[int, gg.BackendStats, list[str], BaseException | None]:
    script = Script(error(429, retry_after_ms="1") if status == 429 else error(status))
    backend = gg.Backend(
        name="mock", base_url=BASE, model="m", concurrency=4,
        transport=httpx2.MockTransport(script),
    )
    gate = gg.Gateway(
        [backend], seed=1, max_attempts=3, backoff_base_s=0.001, backoff_cap_s=0.002,
        retry_budget_ratio=ratio, retry_budget_min_per_s=0.0,
    )
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep(level=logging.WARNING)
    logging.getLogger("gptgate").addHandler(handler)
    try:
        async with gate:
            client = _sdk(gate, "mock", max_retries=2)

            @gate.guard(backend="mock")
            async def ask() -> Any:
                return await client.chat.completions.create(model="m", messages=USER)

            failure: BaseException | None = None
            try:
                await ask()
            except openai.APIStatusError as exc:
                failure = exc
            stats = gate.stats()["mock"]
    finally:
        logging.getLogger("gptgate").removeHandler(handler)
    return len(script.requests), stats, records, failure


def test_the_sdks_own_retries_spend_the_gateways_budget() -> None:
    """One guarded call meeting 429s sent 9 requests: the guard's 3 tries times the SDK's 3.
    The SDK's retries are now retries of the gateway's: counted, and paid from its budget."""
    sent, stats, records, failure = anyio.run(_sdk_retries, 1.0)
    # the guarded call's first request funds one retry (ratio 1.0): the SDK's first retry is
    # sent, its second is refused unsent, and the guard does not retry a refusal
    assert sent == 2
    assert stats.retries == 1 and stats.rate_limited == 2
    assert isinstance(failure, openai.InternalServerError)
    assert "retry budget is spent" in str(failure)
    assert sum("max_retries=0" in r for r in records) == 1  # said once, with the way out


def test_the_sdks_retries_are_attempts_of_one_call_in_stats() -> None:
    # a 500 (a 429 with retry-after is a refusal the guard requeues until its bound, free of
    # max_attempts: gptgate/shed.py)
    sent, stats, _, _ = anyio.run(_sdk_retries, None, 500)
    assert sent == 9  # no budget: the guard's 3 tries times the SDK's 3, all counted
    assert stats.retries == 8 and stats.failures == 9


# -- a span and a ledger entry per guarded call ----------------------------------------------


async def _traced(fail: bool) -> tuple[list[Any], gg.Ledger]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="l", clock=clock)
    async with gg.Gateway(
        [backend], clock=clock, seed=1, tracer_provider=provider, max_attempts=2
    ) as gate:

        @gate.guard(backend="l", scenario="batch_content")
        async def body() -> dict[str, Any]:
            if fail:
                raise _status_error(openai.InternalServerError, 500)
            return {"id": "r1", "usage": {"prompt_tokens": 100, "completion_tokens": 40}}

        with contextlib.suppress(openai.InternalServerError):
            await body()
        return list(exporter.get_finished_spans()), gate.ledger


def test_a_guarded_call_has_a_span_with_its_usage_and_cost() -> None:
    spans, ledger = run_virtual(_traced, False)
    (span,) = spans
    attributes = dict(span.attributes or {})
    assert span.kind == SpanKind.INTERNAL and span.name.startswith("guard ")
    assert attributes["gptgate.scenario"] == "batch_content"
    assert attributes["gptgate.backend"] == "l" and attributes["gptgate.attempt"] == 1
    assert attributes["gptgate.outcome"] == "ok"
    assert attributes["gen_ai.usage.input_tokens"] == 100
    assert attributes["gen_ai.usage.output_tokens"] == 40
    entry = ledger.entries["l"]
    assert (entry.input_tokens, entry.output_tokens, entry.calls_ok) == (100, 40, 1)
    assert attributes["gptgate.cost_usd"] == pytest.approx(entry.cost_usd)


def test_a_failed_guarded_call_says_so_on_its_span() -> None:
    spans, ledger = run_virtual(_traced, True)
    (span,) = spans
    attributes = dict(span.attributes or {})
    assert span.status.status_code == StatusCode.ERROR
    assert attributes["error.type"] == "InternalServerError"
    assert attributes["gptgate.outcome"] == "error" and attributes["gptgate.attempt"] == 2
    entry = ledger.entries["l"]
    assert entry.calls_failed == 1 and entry.attempts == 0  # no usage: nothing guessed


# -- the shutdown ends a running guarded body -------------------------------------------------


async def _shutdown() -> tuple[BaseException | None, float, int]:
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="l", clock=clock)
    gate = gg.Gateway([backend], clock=clock, seed=1)
    outcome: BaseException | None = None

    @gate.guard(backend="l")
    async def slow() -> str:
        await clock.sleep(1000.0)
        return "late"

    async def one() -> None:
        nonlocal outcome
        try:
            await slow()
        except BaseException as exc:
            outcome = exc

    async with anyio.create_task_group() as tg:
        await gate.start()
        tg.start_soon(one)
        await clock.sleep(1.0)
        began = clock.now()
        await gate.aclose(grace_s=2.0)
        took = clock.now() - began
    return outcome, took, gate.backend_state("l").limiter.in_flight


def test_closing_the_gateway_ends_a_running_guarded_body() -> None:
    """The shutdown's grace and cancel reached ``gate.chat`` calls but not guarded bodies."""
    outcome, took, in_flight = run_virtual(_shutdown)
    assert isinstance(outcome, gg.GatewayClosedError)
    # the grace, then the backend's abandon_grace_s (0.1 s) for the request it hung up on
    assert took == pytest.approx(2.1, abs=0.01)
    assert in_flight == 0


async def test_the_sdks_retries_show_as_attempts_on_their_spans() -> None:
    # two server failures (a 429 with retry-after is a refusal the transport itself sends
    # again, unseen by the SDK: gptgate/sdk_requeue.py, tests/test_sdk_requeue.py)
    script = Script(error(500, retry_after_ms="1"), error(502, retry_after_ms="1"), ok("fine"))
    backend = gg.Backend(
        name="mock", base_url=BASE, model="m", concurrency=4,
        transport=httpx2.MockTransport(script),
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with gg.Gateway([backend], seed=1, tracer_provider=provider) as gate:
        client = _sdk(gate, "mock", max_retries=2)
        await client.chat.completions.create(model="m", messages=USER)
        stats = gate.stats()["mock"]
    attempts = [
        (s.attributes or {})["gptgate.attempt"]
        for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT
    ]
    assert attempts == [1, 2, 3]
    assert stats.calls == 3 and stats.retries == 2 and stats.failures == 2
