"""The sync ``openai.AzureOpenAI`` and ``anthropic.Anthropic`` clients on
``SyncGateway.http_client`` over real loopback HTTP, against the simulator's Azure and
Anthropic flavors: many plain threads, one limit (the server's peak ≤ it), a client span per
request, and the gateway's ledger equal to the server's bill."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, SimEngine, SimServer, get_profile
from gptgate.sim.anthropic import bill_usd
from tests.test_sync_gateway import in_threads

SCALE = 50.0
THREADS, CALLS, LIMIT = 16, 3, 3
USER = [{"role": "user", "content": "Tell me about connection pools."}]
AZURE_KEY = "azure-key-0123456789abcdef"
AZURE_PRICE = gg.Price(input_per_mtok=2.5, cached_input_per_mtok=1.25, output_per_mtok=10.0)
CLAUDE = "claude-sonnet-4-5"
CLAUDE_PRICE = gg.Price(
    input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75
)
UNLIMITED = {"rpm": None, "tpm": None, "max_queue": None, "output_tokens_mean": 30.0}


def _serve(profile: Any) -> Iterator[tuple[str, SimEngine]]:
    sim = SimEngine(profile, clock=gg.ScaledClock(SCALE), seed=5)
    with SimServer(sim, time_scale=SCALE) as base_url:
        yield base_url.removesuffix("/v1"), sim  # both SDKs take the server's root


@pytest.fixture
def azure_server() -> Iterator[tuple[str, SimEngine]]:
    update = {"flavor": "azure", "api_key": AZURE_KEY, **UNLIMITED}
    yield from _serve(get_profile("gpu").model_copy(update=update))


@pytest.fixture
def anthropic_server() -> Iterator[tuple[str, SimEngine]]:
    yield from _serve(ANTHROPIC_PROFILE.model_copy(update=UNLIMITED))


#: the gateways keep real time (only the servers run 50× fast): nothing here is bounded by
#: the gateway's clock, and on ``ScaledClock(50)`` a stream's 30 s idle bound was 0.6 s of
#: wall time, which a thread starved on a loaded machine outlasted ("the stream was left
#: unread 30s", in a -n 2 run at load 8-12)


def _traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider, spans


def _client_spans(spans: InMemorySpanExporter, key: str) -> list[Any]:
    clients = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]
    for span in clients:
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert key not in json.dumps(dict(span.attributes))  # no key in a span
    return clients


def _idle(gate: gg.SyncGateway, name: str) -> gg.BackendStats:
    stats = gate.stats()[name]
    assert (stats.in_flight, stats.queued, stats.pool.checked_out) == (0, 0, 0)
    return stats


def test_the_sync_azure_openai_sdk_on_http_client_is_governed_traced_and_billed(
    azure_server: tuple[str, SimEngine],
) -> None:
    root, sim = azure_server
    tracer_provider, spans = _traced()
    backend = gg.Backend(
        name="az", provider="azure", base_url=root, deployment="gpt-5.5", api_key=AZURE_KEY,
        concurrency=LIMIT, price=AZURE_PRICE, timeout=60.0,
    )
    with gg.SyncGateway([backend], clock=gg.SystemClock(), seed=1,
                        tracer_provider=tracer_provider) as gate:
        client = openai.AzureOpenAI(
            azure_endpoint=root, api_key=AZURE_KEY, api_version="2024-10-21",
            http_client=gate.http_client("az"), max_retries=0,
        )

        def ask(i: int) -> bool:
            for n in range(CALLS):
                if (i + n) % 2:
                    chunks = client.chat.completions.create(
                        model="gpt-5.5", messages=USER, max_tokens=20,  # type: ignore[arg-type]
                        stream=True, stream_options={"include_usage": True},
                    )
                    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                else:
                    answer = client.chat.completions.create(
                        model="gpt-5.5", messages=USER, max_tokens=20  # type: ignore[arg-type]
                    )
                    text = answer.choices[0].message.content or ""
                assert text
            return True

        assert all(in_threads(ask, threads=THREADS))
        stats = _idle(gate, "az")
        ours = gate.gateway.ledger.total()
    assert stats.calls == THREADS * CALLS and stats.failures == 0
    server = sim.ledger.snapshot()
    assert server.ok == THREADS * CALLS and 1 <= server.peak_in_flight <= LIMIT
    assert (ours.input_tokens, ours.output_tokens) == (server.input_tokens, server.output_tokens)
    assert ours.cost_usd == pytest.approx(server.billed_usd(AZURE_PRICE), rel=0.005)
    assert len(_client_spans(spans, AZURE_KEY)) == THREADS * CALLS


def test_the_sync_anthropic_sdk_on_http_client_is_governed_traced_and_billed(
    anthropic_server: tuple[str, SimEngine],
) -> None:
    root, sim = anthropic_server
    tracer_provider, spans = _traced()
    key = "sk-ant-test"
    backend = gg.Backend(
        name="claude", provider="anthropic", base_url=root, model=CLAUDE, api_key=key,
        price=CLAUDE_PRICE, concurrency=LIMIT, timeout=60.0,
    )
    with gg.SyncGateway([backend], clock=gg.SystemClock(), seed=3,
                        tracer_provider=tracer_provider) as gate:
        client = anthropic.Anthropic(
            api_key=key, base_url=root, http_client=gate.http_client("claude"), max_retries=0,
        )

        def ask(i: int) -> bool:
            for n in range(CALLS):
                messages = [{"role": "user", "content": f"Question {i}.{n}: name a prime."}]
                if (i + n) % 2:
                    with client.messages.stream(
                        model=CLAUDE, max_tokens=20, messages=messages  # type: ignore[arg-type]
                    ) as stream:
                        text = "".join(stream.text_stream)
                else:
                    message = client.messages.create(
                        model=CLAUDE, max_tokens=20, messages=messages  # type: ignore[arg-type]
                    )
                    text = "".join(b.text for b in message.content if b.type == "text")
                assert text
            return True

        assert all(in_threads(ask, threads=THREADS))
        stats = _idle(gate, "claude")
        entry = gate.gateway.ledger.entries["claude"]
    assert stats.calls == THREADS * CALLS and stats.failures == 0
    assert entry.streamed_attempts + entry.plain_attempts == THREADS * CALLS
    assert entry.streamed_attempts == THREADS * CALLS // 2
    server = sim.ledger.snapshot()
    assert 1 <= server.peak_in_flight <= LIMIT
    assert (entry.input_tokens, entry.output_tokens) == (server.input_tokens, server.output_tokens)
    assert entry.cost_usd == pytest.approx(bill_usd(server, 3.0, 15.0), rel=0.005)
    clients = _client_spans(spans, key)
    assert len(clients) == THREADS * CALLS
    assert all(s.name == f"chat {CLAUDE}" for s in clients)
