"""Searches of Anthropic's server-side web search tool are booked.

Anthropic bills each search on top of the tokens ($10 per 1,000: pricing docs; the
genai-prices table's ``web_searches_kcount``) and reports the count as
``usage.server_tool_use.web_search_requests`` (cumulative in a stream's ``message_delta``).
Before, the count was not read: ``r.usage``, the ledger and ``stats()`` had no searches and
every search cost $0 — on ``gate.chat``, ``gate.stream`` and the anthropic SDK on
``gate.http_client`` alike.
"""

from __future__ import annotations

import anthropic
import httpx2
import pytest

import gptgate as gg
from gptgate.ledger import Ledger

from .test_anthropic_server_tools import (
    ASK,
    CONTENT,
    MODEL,
    PAUSED,
    SEARCH,
    Claude,
    _ask,
    _claude,
    _stream,
)

PRICE = gg.Price(input_per_mtok=3.0, output_per_mtok=15.0, web_search_per_k=10.0)
#: 1,000 input and 100 output tokens at Sonnet's prices, and two searches at $10 per 1,000
PAUSED_USD = (1000 * 3.0 + 100 * 15.0) / 1e6 + 2 * 10.0 / 1000


async def test_the_searches_are_booked_on_every_path() -> None:
    async with gg.Gateway([_claude(Claude(), price=PRICE)]) as gate:
        chat = await _ask(gate, False)
        streamed = await _ask(gate, True)
        client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                                          http_client=gate.http_client("claude"), max_retries=0)
        whole = await client.messages.create(model=MODEL, max_tokens=1024, messages=ASK,
                                             tools=SEARCH)  # type: ignore[arg-type]
        async with client.messages.stream(model=MODEL, max_tokens=1024, messages=ASK,
                                          tools=SEARCH) as sdk:  # type: ignore[arg-type]
            final = await sdk.get_final_message()
        stats = gate.stats()["claude"]
        entry = gate.ledger.entries["claude"]
    assert chat.usage.web_search_requests == streamed.usage.web_search_requests == 2
    assert chat.cost_usd == pytest.approx(PAUSED_USD)  # the searches were $0 before
    assert streamed.cost_usd == pytest.approx(PAUSED_USD)
    # the SDK reads every block as it came, and its calls are booked the same
    assert [b.type for b in whole.content] == [b.type for b in final.content] == [
        b["type"] for b in CONTENT]
    assert final.content[3].citations is not None  # type: ignore[union-attr]
    assert stats.web_search_requests == entry.web_search_requests == 4 * 2
    assert stats.cost_usd == pytest.approx(4 * PAUSED_USD)


async def test_the_price_table_prices_the_searches() -> None:
    pytest.importorskip("genai_prices")
    async with gg.Gateway([_claude(Claude(), price=None)]) as gate:
        r = await _ask(gate, False)
    # Sonnet 4.5 in the table: $3 / $15 per MTok, $10 per 1,000 searches
    assert r.cost_usd == pytest.approx(PAUSED_USD)


def test_a_price_without_a_search_price_books_them_at_nothing() -> None:
    usage = gg.Usage(input_tokens=1000, output_tokens=100, web_search_requests=2)
    assert gg.Price(input_per_mtok=3.0, output_per_mtok=15.0).cost(usage) == pytest.approx(
        (1000 * 3.0 + 100 * 15.0) / 1e6)
    assert (usage + usage).web_search_requests == 4



def _cut_after_first_search() -> gg.Backend:
    """A Claude backend whose stream is cut right after the first search's result."""
    cut = _stream(PAUSED).split(b"event: content_block_start")
    body = b"event: content_block_start".join(cut[:4])

    def server(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return gg.Backend(name="claude", provider="anthropic", model=MODEL, api_key="sk-ant-test",
                      base_url="http://127.0.0.1:9", price=PRICE,
                      transport=httpx2.MockTransport(server))


async def test_a_stream_cut_after_a_search_books_the_search() -> None:
    """Anthropic bills a search once made (one that errored is not billed); the count comes
    only at the stream's end, so a stream cut after a search's result is booked at the
    searches it saw — before, at none."""
    backend = _cut_after_first_search()
    async with gg.Gateway([backend], max_attempts=1) as gate:
        with pytest.raises(gg.GateError):
            async with gate.stream(ASK, tools=SEARCH) as s:
                [_ async for _ in s]
        entry = gate.ledger.entries["claude"]
    assert entry.web_search_requests == 1
    assert entry.cost_usd >= 10.0 / 1000


async def test_a_dollar_budget_reserves_the_searches_a_call_may_make() -> None:
    """A budget reserves a call's dearest outcome before sending it: with a web search tool of
    ``max_uses`` 5, that is five searches besides the tokens. Before, only the tokens were
    reserved ($0.0016 here): the call went out under a $0.01 budget and spent $0.0245."""
    server = Claude()
    budget = gg.Budget(usd_per_hour=0.01, on_exceed="raise")
    tools = [{**SEARCH[0], "max_uses": 5}]
    async with gg.Gateway([_claude(server, price=PRICE)], budget=budget) as gate:
        with pytest.raises(gg.BudgetExceededError):
            await gate.chat(ASK, tools=tools, max_tokens=100)
        assert not server.bodies  # refused before sending
        await gate.chat(ASK, max_tokens=100)  # no search tool: its tokens fit
    assert len(server.bodies) == 1 and "tools" not in server.bodies[0]


async def test_an_sdk_stream_cut_after_a_search_books_the_search() -> None:
    backend = _cut_after_first_search()
    async with gg.Gateway([backend]) as gate:
        client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                                          http_client=gate.http_client("claude"), max_retries=0)
        async with client.messages.stream(model=MODEL, max_tokens=1024, messages=ASK,
                                          tools=SEARCH) as sdk:  # type: ignore[arg-type]
            [_ async for _ in sdk]
        entry = gate.ledger.entries["claude"]
    assert entry.web_search_requests == 1


def test_a_batch_answer_books_its_searches_at_their_full_price() -> None:
    """The Batch API halves the tokens' price, not the searches' (genai-prices' batch price
    keeps $10 per 1,000): a batch answer with an explicit price discounted both, and its
    searches were not counted in the ledger."""
    ledger = Ledger({"claude": PRICE})
    usage = gg.Usage(input_tokens=1000, output_tokens=100, web_search_requests=2)
    cost = ledger.record_batch("claude", usage, 0.5)
    assert cost == pytest.approx((1000 * 3.0 + 100 * 15.0) / 1e6 * 0.5 + 2 * 10.0 / 1000)
    assert ledger.entries["claude"].web_search_requests == 2


@pytest.mark.parametrize("path", ["gate.chat", "http_client"])
async def test_a_search_tool_without_max_uses_reserves_the_default_searches(path: str) -> None:
    """A web search tool without ``max_uses`` may search without bound; a budget reserves
    ``DEFAULT_SEARCHES`` (5) of them for it. Before, it reserved none: the call went out
    under a $0.01 budget whatever its searches would cost (five: $0.05). An SDK request on
    ``gate.http_client`` reserved no searches at all, ``max_uses`` or not."""
    from gptgate.wire.anthropic_server_tools import DEFAULT_SEARCHES

    server = Claude()
    budget = gg.Budget(usd_per_hour=0.01, on_exceed="raise")
    unbounded = [{"type": "web_search_20250305", "name": "web_search"}]
    async with gg.Gateway([_claude(server, price=PRICE)], budget=budget) as gate:
        if path == "gate.chat":
            with pytest.raises(gg.BudgetExceededError):
                await gate.chat(ASK, tools=unbounded, max_tokens=100)
        else:
            client = anthropic.AsyncAnthropic(api_key="sk-ant-test", max_retries=0,
                                              base_url="http://127.0.0.1:9",
                                              http_client=gate.http_client("claude"))
            with pytest.raises(anthropic.RateLimitError, match="budget"):
                await client.messages.create(model=MODEL, max_tokens=100, messages=ASK,
                                             tools=unbounded)  # type: ignore[arg-type]
    assert not server.bodies  # refused before sending
    assert DEFAULT_SEARCHES == 5
