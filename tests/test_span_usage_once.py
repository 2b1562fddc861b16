"""Every token the ledger booked is on exactly one span: summing ``gen_ai.usage.*`` over a
trace — what a GenAI-aware backend (an LLM-observability tool reading OTel) does to show a
trace's tokens and cost — gives the ledger's counts, for a ``@gate.guard``-ed SDK call through
``gate.http_client`` too.

Before, a guarded call's INTERNAL span repeated the usage its child CLIENT span (the request
on ``gate.http_client``) already carried, so such a tool counted the call's tokens twice. The
guard's span keeps its usage for a body whose requests gptgate did not see (the SDK's own
client): then it is the only span that has it. Over loopback, against the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import gptgate as gg
from gptgate.sim import SimEngine, SimServer, get_profile
from tests.simserve import unlimited_gpu

SCALE = 50.0
KEY = "sk-test-0123456789abcdef"
USER = [{"role": "user", "content": "Tell me about connection pools."}]


@pytest.fixture
def base_url() -> Iterator[str]:
    with unlimited_gpu(40, seed=5, scale=SCALE) as url:
        yield url


def _summed(exporter: InMemorySpanExporter, name: str) -> int:
    return sum(int((s.attributes or {}).get(name, 0)) for s in exporter.get_finished_spans())


async def test_a_guarded_sdk_calls_tokens_are_on_one_span(base_url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    backend = gg.Backend(name="sim", base_url=base_url, model="m", api_key=KEY, concurrency=4,
                         timeout=60.0)
    async with gg.Gateway([backend], clock=gg.ScaledClock(SCALE), seed=3,
                          tracer_provider=provider) as gate:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY,
                                    http_client=gate.http_client("sim"), max_retries=0)

        @gate.guard()
        async def ask() -> Any:
            return await client.chat.completions.create(
                model="m", messages=USER, max_tokens=30,  # type: ignore[arg-type]
            )

        await ask()
        await gate.chat(USER, max_tokens=30)
        entry = gate.ledger.entries["sim"]
    names = {s.name.split()[0] for s in exporter.get_finished_spans()}
    assert names == {"guard", "chat"}
    assert entry.input_tokens > 0 and entry.output_tokens > 0
    assert _summed(exporter, "gen_ai.usage.input_tokens") == entry.input_tokens
    assert _summed(exporter, "gen_ai.usage.output_tokens") == entry.output_tokens


async def test_a_failed_attempts_billed_tokens_are_on_its_span() -> None:
    """A stream the server cut mid-answer, and a plain answer it cut mid-body, are billed (the
    ledger books what was generated): the failed attempt's span carries those tokens beside
    its cost, as an abandoned attempt's does. Before, it said its cost and no tokens."""
    from gptgate.sim import FaultPlan

    profile = get_profile("gpu").model_copy(
        update={"rpm": None, "tpm": None, "max_queue": None, "output_tokens_mean": 200}
    )
    engine = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5,
                       faults=FaultPlan(reset_rate=1.0))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with SimServer(engine, time_scale=SCALE) as url:
        backend = gg.Backend(name="sim", base_url=url, model="m", api_key=KEY, concurrency=4,
                             timeout=60.0)
        async with gg.Gateway([backend], clock=gg.ScaledClock(SCALE), seed=3,
                              tracer_provider=provider) as gate:
            with pytest.raises(gg.StreamInterruptedError):
                async with gate.stream(USER, max_tokens=300) as stream:
                    async for _ in stream:
                        pass
            with pytest.raises(gg.BackendError):
                await gate.chat(USER, max_tokens=300)
            entry = gate.ledger.entries["sim"]
    assert entry.input_tokens > 0 and entry.output_tokens > 0
    assert _summed(exporter, "gen_ai.usage.input_tokens") == entry.input_tokens
    assert _summed(exporter, "gen_ai.usage.output_tokens") == entry.output_tokens
