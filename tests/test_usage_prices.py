"""Usage is the same on every provider and priced in one place (issue 32, "usage normalised").

``input_tokens`` is all of the prompt; cache reads and writes are parts of it, reasoning a part
of the output. ``gg.Price`` prices reads, writes and the rest; the ledger, the budget, the spans
and ``stats()`` carry every count.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.ledger import Ledger
from gptgate.telemetry import NAMES, usage_attributes
from tests.mockbackend import USER, Script, backend, gateway

#: Claude Sonnet's list price: writes 1.25× input, reads 0.1×
SONNET = gg.Price(
    input_per_mtok=3.0, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75, output_per_mtok=15.0
)


def test_price_bills_cache_reads_and_writes_at_their_own_rates() -> None:
    usage = gg.Usage(
        input_tokens=10_000, cached_input_tokens=6_000, cache_write_input_tokens=2_000,
        output_tokens=500, reasoning_tokens=200,
    )
    expected = (2_000 * 3.0 + 6_000 * 0.3 + 2_000 * 3.75 + 500 * 15.0) / 1e6
    assert SONNET.cost(usage) == pytest.approx(expected)
    # reasoning is already in the output: it is not billed twice
    assert SONNET.cost(usage) == SONNET.cost(
        gg.Usage(input_tokens=10_000, cached_input_tokens=6_000,
                 cache_write_input_tokens=2_000, output_tokens=500)
    )


def test_cache_prices_default_to_the_input_price() -> None:
    flat = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)
    usage = gg.Usage(input_tokens=1_000, cached_input_tokens=300, cache_write_input_tokens=400)
    assert flat.cost(usage) == pytest.approx(1_000 * 2.0 / 1e6)
    assert (flat.cache_read_rate, flat.cache_write_rate) == (2.0, 2.0)


def test_counts_that_claim_more_cache_than_prompt_are_never_billed_below_zero() -> None:
    usage = gg.Usage(input_tokens=100, cached_input_tokens=80, cache_write_input_tokens=80)
    # 80 read, the 20 left written; nothing at the plain input price
    assert SONNET.cost(usage) == pytest.approx((80 * 0.3 + 20 * 3.75) / 1e6)


def test_a_budget_reserves_the_dearer_of_input_and_cache_write() -> None:
    assert SONNET.most_cost(1_000, 100) == pytest.approx((1_000 * 3.75 + 100 * 15.0) / 1e6)
    cheap_writes = gg.Price(input_per_mtok=3.0, cache_write_per_mtok=1.0, output_per_mtok=15.0)
    assert cheap_writes.most_cost(1_000, 100) == pytest.approx((3_000 + 1_500) / 1e6)


def test_negative_or_infinite_cache_write_price_is_refused_naming_the_field() -> None:
    for bad in (-1.0, float("inf")):
        with pytest.raises(Exception, match="cache_write_per_mtok"):
            gg.Price(input_per_mtok=1.0, cache_write_per_mtok=bad)


def test_usage_adds_every_count() -> None:
    a = gg.Usage(input_tokens=10, cached_input_tokens=4, cache_write_input_tokens=3,
                 output_tokens=7, reasoning_tokens=2)
    b = gg.Usage(input_tokens=5, cached_input_tokens=1, cache_write_input_tokens=1,
                 output_tokens=3, reasoning_tokens=1, estimated=True)
    assert a + b == gg.Usage(input_tokens=15, cached_input_tokens=5, cache_write_input_tokens=4,
                             output_tokens=10, reasoning_tokens=3, estimated=True)


def test_the_ledger_counts_cache_writes_and_reasoning_and_corrects_them() -> None:
    ledger = Ledger({"a": SONNET})
    booked = gg.Usage(input_tokens=1_000, output_tokens=10, estimated=True)
    ledger.record_attempt("a", booked, streamed=False, wasted=True)
    actual = gg.Usage(input_tokens=1_000, cached_input_tokens=600, cache_write_input_tokens=300,
                      output_tokens=50, reasoning_tokens=20)
    ledger.correct("a", booked, actual, uncertain=False)
    entry = ledger.entries["a"]
    assert (entry.input_tokens, entry.cached_input_tokens, entry.cache_write_input_tokens,
            entry.output_tokens, entry.reasoning_tokens) == (1_000, 600, 300, 50, 20)
    assert entry.cost_usd == pytest.approx(SONNET.cost(actual))
    assert ledger.total().cache_write_input_tokens == 300


def test_span_usage_attributes_follow_the_genai_conventions() -> None:
    plain = usage_attributes(gg.Usage(input_tokens=9, cached_input_tokens=4, output_tokens=2))
    assert plain == {
        "gen_ai.usage.input_tokens": 9,
        "gen_ai.usage.output_tokens": 2,
        "gen_ai.usage.cache_read.input_tokens": 4,
    }
    full = usage_attributes(
        gg.Usage(input_tokens=9, cache_write_input_tokens=5, output_tokens=6, reasoning_tokens=3)
    )
    assert full["gen_ai.usage.cache_creation.input_tokens"] == 5
    assert full["gen_ai.usage.reasoning.output_tokens"] == 3


def _reasoning_completion() -> dict[str, Any]:
    return {
        "id": "c1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 2_000, "completion_tokens": 300, "total_tokens": 2_300,
            "prompt_tokens_details": {"cached_tokens": 1_536},
            "completion_tokens_details": {"reasoning_tokens": 256},
        },
    }


async def test_stats_spans_and_cost_carry_cached_and_reasoning_tokens() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    price = gg.Price(input_per_mtok=2.0, cached_input_per_mtok=0.5, output_per_mtok=8.0)
    script = Script(httpx2.Response(200, json=_reasoning_completion()))
    async with gateway(backend(script, price=price), tracer_provider=provider) as gate:
        result = await gate.chat(USER, max_tokens=400)
        stats = gate.stats()["mock"]
    assert result.usage.reasoning_tokens == 256 and result.usage.cached_input_tokens == 1_536
    assert result.cost_usd == pytest.approx((464 * 2.0 + 1_536 * 0.5 + 300 * 8.0) / 1e6)
    assert (stats.input_tokens, stats.cached_input_tokens, stats.reasoning_tokens) == (
        2_000, 1_536, 256)
    assert stats.cost_usd == pytest.approx(result.cost_usd)
    attempt = next(s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT)
    attrs = dict(attempt.attributes or {})
    assert attrs[NAMES["cached_tokens"]] == 1_536
    assert attrs[NAMES["reasoning_tokens"]] == 256


def test_a_config_file_takes_the_cache_write_price(tmp_path: Any) -> None:
    from gptgate.config_file import load_config

    path = tmp_path / "gate.toml"
    path.write_text(
        '[[backends]]\nname = "claude"\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n'
        "api_key_env = \"X\"\n"
        "price = { input_per_mtok = 3, cached_input_per_mtok = 0.3, cache_write_per_mtok = 3.75,"
        " output_per_mtok = 15 }\n",
        encoding="utf-8",
    )
    price = load_config(path).backends[0].price
    assert price == SONNET
