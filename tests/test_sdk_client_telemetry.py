"""``gate.http_client``: every request the SDK sends is an attempt like ``gate.chat``'s —
seen (span, metrics, ledger, ``stats()``) and governed (what the limit learns, bounded waits,
a closed gateway, priority, idle timeout).

Before: 40 ``gate.chat`` calls and 20 SDK calls made 40 ``chat {model}`` spans, not 60; the
SDK's calls had no metric point, no ledger entry and no cost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import gptgate as gg
from gptgate.sim import SimEngine, SimServer, get_profile
from gptgate.testing import LoopClock, run_virtual, sim_backend

from .mockbackend import RecordingLimit, Script, completion, error, ok, stream

SCALE = 50.0
USER = [{"role": "user", "content": "Tell me about connection pools."}]
KEY = "sk-secret-value-987654"


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def clients(self) -> list[Any]:
        return [s for s in self.spans.get_finished_spans() if s.kind == SpanKind.CLIENT]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            p
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == name
            for p in m.data.data_points
        ]


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    profile = get_profile("gpu").model_copy(
        update={"rpm": None, "tpm": None, "max_queue": None, "output_tokens_mean": 30}
    )
    sim = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5)
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url, sim


async def test_sdk_calls_get_spans_and_metrics_like_gate_chat(
    server: tuple[str, SimEngine],
) -> None:
    base_url, _ = server
    otel = Otel()
    backend = gg.Backend(
        name="sim", base_url=base_url, model="m", concurrency=8, timeout=60.0,
        hardware="gpu", api_key=KEY,
    )
    gate = gg.Gateway(
        [backend], clock=gg.ScaledClock(SCALE), seed=3,
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider,
    )
    async with gate:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=KEY, http_client=gate.http_client("sim"), max_retries=0
        )
        for _ in range(4):
            await gate.chat(USER, max_tokens=12)
        for _ in range(3):
            await client.chat.completions.create(
                model="m", messages=USER, max_tokens=12, temperature=0.5
            )
        for _ in range(2):
            chunks = await client.chat.completions.create(
                model="m", messages=USER, max_tokens=12, stream=True,
                stream_options={"include_usage": True},
            )
            async for _chunk in chunks:
                pass
    spans = otel.clients()
    assert len(spans) == 9
    assert all(s.name == "chat m" for s in spans)
    sdk = spans[4:]
    for span in sdk:
        attributes = span.attributes
        assert attributes is not None
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "m"
        assert attributes["gen_ai.request.max_tokens"] == 12
        assert attributes["gptgate.backend"] == "sim" and attributes["gptgate.hardware"] == "gpu"
        assert attributes["gen_ai.usage.output_tokens"] > 0
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.response.id"]
        assert attributes["gen_ai.response.finish_reasons"]
        assert "gptgate.queue_s" in attributes
        assert span.status.status_code != StatusCode.ERROR
    assert sdk[0].attributes is not None and sdk[0].attributes["gen_ai.request.temperature"] == 0.5
    assert [s.attributes["gen_ai.request.stream"] for s in sdk if s.attributes] == [
        False, False, False, True, True
    ]
    every = " ".join(str(v) for s in otel.spans.get_finished_spans() for v in s.attributes.values())
    assert KEY not in every and "connection pools" not in every
    durations = otel.points("gen_ai.client.operation.duration")
    assert sum(p.count for p in durations) == 9
    tokens = otel.points("gen_ai.client.token.usage")
    assert sum(p.count for p in tokens) == 18  # input + output per attempt
    assert sum(p.count for p in otel.points("gen_ai.client.operation.time_to_first_chunk")) >= 2
    assert sum(p.count for p in otel.points("gptgate.client.queue.duration")) == 9


def _embeddings(request: httpx2.Request) -> httpx2.Response:
    path = request.url.path
    if path.endswith("/embeddings"):
        return httpx2.Response(200, json={
            "object": "list", "model": "e",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        })
    if path.endswith("/responses"):
        return httpx2.Response(200, json={
            "id": "resp_1", "object": "response", "created_at": 0, "model": "m",
            "status": "completed", "output": [{
                "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "hello", "annotations": []}],
            }],
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 11, "output_tokens": 5, "total_tokens": 16,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        })
    if path.endswith("/models"):
        return httpx2.Response(200, json={"object": "list", "data": []})
    return httpx2.Response(200, json=completion("the answer", prompt=9))


async def test_embeddings_responses_and_other_endpoints_are_traced_by_operation() -> None:
    otel = Otel()
    backend = gg.Backend(
        name="mock", base_url="http://127.0.0.1:9/v1", model="m", concurrency=4,
        transport=httpx2.MockTransport(_embeddings),
    )
    gate = gg.Gateway(
        [backend], seed=1, tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )
    async with gate:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1", api_key="sk-test",
            http_client=gate.http_client("mock"), max_retries=0,
        )
        await client.embeddings.create(model="e", input="a sentence")
        await client.responses.create(model="m", input="say hello")
        await client.completions.create(model="m", prompt="once upon", max_tokens=5)
        await client.models.list()
        entry = gate.ledger.entries["mock"]
    by_name = {s.name: s.attributes for s in otel.clients()}
    assert set(by_name) == {"embeddings e", "chat m", "text_completion m", "models m"}
    assert by_name["embeddings e"]["gen_ai.usage.input_tokens"] == 7
    assert by_name["chat m"]["gen_ai.usage.output_tokens"] == 5
    assert by_name["chat m"]["gen_ai.response.id"] == "resp_1"
    assert by_name["text_completion m"]["gen_ai.operation.name"] == "text_completion"
    assert entry.input_tokens == 7 + 11 + 9 and entry.attempts == 3


async def _ledger_run(n: int) -> tuple[gg.LedgerEntry, Any, gg.BackendStats]:
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="l", clock=clock, concurrency=4)
    gate = gg.Gateway([backend], clock=clock, seed=1)
    async with gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
            http_client=gate.http_client("l"), max_retries=0,
        )

        async def one(i: int) -> None:
            if i % 2:
                chunks = await client.chat.completions.create(
                    model="m", messages=USER, max_tokens=30, stream=True,
                    stream_options={"include_usage": True},
                )
                async for _chunk in chunks:
                    pass
            else:
                await client.chat.completions.create(model="m", messages=USER, max_tokens=30)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        entry = gate.ledger.entries["l"]
        stats = gate.stats()["l"]
    return entry, engine.ledger.snapshot(), stats


def test_the_ledger_of_sdk_calls_is_the_simulators_bill() -> None:
    entry, bill, stats = run_virtual(_ledger_run, 20)
    assert bill.requests == 20
    assert (entry.input_tokens, entry.output_tokens) == (bill.input_tokens, bill.output_tokens)
    assert entry.attempts == 20 and entry.streamed_attempts == 10 and entry.cost_usd >= 0
    assert stats.calls == 20 and stats.failures == 0


async def test_stats_count_sdk_failures_rate_limits_and_timeouts() -> None:
    def reset(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadError("connection reset", request=request)

    def slow(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("no answer", request=request)

    script = Script(error(429), error(429), error(500), reset, slow, ok("fine"))
    backend = gg.Backend(
        name="mock", base_url="http://127.0.0.1:9/v1", model="m", concurrency=4,
        transport=httpx2.MockTransport(script),
    )
    otel = Otel()
    async with gg.Gateway([backend], seed=1, tracer_provider=otel.tracer_provider) as gate:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1", api_key="sk-test",
            http_client=gate.http_client("mock"), max_retries=0,
        )
        for _ in range(5):
            with pytest.raises(openai.OpenAIError):
                await client.chat.completions.create(model="m", messages=USER)
        await client.chat.completions.create(model="m", messages=USER)
        stats = gate.stats()["mock"]
    assert stats.calls == 6
    assert stats.failures == 5 and stats.rate_limited == 2 and stats.timeouts == 1
    spans = otel.clients()
    assert [s.status.status_code for s in spans].count(StatusCode.ERROR) == 5
    assert [s.attributes["error.type"] for s in spans[:5] if s.attributes] == [
        "RateLimitedError", "RateLimitedError", "BackendError", "BackendError", "RequestTimeout"
    ]


async def test_token_less_replies_do_not_teach_the_limit() -> None:
    """Defect 2: two ``models.list()`` before 200 chat calls made them take 72.7 s, not 9.9 s:
    their fast, token-less latencies became the limit's baseline."""
    async with gg.Gateway([_mock_backend(_embeddings)], seed=1) as gate:
        recorder = RecordingLimit()
        gate.backend_state("mock").limiter.limit = recorder
        client = _sdk(gate)
        await client.models.list()
        await client.embeddings.create(model="e", input="x")
        await client.chat.completions.create(model="m", messages=USER)
    (sample,) = recorder.samples  # an ignored permit feeds the limit nothing
    assert sample.kind == "ok" and sample.output_tokens > 0


def _mock_backend(handler: Any, **options: Any) -> gg.Backend:
    settings: dict[str, Any] = {"concurrency": 4, "timeout": 5.0}
    settings.update(options)
    return gg.Backend(
        name="mock", base_url="http://127.0.0.1:9/v1", model="m",
        transport=httpx2.MockTransport(handler), **settings,
    )


def _sdk(gate: gg.Gateway, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1", api_key="sk-test",
        http_client=gate.http_client("mock", **options), max_retries=0,
    )


class _CutStream(httpx2.AsyncByteStream):
    """An SSE body that sends its first chunk, then the connection resets."""

    async def __aiter__(self) -> Any:
        yield b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"abcdefgh"}}]}\n\n'
        raise httpx2.ReadError("connection reset")


class _SlowStream(httpx2.AsyncByteStream):
    """An SSE answer in four chunks, each its own read."""

    async def __aiter__(self) -> Any:
        for word in ("one", "two", "three", "four"):
            yield b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % (
                word.encode()
            )
            await anyio.sleep(0.001)
        yield b"data: [DONE]\n\n"


async def test_an_early_end_of_a_body_is_never_a_success_with_no_tokens() -> None:
    """Defect 3: a reset, a caller's break, all reached the limit as successes with 0 tokens
    (after 100 streams cancelled at 1 s the limit fell from 18 to 4)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.headers.get("x-cut") == "1":
            return httpx2.Response(
                200, stream=_CutStream(), headers={"content-type": "text/event-stream"}
            )
        return httpx2.Response(
            200, stream=_SlowStream(), headers={"content-type": "text/event-stream"}
        )

    async with gg.Gateway([_mock_backend(handler)], seed=1) as gate:
        recorder = RecordingLimit()
        gate.backend_state("mock").limiter.limit = recorder
        client = _sdk(gate)
        chunks = await client.chat.completions.create(
            model="m", messages=USER, stream=True, extra_headers={"x-cut": "1"}
        )
        with pytest.raises(openai.APIError):
            async for _chunk in chunks:
                pass
        chunks = await client.chat.completions.create(model="m", messages=USER, stream=True)
        async for _chunk in chunks:
            break
        await chunks.close()
        stats = gate.stats()["mock"]
        entry = gate.ledger.entries["mock"]
    (cut,) = recorder.samples  # the caller's break: ignored, no sample
    assert cut.kind == "dropped" and cut.congestion is False  # a server failure
    assert stats.failures == 1
    assert entry.interrupted_streams == 2 and entry.output_tokens >= 2  # possibly billed


async def test_a_stream_without_usage_counts_its_content_tokens() -> None:
    """Defect 4: without ``include_usage`` (the SDK's default) the limit saw 0 tokens."""
    async with gg.Gateway([_mock_backend(lambda r: stream(["x" * 40], usage=False))]) as gate:
        recorder = RecordingLimit()
        gate.backend_state("mock").limiter.limit = recorder
        chunks = await _sdk(gate).chat.completions.create(model="m", messages=USER, stream=True)
        async for _chunk in chunks:
            pass
        entry = gate.ledger.entries["mock"]
    (sample,) = recorder.samples
    assert sample.kind == "ok" and sample.output_tokens == 10 and sample.input_tokens > 0
    assert entry.output_tokens == 10 and entry.estimated_attempts == 1


async def _pool_timeout() -> tuple[type[BaseException], float]:
    clock = LoopClock()
    backend, _ = sim_backend("gpu", name="mock", clock=clock, concurrency=1)
    gate = gg.Gateway([backend], clock=clock, seed=1)
    async with gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
            http_client=gate.http_client("mock"), max_retries=0, timeout=1.0,
        )
        permit = await gate.backend_state("mock").limiter.acquire()  # the one permit, busy
        start = clock.now()
        try:
            await client.chat.completions.create(model="m", messages=USER)
        except BaseException as exc:
            kind: type[BaseException] = type(exc)
        else:
            kind = type(None)  # type: ignore[assignment]
        waited = clock.now() - start
        permit.ignore()
    return kind, waited


def test_the_wait_for_a_permit_is_bounded_by_the_requests_timeout() -> None:
    """Defect 7: an SDK call with ``timeout=1.0`` queued behind a busy permit returned after
    8 s; now the SDK raises its own timeout error after its pool timeout."""
    kind, waited = run_virtual(_pool_timeout)
    assert kind is openai.APITimeoutError
    assert waited <= 1.01


async def test_a_closed_gateways_client_raises_a_typed_error() -> None:
    """Defect 9: after ``aclose`` the client still sent, outside any limit."""
    sent: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return ok()

    gate = gg.Gateway([_mock_backend(handler)], seed=1)
    client = gate.http_client("mock")
    with pytest.raises(gg.GatewayClosedError):  # before it opens
        await client.post("http://127.0.0.1:9/v1/chat/completions", json={"messages": USER})
    async with gate:
        await client.post("http://127.0.0.1:9/v1/chat/completions", json={"messages": USER})
    with pytest.raises(gg.GatewayClosedError):
        await client.post("http://127.0.0.1:9/v1/chat/completions", json={"messages": USER})
    sdk = openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1", api_key="sk-test", http_client=client, max_retries=0
    )
    with pytest.raises(gg.GatewayClosedError):  # through the SDK too, unwrapped
        await sdk.chat.completions.create(model="m", messages=USER)
    assert len(sent) == 1


async def test_http_client_takes_priority_and_scenario() -> None:
    """Defect 14: ``http_client(name)`` took no ``priority=`` or ``scenario=``."""
    order: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        order.append(json.loads(request.content)["messages"][0]["content"])
        return ok()

    async with gg.Gateway([_mock_backend(handler, concurrency=1)], seed=1) as gate:
        low = gate.http_client("mock", priority=0)
        high = gate.http_client("mock", scenario=gg.Scenario(name="vip", priority=9))
        limiter = gate.backend_state("mock").limiter
        permit = await limiter.acquire()
        url = "http://127.0.0.1:9/v1/chat/completions"
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: low.post(url, json={"messages": [{"content": "low"}]}))
            await anyio.sleep(0.01)
            tg.start_soon(lambda: high.post(url, json={"messages": [{"content": "high"}]}))
            await anyio.sleep(0.01)
            permit.ignore()
            limiter.release() if hasattr(limiter, "release") else None
    assert order == ["high", "low"]
    with pytest.raises(gg.BadRequestError, match="priority"):
        gate.http_client("mock", priority="high")  # type: ignore[arg-type]


async def test_idle_timeout_applies_to_sdk_streams() -> None:
    """Defect 14: a 3 s mid-stream stall passed with ``idle_timeout=2.0``."""

    class Stall(httpx2.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"ab"}}]}\n\n'
            await anyio.sleep(3.0)
            yield b"data: [DONE]\n\n"

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, stream=Stall(), headers={"content-type": "text/event-stream"})

    clock = gg.ScaledClock(100.0)
    backend = _mock_backend(handler, idle_timeout=2.0)
    async with gg.Gateway([backend], seed=1, clock=clock) as gate:
        chunks = await _sdk(gate).chat.completions.create(model="m", messages=USER, stream=True)
        with anyio.fail_after(5), pytest.raises(openai.APIError):
            async for _chunk in chunks:
                pass
        stats = gate.stats()["mock"]
    assert stats.timeouts == 1 and stats.failures == 1


async def test_a_timed_out_sdk_attempt_is_counted_as_possibly_billed() -> None:
    """As ``gate.chat``: a timeout with no byte of answer may have been billed — the ledger
    counts its prompt, marked uncertain."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.headers.get("x-slow") == "1":
            raise httpx2.ReadTimeout("no answer", request=request)
        return ok("fine")

    async with gg.Gateway([_mock_backend(handler)], seed=1) as gate:
        client = _sdk(gate)
        await client.chat.completions.create(model="m", messages=USER)
        before = gate.ledger.entries["mock"].input_tokens
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(
                model="m", messages=USER, extra_headers={"x-slow": "1"}
            )
        entry = gate.ledger.entries["mock"]
        stats = gate.stats()["mock"]
    assert entry.attempts == 2 and entry.input_tokens > before
    assert entry.uncertain_tokens > 0 and entry.wasted_tokens == entry.uncertain_tokens
    assert stats.timeouts == 1


async def test_a_stream_left_after_its_end_marker_is_a_success() -> None:
    async with gg.Gateway([_mock_backend(lambda r: stream(["abcd" * 5]))], seed=1) as gate:
        recorder = RecordingLimit()
        gate.backend_state("mock").limiter.limit = recorder
        response = await gate.http_client("mock").send(
            gate.http_client("mock").build_request(
                "POST", "http://127.0.0.1:9/v1/chat/completions",
                json={"model": "m", "messages": USER, "stream": True},
            ),
            stream=True,
        )
        async for _line in response.aiter_lines():
            pass
        await response.aclose()
        entry = gate.ledger.entries["mock"]
    (sample,) = recorder.samples
    assert sample.kind == "ok" and entry.wasted_tokens == 0 and entry.attempts == 1


async def _guarded(n: int) -> tuple[int, int, gg.LedgerEntry, Any, gg.BackendStats]:
    otel = Otel()
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="l", clock=clock, concurrency=4)
    gate = gg.Gateway(
        [backend], clock=clock, seed=1, tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )
    async with gate:
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:8000/v1",
            http_client=gate.http_client("l"), max_retries=0,
        )

        @gate.guard(backend="l")
        async def ask() -> None:
            await client.chat.completions.create(model="m", messages=USER, max_tokens=20)

        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(ask)
        entry = gate.ledger.entries["l"]
        stats = gate.stats()["l"]
    spans = [s for s in otel.clients() if s.name == "chat m"]
    return len(spans), engine.ledger.snapshot().output_tokens, entry, engine, stats


def test_sdk_requests_inside_a_guarded_call_still_get_span_and_ledger() -> None:
    spans, billed_output, entry, _, stats = run_virtual(_guarded, 8)
    assert spans == 8
    assert entry.output_tokens == billed_output and entry.attempts == 8
    assert stats.calls == 8 and stats.in_flight == 0  # counted once, by the guard
