"""A call the gateway's shutdown ended says so on its span: ERROR, ``error.type``
``GatewayClosedError`` — what its caller was raised.

Closed with calls in flight (a deploy's rolling restart), every one of them — ``gate.chat``,
``gate.stream``, an SDK stream on ``gate.http_client``, a stream a guarded function returned —
raised ``GatewayClosedError`` to its caller, yet every span ended UNSET, without
``error.type``: a trace view and the GenAI duration metric counted the calls the shutdown cut
as successes. The real openai SDK, loopback HTTP to the simulator.
"""

from __future__ import annotations

from typing import Any

import anyio
import openai
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import gptgate as gg
from gptgate.sim import SimServer

USER = [{"role": "user", "content": "Write a long story about connection pools."}]
LONG = 4000  # tokens: the simulator is still generating each answer when the gateway closes


def _error_type(span: ReadableSpan) -> Any:
    return (span.attributes or {}).get("error.type")


async def test_calls_the_shutdown_cut_end_their_spans_with_its_error() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with SimServer("gpu", seed=1) as base_url:
        backend = gg.Backend(name="b", base_url=base_url, model="m", concurrency=8)
        gate = gg.Gateway([backend], tracer_provider=provider)
        await gate.start()
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=base_url, http_client=gate.http_client("b"),
            max_retries=0,
        )

        @gate.guard(backend="b")
        async def opened() -> Any:
            return await client.chat.completions.create(
                model="m", messages=USER, max_tokens=LONG, stream=True
            )

        raised: dict[str, BaseException | None] = {}
        reading = {name: anyio.Event() for name in ("stream", "sdk", "guarded")}
        never = anyio.Event()

        async def outcome(name: str, step: Any) -> None:
            try:
                await step()
            except BaseException as exc:
                raised[name] = exc
            else:
                raised[name] = None

        async def chat() -> None:
            await gate.chat(USER, max_tokens=LONG, stream=False)

        async def stream() -> None:
            async with gate.stream(USER, max_tokens=LONG) as s:
                async for _ in s:
                    reading["stream"].set()

        async def sdk(name: str, guarded: bool) -> None:
            chunks = await (
                opened() if guarded else client.chat.completions.create(
                    model="m", messages=USER, max_tokens=LONG, stream=True
                )
            )
            async for _ in chunks:
                reading[name].set()
                await never.wait()  # a caller between two reads when the grace runs out

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(outcome, "chat", chat)
                tg.start_soon(outcome, "stream", stream)
                tg.start_soon(outcome, "sdk", lambda: sdk("sdk", False))
                tg.start_soon(outcome, "guarded", lambda: sdk("guarded", True))
                for event in reading.values():
                    await event.wait()
                await gate.aclose(grace_s=0.05)
                never.set()

    assert {name: type(exc).__name__ for name, exc in raised.items()} == dict.fromkeys(
        ("chat", "stream", "sdk", "guarded"), "GatewayClosedError"
    )
    spans = exporter.get_finished_spans()
    calls = [s for s in spans if s.kind == SpanKind.INTERNAL]
    guards = {s.context.span_id for s in calls if s.name.startswith("guard ")}
    sdk_requests = [  # the SDK's own request (no parent) and the guarded one's
        s for s in spans
        if s.kind == SpanKind.CLIENT and (s.parent is None or s.parent.span_id in guards)
    ]
    # gate.chat, gate.stream and the guarded call: one INTERNAL span each; the SDK's own
    # request and the guarded one's: a CLIENT span each
    assert len(calls) == 3 and len(sdk_requests) == 2
    for span in calls + sdk_requests:
        assert span.status.status_code == StatusCode.ERROR, span.name
        assert _error_type(span) == "GatewayClosedError", span.name
