"""Anthropic's one-hour cache writes are billed at their own price (2× the input price, not
the 5-minute writes' 1.25×).

Anthropic reports the split in ``usage.cache_creation`` (``ephemeral_5m_input_tokens``,
``ephemeral_1h_input_tokens``); gptgate read only the total ``cache_creation_input_tokens`` and
priced every write at ``cache_write_per_mtok``: a 2,000-token one-hour write on Sonnet
($6.00/MTok) was booked at $3.75/MTok, 37.5% under the bill. ``Usage`` now carries the
one-hour part and ``Price.cache_write_1h_per_mtok`` prices it (genai-prices' table has it:
``price=None`` takes it)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.wire.usage import parse_anthropic_usage

from .mockbackend import Script, gateway
from .mockbackend import backend as mock_backend

SONNET = gg.Price(input_per_mtok=3.0, cached_input_per_mtok=0.30, cache_write_per_mtok=3.75,
                  cache_write_1h_per_mtok=6.0, output_per_mtok=15.0)
USAGE = {"input_tokens": 10, "cache_creation_input_tokens": 2_500, "cache_read_input_tokens": 0,
         "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 2_000},
         "output_tokens": 20}
#: what Anthropic bills: 10 uncached, 500 5-minute writes, 2,000 one-hour writes, 20 out
BILL = (10 * 3.0 + 500 * 3.75 + 2_000 * 6.0 + 20 * 15.0) / 1e6


def test_the_one_hour_part_of_the_writes_is_read() -> None:
    usage = parse_anthropic_usage(USAGE)
    assert usage is not None
    assert (usage.input_tokens, usage.cache_write_input_tokens,
            usage.cache_write_1h_input_tokens) == (2_510, 2_500, 2_000)
    assert SONNET.cost(usage) == pytest.approx(BILL)


def test_without_a_one_hour_price_a_write_costs_the_write_price() -> None:
    """``cache_write_1h_per_mtok=None``: the 5-minute write price, as before (no provider
    but Anthropic reports one-hour writes)."""
    plain = gg.Price(input_per_mtok=3.0, cache_write_per_mtok=3.75, output_per_mtok=15.0)
    usage = parse_anthropic_usage(USAGE)
    assert usage is not None
    assert plain.cost(usage) == pytest.approx((10 * 3.0 + 2_500 * 3.75 + 20 * 15.0) / 1e6)


def _answer(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Oolong, sencha, assam."}],
        "stop_reason": "end_turn", "stop_sequence": None, "usage": USAGE,
    })


@pytest.mark.parametrize("price", [SONNET, None])
async def test_the_ledger_books_what_anthropic_bills(price: Any) -> None:
    pytest.importorskip("genai_prices")
    claude = mock_backend(Script(_answer), name="claude", provider="anthropic",
                          model="claude-sonnet-4-5", api_key="sk-ant-test", price=price)
    async with gateway(claude) as gate:
        result = await gate.chat([{"role": "user", "content": "Three teas?"}], stream=False,
                                 max_tokens=50)
        booked = gate.stats()["claude"].cost_usd
    assert result.usage.cache_write_1h_input_tokens == 2_000
    assert booked == pytest.approx(BILL)
