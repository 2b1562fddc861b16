"""``price=None`` takes the provider's list price from the bundled genai-prices table
(issue 32): at the attempt's moment (DeepSeek's off-peak hours) and prompt size (long-context
tiers); an explicit ``price=`` wins; an unknown model logs one line and costs nothing. The
table is the copy the package ships: nothing is fetched."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import httpx2
import pytest

import gptgate as gg
from gptgate.ledger import Ledger
from gptgate.price_by_answer import PricedByAnswer
from gptgate.prices import CatalogPrice, catalog_price, price_source
from tests.mockbackend import USER, Script, gateway, ok

PEAK = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # DeepSeek's standard hours: 00:30-16:30 UTC
OFF_PEAK = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)


def _deepseek(**kwargs: object) -> gg.Backend:
    return gg.Backend(
        name="ds", provider="deepseek", base_url="https://api.deepseek.com",
        model="deepseek-chat", **kwargs,  # type: ignore[arg-type]
    )


def test_a_known_hosted_model_is_priced_from_the_table_at_the_attempts_moment() -> None:
    source = price_source(_deepseek())
    assert isinstance(source, CatalogPrice)
    usage = gg.Usage(input_tokens=1_000_000, cached_input_tokens=800_000, output_tokens=100_000)
    peak = Ledger({"ds": source}, utc_now=lambda: PEAK)
    # the table's DeepSeek chat prices: $0.27 miss, $0.07 hit, $1.10 output per MTok
    assert peak.cost("ds", usage) == pytest.approx(0.2 * 0.27 + 0.8 * 0.07 + 0.1 * 1.1)
    off_peak = Ledger({"ds": source}, utc_now=lambda: OFF_PEAK)
    assert off_peak.cost("ds", usage) == pytest.approx(peak.cost("ds", usage) / 2, rel=0.1)


def test_a_long_prompt_pays_the_tier_it_reaches() -> None:
    source = catalog_price("anthropic", "claude-sonnet-4-5")
    assert source is not None
    short = source.at(PEAK, input_tokens=10_000)
    assert (short.input_per_mtok, short.cache_read_rate, short.cache_write_rate,
            short.output_per_mtok) == (3.0, 0.3, 3.75, 15.0)
    long = source.at(PEAK, input_tokens=250_000)
    assert long.input_per_mtok > short.input_per_mtok
    assert long.output_per_mtok > short.output_per_mtok


def test_an_explicit_price_always_wins() -> None:
    mine = gg.Price(input_per_mtok=9.0, output_per_mtok=9.0)
    assert price_source(_deepseek(price=mine)) is mine


def test_an_unknown_model_logs_one_line_and_costs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unknown = gg.Backend(
        name="ds", provider="deepseek", base_url="https://api.deepseek.com", model="no-such-model"
    )
    with caplog.at_level(logging.INFO, logger="gptgate.prices"):
        source = price_source(unknown)
    # priced only once an answer names a model the table knows (tests/test_price_by_answer.py)
    assert isinstance(source, PricedByAnswer)
    lines = [r for r in caplog.records if r.name == "gptgate.prices"]
    assert len(lines) == 1 and "'no-such-model'" in lines[0].getMessage()
    ledger = Ledger({"ds": source})
    assert ledger.cost("ds", gg.Usage(input_tokens=10**6)) == 0.0 and ledger.price("ds") is None


def test_any_openai_compatible_server_is_not_priced_as_openai() -> None:
    # provider="openai" is the default for every compatible server: a self-hosted gpt-4o-named
    # model is not billed at OpenAI's price; OpenAI's own URL is
    assert catalog_price("openai", "gpt-4o", "http://gpu:8000/v1") is None
    assert catalog_price("vllm", "gpt-4o", "http://gpu:8000/v1") is None
    hosted = catalog_price("openai", "gpt-4o", "https://api.openai.com/v1")
    assert hosted is not None and hosted.at(PEAK).input_per_mtok == 2.5


def test_a_budget_accepts_a_backend_priced_by_the_table() -> None:
    gg.GatewayConfig(backends=[_deepseek()], budget=gg.Budget(usd_per_hour=1.0))
    local = gg.Backend(name="l", base_url="http://gpu:8000/v1", model="m")
    with pytest.raises(Exception, match="budget needs a backend with a price"):
        gg.GatewayConfig(backends=[local], budget=gg.Budget(usd_per_hour=1.0))


async def test_a_call_is_billed_at_the_tables_price_without_a_price_given() -> None:
    script = Script(ok("answer", prompt=4_000, cached=3_072))
    ds = _deepseek(transport=httpx2.MockTransport(script))
    async with gateway(ds) as gate:
        result = await gate.chat(USER, max_tokens=50)
    usage = result.usage
    assert usage.cached_input_tokens == 3_072
    costs = {
        Ledger({"ds": catalog_price("deepseek", "deepseek-chat")}, utc_now=lambda w=when: w)
        .cost("ds", usage)
        for when in (PEAK, OFF_PEAK)
    }
    assert any(result.cost_usd == pytest.approx(c) for c in costs)
    assert result.cost_usd > 0


def test_the_table_is_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the price table must not be fetched")

    monkeypatch.setattr(httpx2.Client, "send", refuse)
    monkeypatch.setattr(httpx2.AsyncClient, "send", refuse)
    assert catalog_price("groq", "llama-3.3-70b-versatile") is not None
